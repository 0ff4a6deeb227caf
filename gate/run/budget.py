"""``checks.budget_minutes``: the run fitted to a wall-clock budget, what buys most first.

The budget is wall-clock minutes of one ``specguard gate`` command, from its start to the verdict written (set-up,
model load, server start-up, the run, the checks and the report), because a job's timeout and its runner's bill are
both wall clock.  Every phase holds the same devices (:mod:`gate.run.devices`), so a budget of device-minutes is
this budget times the devices held; ``specguard plan`` prints both.

With a budget the run goes in priority order, not phase order, and each unit of work is admitted only when its
estimate fits what is left of the budget (less the its ``reserve_s`` kept for the checks and report):

1. the equivalence outputs at the largest batch size (every engine), with the canonical reference they are judged
   against: never left out; a budget that cannot hold them is refused (exit 2, ``checks.budget_minutes``);
2. the sampling groups at ``checks.distribution.num_samples``: where all of them do not fit, every group gets the
   same share of its tokens (at least :data:`MIN_SAMPLES`), so the test runs at the power that share gives;
3. timing at the largest batch size, each cell at ``min_repeats``;
4. the other batch sizes, largest first: their equivalence outputs, then their timing cells at ``min_repeats``; then
   request-rate traffic;
5. adaptive timing repeats past ``min_repeats``: a load level repeats only while the time left exceeds what the
   work still queued behind it is estimated to need (more repeats only narrow intervals already measured, while a
   batch size not run at all is a hole in the equivalence check and the load curve).

A unit's estimate is its budgeted tokens (max new tokens summed over its rows) times seconds per token
(:class:`Pace`): this run's own rate at that phase, engine and batch size once measured; else the last run's
(:func:`gate.run.cost.last_run`) times how much slower this run has been so far than that run on the same work;
else this run's rate at the nearest batch size measured, scaled as if a step cost the same at any batch size (a
bound from above).  What a unit that did not fit is, is recorded (:class:`gate.run.results.BudgetRecord`), and the
checks and the comment say it was left out, never that it passed.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gate.inputs.config import REFERENCE

MIN_SAMPLES = 100  # checks.distribution.num_samples' own lower bound: fewer and the sampling group is left out
TAIL_SHARE = 0.2  # the budget's share kept for the checks and report where no earlier run says what they cost
AFTER_RUN = ("re-scoring", "statistics and power simulations", "report")  # phases.json's names for the tail


@dataclass
class Unit:
    """One piece of work the budget admits or leaves out."""

    tier: int  # 1: never left out
    what: str  # equivalence, sampling, timing, traffic
    label: str  # in words, for the log, checks.json and the comment
    tokens: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (phase, engine, bs) -> budgeted tokens
    batch_size: int | None = None
    engine: str | None = None
    cell: str | None = None
    extra_s: float = 0.0  # seconds not priced per token (request-rate traces)
    work: Any = None  # what the runner runs: jobs, a sampling group, a timing cell, the traffic


class Pace:
    """Seconds per budgeted token, measured as the run goes, with the last run's rates as the prior."""

    def __init__(self, prior: Callable[[str, str, int], float] | None = None):
        self.prior = prior
        self.spent: dict[tuple, list[float]] = {}  # key -> [seconds, tokens]
        self.against_prior = [0.0, 0.0]  # [seconds measured, seconds the prior expected] on the same work

    def record(self, phase: str, engine: str, bs: int, tokens: int, seconds: float) -> None:
        if tokens <= 0:
            return
        for key in ((phase, engine, bs), (engine, bs)):
            acc = self.spent.setdefault(key, [0.0, 0])
            acc[0] += seconds
            acc[1] += tokens
        if self.prior is not None:
            self.against_prior[0] += seconds
            self.against_prior[1] += self.prior(phase, engine, bs) * tokens

    @property
    def slowdown(self) -> float:
        """This run's seconds over the last run's on the same work so far (1 before anything is measured)."""
        measured, expected = self.against_prior
        return measured / expected if expected > 0 else 1.0

    def per_token(self, phase: str, engine: str, bs: int) -> float | None:
        for key in ((phase, engine, bs), (engine, bs)):
            if key in self.spent:
                s, t = self.spent[key]
                return s / t
        if self.prior is not None:
            return self.prior(phase, engine, bs) * self.slowdown
        measured = {k[1]: v[0] / v[1] for k, v in self.spent.items() if len(k) == 2 and k[0] == engine} or \
            {k[1]: v[0] / v[1] for k, v in self.spent.items() if len(k) == 2}
        if not measured:
            return None
        near = min(measured, key=lambda b: (abs(b - bs), -b))
        # a step costing the same at any batch size: per token, a smaller batch is dearer in proportion (a bound)
        return measured[near] * max(1.0, near / bs)

    def seconds(self, tokens: dict[tuple[str, str, int], int]) -> float | None:
        """The estimate of work holding ``tokens``; None where no rate is known yet."""
        total = 0.0
        for (phase, engine, bs), n in tokens.items():
            rate = self.per_token(phase, engine, bs)
            if rate is None:
                return None
            total += rate * n
        return total


