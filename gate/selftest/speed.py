"""``specguard selftest --speed``: how well the speed rule separates a real slowdown from noise.

The equivalence self-test plants bugs and counts what the checks catch.  This one plants *slowdowns* in the
gate's own correct engine and counts what the speed rule flags, on this machine, in both modes:

* **paired**: the head (the correct engine, or a slowed copy) timed beside the base (the correct engine) in one
  run, interleaved on the same batches (``specguard gate --against``);
* **stored**: the head's run against a baseline refreshed from a separate run of the correct engine.

A slowdown of ``s`` makes every speculative step wait ``s`` times the time the step itself took (its drafts and
its verification), inside the engine: the engine's wall time grows by ``s``, and its speedup falls by
``s / (1 + s)`` (5% -> -4.8%, 10% -> -9.1%, 20% -> -16.7%).  ``s = 0`` is the base against itself: what it
flags is the rule's false-alarm rate.

Per cell (slice x batch size x context bucket), a slowdown is **flagged** when the speed section marks it
(⚠️ or ❌: a drop beyond ``baseline.min_effect`` significant over the run's cells and load levels, Holm; or the
whole CI below ``1 - speedup_drop``) and **failed** when the gate fails on it (❌).  A run is **marked** when any
cell or load level is: what a reviewer sees (gate.verdict.speed_rule).  The tolerance is the default
``baseline.speedup_drop`` (10%) unless given.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gate.checks.analysis import run_checks
from gate.engines.paired import PairedBase
from gate.engines.reference import ReferenceEngine
from gate.engines.speculative import SpeculativeEngine
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.inputs.models import load_pair
from gate.run.cache import ReferenceCache
from gate.run.runner import Runner
from gate.selftest import selftest_suite
from gate.verdict.baseline import derive, failing_checks, hardware_of, measure
from gate.verdict.judge import judge
from gate.verdict.store import Stored
from gate.verdict.summary import summarize

SPEED_CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: %(dtype)s}
  draft: {path: "specguard:demo/draft", dtype: %(dtype)s}
  device: %(device)s
speculation: {num_draft_tokens: 4}
batching: {batch_sizes: [1, 4], compositions: 1}
generation: {max_new_tokens: 16, greedy: true}
checks:
  speedup: {min_repeats: %(repeats)d, max_repeats: %(repeats)d, warmup: 1, context_buckets: [1024],
            calibration_trials: 5}
baseline: {speedup_drop: %(tolerance)s}
output: {cache_dir: null}
"""
SLOWDOWNS = (0.0, 0.05, 0.10, 0.20)
SLICES = ("prose", "code", "questions")


class Slowed(SpeculativeEngine):
    """The correct engine, made slower from inside: each step waits ``slowdown`` times its own duration."""

    slowdown = 0.0

    def step(self, rows, tgt, drf, settings, rnd, clock) -> None:
        start = time.perf_counter()
        super().step(rows, tgt, drf, settings, rnd, clock)
        if self.slowdown:
            time.sleep((time.perf_counter() - start) * self.slowdown)


@dataclass(frozen=True)
class SpeedTrial:
    mode: str  # "paired" or "stored"
    slowdown: float
    seed: int
    cells: int
    flagged: int  # cells marked ⚠️ or ❌
    failed: int  # cells marked ❌
    ratios: list[float]  # head/base per cell
    samples: list[list[float]] = field(default_factory=list)  # paired mode: each cell's paired head/base ratios
    marked: bool = False  # the run marked a cell or a load level (⚠️ or ❌): a reviewer saw a speed change


