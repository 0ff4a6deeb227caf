"""What a run can resolve: the smallest drop of speedup it would detect with 80% power, given the spread it measured.

A drop ``delta`` of a load level's speedup moves its mean log speedup by ``log(1 - delta)``.  With ``se`` the
standard error of that mean and a two-sided 95% test, the drop is detected with probability 80% once
``-log(1 - delta) >= (t_.975 + t_.80) se``, so the smallest such drop is::

    resolution = 1 - exp(-(t_.975 + t_.80) se)

(Student's t on the spread's degrees of freedom).  ``se`` is what the run's repeats measured (its *own* timing
spread, which the run controls: more repeats, a quieter runner); the judge adds the spread between runs where a
baseline stores it (:mod:`gate.verdict.speed`).  Where a load level's own resolution is worse than the fail rule
(``baseline.speedup_drop``), the run cannot see the drop the rule is about: its speed is *not judged* there, and a
refresh does not store it (docs/baselines.md, "What a run can resolve, and speed that is not judged").

A load level's mean log speedup is the mean over its cells of each cell's mean over its timed batches of each
batch's mean over repeats (the estimator of :mod:`gate.verdict.noise`), so with ``sigma_w`` the pooled
repeat-to-repeat spread, ``se^2 = sigma_w^2 sum_c f_c / C^2`` with ``f_c = sum_b 1 / n_b / B_c^2``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gate.stats import t_ppf

POWER = 0.80
CONFIDENCE = 0.95
MIN_DF = 10  # a load level whose repeats give fewer degrees of freedom borrows the spread of the engine's other levels

LogGroups = Sequence[Sequence[float]]  # one cell's log speedup samples, grouped by timed batch (its repeats)


def drop(se: float | None, df: int) -> float | None:
    """The smallest drop detected with 80% power by a 95% two-sided test at standard error ``se`` (None: no spread
    measured)."""
    if se is None or df < 1 or not math.isfinite(se):
        return None
    z = t_ppf(1 - (1 - CONFIDENCE) / 2, df) + t_ppf(POWER, df)
    return 1 - math.exp(-z * se)


def spread(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """Pooled standard deviation of log samples about their own group's mean, and its degrees of freedom."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) < 2:
            continue
        m = sum(g) / len(g)
        ss += sum((x - m) ** 2 for x in g)
        df += len(g) - 1
    return (math.sqrt(ss / df) if df else 0.0), df


def variance_factor(run: Sequence[Sequence[float]]) -> float:
    """``Var(cell mean) / sigma_w^2`` for one cell's repeats: ``sum(1 / n_b) / B^2`` over its ``B`` timed batches."""
    groups = [g for g in run if g]
    return sum(1 / len(g) for g in groups) / len(groups) ** 2


def factor(cells: Sequence[LogGroups]) -> float | None:
    """``Var(level mean) / sigma_w^2`` for a load level's cells (None: no samples)."""
    fs = [variance_factor(cell) for cell in cells if any(cell)]
    return sum(fs) / len(fs) ** 2 if fs else None


def grouped(samples: Sequence[float], batches: Sequence[int] | None) -> list[list[float]]:
    """Speedup samples as log values grouped by timed batch (one group where the batch was not kept)."""
    if not batches or len(batches) != len(samples):
        return [[math.log(x) for x in samples if x > 0]]
    out: dict[int, list[float]] = {}
    for x, b in zip(samples, batches):
        if x > 0:
            out.setdefault(b, []).append(math.log(x))
    return [out[b] for b in sorted(out)]


def levels(cells: dict[int, list[LogGroups]]) -> dict[int, tuple[float | None, float, int, float | None]]:
    """Per load level (batch size -> its cells): ``(resolution, sd, df, se)`` from its own repeats (a level with
    fewer than ``MIN_DF`` degrees of freedom takes the spread pooled over every level)."""
    every = spread([g for cs in cells.values() for c in cs for g in c])
    out = {}
    for bs, cs in sorted(cells.items()):
        sd, df = spread([g for c in cs for g in c])
        if df < MIN_DF:
            sd, df = every
        f = factor(cs)
        se = sd * math.sqrt(f) if f is not None and df else None
        out[bs] = (drop(se, df), sd, df, se)
    return out


def whole(cells: dict[int, list[LogGroups]]) -> tuple[float | None, float, int, float | None]:
    """The run's own resolution of a drop in every cell alike: the mean over all of its cells."""
    sd, df = spread([g for cs in cells.values() for c in cs for g in c])
    f = factor([c for cs in cells.values() for c in cs])
    se = sd * math.sqrt(f) if f is not None and df else None
    return drop(se, df), sd, df, se


__all__ = ["CONFIDENCE", "MIN_DF", "POWER", "drop", "factor", "grouped", "levels", "spread", "variance_factor",
           "whole"]
