"""How often each timing cell runs: interleaved pairs and adaptive repeats.

Per load level, every cell (slice x context bucket) gets ``min_repeats``; then
the cell whose speedup CI is widest gets one more repeat, until every cell is
within ``ci_half_width``, has ``max_repeats``, or the level's share of
``time_budget_s`` is spent (an equal split across load levels, so the first
cannot starve the rest).  Within a repeat, the reference and each engine run
every batch of the cell back to back, A B on even repeats and B A on odd ones,
so linear drift hits both sides equally.

Under a budget (:mod:`gate.run.budget`) a :class:`Guard` decides too: whether a cell gets its ``min_repeats`` at all,
and whether one more adaptive repeat fits (stopped so, a cell's ``stopped_by`` is ``"deadline"``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from gate.inputs.checks_config import SpeedupCheck
from gate.run.plan import PlannedBatch, TimingCell
from gate.stats import bootstrap_median_ci

# run(batch, repeat, order) -> {engine: wall seconds, or None when the engine failed on the batch}
RunPair = Callable[[PlannedBatch, int, list[str]], dict[str, float | None]]


class Guard(Protocol):
    def cell(self, cell: TimingCell) -> bool:
        """Whether ``cell`` gets its ``min_repeats`` (False: it is left out, and not timed)."""

    def more(self, cell: TimingCell, seconds: float) -> bool:
        """Whether one more repeat of ``cell``, estimated at ``seconds``, fits."""


def interleaved(names: list[str], repeat: int) -> list[str]:
    """A B, then B A on the next repeat."""
    return list(reversed(names)) if repeat % 2 else list(names)


class TimingScheduler:
    def __init__(self, policy: SpeedupCheck, clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.clock = clock

    def run_level(self, cells: list[TimingCell], reference: str, engines: list[str], budget_s: float,
                  run: RunPair, guard: Guard | None = None) -> dict[str, dict]:
        """Time one load level; returns {cell label: {"repeats", "stopped_by"}} of the cells timed (a cell the
        ``guard`` leaves out is not among them)."""
        sp = self.policy
        started = self.clock()
        ratios: dict[str, list[float]] = {c.label: [] for c in cells}
        repeats = {c.label: 0 for c in cells}
        took = {c.label: 0.0 for c in cells}  # seconds its repeats took, in all

        def one_repeat(cell: TimingCell) -> None:
            r = repeats[cell.label]
            t0 = self.clock()
            for pb in cell.batches:
                walls = run(pb, r, interleaved([reference, *engines], r))
                if walls[reference] is not None:
                    ratios[cell.label] += [walls[reference] / walls[e] for e in engines if walls[e]]
            repeats[cell.label] += 1
            took[cell.label] += self.clock() - t0

        def width(cell: TimingCell) -> float:
            return bootstrap_median_ci(ratios[cell.label], sp.bootstrap_resamples).rel_half_width if engines else 0.0

        kept = []
        for cell in cells:  # each cell asked for just before it runs: the pace so far prices it
            if guard is not None and not guard.cell(cell):
                continue
            kept.append(cell)
            for _ in range(sp.min_repeats):
                one_repeat(cell)
        cells = kept
        stop: dict[str, str] = {}
        while True:
            open_cells = [c for c in cells if width(c) > sp.ci_half_width and repeats[c.label] < sp.max_repeats]
            for c in cells:
                if c not in open_cells:
                    stop[c.label] = "precision" if width(c) <= sp.ci_half_width else "max_repeats"
            if not open_cells:
                break
            if self.clock() - started > budget_s:
                stop.update(dict.fromkeys((c.label for c in open_cells), "budget"))
                break
            nxt = max(open_cells, key=width)  # the least precise cell gets the next repeat
            if guard is not None and not guard.more(nxt, took[nxt.label] / repeats[nxt.label]):
                stop.update(dict.fromkeys((c.label for c in open_cells), "deadline"))
                break
            one_repeat(nxt)
        return {c.label: {"repeats": repeats[c.label], "stopped_by": stop[c.label]} for c in cells}
