"""``specguard selftest --null``: what the gate says when nothing changed.

The mutants prove that the gate catches broken engines; the speed self-test's planted slowdowns prove that the
speed rule sees a slower one.  This plants *nothing*: the gate's own correct engine, unchanged, is run ``runs``
times and judged as a PR would be, and every verdict line is counted:

* **stored**: each run against a baseline refreshed from two earlier runs of the same engine (the refresh's two
  timing passes), every run with its own sampling seed (1 to ``runs``);
* **paired**: each run timing the correct engine beside itself as the base, interleaved (``gate --against``), with
  its own prompt order, hence its own batches, and its own sampling seed (``runs + 1`` on): no two runs share a
  sample, so the distribution check's failures count 2 x ``runs`` independent tests.

Each run is checked as ``specguard gate`` checks it: a distribution test between its floor and alpha is sampled
again before it fails (:mod:`gate.checks.confirmation`), and the report counts those second passes.
Per mode and check, how many runs it failed and warned in, with the Clopper-Pearson 95% interval of the rate; and
the speed rule's cells and load levels marked.  It also prints the between-run spread these runs show on this
machine (:mod:`gate.verdict.noise`): what ``baseline.between_run_sd`` should be at least, as far as one job can tell.
A failing check on the unchanged engine is a false alarm: the self-test then exits 1.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gate.engines.paired import PairedBase
from gate.engines.reference import ReferenceEngine
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.inputs.models import load_pair
from gate.run.cache import ReferenceCache
from gate.run.runner import Runner
from gate.selftest import checked
from gate.selftest.speed import Slowed, suite_of
from gate.verdict.baseline import derive, failing_checks, hardware_of, measure, with_passes
from gate.verdict.judge import judge
from gate.verdict.store import Stored
from gate.verdict.summary import summarize

NULL_CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: %(dtype)s}
  draft: {path: "specguard:demo/draft", dtype: %(dtype)s}
  device: %(device)s
speculation: {num_draft_tokens: 4}
batching: {batch_sizes: [1, 4], compositions: 1}
generation:
  max_new_tokens: 16
  greedy: true
  sampling: {temperature: 1.0, seed: %(seed)d, batch_sizes: [4]}
checks:
  distribution: {num_samples: %(samples)d, alpha: 0.01, power_trials: 0}
  speedup: {min_repeats: %(repeats)d, max_repeats: %(repeats)d, warmup: 1, context_buckets: [1024],
            calibration_trials: 5}
baseline: {speedup_drop: 0.10}
output: {cache_dir: null}
"""


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    from scipy import stats

    if n == 0:
        return (0.0, 1.0)
    ci = stats.binomtest(k, n).proportion_ci(method="exact")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class NullRun:
    mode: str  # "stored" or "paired"
    seed: int
    failed: list[str]  # checks with a failing line
    warned: list[str]  # checks with a warning line (and none failing)
    seen: list[str]  # every check with a verdict line in the run
    cells: int  # speedup cells and load levels judged
    marked: int  # of them warned or failed
    second_passes: int = 0  # distribution groups sampled again before they could fail (gate.checks.confirmation)
    groups: int = 0  # distribution groups (engine x batch size) judged
    one_pass: int = 0  # of them, failed by one pass at alpha (the rule before confirmation)
    confirmed: int = 0  # of them, failed after confirmation (at once below the floor, or confirmed)


