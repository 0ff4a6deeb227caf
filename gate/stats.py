"""Small statistics used by the speedup and distribution checks.

* :func:`bootstrap_median_ci`: percentile bootstrap CI of the median of paired
  ratios (reference time / speculative time of the same batch, same repeat).
* :func:`expected_speedup`: Leviathan et al. (2023), Theorem 3.8: with
  acceptance rate alpha, draft length k and draft/target cost ratio c, the
  expected wall-time improvement is ``(1 - alpha^(k+1)) / ((1 - alpha)(1 + c k))``.
* :func:`t_cdf`, :func:`t_ppf`: Student's t (the normal from 1,000 degrees of freedom on), through
  ``scipy.special``: the values ``scipy.stats.t(df).cdf``/``.ppf`` return, without building a frozen
  distribution per call (about a millisecond each: the judge and its calibration tests call them thousands of
  times).
* :func:`ks_uniform_p`: the exact two-sided p-value of the one-sample Kolmogorov-Smirnov test against
  Uniform(0, 1), the value ``scipy.stats.kstest(u, "uniform")`` gives, without its per-call argument handling
  (most of its cost on a few hundred points; the distribution check's power simulation calls it per trial).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int

    @property
    def rel_half_width(self) -> float:
        """Half the CI width relative to the estimate (0.03 means +-3%)."""
        if not self.estimate or not math.isfinite(self.estimate):
            return math.inf
        return (self.high - self.low) / 2 / abs(self.estimate)

    def to_dict(self) -> dict:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n,
                "rel_half_width": self.rel_half_width}


def bootstrap_median_ci(samples, resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> Interval:
    x = np.asarray(list(samples), dtype=float)
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    if x.size == 1:
        return Interval(float(x[0]), -math.inf, math.inf, 1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    medians = np.median(x[idx], axis=1)
    a = (1 - confidence) / 2
    return Interval(float(np.median(x)), float(np.quantile(medians, a)), float(np.quantile(medians, 1 - a)),
                    int(x.size))


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al.'s expected speedup for acceptance rate alpha, k drafts, cost ratio c."""
    if alpha >= 1.0:
        tokens = k + 1
    else:
        tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (1 + c * k)


NORMAL_FROM_DF = 1000  # from here on Student's t is read as the normal


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom (the normal's from NORMAL_FROM_DF on)."""
    from scipy import special

    return float(special.stdtr(df, x) if df < NORMAL_FROM_DF else special.ndtr(x))


def t_ppf(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (the normal's from NORMAL_FROM_DF on)."""
    from scipy import special

    return float(special.stdtrit(df, p) if df < NORMAL_FROM_DF else special.ndtri(p))


def ks_uniform_p(u) -> float:
    """Exact two-sided p-value of the one-sample KS test of ``u`` (values in [0, 1]) against Uniform(0, 1): D is
    the larger of max(i/n - u_(i)) and max(u_(i) - (i-1)/n), and the p-value Kolmogorov's exact distribution of D
    for n points (``scipy.stats.kstwo``), as scipy's kstest computes both."""
    from scipy import stats

    x = np.sort(np.asarray(u, dtype=float))
    n = x.shape[-1]
    d = max(float(np.max(np.arange(1.0, n + 1) / n - x)), float(np.max(x - np.arange(0.0, n) / n)))
    return float(np.clip(stats.kstwo.sf(d, n), 0.0, 1.0))


def alpha_from_mean_accepted(mean_accepted_length: float, k: int) -> float:
    """Invert E[tokens per step] = (1 - a^(k+1)) / (1 - a) for a (bisection; monotone in a)."""
    target = min(max(mean_accepted_length, 1.0), k + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        val = (k + 1) if mid >= 1 else (1 - mid ** (k + 1)) / (1 - mid)
        lo, hi = (mid, hi) if val < target else (lo, mid)
    return (lo + hi) / 2


def signed_rank_p(xs) -> float:
    """Exact one-sided p-value of Wilcoxon's signed-rank test that ``xs`` lean above zero: the share of the 2^n
    sign patterns, each equally likely when every ``x`` is symmetric about zero, whose sum of positive ranks is at
    least the observed one (ranks of ``|x|``, ties averaged; zeros dropped).  For the few rounds of a probe
    (n <= 20); 1.0 when nothing is left."""
    xs = [float(x) for x in xs if x != 0]
    n = len(xs)
    if n == 0:
        return 1.0
    if n > 20:
        raise ValueError(f"signed_rank_p enumerates 2^n sign patterns: n={n} is too many")
    order = sorted(range(n), key=lambda i: abs(xs[i]))
    ranks = [0.0] * n
    i = 0
    while i < n:  # average ranks over ties of |x|
        j = i
        while j + 1 < n and abs(xs[order[j + 1]]) == abs(xs[order[i]]):
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2 + 1
        i = j + 1
    observed = sum(r for r, x in zip(ranks, xs) if x > 0)
    at_least = sum(1 for signs in range(1 << n)
                   if sum(r for b, r in enumerate(ranks) if signs >> b & 1) >= observed - 1e-9)
    return at_least / (1 << n)