@dataclass
class SpeedReport:
    tolerance: float
    repeats: int
    trials: list[SpeedTrial] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """The speed self-test measures; it has no verdict of its own (its numbers go in docs/checks.md)."""
        return True

    def rows(self) -> list[dict]:
        """One row per mode and slowdown: cells flagged and failed, over every run."""
        out = []
        for mode in ("paired", "stored"):
            for s in sorted({t.slowdown for t in self.trials}):
                ts = [t for t in self.trials if t.mode == mode and t.slowdown == s]
                if not ts:
                    continue
                cells = sum(t.cells for t in ts)
                ratios = sorted(r for t in ts for r in t.ratios)
                out.append({"mode": mode, "slowdown": s, "runs": len(ts), "cells": cells,
                            "flagged": sum(t.flagged for t in ts), "failed": sum(t.failed for t in ts),
                            "runs_failed": sum(t.failed > 0 for t in ts), "runs_marked": sum(t.marked for t in ts),
                            "median_ratio": ratios[len(ratios) // 2] if ratios else None})
        return out

    def lines(self) -> list[str]:
        head = (f"speed self-test: {self.repeats} repeats per cell, tolerance {self.tolerance:.0%}, "
                f"{self.seconds:.0f} s")
        table = ["| mode | planted slowdown | runs | runs marked (a cell or load level ⚠️ or ❌) | cells | "
                 "cells flagged (⚠️ or ❌) | cells failed (❌) | runs failed | median head/base |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows():
            table.append(f"| {r['mode']} | {r['slowdown']:.0%} | {r['runs']} | {r['runs_marked']} | {r['cells']} | "
                         f"{r['flagged']} ({r['flagged'] / r['cells']:.0%}) | {r['failed']} "
                         f"({r['failed'] / r['cells']:.0%}) | {r['runs_failed']} | {r['median_ratio']:.3f} |")
        return [head, "", *table]

    def to_json(self) -> dict:
        return {"tolerance": self.tolerance, "repeats": self.repeats, "seconds": self.seconds, "rows": self.rows(),
                "trials": [dataclasses.asdict(t) for t in self.trials]}


def suite_of(seed: int):
    """The self-test's prompts of the timed slices, in the order ``seed`` shuffles them to (0: the suite's)."""
    full = selftest_suite(order_seed=seed or None)
    return dataclasses.replace(full, prompts=tuple(p for p in full.prompts if p.slice in SLICES))


def _cells(doc) -> tuple[int, int, int, list[float], bool]:
    """Cells judged, flagged (warn or fail), failed, their ratios; and whether the run marked anything at all (a cell
    or a load level: what a reviewer sees)."""
    changes = [c for c in doc.speedup if c.ratio.estimate is not None]
    marked = any(c.status in ("warn", "fail") for c in doc.speedup + doc.speedup_levels)
    return (len(changes), sum(c.status in ("warn", "fail") for c in changes),
            sum(c.status == "fail" for c in changes), [c.ratio.estimate for c in changes], marked)


def speed_selftest(runs: int = 10, slowdowns: tuple[float, ...] = SLOWDOWNS, repeats: int = 16,
                   tolerance: float = 0.10, modes: tuple[str, ...] = ("paired", "stored"),
                   say: Callable[[str], None] = lambda m: None, dtype: str = "float32",
                   device: str = "cpu") -> SpeedReport:
    """``runs`` runs per mode and slowdown (each with its own prompt order, hence batches); the stored mode's
    baseline is refreshed once from a run of the correct engine.  Budget: about 90 s per paired run on 2 CPU cores
    with the defaults (two load levels, three slices, 16 timed repeats of each cell: what a planted 10% slowdown
    needs to be flagged in 95% of cells, docs/checks.md)."""
    started = time.perf_counter()
    cfg = parse_config(SPEED_CONFIG % {"repeats": repeats, "tolerance": tolerance, "dtype": dtype, "device": device},
                       PACKAGE_DIR / "selftest.yaml")
    pair = load_pair(cfg)
    reference = ReferenceEngine(pair.target.model, pair.device)
    report = SpeedReport(tolerance=tolerance, repeats=repeats)

    def engine(slowdown: float, name: str) -> Slowed:
        e = Slowed(pair.target.model, pair.draft.model, pair.device)
        e.slowdown, e.name = slowdown, name
        return e

    with tempfile.TemporaryDirectory(prefix="specguard-speed-") as tmp:
        cache = ReferenceCache(Path(tmp) / "cache")

        def run(name: str, seed: int, head: Slowed, paired: PairedBase | None = None):
            runner = Runner(cfg, pair, suite_of(seed), reference, [head], Path(tmp) / name, log=lambda m: None,
                            cache=cache, paired=paired)
            # Timing only: equivalence is the other self-test's business, and its outputs would triple the cost.
            runner.plan.outputs, runner.plan.canonical = [], []
            results = runner.run()
            return results, run_checks(results, pair, cfg.config)

        stored = Stored(None, "", "selftest")
        if "stored" in modes:
            results, checks = run("baseline", 0, engine(0.0, "speculative"))
            baseline = derive(measure(results, checks, cfg.config), name="selftest",
                              hardware_key=results.fingerprint.hardware_key, hardware=hardware_of(results),
                              status=results.status, failing=failing_checks(checks), created_utc="", source={},
                              force_reason="the speed self-test times only: its equivalence is not measured")
            stored = Stored(baseline, "", "selftest")
        for seed in range(1, runs + 1):
            for s in slowdowns:
                for mode in modes:
                    paired = None
                    if mode == "paired":
                        paired = PairedBase(engine=engine(0.0, "base-speculative"), head_engine="speculative",
                                            draft=pair.draft, num_draft_tokens=4, config={}, source="selftest")
                    # paired: each run its own prompt order (hence batches); stored: the baseline's order, since
                    # a slice's fingerprint follows its prompts' order and a reordered slice is not compared
                    order = seed if mode == "paired" else 0
                    results, checks = run(f"{mode}-{s}-{seed}", order, engine(s, "speculative"), paired)
                    summary = summarize(results, checks, cfg.config, "selftest")
                    doc = judge(summary, stored if mode == "stored" else Stored(None, "", "selftest"),
                                cfg.config.baseline)
                    cells, flagged, failed, ratios, marked = _cells(doc)
                    samples = [list(c.ratios) for _, c in sorted(summary.paired.cells.items())] \
                        if summary.paired is not None else []
                    report.trials.append(SpeedTrial(mode, s, seed, cells, flagged, failed, ratios, samples, marked))
                    say(f"{mode} slowdown {s:.0%} run {seed}: {flagged}/{cells} cells flagged, {failed} failed")
    report.seconds = time.perf_counter() - started
    return report


__all__ = ["SLOWDOWNS", "Slowed", "SpeedReport", "SpeedTrial", "speed_selftest"]