@dataclass
class NullReport:
    runs: list[NullRun] = field(default_factory=list)
    between_sd: float | None = None  # the between-run spread the stored-mode runs show here
    between_df: int = 0
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """No check failed on the unchanged engine (warnings are counted, not failed on)."""
        return not any(r.failed for r in self.runs)

    def rows(self) -> list[dict]:
        out = []
        for mode in ("stored", "paired"):
            runs = [r for r in self.runs if r.mode == mode]
            if not runs:
                continue
            for check in sorted({c for r in runs for c in r.seen}):
                f = sum(check in r.failed for r in runs)
                w = sum(check in r.warned for r in runs)
                out.append({"mode": mode, "check": check, "runs": len(runs), "failed": f,
                            "failed_ci": clopper_pearson(f, len(runs)), "warned": w,
                            "warned_ci": clopper_pearson(w, len(runs))})
            cells, marked = sum(r.cells for r in runs), sum(r.marked for r in runs)
            out.append({"mode": mode, "check": "speedup cells and load levels", "runs": len(runs), "cells": cells,
                        "marked": marked, "marked_ci": clopper_pearson(marked, cells)})
        return out

    def lines(self) -> list[str]:
        table = ["| mode | check | runs | failed (95% CI) | warned (95% CI) |", "|---|---|---|---|---|"]
        for r in self.rows():
            if "cells" in r:
                lo, hi = r["marked_ci"]
                table.append(f"| {r['mode']} | {r['check']} | {r['runs']} | – | {r['marked']} of {r['cells']} "
                             f"({r['marked'] / max(r['cells'], 1):.1%}, {lo:.1%}–{hi:.1%}) |")
                continue
            (flo, fhi), (wlo, whi) = r["failed_ci"], r["warned_ci"]
            table.append(f"| {r['mode']} | {r['check']} | {r['runs']} | {r['failed']} ({flo:.0%}–{fhi:.0%}) | "
                         f"{r['warned']} ({wlo:.0%}–{whi:.0%}) |")
        head = [f"null self-test: the correct engine against itself, {len(self.runs)} run(s), {self.seconds:.0f} s"]
        second = sum(r.second_passes for r in self.runs)
        if second:
            head.append(f"distribution groups sampled again before they could fail (a first pass between the floor "
                        f"and alpha, as `specguard gate` confirms it): {second}")
        head += self.group_lines()
        if self.between_sd is not None:
            head.append(f"between-run spread of a cell's mean log speedup here: {self.between_sd:.1%} "
                        f"({self.between_df} df, one job; baseline.between_run_sd should be at least this)")
        return [*head, "", *table]

    def groups(self) -> dict:
        """The distribution check per group over every run: judged, failed by one pass at alpha, failed after
        confirmation; each rate with its Clopper-Pearson 95% interval."""
        n = sum(r.groups for r in self.runs)
        out: dict = {"groups": n}
        for key in ("one_pass", "confirmed"):
            k = sum(getattr(r, key) for r in self.runs)
            out[key] = {"failed": k, "ci": clopper_pearson(k, n)}
        return out

    def group_lines(self) -> list[str]:
        g = self.groups()
        if not g["groups"]:
            return []
        said = [f"{g[key]['failed']} of {g['groups']} ({g[key]['ci'][0]:.1%}–{g[key]['ci'][1]:.1%})"
                for key in ("one_pass", "confirmed")]
        return [f"distribution groups (engine x batch size) failed: one pass at alpha {said[0]}; after confirmation "
                f"{said[1]}"]

    def to_json(self) -> dict:
        return {"passed": self.passed, "seconds": self.seconds, "between_sd": self.between_sd,
                "between_df": self.between_df, "rows": self.rows(), "distribution_groups": self.groups(),
                "runs": [r.__dict__ for r in self.runs]}


def _count(doc) -> tuple[list[str], list[str], list[str], int, int]:
    failed = sorted({v.check for v in doc.checks if v.status == "fail"})
    warned = sorted({v.check for v in doc.checks if v.status == "warn"} - set(failed))
    seen = sorted({v.check for v in doc.checks if v.status != "info"})
    every = doc.speedup + doc.speedup_levels
    return failed, warned, seen, len(every), sum(c.status != "pass" for c in every)


