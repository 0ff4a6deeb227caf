"""The run under ``checks.budget_minutes``: the :class:`~gate.run.runner.Runner`'s work in the budget's priority
order, each unit admitted while its estimate fits what is left (:mod:`gate.run.budget` says the order and why), and
what it left out, for ``results.json``."""

from __future__ import annotations

from gate.errors import Problem, SpecguardError
from gate.run import load
from gate.run.plan import Job
from gate.run.records import Phase
from gate.run.results import Skip
from gate.run.schedule import TimingScheduler


class Guard:
    """The budget's say in a load level's timing (:class:`gate.run.schedule.Guard`): a cell already admitted gets its
    ``min_repeats``; an adaptive repeat runs only while it fits beside the work still ``queued`` behind the level."""

    def __init__(self, budget, queued, batch_size: int, units: dict):
        self.budget, self.queued, self.batch_size = budget, queued, batch_size
        self.units = units  # id(cell) -> its unit; a cell not among them was admitted before the level began

    def cell(self, cell) -> bool:
        unit = self.units.get(id(cell))
        return unit is None or self.budget.admit(unit)

    def more(self, cell, seconds: float) -> bool:
        if self.budget.room(seconds, self.queued):
            return True
        self.budget.repeats_cut.add(self.batch_size)
        return False


# --- under a budget (gate.run.budget) ---------------------------------------------------

def budgeted_phases(runner) -> tuple[dict, dict, dict, object]:
    """The run in the budget's priority order, each unit admitted while its estimate fits what is left;
    (calibration, the base's calibration, timing, the runner's load while it timed)."""
    from gate.run.budget import LeftOut, split_sampling, units

    b, sp = runner.budget, runner.cfg.checks.speedup
    tc = runner.cfg.checks.traffic
    traffic_s = sum(tc.trace_span_s(r) for r in tc.rates) * tc.repeats * 2 if tc and runner._traffic_here() else 0.0
    queue = units(runner.plan, runner.prompts, runner.cfg.batching.batch_sizes, sp.min_repeats, sp.warmup,
                  lambda job: _cached(runner, job), traffic_s)
    first = queue[0]
    estimate = b.estimate(first)
    if estimate is not None and estimate > b.deadline.left():
        raise SpecguardError(Problem(
            b.source, f"{b.minutes:g} min is too small for even {first.label} (the work never left out): "
            f"an estimated {estimate:.0f} s, and {max(b.deadline.left(), 0):.0f} s are left after "
            f"{b.deadline.elapsed():.0f} s spent and {b.deadline.reserve_s:.0f} s kept for the checks and report "
            f"({b.estimates})", field="checks.budget_minutes",
            hint="raise it, or plan less work (fewer batch sizes, prompts or new tokens)"))
    runner.progress.note(f"budget: {b.minutes:g} min ({b.source}), {b.deadline.left():.0f} s left for the run; "
                       "in priority order: " + "; ".join(dict.fromkeys(u.label.split(", cell")[0] for u in queue)))
    calibration: dict = {}
    base_calibration: dict = {}
    timing: dict = {}
    runner_load, started = None, None
    scheduler = TimingScheduler(sp)
    share = sp.time_budget_s / max(1, len(runner.plan.timing))
    sampled = [u for u in queue if u.what == "sampling"]
    need = None  # tokens per sampling group: weighed once the work before it has set the pace
    i = 0
    while i < len(queue):
        u = queue[i]
        if u.what == "equivalence":
            if b.admit(u):
                runner.outputs_phase(u.work)
            else:
                _left_out(runner, u, {j.engine for j in u.work}, "greedy")
        elif u.what == "sampling":
            if need is None:
                need = split_sampling(runner.cfg.checks.distribution.num_samples, b.share(sampled))
            if need == 0:  # not even MIN_SAMPLES tokens of every group fit
                b.left_out.append(LeftOut(u, b.estimate(u), b.deadline.left()))
                _left_out(runner, u, {u.engine}, "sampling")
            else:
                with runner.phases("sampling"):
                    runner._sample(u.work, Phase.SAMPLING, 0, need=need, queued=queue[i + 1:])
        elif u.what == "timing":
            level = u.work[0]
            group = [v for v in queue[i:] if v.what == "timing" and v.work[0] is level]
            i += len(group) - 1
            rest = queue[i + 1:]
            if not b.admit(group[0]):  # not even its first cell (and warm-up): the level is left out
                b.left_out += [LeftOut(v, b.estimate(v), b.deadline.left()) for v in group[1:]]
                _left_out(runner, group[0], set(level.engines), "greedy")
            else:
                if runner.plan.calibrate and level.batch_size in runner.plan.calibrate:
                    cal, base_cal = runner._calibrate([level.batch_size])
                    calibration.update(cal)
                    base_calibration.update(base_cal)
                guard = Guard(b, rest, level.batch_size, {id(v.work[1]): v for v in group[1:]})
                with runner.phases("timing"):
                    started = started or load.snapshot()
                    timing[str(level.batch_size)] = runner._time_level(level, [v.work[1] for v in group], scheduler,
                                                                       share, guard)
                    runner_load = load.record(started)
                for v in group[1:]:
                    if v.cell not in timing[str(level.batch_size)]:
                        _left_out(runner, v, set(level.engines), "greedy")
        elif u.what == "traffic" and b.admit(u):
            with runner.phases("request-rate traffic"):
                runner.traffic_phase()
        i += 1
    return calibration, base_calibration, timing, runner_load

def _cached(runner, job: Job) -> bool:
    """Whether the reference cache (or a resumed log) holds this job: it then costs nothing."""
    if not job.cacheable or runner.executor is None or runner.executor.cache is None:
        return False
    settings = runner.greedy if job.mode == "greedy" else runner.sampled
    return runner.executor.cache.get(runner.executor.cache_key(job.batch, job.repeat, settings)) is not None

def _left_out(runner, unit, engines: set[str], mode: str) -> None:
    """A unit the budget left out, said; an equivalence batch size or a sampling group also as a skip per engine
    (``required`` checks then say why they measured nothing)."""
    b = runner.budget
    said = next((x.reason(b.source) for x in reversed(b.left_out) if x.unit is unit), "left out by the budget")
    runner.progress.note(f"{unit.label}: {said}")
    if unit.cell is None:
        runner.budget_skips += [Skip(engine=e, batch_size=unit.batch_size, mode=mode, reason=said)
                                for e in sorted(engines)]

def budget_record(runner):
    """results.json's ``budget``: what the budget left out or cut (None without a budget)."""
    if runner.budget is None:
        return None
    from gate.run.results import BudgetLeftOut, BudgetRecord, BudgetSampling

    b = runner.budget
    return BudgetRecord(
        minutes=b.minutes, source=b.source, reserve_s=b.deadline.reserve_s, estimates=b.estimates,
        run_s=b.deadline.elapsed(),
        left_out=[BudgetLeftOut(what=x.unit.what, batch_size=x.unit.batch_size, engine=x.unit.engine,
                                cell=x.unit.cell, estimate_s=x.estimate_s, left_s=x.left_s,
                                reason=x.reason(b.source)) for x in b.left_out],
        sampling=[BudgetSampling(engine=e, batch_size=bs, tokens=got, need=need) for e, bs, got, need in b.cut],
        repeats_cut=sorted(b.repeats_cut))


__all__ = ["Guard", "budget_record", "budgeted_phases"]