def process_started(clock: Callable[[], float] = time.perf_counter) -> float:
    """When this process started, on ``clock`` (Linux's /proc; elsewhere now): the budget counts the interpreter's
    start-up and imports too, as the job's clock does."""
    try:
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return clock() - max(0.0, up - start)
    except (OSError, ValueError, IndexError):
        return clock()


class Deadline:
    """The budget's clock: ``budget_s`` from ``started`` (the command's start), ``reserve_s`` of it kept for what
    follows the run."""

    def __init__(self, budget_s: float, started: float, reserve_s: float = 0.0,
                 clock: Callable[[], float] = time.perf_counter):
        self.budget_s, self.started, self.reserve_s, self.clock = budget_s, started, reserve_s, clock
        self.reserve_scale: Callable[[], float] = lambda: 1.0  # a run going slower than the last: its checks too

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds left for the run's work."""
        return self.budget_s - self.reserve_s * self.reserve_scale() - self.elapsed()


@dataclass
class LeftOut:
    unit: Unit
    estimate_s: float | None
    left_s: float

    def reason(self, source: str) -> str:
        need = f"an estimated {self.estimate_s:.0f} s" if self.estimate_s is not None else "its time"
        return f"left out by the budget ({source}): {need} did not fit the {max(self.left_s, 0):.0f} s left"


class Budget:
    """Admits units against a :class:`Deadline` at a :class:`Pace`, and remembers what it left out."""

    def __init__(self, minutes: float, source: str, deadline: Deadline, pace: Pace, estimates: str = ""):
        self.minutes, self.source, self.deadline, self.pace = minutes, source, deadline, pace
        deadline.reserve_scale = lambda: max(1.0, pace.slowdown)  # never less than the last run spent
        self.estimates = estimates  # where the estimates come from, in words
        self.left_out: list[LeftOut] = []
        self.cut: list[tuple[str, int, int, int]] = []  # sampling (engine, bs, tokens planned now, need)
        self.repeats_cut: set[int] = set()  # load levels whose adaptive repeats the budget stopped

    def admit(self, unit: Unit, queued: list[Unit] = ()) -> bool:
        """Whether ``unit`` fits what is left, beside the work still ``queued`` ahead of it; tier 1 always does."""
        estimate = self.estimate(unit)
        if unit.tier == 1:
            return True
        left = self.deadline.left() - self.need(queued)
        if estimate is not None and estimate <= left:
            return True
        if estimate is None and left > 0:  # nothing says what it costs: it runs while time is left
            return True
        self.left_out.append(LeftOut(unit, estimate, left))
        return False

    def estimate(self, unit: Unit) -> float | None:
        s = self.pace.seconds(unit.tokens)
        return None if s is None else s + unit.extra_s

    def need(self, units) -> float:
        """The estimate of ``units`` (those not yet estimable count 0)."""
        return sum(self.estimate(u) or 0.0 for u in units)

    def room(self, seconds: float, queued: list[Unit] = ()) -> bool:
        """Whether ``seconds`` more fit, with the ``queued`` units still to come."""
        return seconds <= self.deadline.left() - self.need(queued)

    def share(self, units: list[Unit]) -> float:
        """The share of ``units``' work that fits what is left (1: all of it; 0: none known to fit)."""
        est = self.pace.seconds({k: v for u in units for k, v in u.tokens.items()})
        left = self.deadline.left()
        if est is None or est <= left:
            return 1.0
        return max(0.0, left / est)


def _tokens(batch, prompts) -> int:
    return sum(prompts[i].max_new_tokens for i in batch.members)


