"""How much a cell's speedup moves between runs, beside how much it moves within one: the variance components behind
the stored comparison (docs/baselines.md, "A baseline is a distribution over runs").

    python benchmarks/between_runs.py [--config gate/demo/specguard.yaml] [--passes 6] [--out DIR] [--threads 2]
    python benchmarks/between_runs.py --analyse DIR        # the numbers again, from passes already written
    python benchmarks/between_runs.py --analyse DIR --judge BASELINE.json [--slowdown 0.25] [--speedup-drop 0.25]
    python benchmarks/between_runs.py --analyse DIR --judge passes:0,1 [--slowdown 0.10]

Each pass is ``specguard run CONFIG --timing-only`` in a process of its own (what a refresh's extra passes are),
run one after the other, alone on the machine.  Per cell (slice x batch size x context bucket) and pass, the mean of
the log speedup samples; then, in log space:

* **within**: the pooled variance of a sample about its own pass's cell mean (what one run's interval sees);
* **between**: the variance of a cell's pass means beyond what ``within / n`` explains (method of moments, pooled
  over cells), split into what every cell of a pass shares, what the cells of one batch size share, and the rest.

Prints the table and writes ``DIR/between_runs.json``.  With ``--judge``, each pass is also judged as a PR's head by
the speed rule (``gate.verdict.speed.stored_changes``) against a baseline file, or against a baseline made of two of
the passes themselves (``passes:I,J``; the other passes are the heads), with every sample scaled by
``1 - --slowdown`` (a planted slowdown): how many cells and load levels it marks, in how many runs.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_passes(config: str, out: Path, passes: int, threads: int) -> None:
    for i in range(passes):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import sys; sys.path.pop(0); from gate.entry import entry; entry()",
                        "run", config, "--timing-only", "--out", str(out / f"pass-{i}"), "--threads", str(threads),
                        "-q"], check=True, cwd=ROOT)
        print(f"pass {i}: {time.perf_counter() - started:.0f} s", flush=True)


def cells_of(run_dir: Path) -> dict[str, list[list[float]]]:
    """Per cell, its log samples grouped by timed batch."""
    from gate.run.results import load_results
    from gate.verdict.baseline import cell_key

    out: dict[str, dict[int, list[float]]] = {}
    for p in load_results(run_dir / "results.json").judged_timing_pairs():
        if p.ratio:
            key = f"{p.engine}|{cell_key(p.slice, p.batch_size, p.bucket)}"
            out.setdefault(key, {}).setdefault(p.execution.batch, []).append(math.log(p.ratio))
    return {k: [v[b] for b in sorted(v)] for k, v in out.items()}


def analyse(out: Path) -> dict:
    from gate.verdict.noise import between_from_passes, cell_mean

    passes = [cells_of(d) for d in sorted(out.glob("pass-*")) if (d / "results.json").exists()]
    keys = sorted(set.intersection(*(set(p) for p in passes)))
    means = [[cell_mean(p[k]) for k in keys] for p in passes]
    est = between_from_passes([[p[k] for p in passes] for k in keys])
    r, c = len(passes), len(keys)
    grand = sum(map(sum, means)) / (r * c)
    col = [sum(means[i][j] for i in range(r)) / r for j in range(c)]
    run_effect = [sum(means[i][j] - col[j] for j in range(c)) / c for i in range(r)]
    sizes = sorted({k.split("|")[2] for k in keys}, key=int)
    bs_effect = {}
    for bs in sizes:
        js = [j for j, k in enumerate(keys) if k.split("|")[2] == bs]
        bs_effect[bs] = [sum(means[i][j] - col[j] for j in js) / len(js) - run_effect[i] for i in range(r)]
    resid = [[means[i][j] - col[j] - run_effect[i] - bs_effect[keys[j].split("|")[2]][i] for j in range(c)]
             for i in range(r)]

    def sd(xs: list[float], ddof: int = 1) -> float:
        m = sum(xs) / len(xs)
        return math.sqrt(sum((x - m) ** 2 for x in xs) / max(len(xs) - ddof, 1))

    report = {
        "passes": r, "cells": c, "grand_mean_speedup": math.exp(grand),
        "within_sd": est.within_sd, "between_sd": est.between_sd, "between_df": est.df,
        "run_effect_sd": sd(run_effect),
        "batch_size_effect_sd": {bs: sd(v) for bs, v in bs_effect.items()},
        "residual_sd": math.sqrt(sum(x * x for row in resid for x in row) / max((r - 1) * (c - len(sizes)), 1)),
        "cells_detail": {k: {"pass_means": [round(means[i][j], 4) for i in range(r)],
                             "n": [[len(g) for g in p[k]] for p in passes]} for j, k in enumerate(keys)},
    }
    return report


def judge_passes(out: Path, against: str, slowdown: float, speedup_drop: float) -> str:
    from gate.inputs.config import BaselineConfig
    from gate.run.results import load_results
    from gate.verdict.baseline import load_baseline, speedup_cells, with_passes
    from gate.verdict.speed import stored_changes

    dirs = sorted(d for d in out.glob("pass-*") if (d / "results.json").exists())
    if against.startswith("passes:"):
        picked = [dirs[int(i)] for i in against[len("passes:"):].split(",")]
        runs = [load_results(d / "results.json") for d in picked]
        from gate.verdict.baseline import Baseline

        template = {"schema": "specguard.baseline/1", "name": "passes", "hardware_key": "here", "hardware": {},
                    "created_utc": "", "fingerprint": {"models": {}, "libraries": {}, "config": "",
                                                        "suite": {"name": "", "fingerprint": "", "prompts": 0,
                                                                  "slices": []}},
                    "settings": {"num_draft_tokens": 4, "batch_sizes": [1], "max_new_tokens": 1, "greedy": True,
                                 "engines": []}}
        base = Baseline.model_validate(template)
        base.speedup = with_passes(speedup_cells(runs[0]), runs[1:])
        heads = [d for d in dirs if d not in picked]
    else:
        base, heads = load_baseline(against), dirs
    rules = BaselineConfig(speedup_drop=speedup_drop)
    marked_runs = cells = marked = failed = 0
    noise = None
    for d in heads:
        head_cells = speedup_cells(load_results(d / "results.json"))
        for rows in head_cells.values():
            for cell in rows.values():
                cell.samples = [x * (1 - slowdown) for x in cell.samples]
        changes, levels, noise = stored_changes(base.model_copy(update={"speedup": head_cells}), base, rules)
        every = changes + levels
        cells += len(changes)
        marked += sum(c.status != "pass" for c in changes)
        failed += sum(c.status == "fail" for c in every)
        marked_runs += any(c.status != "pass" for c in every)
    return (f"judged against {against}, slowdown {slowdown:.0%}: {marked} of {cells} cells marked, {failed} cells or "
            f"load levels failed, {marked_runs} of {len(heads)} runs marked anything; between-run spread "
            f"{noise.between_sd:.1%} ({noise.between_source})" if noise else "nothing to judge")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="gate/demo/specguard.yaml")
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--out", default="between-runs-out")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--analyse", metavar="DIR")
    ap.add_argument("--judge", metavar="BASELINE.json|passes:I,J")
    ap.add_argument("--slowdown", type=float, default=0.0)
    ap.add_argument("--speedup-drop", type=float, default=0.25, help="baseline.speedup_drop (the demo's: 0.25)")
    args = ap.parse_args()
    out = Path(args.analyse or args.out)
    if not args.analyse:
        run_passes(args.config, out, args.passes, args.threads)
    report = analyse(out)
    (out / "between_runs.json").write_text(json.dumps(report, indent=1))
    print(f"{report['passes']} passes x {report['cells']} cells (log speedup; sd as a fraction):")
    print(f"  within a run, one sample:      {report['within_sd']:.3f}")
    print(f"  between runs, one cell's mean: {report['between_sd']:.3f} ({report['between_df']} df)")
    print(f"    shared by every cell of a pass:   {report['run_effect_sd']:.3f}")
    for bs, v in report["batch_size_effect_sd"].items():
        print(f"    shared by the cells at bs {bs}:     {v:.3f}")
    print(f"    the rest (cell by cell):          {report['residual_sd']:.3f}")
    if args.judge:
        print(judge_passes(out, args.judge, args.slowdown, args.speedup_drop))


if __name__ == "__main__":
    main()
