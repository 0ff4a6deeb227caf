"""Sampling: is every emitted token an exact draw from the target's distribution?

With temperature T > 0 a correct speculative sampler emits each token from
``p = softmax(target_logits / T)`` given its prefix, exactly as plain sampling
does.  Four tests check this on the sampled tokens, each computed against the
teacher-forced target (and draft) distributions at every position:

* ``pit_ks`` — the randomized probability-integral transform
  ``U = F(y - 1) + V * p(y)`` (tokens ordered by id, ``V ~ U(0, 1)``) is i.i.d.
  uniform under the null; a Kolmogorov-Smirnov test checks it.  It sees any
  distortion, but weakly.
* ``draft_top`` — ``sum_t (1[y_t = argmax q_t] - p_t(argmax q_t))``, scaled by its
  standard deviation, is approximately N(0, 1) under the null (a martingale
  CLT: each term has mean zero given its prefix).  Speculative-sampling bugs
  push output toward the draft's preferences, and this statistic looks exactly
  there.
* ``draft_logprob`` — the same with ``f(y) = log q(y)``.
* ``draft_ratio`` — the same with ``f(y) = q(y) / (p(y) + q(y))``: a bounded form
  of the score statistic for a mixture toward the draft, the direction in which
  rejection-sampling bugs (no residual, inverted ratio, off-by-one) push.

The check fails when the smallest p-value is below ``alpha / 4`` (Bonferroni
over the four tests).  The non-speculative sampler is run through the same
tests as a control: it must pass.

Power is measured, not assumed: distortions of known size are planted into the
same positions' distributions and the tests are re-run ``power_trials`` times
per size.  Two families: *toward the draft*, ``(1 - e) p + e q``, and
*sharpened*, ``p^(1+e)`` renormalised.  The smallest ``e`` detected with 80%
power is reported as the test's resolution at this sample size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats as sps

from gate.checks.scoring import Item, Scorer

EPSILONS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
POWER_TARGET = 0.8
TESTS = ("pit_ks", "draft_top", "draft_logprob", "draft_ratio")


@dataclass
class Positions:
    """Per sampled token: target p and draft q (at temperature T), and the token."""

    p: torch.Tensor  # [n, V]
    q: torch.Tensor  # [n, V]
    tokens: torch.Tensor  # [n]

    @property
    def n(self) -> int:
        return int(self.tokens.shape[0])


def collect_positions(target: Scorer, draft: Scorer, items: list[Item], temperature: float,
                      limit: int) -> Positions:
    """Teacher-forced p and q at the first ``limit`` sampled positions of ``items``."""
    kept, total = [], 0
    for p_o in items:
        if total >= limit:
            break
        take = min(len(p_o[1]), limit - total)
        if take > 0:
            kept.append((p_o[0], tuple(p_o[1][:take])))
            total += take
    ps = target.logits_rows(kept, lambda i, rows: torch.softmax(rows / temperature, -1).cpu())
    qs = draft.logits_rows(kept, lambda i, rows: torch.softmax(rows / temperature, -1).cpu())
    ps = [x for x in ps if x is not None]
    qs = [x for x in qs if x is not None]
    toks = torch.tensor([t for _, o in kept for t in o], dtype=torch.long)
    if not ps:
        empty = torch.zeros((0, 1))
        return Positions(empty, empty, torch.zeros(0, dtype=torch.long))
    return Positions(torch.cat(ps).double(), torch.cat(qs).double(), toks)


class Prepared:
    """Everything the tests need that depends on p and q only, computed once per set of positions."""

    def __init__(self, p: torch.Tensor, q: torch.Tensor):
        self.p = p
        self.cdf = p.cumsum(1)
        self.top = q.argmax(1)
        m = p.gather(1, self.top[:, None])[:, 0]
        self.top_mean, self.top_var = m, float((m * (1 - m)).sum())
        self.logq = q.clamp(min=1e-30).log()
        mean = (p * self.logq).sum(1)
        self.logq_mean = mean
        self.logq_var = float(((p * self.logq.square()).sum(1) - mean.square()).clamp(min=0).sum())
        self.ratio = q / (p + q).clamp(min=1e-300)
        mean = (p * self.ratio).sum(1)
        self.ratio_mean = mean
        self.ratio_var = float(((p * self.ratio.square()).sum(1) - mean.square()).clamp(min=0).sum())

    def pvalues(self, tokens: torch.Tensor, rng: np.random.Generator) -> dict:
        t = tokens[:, None]
        py = self.p.gather(1, t)[:, 0]
        below = (self.cdf.gather(1, t)[:, 0] - py).clamp(min=0)
        u = (below + torch.from_numpy(rng.random(tokens.shape[0])) * py).clamp(0, 1).numpy()
        return {
            "pit_ks": float(sps.kstest(u, "uniform").pvalue),
            "draft_top": _z_pvalue(float(((tokens == self.top).double() - self.top_mean).sum()), self.top_var),
            "draft_logprob": _z_pvalue(float((self.logq.gather(1, t)[:, 0] - self.logq_mean).sum()), self.logq_var),
            "draft_ratio": _z_pvalue(float((self.ratio.gather(1, t)[:, 0] - self.ratio_mean).sum()), self.ratio_var),
        }


def statistics(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, rng: np.random.Generator) -> dict:
    """p-values of the four tests for tokens drawn (supposedly) from p."""
    return Prepared(p, q).pvalues(tokens, rng)


def _z_pvalue(total: float, variance: float) -> float:
    if variance <= 0:
        return 1.0
    z = total / math.sqrt(variance)
    return float(2 * sps.norm.sf(abs(z)))


def rejects(pvalues: dict, alpha: float) -> bool:
    return min(pvalues.values()) < alpha / len(pvalues)


def _sample(cdf: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """One token per row, by inverse CDF."""
    u = torch.from_numpy(rng.random(cdf.shape[0]))[:, None] * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True)[:, 0].clamp(max=cdf.shape[1] - 1)


def planted(pos: Positions, family: str, eps: float) -> torch.Tensor:
    if family == "toward_draft":
        return (1 - eps) * pos.p + eps * pos.q
    sharp = pos.p.clamp(min=1e-300) ** (1 + eps)
    return sharp / sharp.sum(1, keepdim=True)


def power(pos: Positions, alpha: float, trials: int, seed: int = 0) -> dict:
    """Empirical power of the combined test (and of each test) against planted distortions."""
    rng = np.random.default_rng(seed)
    prep = Prepared(pos.p, pos.q)
    out: dict = {"trials": trials, "n": pos.n, "families": {}}
    for family in ("toward_draft", "sharpened"):
        rows = []
        for eps in EPSILONS:
            cdf = planted(pos, family, eps).cumsum(1)
            hits = dict.fromkeys((*TESTS, "combined"), 0)
            for _ in range(trials):
                pv = prep.pvalues(_sample(cdf, rng), rng)
                hits["combined"] += rejects(pv, alpha)
                for t in TESTS:
                    hits[t] += pv[t] < alpha / len(TESTS)
            rows.append({"epsilon": eps, **{k: v / trials for k, v in hits.items()}})
        detect = next((r["epsilon"] for r in rows if r["combined"] >= POWER_TARGET), None)
        out["families"][family] = {"curve": rows, "min_detectable_epsilon": detect}
    return out


def null_rate(pos: Positions, alpha: float, trials: int, seed: int = 1) -> float:
    """False-rejection rate of the combined test when tokens really are drawn from p."""
    rng = np.random.default_rng(seed)
    prep = Prepared(pos.p, pos.q)
    return sum(rejects(prep.pvalues(_sample(prep.cdf, rng), rng), alpha) for _ in range(trials)) / trials
