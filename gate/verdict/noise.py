"""Timing noise as variance components: how far a cell's speedup moves within one run, and between runs.

A speedup sample is ``reference wall / engine wall`` of one timed batch.  In log space, sample ``i`` of cell ``c``
in run ``r`` is ``y = mu_c + b_rc + e_rci``:

* ``e`` is the **within-run** noise (``sigma_w``): what one run's repeats see, and all a one-run interval sees;
* ``b`` is the **between-run** shift (``sigma_b``): another process, another hour, another machine of the same key
  (memory layout, clocks, neighbours) moves a cell's whole mean, and no number of repeats in one run averages it out.

``sigma_w`` is pooled over every cell of the runs at hand (many degrees of freedom, where one cell holds two to six
samples).  ``sigma_b`` is measured where a baseline holds two or more timing passes of each cell, each in a process
of its own (``baseline.timing_passes``): the spread of a cell's pass means beyond what ``sigma_w / sqrt(n)``
explains, pooled over cells (method of moments).  A cell of a head run (one pass) against a baseline of ``m`` passes
then differs, under no change, by ``d = ybar_head - ybar_base`` with::

    Var(d) = sigma_b^2 + sigma_w^2 / n_head  +  (sigma_b^2 + sigma_w^2 * mean(1 / n_pass)) / m

which is the interval the judge draws (:func:`gate.verdict.speed_rule.stored_cell`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gate.checks.resolution import spread, variance_factor

CellRun = Sequence[Sequence[float]]  # one cell in one run: its log samples, grouped by timed batch (its repeats)


def cell_mean(run: CellRun) -> float:
    """A cell's mean log speedup in one run: the mean over its batches of each batch's mean over repeats (a cell's
    batches are different prompts, whose speedups differ for real: they are the cell, not its noise)."""
    means = [sum(g) / len(g) for g in run if g]
    return sum(means) / len(means)


@dataclass(frozen=True)
class Spread:
    """Pooled within-run spread of log speedup samples (``sd``) and its degrees of freedom."""

    sd: float
    df: int


def within(groups: Sequence[Sequence[float]]) -> Spread:
    """Pooled standard deviation of log samples about their own group's mean (a group: the repeats of one timed
    batch in one run): the repeat-to-repeat noise, never the difference between a cell's prompts."""
    return Spread(*spread(groups))


@dataclass(frozen=True)
class BetweenRuns:
    """The between-run spread of a cell's mean log speedup, as measured from passes (or assumed: ``source``)."""

    between_sd: float
    df: int  # degrees of freedom of between_sd (cells x (passes - 1)); 0 when assumed
    within_sd: float
    within_df: int
    passes: int
    cells: int
    source: str  # "passes": the baseline's own; "runner": measured on this hardware key; "assumed": a default


def between_from_passes(cells: Sequence[Sequence[CellRun]]) -> BetweenRuns:
    """``cells[c][r]``: cell ``c`` in pass ``r``, its log samples grouped by batch."""
    w = within([g for cell in cells for run in cell for g in run])
    excess, used, passes = 0.0, 0, 0
    for cell in cells:
        runs = [r for r in cell if any(r)]
        if len(runs) < 2:
            continue
        passes = max(passes, len(runs))
        means = [cell_mean(r) for r in runs]
        mbar = sum(means) / len(means)
        s2 = sum((x - mbar) ** 2 for x in means) / (len(means) - 1)
        excess += s2 - w.sd ** 2 * sum(variance_factor(r) for r in runs) / len(runs)
        used += 1
    between = math.sqrt(max(0.0, excess / used)) if used else 0.0
    return BetweenRuns(between_sd=between, df=used * (passes - 1) if used else 0, within_sd=w.sd,
                       within_df=w.df, passes=passes, cells=used, source="passes")


__all__ = ["BetweenRuns", "CellRun", "Spread", "between_from_passes", "cell_mean", "variance_factor", "within"]
