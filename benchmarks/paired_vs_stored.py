"""Stored-baseline vs paired mode: how precisely each measures a speedup change, for the same time budget.

The head is the demo pair itself, so the true change is zero and any width is noise:

* stored: run A is refreshed into a baseline; run B (same config, same timing
  budget) is compared with A's stored samples (unpaired bootstrap of the ratio
  of medians);
* paired: one run with ``--against`` the same config times the base engine
  beside the head's on the same batches (bootstrap of the paired ratios).

Prints the median and worst 95% CI half-width of head/base per timing cell, and
the wall time of the run a PR pays for.  Run it alone (2 cores, no other torch
process):

    python benchmarks/paired_vs_stored.py [--budget 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from gate.cli import main as specguard

CONFIG = """\
version: 1
models:
  target: {{path: "specguard:demo/target"}}
  draft: {{path: "specguard:demo/draft"}}
  device: cpu
batching: {{batch_sizes: [1, 4], compositions: 1}}
generation: {{max_new_tokens: 32}}
suite: {{max_prompts_per_slice: 3}}
checks:
  speedup: {{time_budget_s: {budget}, min_repeats: 3, max_repeats: 40, ci_half_width: 0.01, warmup: 1}}
baseline: {{name: bench, dir: {dir}/baselines}}
output: {{cache_dir: {dir}/cache}}
"""


def half_widths(verdict: dict) -> list[float]:
    out = []
    for c in verdict["speedup"]:
        r = c["ratio"]
        if r["low"] is not None and r["estimate"]:
            out.append((r["high"] - r["low"]) / 2 / r["estimate"])
    return out


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    specguard(args)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=40.0, help="checks.speedup.time_budget_s of each run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cfg = tmp / "bench.yaml"
        cfg.write_text(CONFIG.format(budget=args.budget, dir=tmp))
        common = ["--threads", str(args.threads), "-q"]
        timed(["gate", str(cfg), "--out", str(tmp / "a"), *common])
        specguard(["baseline", "refresh", str(cfg), "--from", str(tmp / "a")])
        stored_s = timed(["gate", str(cfg), "--out", str(tmp / "b"), *common])
        paired_s = timed(["gate", str(cfg), "--against", str(cfg), "--out", str(tmp / "p"), *common])
        stored = half_widths(json.loads((tmp / "b" / "verdict.json").read_text()))
        paired = half_widths(json.loads((tmp / "p" / "verdict.json").read_text()))
    report = {
        "budget_s": args.budget,
        "stored": {"cells": len(stored), "median_half_width": statistics.median(stored), "max_half_width": max(stored),
                   "run_s": stored_s},
        "paired": {"cells": len(paired), "median_half_width": statistics.median(paired), "max_half_width": max(paired),
                   "run_s": paired_s},
    }
    print(json.dumps(report, indent=1))
    print("\n| mode | cells | median CI half-width of head/base | worst | the PR's run |\n|---|---|---|---|---|")
    for mode in ("stored", "paired"):
        r = report[mode]
        print(f"| {mode} | {r['cells']} | ±{r['median_half_width']:.1%} | ±{r['max_half_width']:.1%} | "
              f"{r['run_s']:.0f} s |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
