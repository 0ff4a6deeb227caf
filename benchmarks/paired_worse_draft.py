"""Paired mode against a real regression: a draft that no longer agrees with the target (the demo draft with noise
added to every weight) gated `--against` the demo pair, on real timings.

Until 2026-12-07 this was a test (tests/test_paired.py); whether a timed drop reaches significance on a shared
2-core machine is a measurement, not a unit test's to hold (it read NEUTRAL beside other jobs). It prints, per run:
the exit code, the failing speed cells with their paired ratio intervals, whether each was significant, and the
cause the gate named (acceptance, draft cost, verify cost).  The mechanics of paired mode stay tested
(tests/test_paired.py, tests/test_http.py, tests/test_own_reference.py, tests/test_action.py), and the attribution
of a drop to its cause on planted timings in tests/test_compare.py.  Run it alone (2 cores, no other torch
process):

    python benchmarks/paired_worse_draft.py [--runs 3] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from gate.cli import main as specguard
from gate.inputs.config import PACKAGE_DIR

CONFIG = """\
version: 1
models:
  target: {{path: "specguard:demo/target"}}
  draft: {{path: "{draft}"}}
  device: cpu
batching: {{batch_sizes: [1, 2], compositions: 1}}
generation: {{max_new_tokens: 12}}
suite: {{max_prompts_per_slice: 1, slices: [prose, code, questions]}}
checks:
  speedup: {{min_repeats: 4, max_repeats: 4, warmup: 1, context_buckets: [1024], calibration_trials: 5}}
output: {{dir: out, cache_dir: null}}
"""


def worse_draft(into: Path) -> Path:
    shutil.copytree(PACKAGE_DIR / "demo" / "draft", into)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(PACKAGE_DIR / "demo" / "draft")
    with torch.no_grad():
        for p in model.parameters():  # a draft that no longer agrees with the target
            p.add_(torch.randn_like(p) * p.std().clamp(min=1e-3) * 2)
    model.save_pretrained(into)
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base, head = tmp / "base.yaml", tmp / "head.yaml"
        base.write_text(CONFIG.format(draft="specguard:demo/draft"))
        head.write_text(CONFIG.format(draft=worse_draft(tmp / "worse-draft")))
        for i in range(args.runs):
            out = tmp / f"run-{i}"
            code = specguard(["gate", str(head), "--against", str(base), "--out", str(out), "--threads",
                              str(args.threads), "-q"])
            verdict = json.loads((out / "verdict.json").read_text())
            drops = [{"slice": c.get("slice"), "batch_size": c.get("batch_size"), "ratio": c["ratio"],
                      "significant": c.get("significant"), "explanation": c.get("explanation")}
                     for c in verdict["speedup"] if c["status"] == "fail"]
            runs.append({"exit": code, "outcome": verdict["outcome"], "headline": verdict["headline"],
                         "failing_cells": drops, "cells": len(verdict["speedup"])})
            print(f"run {i}: exit {code}, {len(drops)} of {len(verdict['speedup'])} cells fail: "
                  f"{verdict['headline']}")
            for d in drops:
                r, e = d["ratio"], d["explanation"] or {}
                print(f"  {d['slice']} bs {d['batch_size']}: {r['estimate']:.2f} ({r['low']:.2f}-{r['high']:.2f}), "
                      f"significant {d['significant']}, acceptance {e.get('acceptance')}, draft cost "
                      f"{e.get('draft_cost')}, verify cost {e.get('verify_cost')}")
    caught = sum(r["exit"] == 1 for r in runs)
    print(f"caught in {caught} of {len(runs)} runs")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "caught": caught}, indent=1))


if __name__ == "__main__":
    main()
