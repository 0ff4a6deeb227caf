"""What one gate run costs, and what the reference cache saves when only the draft changes.

    python benchmarks/gate_cost.py [--json out.json]

On the full demo config (``gate/demo/specguard-full.yaml``), in one process:

1. a full run with an empty reference cache: generation time (``specguard run``)
   and analysis time (``specguard check``: re-scoring, statistics, report);
2. the same gate after a draft-only change (a copy of the demo draft with
   slightly perturbed weights, so its fingerprint differs), with the cache
   left by run 1.

It prints both wall times, the share of the draft-only run saved, the number
of reference executions served from the cache, and analysis as a share of
generation time.  Run it alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from gate.checks.analysis import run_checks
from gate.engines import build_engine, build_reference
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.inputs.models import load_pair
from gate.inputs.suite import suite_for
from gate.report.render import render_text
from gate.run.cache import ReferenceCache
from gate.run.runner import Runner

DEMO = PACKAGE_DIR / "demo"


def perturbed_draft(dest: Path) -> Path:
    shutil.copytree(DEMO / "draft", dest)
    weights = load_file(dest / "model.safetensors")
    g = torch.Generator().manual_seed(0)
    for name, t in weights.items():
        if "mlp" in name:
            weights[name] = (t.float() + 1e-3 * torch.randn(t.shape, generator=g)).to(t.dtype)
    save_file(weights, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def gate_once(config_text: str, where: Path, cache_dir: Path) -> dict:
    loaded = parse_config(config_text, where / "specguard.yaml")
    pair = load_pair(loaded)
    engines = [build_engine(e, pair, loaded) for e in loaded.config.engines]
    t0 = time.perf_counter()
    doc = Runner(loaded, pair, suite_for(loaded), build_reference(pair), engines, where / "out",
                 log=lambda m: None, cache=ReferenceCache(cache_dir)).run()
    t1 = time.perf_counter()
    checks = run_checks(doc, pair, loaded.config)
    render_text(doc, checks)
    t2 = time.perf_counter()
    return {"generation_s": t1 - t0, "analysis_s": t2 - t1, "total_s": t2 - t0,
            "executions": len(doc.executions), "reused_from_cache": len(doc.cache["reused"]),
            "analysis_share": (t2 - t1) / (t1 - t0),
            "failed_checks": [v.check for v in checks.failing()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = (DEMO / "specguard-full.yaml").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cache = tmp / "cache"
        (tmp / "full").mkdir()
        full = gate_once(base, tmp / "full", cache)
        draft = perturbed_draft(tmp / "draft-v2")
        changed = base.replace('path: "specguard:demo/draft"', f'path: "{draft}"')
        assert changed != base
        (tmp / "draft-only").mkdir()
        draft_only = gate_once(changed, tmp / "draft-only", cache)
    report = {"full": full, "draft_only": draft_only,
              "draft_only_saving": 1 - draft_only["total_s"] / full["total_s"]}
    print(json.dumps(report, indent=1))
    print(f"\nfull run: {full['total_s']:.0f} s (generation {full['generation_s']:.0f} s, analysis "
          f"{full['analysis_s']:.1f} s = {full['analysis_share']:.1%} of generation)")
    print(f"draft-only change: {draft_only['total_s']:.0f} s, {draft_only['reused_from_cache']} reference "
          f"executions reused, {report['draft_only_saving']:.0%} less than the full run")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
