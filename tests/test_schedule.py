"""TimingScheduler on a fake clock and fake engines: which cell gets the next repeat, and why each stops.

No model, no real time: `run` returns the walls we choose and advances the clock by them.
"""

from __future__ import annotations

import itertools

from gate.inputs.checks_config import SpeedupCheck
from gate.run.plan import PlannedBatch, TimingCell
from gate.run.schedule import TimingScheduler, interleaved


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def cell(slice_: str, n_batches: int = 1) -> TimingCell:
    batches = tuple(PlannedBatch(batch_size=1, index=i, members=(i,), n_real=1, slice=slice_, bucket="0-127")
                    for i in range(n_batches))
    return TimingCell(batch_size=1, slice=slice_, bucket="0-127", batches=batches)


def runner(clock: FakeClock, walls: dict[str, object], calls: list):
    """Per slice, an iterator of (reference wall, engine wall) pairs; each call advances the fake clock."""

    def run(pb: PlannedBatch, repeat: int, order: list[str]) -> dict[str, float | None]:
        ref, eng = next(walls[pb.slice])
        calls.append((pb.slice, repeat, tuple(order), clock.t))
        clock.t += (ref or 0) + (eng or 0)
        return {"reference": ref, "speculative": eng}

    return run


def policy(**kw) -> SpeedupCheck:
    return SpeedupCheck(**{"min_repeats": 3, "max_repeats": 10, "ci_half_width": 0.03, "bootstrap_resamples": 200,
                           **kw})


def test_a_steady_cell_stops_on_precision_after_the_minimum():
    clock, calls = FakeClock(), []
    walls = {"prose": itertools.repeat((2.0, 1.0))}  # exactly 2x every time: the CI has zero width
    out = TimingScheduler(policy(), clock).run_level([cell("prose")], "reference", ["speculative"], 1e9,
                                                     runner(clock, walls, calls))
    assert out == {"prose|0-127": {"repeats": 3, "stopped_by": "precision"}}
    assert [c[2] for c in calls] == [("reference", "speculative"), ("speculative", "reference"),
                                     ("reference", "speculative")], "A B, then B A, then A B"


def test_a_noisy_cell_gets_the_extra_repeats_and_stops_at_max_repeats():
    clock, calls = FakeClock(), []
    noisy = itertools.cycle([(2.0, 1.0), (2.0, 1.6), (2.0, 0.8), (2.0, 1.3)])  # ratios 2, 1.25, 2.5, 1.54
    walls = {"prose": itertools.repeat((2.0, 1.0)), "code": noisy}
    out = TimingScheduler(policy(), clock).run_level([cell("prose"), cell("code")], "reference", ["speculative"],
                                                     1e9, runner(clock, walls, calls))
    assert out["prose|0-127"] == {"repeats": 3, "stopped_by": "precision"}
    assert out["code|0-127"] == {"repeats": 10, "stopped_by": "max_repeats"}
    assert [c[0] for c in calls[6:]] == ["code"] * 7, "after the minimum, only the wide cell is repeated"


def test_the_budget_stops_open_cells_and_says_so():
    clock, calls = FakeClock(), []
    noisy = itertools.cycle([(20.0, 10.0), (20.0, 16.0), (20.0, 8.0)])
    walls = {"code": noisy}
    out = TimingScheduler(policy(max_repeats=1000), clock).run_level(
        [cell("code")], "reference", ["speculative"], 100.0, runner(clock, walls, calls))
    assert out == {"code|0-127": {"repeats": len(calls), "stopped_by": "budget"}}
    # the minimum repeats always run; after that a repeat starts only while the clock is within the budget
    starts = [c[3] for c in calls]
    assert len(calls) > 3 and all(t <= 100.0 for t in starts) and clock.t > 100.0


def test_a_failed_engine_batch_adds_no_ratio():
    clock, calls = FakeClock(), []
    walls = {"prose": itertools.cycle([(2.0, None), (2.0, 1.0)])}
    out = TimingScheduler(policy(min_repeats=2, max_repeats=4), clock).run_level(
        [cell("prose")], "reference", ["speculative"], 1e9, runner(clock, walls, calls))
    # after 2 repeats one ratio exists (a CI of unknown width, so one more pair is run); after 4, two ratios of
    # exactly 2 give a zero-width CI: the failed batches are skipped, never counted as a ratio of 0 or inf
    assert out["prose|0-127"] == {"repeats": 4, "stopped_by": "precision"}


def test_interleaving_alternates_the_order():
    assert interleaved(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert interleaved(["a", "b", "c"], 1) == ["c", "b", "a"]
