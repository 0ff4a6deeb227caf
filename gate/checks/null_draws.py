"""Null draws: tokens drawn from the target's own distribution at the observed positions, which calibrate the
distribution check's z-tests at any sample size (:mod:`gate.checks.distribution`).

A martingale z-test's normal approximation is anti-conservative where a few rare tokens carry heavy tails (``log
q(y)`` of a token the draft finds unlikely) and n is a few hundred.  Each null draw gives the three statistics'
sums as the observed tokens do; a test's calibrated p-value is the share of draws at least as extreme, counting the
observation itself, ``(1 + #) / (1 + trials)``: a valid p-value whatever n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

MARTINGALE = ("draft_top", "draft_logprob", "draft_ratio")  # the statistics a null draw gives, in this order


class NullDraws:
    """Tokens drawn from the target's own distribution at the observed positions, ``trials`` times, reduced to the
    three martingale statistics' sums (``[3, trials]``).  Each position's uniforms come from its own seed, so the
    draws do not depend on how positions are chunked.  ``keep``: also the running sums per position
    (``[n, 3, trials]``, float32), for decisions on every prefix (gate.repro.sampling)."""

    def __init__(self, n: int, trials: int, seed: int, keep: bool = False):
        self.trials, self.seed = trials, seed
        self.sums = np.zeros((3, trials))
        self.per_position = np.zeros((n, 3, trials), dtype=np.float32) if keep else None
        self.cumulative = False  # per_position turned into running sums (Analysis.calibration)

    def add(self, c, m, start: int) -> None:
        """One chunk of positions: ``c`` its distributions (:class:`gate.checks.distribution._Chunk`), ``m`` their
        moments."""
        rows = c.cdf.shape[0]
        u = np.stack([np.random.default_rng([self.seed, start + i]).random(self.trials) for i in range(rows)])
        x = torch.from_numpy(u) * c.cdf[:, -1:]
        y = torch.searchsorted(c.cdf, x, right=True).clamp(max=c.cdf.shape[1] - 1)  # [rows, trials]
        parts = torch.stack([(y == c.top[:, None]).double() - m.top_mean[:, None],
                             c.logq.gather(1, y) - m.logq_mean[:, None],
                             c.ratio.gather(1, y) - m.ratio_mean[:, None]], dim=1).numpy()  # [rows, 3, trials]
        if self.per_position is not None:
            self.per_position[start:start + rows] = parts
        self.sums += parts.sum(0)


@dataclass
class Calibration:
    """The null distribution of each martingale test's asymptotic p-value, from :class:`NullDraws`: a test's
    calibrated p-value is the share of null draws at least as extreme, counting the observation itself."""

    null_p: dict[str, np.ndarray]  # statistic -> sorted asymptotic p-values of the null draws
    trials: int

    @classmethod
    def of(cls, sums: np.ndarray, m, n: int | None = None) -> Calibration:
        from scipy import stats as sps

        m = head(m, n) if n is not None else m
        var = (float((m.top_mean * (1 - m.top_mean)).sum()), float(m.logq_var.sum()), float(m.ratio_var.sum()))
        out = {}
        for i, name in enumerate(MARTINGALE):
            z = np.abs(sums[i]) / math.sqrt(var[i]) if var[i] > 0 else np.zeros_like(sums[i])
            out[name] = np.sort(2 * sps.norm.sf(z))
        return cls(out, int(sums.shape[1]))

    def apply(self, pv: dict[str, float]) -> dict[str, float]:
        """The p-values with each martingale test's replaced by its calibrated one."""
        out = dict(pv)
        for name, null in self.null_p.items():
            if name in out:
                at_least = int(np.searchsorted(null, out[name] * (1 + 1e-9), side="right"))
                out[name] = (1 + at_least) / (1 + self.trials)
        return out


def head(x, n: int):
    """The first ``n`` positions of a dataclass of per-position tensors."""
    return type(x)(*(getattr(x, f.name)[:n] for f in fields(x)))


__all__ = ["MARTINGALE", "Calibration", "NullDraws", "head"]