def units(p, prompts, sizes: list[int], min_repeats: int, warmup: int, cached: Callable = lambda job: False,
          traffic_s: float = 0.0) -> list[Unit]:
    """The plan's work as units in priority order (the module's list); ``cached(job)``: a reference batch the cache
    holds (it costs nothing); ``traffic_s``: the request-rate replays' expected time (0: none)."""
    from gate.run.records import Phase

    largest = max(sizes)

    def tokens(jobs) -> dict:
        out: dict = {}
        for j in jobs:
            if not cached(j):
                key = (j.phase.value, j.engine, j.batch.batch_size)
                out[key] = out.get(key, 0) + _tokens(j.batch, prompts)
        return out

    def canonical(j) -> bool:  # the reference alone at batch size 1: what every equivalence check is judged against
        return j.engine == REFERENCE and j.batch.batch_size == 1 and j.repeat == 0

    first = [j for j in p.outputs if j.batch.batch_size == largest or canonical(j)] + list(p.canonical)
    out = [Unit(1, "equivalence", f"equivalence at batch size {largest}", tokens(first), largest, work=first)]
    for g in p.sampling:
        per_pass = sum(_tokens(b, prompts) for b in g.batches) or 1
        passes = math.ceil(g.need / per_pass)
        out.append(Unit(2, "sampling", f"sampling with {g.engine} at batch size {g.batch_size}",
                        {(Phase.SAMPLING.value, g.engine, g.batch_size): passes * per_pass}, g.batch_size, g.engine,
                        work=g))

    def cells(level, tier: int) -> list[Unit]:
        engines = (REFERENCE, *level.engines)
        row = []
        for i, c in enumerate(level.cells):
            per = sum(_tokens(b, prompts) for b in c.batches) * min_repeats
            if i == 0:  # the level's warm-up runs on its first batch
                per += warmup * _tokens(c.batches[0], prompts)
            row.append(Unit(tier, "timing", f"timing at batch size {level.batch_size}, cell {c.label}",
                            {(Phase.TIMING.value, e, level.batch_size): per for e in engines}, level.batch_size,
                            cell=c.label, work=(level, c)))
        return row

    levels = {lvl.batch_size: lvl for lvl in p.timing}
    if largest in levels:
        out += cells(levels[largest], 3)
    for bs in sorted(set(sizes) - {largest}, reverse=True):
        rest = [j for j in p.outputs if j.batch.batch_size == bs and not canonical(j)]
        if rest:
            out.append(Unit(4, "equivalence", f"equivalence at batch size {bs}", tokens(rest), bs, work=rest))
        if bs in levels:
            out += cells(levels[bs], 4)
    if traffic_s:
        out.append(Unit(4, "traffic", "request-rate traffic", {}, extra_s=traffic_s, work="traffic"))
    return out


def split_sampling(need: int, share: float) -> int:
    """Tokens per sampling group at ``share`` of the work (0: left out)."""
    if share >= 1.0:
        return need
    got = int(need * share)
    return got if got >= MIN_SAMPLES else 0


@dataclass
class Fit:
    """The plan's fit of a budget (``specguard plan``): what it keeps and drops, each with its estimate."""

    kept: list[tuple[Unit, float | None]] = field(default_factory=list)
    dropped: list[tuple[Unit, float | None]] = field(default_factory=list)
    sampling_need: int | None = None  # tokens per sampling group where the budget cuts them (None: not cut)
    left_s: float = 0.0  # what is estimated to remain of the budget

    def lines(self) -> list[str]:
        def said(pairs) -> str:
            grouped: dict[str, list[float | None]] = {}
            for u, s in pairs:
                grouped.setdefault(u.label.split(", cell ")[0] + (" (cells)" if u.cell else ""), []).append(s)
            return "; ".join(f"{label.replace(' (cells)', f' ({len(ss)} cell' + ('s)' if len(ss) > 1 else ')'))} "
                             + ("(time unknown)" if any(x is None for x in ss) else f"{sum(ss):.0f} s")
                             for label, ss in grouped.items())

        out = [f"keeps {said(self.kept)}"]
        if self.sampling_need is not None:
            out.append(f"cuts the sampling test to {self.sampling_need} tokens per group "
                       "(checks.distribution.num_samples not reached: the check reports the power that remains)")
        if self.dropped:
            out.append(f"drops {said(self.dropped)}")
        return out


def fit(units: list[Unit], available_s: float, seconds: Callable[[Unit], float | None],
        num_samples: int | None = None) -> Fit:
    """Units in priority order, each kept while its estimate fits what is left (tier 1 always; the sampling groups
    together, cut to the same share of ``num_samples`` where all of them do not fit), as the run admits them."""
    out, left = Fit(), available_s
    sampling = [u for u in units if u.what == "sampling"]
    need = None  # tokens per sampling group, weighed at the first of them
    for u in sorted(units, key=lambda u: u.tier):
        s = seconds(u)
        if u.what == "sampling" and num_samples:
            if need is None:
                total = [seconds(v) for v in sampling]
                whole = None if any(x is None for x in total) else sum(total)
                need = split_sampling(num_samples, 1.0 if whole is None or whole <= left else max(0.0, left) / whole)
                out.sampling_need = need if need < num_samples else None
            if need == 0:
                out.dropped.append((u, s))
                continue
            s = None if s is None else s * need / num_samples
        if u.tier <= 2 or s is None or s <= left:
            out.kept.append((u, s))
            left -= s or 0.0
        else:
            out.dropped.append((u, s))
    out.left_s = left
    return out


UNIT_PHASE = {"outputs": "equivalence outputs", "canonical": "canonical reference", "sampling": "sampling",
              "timing": "timing"}