def null_selftest(runs: int = 10, repeats: int = 8, samples: int = 600, modes: tuple[str, ...] = ("stored", "paired"),
                  say: Callable[[str], None] = lambda m: None, dtype: str = "float32",
                  device: str = "cpu") -> NullReport:
    """``runs`` unchanged runs per mode; the stored mode's baseline from two runs before them (its two passes).
    Budget: about a minute per run on 2 CPU cores with the defaults.  ``dtype`` and ``device``: the demo pair's
    (models.device; cuda runs it on a GPU)."""
    from gate.verdict.noise import between_from_passes
    from gate.verdict.speed_rule import groups

    started = time.perf_counter()

    def config(seed: int):
        return parse_config(NULL_CONFIG % {"seed": seed, "samples": samples, "repeats": repeats, "dtype": dtype,
                                           "device": device}, PACKAGE_DIR / "selftest.yaml")

    pair = load_pair(config(0))
    reference = ReferenceEngine(pair.target.model, pair.device)
    report = NullReport()

    def engine(name: str) -> Slowed:
        e = Slowed(pair.target.model, pair.draft.model, pair.device)
        e.name = name
        return e

    with tempfile.TemporaryDirectory(prefix="specguard-null-") as tmp:
        cache = ReferenceCache(Path(tmp) / "cache")

        def run(name: str, seed: int, order: int, paired: PairedBase | None = None, timing_only: bool = False):
            cfg = config(seed)
            runner = Runner(cfg, pair, suite_of(order), reference, [engine("speculative")], Path(tmp) / name,
                            log=lambda m: None, cache=cache, paired=paired)
            if timing_only:
                runner.plan.outputs, runner.plan.canonical, runner.plan.sampling = [], [], []
                return cfg, runner.run(), None
            return cfg, *checked(runner, pair, cfg.config)

        stored_runs: list = []
        baseline = None
        if "stored" in modes:
            cfg, results, checks = run("baseline", 0, 0)
            _, second, _ = run("baseline-pass-2", 0, 0, timing_only=True)
            measured = measure(results, checks, cfg.config)
            measured.speedup = with_passes(measured.speedup, [second])
            baseline = derive(measured, name="selftest", hardware_key=results.fingerprint.hardware_key,
                              hardware=hardware_of(results), status=results.status,
                              failing=failing_checks(checks), created_utc="", source={},
                              force_reason="the null self-test's own baseline")
        for seed in range(1, runs + 1):
            for mode in modes:
                paired = None
                if mode == "paired":
                    paired = PairedBase(engine=engine("base-speculative"), head_engine="speculative",
                                        draft=pair.draft, num_draft_tokens=4, config={}, source="selftest")
                # stored: the baseline's prompt order (a reordered slice is not compared); paired: its own order.
                # Each run samples with its own seed, the paired ones too: 2 x runs independent distribution tests
                cfg, results, checks = run(f"{mode}-{seed}", seed if mode == "stored" else runs + seed,
                                           0 if mode == "stored" else seed, paired)
                summary = summarize(results, checks, cfg.config, "selftest")
                stored = Stored(baseline, "", "selftest") if mode == "stored" else Stored(None, "", "selftest")
                doc = judge(summary, stored, cfg.config.baseline)
                failed, warned, seen, cells, marked = _count(doc)
                rows = [r for by_bs in (checks.distribution.engines.values() if checks.distribution else ())
                        for r in by_bs.values()]
                second = sum(r.confirmation is not None and r.confirmation.p2 is not None for r in rows)
                judged = [r for r in rows if r.n]
                one = sum(r.rejected or r.confirmation is not None for r in judged)  # p1 < alpha, or outside
                report.runs.append(NullRun(mode, seed, failed, warned, seen, cells, marked, second, len(judged), one,
                                           sum(bool(r.rejected) for r in judged)))
                if mode == "stored":
                    stored_runs.append(summary.measured.speedup)
                say(f"{mode} run {seed}: " + (f"FAILED {', '.join(failed)}" if failed else "no failure")
                    + (f"; warned {', '.join(warned)}" if warned else "") + f"; {marked} of {cells} speed cells marked"
                    + (f"; {second} distribution group(s) sampled again" if second else ""))
        if len(stored_runs) >= 2:
            keys = sorted(set.intersection(*({(e, k) for e, cells in s.items() for k in cells} for s in stored_runs)))
            est = between_from_passes([[groups(s[e][k].samples, s[e][k].batches) for s in stored_runs]
                                       for e, k in keys])
            report.between_sd, report.between_df = est.between_sd, est.df
    report.seconds = time.perf_counter() - started
    return report


__all__ = ["NullReport", "NullRun", "clopper_pearson", "null_selftest"]

