"""Engines side by side on the demo pair, in one run, with the gate's own timing protocol.

    python benchmarks/engines.py [--max-new-tokens 48] [--repeats 5] [--json out.json]

Runs the reference, the gate's speculative engine and transformers' assisted
generation interleaved (A B C, then C B A, ...) on the default suite, at batch
sizes 1, 4 and 8 (assisted generation at 1 only), and prints:

* own speculative engine vs reference at each batch size (median of paired
  ratios, bootstrap 95% CI);
* own speculative engine vs HF assisted at batch size 1 (paired, same repeats);
* measured speedup against Leviathan et al.'s expectation for the measured
  acceptance and the measured draft/target cost ratio c;
* the share of speculative step time spent on ragged realignment at batch size 8.

Run it alone: other torch processes on the same cores distort the timings.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from gate.checks.speedup import analyze_speedup
from gate.engines import build_engine, build_reference
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.inputs.models import load_pair
from gate.inputs.suite import suite_for
from gate.run.runner import Runner
from gate.stats import bootstrap_median_ci

CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: float32}
  draft: {path: "specguard:demo/draft", dtype: float32}
  device: cpu
speculation: {num_draft_tokens: %(k)d}
batching: {batch_sizes: [1, 4, 8]}
generation: {max_new_tokens: %(new)d, greedy: true}
suite: {max_prompts_per_slice: %(per_slice)d}
engines:
  - type: speculative
  - type: hf_assisted
checks:
  speedup: {min_repeats: %(repeats)d, max_repeats: %(repeats)d, warmup: 1}
output: {cache_dir: null}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--per-slice", type=int, default=8)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the full analysis here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    text = CONFIG % {"k": args.k, "new": args.max_new_tokens, "repeats": args.repeats, "per_slice": args.per_slice}
    loaded = parse_config(text, PACKAGE_DIR / "benchmark.yaml")
    pair = load_pair(loaded)
    engines = [build_engine(e, pair, loaded) for e in loaded.config.engines]
    with tempfile.TemporaryDirectory() as tmp:
        doc = Runner(loaded, pair, suite_for(loaded), build_reference(pair), engines, Path(tmp),
                     log=lambda m: print(m, flush=True)).run()
    analysis = analyze_speedup(doc)

    # own vs HF assisted at batch size 1: paired by (batch, repeat)
    walls: dict[tuple, dict] = {}
    for ex in doc.executions:
        if ex.phase == "timing" and ex.batch_size == 1:
            walls.setdefault((ex.batch, ex.repeat), {})[ex.engine] = ex.wall_s
    own_vs_hf = bootstrap_median_ci([w["hf_assisted"] / w["speculative"] for w in walls.values()
                                     if "hf_assisted" in w and "speculative" in w])

    own = analysis.engines["speculative"]
    hf = analysis.engines["hf_assisted"]
    print(f"\nk={args.k}, max_new_tokens={args.max_new_tokens}, {args.repeats} repeats, "
          f"{len(doc.prompts)} prompts, torch threads {args.threads}\n")
    print("| engine | batch size | speedup vs reference (95% CI) | tokens/target forward | acceptance | c | expected | "
          "efficiency | verify cost (decode steps) | expected with verify cost | realign share |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, e in (("speculative", own), ("hf_assisted", hf)):
        for bs, r in e.load_curve.items():
            sp, ex = r.speedup, r.expected
            print(f"| {name} | {bs} | {sp.estimate:.2f}x ({sp.low:.2f}-{sp.high:.2f}) | "
                  f"{r.tokens_per_target_forward or 0:.2f} | {r.acceptance_rate or 0:.2f} | "
                  f"{ex.cost_ratio if ex else 0:.3f} | {ex.speedup if ex else 0:.2f}x | "
                  f"{(ex.efficiency if ex else 0) or 0:.0%} | {(ex.verify_ratio if ex else 0) or 0:.2f} | "
                  f"{(ex.speedup_with_verify_cost if ex else 0) or 0:.2f}x | {r.realign_share or 0:.1%} |")
    print(f"\nown speculative vs HF assisted at batch size 1: {own_vs_hf.estimate:.2f}x "
          f"(95% CI {own_vs_hf.low:.2f}-{own_vs_hf.high:.2f}, n={own_vs_hf.n}) — above 1 means ours is faster")
    print(f"realignment share of speculative step time at batch size 8: {own.load_curve['8'].realign_share:.1%}")
    if args.json:
        args.json.write_text(json.dumps({"analysis": analysis, "own_vs_hf_bs1": own_vs_hf.to_dict(),
                                         "calibration": doc.calibration}, indent=1))


if __name__ == "__main__":
    main()