def after_checks(session, unconfirmed, took_s: float, config) -> bool:
    """After ``gate``'s checks (``took_s``), under a budget: that time is spent of what was kept for them; and whether
    the confirmation pass of the ``unconfirmed`` groups (``num_samples`` each at this run's pace) and the checks once
    more fit what is left, said when they do not.  Without a budget, True."""
    budget = session.budget
    if budget is None:
        return True
    budget.deadline.reserve_s = max(0.0, budget.deadline.reserve_s - took_s)
    n = config.checks.distribution.num_samples
    need = sum((budget.pace.per_token("sampling", e, bs) or 0.0) * n for e, bs in unconfirmed)
    if not unconfirmed or budget.room(need + took_s):
        return True
    session.say(f"confirmation pass not run: it and the checks again (about {need + took_s:.0f} s) do not fit the "
                f"{max(budget.deadline.left(), 0):.0f} s left of the budget ({budget.source}); "
                + ", ".join(f"{e} at batch size {bs}" for e, bs in unconfirmed) + " fail as unconfirmed (the "
                "single-pass rule at alpha)")
    return False


def plan_fit(report, budget, num_samples: int | None) -> None:
    """``specguard plan``'s budget lines (``report``: its :class:`gate.run.estimate.PlanReport`; ``budget``: a
    :class:`gate.run.limits.Limit`): what it keeps and drops, in the run's priority order (:func:`fit`), each unit
    at its share of the estimate's seconds for its phase, engine and batch size; warned where the estimate exceeds
    it."""
    from gate.run.cost import duration

    report.limits.append(budget)
    if report.estimate_s is None:
        report.budget_lines = [f"{budget.minutes:g} min ({budget.source}): what it keeps is not known without an "
                               "estimate (an earlier run here, or --tokens-per-s); the run fits itself to it as it "
                               "goes"]
        report.budget = {"minutes": budget.minutes, "source": budget.source, "keeps": None, "drops": None}
        return
    totals: dict = {}
    for u in report.units:
        for k, n in u.tokens.items():
            totals[k] = totals.get(k, 0) + n

    def seconds(u) -> float:
        if u.what == "traffic":
            return report.phase_s.get(("request-rate traffic", "", 0), (u.extra_s,))[0]
        return sum(report.phase_s.get((UNIT_PHASE[ph], e, b), (0.0, 0.0))[0] * n / totals[(ph, e, b)]
                   for (ph, e, b), n in u.tokens.items() if totals.get((ph, e, b)))

    fixed = report.phase_s.get(("fixed costs", "", 0), (0.0, 0.0))[0]
    got = fit(report.units, budget.minutes * 60 - fixed, seconds, num_samples)
    counted = "" if ("fixed costs", "", 0) in report.phase_s else \
        " (model load, server start-up, calibration and the checks not counted: the stated rates leave them out)"
    gpus = len(report.held)
    bill = f" ({budget.minutes * gpus:g} GPU-min at the {gpus} GPUs held)" if gpus else ""
    report.budget_lines = [f"{budget.minutes:g} min{bill} ({budget.source}), {duration(fixed)} of it fixed costs"
                           f"{counted}; "
                           "in priority order it " + got.lines()[0], *(f"it {line}" for line in got.lines()[1:])]
    report.budget = {"minutes": budget.minutes, "source": budget.source, "fixed_s": fixed,
                     "device_minutes": budget.minutes * gpus,
                     "keeps": [{"what": u.what, "label": u.label, "seconds": sec} for u, sec in got.kept],
                     "drops": [{"what": u.what, "label": u.label, "seconds": sec} for u, sec in got.dropped],
                     "sampling_tokens": got.sampling_need, "left_s": got.left_s}
    first = sum(sec or 0.0 for u, sec in got.kept if u.tier == 1)
    if first > budget.minutes * 60 - fixed:
        report.warnings.append(
            f"{budget.source}: {budget.minutes:g} min is too small for even {report.units[0].label} (never left out): "
            f"an estimated {duration(first)} against {duration(max(budget.minutes * 60 - fixed, 0))} after fixed "
            "costs; the gate refuses it (exit 2) once its rates say so: raise it, or plan less work")
    elif report.estimate_s[1] > budget.minutes * 60:
        report.warnings.append(
            f"the estimate exceeds the budget of {budget.minutes:g} min ({budget.source}): the run fits itself to "
            "it and leaves out what does not fit (the budget lines above); checks.json and the comment say what")


__all__ = [
    "AFTER_RUN",
    "MIN_SAMPLES",
    "TAIL_SHARE",
    "Budget",
    "Deadline",
    "Fit",
    "LeftOut",
    "Pace",
    "Unit",
    "after_checks",
    "fit",
    "plan_fit",
    "process_started",
    "split_sampling",
    "units",
]
