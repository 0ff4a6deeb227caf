"""The speed rule: one family of cells, judged against the spread within a run *and* between runs.

Each timing cell (slice x batch size x context bucket) gives ``d``, the change of its mean log speedup (head
against the stored baseline, or head against the base timed beside it in paired mode), with a standard error from
the variance components of :mod:`gate.verdict.noise`.  Each load level (engine x batch size) gives the mean ``d``
over its cells: where a change touches every slice a little, the load level carries the power no cell has.

* **fail** (per cell and per load level): the whole 95% interval of the ratio lies below ``1 - speedup_drop``;
* **warn**: the drop is beyond ``baseline.min_effect`` (5%: smaller is not worth a reviewer's time) *and* its
  one-sided p-value, Holm-adjusted over every cell and load level of the run, is below ``FAMILY_ALPHA`` (5%): an
  unchanged PR warns in at most 5% of runs, not in most of them (18 cells, each tested alone at 95%, flag at least
  one cell in 60% of unchanged runs);
* **pass** otherwise: a change inside the spread the runs show is not named.

Stored mode: ``Var(d) = 2 sigma_b^2 + sigma_w,head^2 f_head + sigma_w,base^2 f_base``, with ``sigma_b`` the
larger of what the baseline's own passes measured and ``baseline.between_run_sd`` (the passes share one job; a PR
runs in another, so both sides get the full between-run variance), ``sigma_w`` pooled over each side's batches and
``f`` each side's :func:`gate.verdict.noise.variance_factor`.  A load level keeps the full ``2 sigma_b^2``: a shift
of every cell alike is what another runner or another day does, and a stored baseline cannot tell it from the PR.
Paired mode: head and base interleaved on the same batches in one process, so ``Var(d) = sigma_w^2 f`` of the
paired log ratios, and a load level averages its cells' noise down.  Intervals use Student's t with the pooled
within-run degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gate.stats import t_cdf, t_ppf
from gate.verdict.doc import Interval
from gate.verdict.noise import BetweenRuns, CellRun, Spread, cell_mean, variance_factor, within

FAMILY_ALPHA = 0.05
MIN_WITHIN_DF = 10  # a side with fewer degrees of freedom borrows the other's spread


@dataclass(frozen=True)
class Tested:
    """One cell's (or load level's) change: ``d`` in log space, its variance, and the interval it gives."""

    d: float | None
    var: float | None
    df: int

    def interval(self) -> Interval:
        if self.d is None:
            return Interval(estimate=None)
        if not self.var or self.df < 1:
            return Interval(estimate=math.exp(self.d))
        q = t_ppf(0.975, self.df) * math.sqrt(self.var)
        return Interval(estimate=math.exp(self.d), low=math.exp(self.d - q), high=math.exp(self.d + q))

    @property
    def p_drop(self) -> float | None:
        """One-sided p-value of "no drop" against a drop."""
        if self.d is None or not self.var or self.df < 1:
            return None
        return t_cdf(self.d / math.sqrt(self.var), self.df)


def groups(samples: Sequence[float], batches: Sequence[int] | None) -> list[list[float]]:
    """A cell's samples as log values grouped by timed batch (all one group where the batch was not kept)."""
    logs = [math.log(x) for x in samples if x > 0]
    if not batches or len(batches) != len(samples):
        return [logs] if logs else []
    out: dict[int, list[float]] = {}
    for x, b in zip(samples, batches):
        if x > 0:
            out.setdefault(b, []).append(math.log(x))
    return [out[b] for b in sorted(out)]


def pooled(a: Spread, b: Spread) -> Spread:
    df = a.df + b.df
    return Spread(math.sqrt((a.sd ** 2 * a.df + b.sd ** 2 * b.df) / df) if df else 0.0, df)


def side_spread(runs: Sequence[CellRun], other: Spread) -> Spread:
    """One side's within-run spread, pooled over its cells' batches (too few degrees of freedom: with the other's)."""
    own = within([g for run in runs for g in run])
    return own if own.df >= MIN_WITHIN_DF else pooled(own, other)


def stored_cell(head: CellRun, base: Sequence[CellRun], w_head: Spread, w_base: Spread, between: float) -> Tested:
    """A head cell (one run) against its baseline cell's passes."""
    base = [b for b in base if any(b)]
    if not any(head) or not base:
        return Tested(None, None, 0)
    d = cell_mean(head) - sum(cell_mean(b) for b in base) / len(base)
    f_base = sum(variance_factor(b) for b in base) / len(base) ** 2
    var = 2 * between ** 2 + w_head.sd ** 2 * variance_factor(head) + w_base.sd ** 2 * f_base
    return Tested(d, var, min(w_head.df, w_base.df))


def paired_cell(run: CellRun, w: Spread) -> Tested:
    """A paired cell: its head/base log ratios, grouped by batch."""
    if not any(run):
        return Tested(None, None, 0)
    return Tested(cell_mean(run), w.sd ** 2 * variance_factor(run), w.df)


def load_level(cells: Sequence[Tested], shared: float = 0.0) -> Tested:
    """The mean change over a load level's cells; ``shared``: the variance every cell shares (stored mode's
    ``2 sigma_b^2``), which no average removes."""
    cells = [c for c in cells if c.d is not None and c.var is not None]
    if not cells:
        return Tested(None, None, 0)
    n = len(cells)
    own = sum(c.var - shared for c in cells) / n ** 2
    return Tested(sum(c.d for c in cells) / n, shared + own, min(c.df for c in cells))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment over the family (None: not tested, not counted)."""
    ranked = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m, out, running = len(ranked), [None] * len(pvalues), 0.0
    for j, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (m - j) * p))
        out[i] = running
    return out


def status(ratio: Interval, p_adjusted: float | None, speedup_drop: float, min_effect: float) -> tuple[str, bool]:
    """fail (significant beyond the tolerance), warn (beyond the minimum effect and significant in the family), or
    pass; and whether the fail rule's significance holds."""
    significant = ratio.high is not None and ratio.high < 1 - speedup_drop
    if significant:
        return "fail", True
    worth = ratio.estimate is not None and ratio.estimate < 1 - min_effect
    if worth and p_adjusted is not None and p_adjusted < FAMILY_ALPHA:
        return "warn", False
    return "pass", False


def between_of(base_cells: Sequence[Sequence[CellRun]], floor: float) -> BetweenRuns:
    """The between-run spread the judge uses: what the baseline's passes measured, never below ``floor``
    (``baseline.between_run_sd``); its source says which one it is."""
    from gate.verdict.noise import between_from_passes

    multi = [c for c in base_cells if sum(1 for r in c if any(r)) >= 2]
    if multi:
        measured = between_from_passes(multi)
        if measured.between_sd >= floor:
            return BetweenRuns(measured.between_sd, measured.df, measured.within_sd, measured.within_df,
                               measured.passes, measured.cells,
                               f"measured between the baseline's {measured.passes} timing passes")
        return BetweenRuns(floor, measured.df, measured.within_sd, measured.within_df, measured.passes,
                           measured.cells, f"baseline.between_run_sd; the baseline's {measured.passes} timing "
                                           f"passes, in one job, measured {measured.between_sd:.1%}")
    w = within([g for c in base_cells for r in c for g in r])
    return BetweenRuns(floor, 0, w.sd, w.df, 1, len(base_cells),
                       "baseline.between_run_sd; the baseline has one timing pass")


__all__ = ["FAMILY_ALPHA", "Tested", "between_of", "groups", "holm", "load_level", "paired_cell", "pooled",
           "side_spread", "status", "stored_cell"]
