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

**Calibrated at every n.**  The three martingale z-tests are normal
approximations; with a few hundred tokens a heavy tail (``log q(y)`` of a rare
token) makes them reject more often than they say.  So their p-values are
Monte-Carlo p-values from the null itself: ``checks.distribution.null_trials``
(2000) sets of tokens are drawn from the target's own distribution at the same
positions, each gives the three statistics, and a test's p-value is
``(1 + #{null draws at least as extreme}) / (1 + trials)``, a valid p-value at any
n (:class:`Calibration`).  The PIT's KS test needs none: its uniforms are exact.
The asymptotic p-values stay in the findings beside them (``asymptotic``); the
decision, the power simulation and the null rate use the calibrated ones.
Past ``CALIBRATE_BELOW`` tokens the normal approximation holds and the draws
are skipped.

Power is measured, not assumed: distortions of known size are planted into the
same positions' distributions and the tests are re-run ``power_trials`` times
per size.  Two families: *toward the draft*, ``(1 - e) p + e q``, and
*sharpened*, ``p^(1+e)`` renormalised.  The smallest ``e`` detected with 80%
power is reported as the test's resolution at this sample size.

**Memory.**  Real targets have vocabularies of 128k-152k tokens, so ``[n, V]``
arrays of distributions (2 GB each at n = 2000) are never held.  Positions are
streamed in chunks of a few MB; each chunk is reduced to the per-token scalars
the tests need (:class:`TokenStats`), for the observed tokens and for every
planted sample of the power simulation, whose uniforms are drawn up front.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from gate.checks.coarse import as_sampled, coarsened
from gate.checks.confirmation import Rule, decision, fails
from gate.checks.doc import Distribution, VerdictLine
from gate.checks.null_draws import Calibration, NullDraws
from gate.checks.proposers import FAMILIES, SAME_STATISTIC, TARGET_TESTS, TESTS
from gate.checks.sampling_verdicts import verdicts_for
from gate.engines.base import GenerationSettings
from gate.engines.proposers import Proposer, proposer_for
from gate.engines.sampling import probs
from gate.engines.scoring import Item, Scorer
from gate.inputs.config import REFERENCE
from gate.stats import ks_uniform_p

EPSILONS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
POWER_TARGET = 0.8
CHUNK_ELEMENTS = 1 << 22  # positions x vocabulary per chunk: 32 MB per float64 array
CALIBRATE_BELOW = 20_000  # tokens: beyond, the z-tests' normal approximation holds and no null draws are made
NULL_TRIALS = 2000
SECOND_NULL_SEED = 2  # the confirmation pass's calibration draws: their own, apart from the first pass's (seed 1)


@dataclass
class TokenStats:
    """Per-position scalars: what the four tests need of one token y and of the distributions p and q."""

    below: torch.Tensor  # F(y - 1), the target's CDF below y
    p_y: torch.Tensor  # p(y)
    top_hit: torch.Tensor  # 1[y == argmax q]
    logq_y: torch.Tensor  # log q(y)
    ratio_y: torch.Tensor  # q(y) / (p(y) + q(y))

    @staticmethod
    def cat(parts: list[TokenStats]) -> TokenStats:
        return TokenStats(*(torch.cat([getattr(p, f) for p in parts]) for f in TokenStats.__dataclass_fields__))


@dataclass
class Moments:
    """Per-position means and variances under p of the three martingale statistics (they do not depend on y)."""

    top_mean: torch.Tensor
    logq_mean: torch.Tensor
    logq_var: torch.Tensor
    ratio_mean: torch.Tensor
    ratio_var: torch.Tensor

    @staticmethod
    def cat(parts: list[Moments]) -> Moments:
        return Moments(*(torch.cat([getattr(p, f) for p in parts]) for f in Moments.__dataclass_fields__))


class _Chunk:
    """Full distributions for a few positions: everything computed from p and q."""

    def __init__(self, p: torch.Tensor, q: torch.Tensor):
        self.p = p
        self.q = q
        self.cdf = p.cumsum(1)
        self.top = q.argmax(1)
        self.logq = q.clamp(min=1e-30).log()
        self.ratio = q / (p + q).clamp(min=1e-300)

    def moments(self) -> Moments:
        p = self.p
        m = p.gather(1, self.top[:, None])[:, 0]
        logq_mean = (p * self.logq).sum(1)
        ratio_mean = (p * self.ratio).sum(1)
        return Moments(m, logq_mean, ((p * self.logq.square()).sum(1) - logq_mean.square()).clamp(min=0),
                       ratio_mean, ((p * self.ratio.square()).sum(1) - ratio_mean.square()).clamp(min=0))

    def stats(self, tokens: torch.Tensor) -> TokenStats:
        t = tokens[:, None]
        p_y = self.p.gather(1, t)[:, 0]
        return TokenStats((self.cdf.gather(1, t)[:, 0] - p_y).clamp(min=0), p_y, (tokens == self.top).double(),
                          self.logq.gather(1, t)[:, 0], self.ratio.gather(1, t)[:, 0])

    def planted_cdf(self, family: str, eps: float) -> torch.Tensor:
        if family == "toward_draft":
            return ((1 - eps) * self.p + eps * self.q).cumsum(1)
        sharp = self.p.clamp(min=1e-300) ** (1 + eps)
        return (sharp / sharp.sum(1, keepdim=True)).cumsum(1)


def _sample(cdf: torch.Tensor, u: np.ndarray) -> torch.Tensor:
    """One token per row by inverse CDF, from the given uniforms."""
    x = torch.from_numpy(u)[:, None] * cdf[:, -1:]
    return torch.searchsorted(cdf, x, right=True)[:, 0].clamp(max=cdf.shape[1] - 1)


def _z_pvalue(total: float, variance: float) -> float:
    if variance <= 0:
        return 1.0
    from scipy import special  # here, not at the top: a greedy-only gate never needs scipy

    z = total / math.sqrt(variance)
    return float(2 * special.ndtr(-abs(z)))  # scipy.stats.norm.sf(|z|) is ndtr(-|z|), without its argument handling


def pvalues(s: TokenStats, m: Moments, pit_u: np.ndarray) -> dict[str, float]:
    """p-values of the four tests; ``pit_u`` are the randomizing uniforms of the PIT."""
    u = (s.below + torch.from_numpy(pit_u) * s.p_y).clamp(0, 1).numpy()
    top_var = float((m.top_mean * (1 - m.top_mean)).sum())
    return {
        "pit_ks": ks_uniform_p(u),
        "draft_top": _z_pvalue(float((s.top_hit - m.top_mean).sum()), top_var),
        "draft_logprob": _z_pvalue(float((s.logq_y - m.logq_mean).sum()), float(m.logq_var.sum())),
        "draft_ratio": _z_pvalue(float((s.ratio_y - m.ratio_mean).sum()), float(m.ratio_var.sum())),
    }


def rejects(pv: dict, alpha: float) -> bool:
    return min(pv.values()) < alpha / len(pv)


@dataclass
class Simulation:
    """Uniforms drawn up front for the planted samples, so chunks can be processed in any grouping."""

    sample_u: np.ndarray  # [families, epsilons, trials, n] (or [trials, n] for the null)
    pit_u: np.ndarray


def _draws(rng: np.random.Generator, shape: tuple[int, ...], n: int) -> Simulation:
    """Per trial, n uniforms to sample with, then n for the PIT (the order a trial-by-trial loop draws them)."""
    sample_u = np.empty((*shape, n))
    pit_u = np.empty((*shape, n))
    for idx in np.ndindex(*shape):
        sample_u[idx] = rng.random(n)
        pit_u[idx] = rng.random(n)
    return Simulation(sample_u, pit_u)


@dataclass
class Analysis:
    """Everything the tests and the power simulation need, as per-position scalars."""

    n: int
    observed: TokenStats | None
    moments: Moments | None
    planted: dict[tuple[str, int, int], TokenStats] | None = None  # (family, eps index, trial) -> stats
    null: list[TokenStats] | None = None  # per trial
    sim: Simulation | None = None
    null_sim: Simulation | None = None
    draws: NullDraws | None = None  # the calibration's null draws (None: past CALIBRATE_BELOW, or not asked)
    outside: int = 0  # sampled tokens the truncated distribution gives probability 0 (top_k/top_p/min_p drop them)

    def calibration(self, n: int | None = None) -> Calibration | None:
        """The calibration of the whole analysis, or (with ``n``, where the draws kept their positions) of its
        first ``n`` tokens."""
        if self.draws is None or self.moments is None:
            return None
        if n is None or n >= self.n:
            return Calibration.of(self.draws.sums, self.moments)
        d = self.draws
        if d.per_position is None:
            raise ValueError("the null draws kept no per-position sums: analyze(..., keep=True)")
        if not d.cumulative:  # once, in place: every prefix's sums are then one row
            np.cumsum(d.per_position, axis=0, out=d.per_position)
            d.cumulative = True
        return Calibration.of(d.per_position[n - 1].astype(np.float64), self.moments, n)


def _chunks(items: list[Item], vocab: int) -> list[list[Item]]:
    per = max(1, CHUNK_ELEMENTS // max(vocab, 1))
    out, cur, count = [], [], 0
    for it in items:
        if cur and count + len(it[1]) > per:
            out.append(cur)
            cur, count = [], 0
        cur.append(it)
        count += len(it[1])
    if cur:
        out.append(cur)
    return out


def truncate(items: list[Item], limit: int) -> list[Item]:
    """The first ``limit`` sampled positions of ``items``."""
    kept, total = [], 0
    for prompt, out in items:
        if total >= limit:
            break
        take = min(len(out), limit - total)
        if take > 0:
            kept.append((prompt, tuple(out[:take])))
            total += take
    return kept


class _Accumulator:
    """Reduces chunks of (p, q, tokens) to per-position scalars, for the observed and the planted tokens."""

    def __init__(self, n: int, power_trials: int, seed: int, null_seed: int, null_trials: int = 0,
                 keep: bool = False):
        self.n, self.trials, self.start = n, power_trials, 0
        self.sim = self.null_sim = None
        self.draws = NullDraws(n, null_trials, null_seed + 1000, keep) if null_trials and n < CALIBRATE_BELOW \
            else None
        if power_trials:
            self.sim = _draws(np.random.default_rng(seed), (len(FAMILIES), len(EPSILONS), power_trials), n)
            self.null_sim = _draws(np.random.default_rng(null_seed), (power_trials,), n)
        self.observed: list[TokenStats] = []
        self.moments: list[Moments] = []
        self.planted: dict[tuple[str, int, int], list[TokenStats]] = {}
        self.nulls: list[list[TokenStats]] = [[] for _ in range(power_trials)]

    def add(self, p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor) -> None:
        c = _Chunk(p, q)
        stop = self.start + tokens.shape[0]
        self.observed.append(c.stats(tokens))
        self.moments.append(c.moments())
        if self.draws is not None:
            self.draws.add(c, self.moments[-1], self.start)
        if self.sim is not None:
            for fi, family in enumerate(FAMILIES):
                for ei, eps in enumerate(EPSILONS):
                    cdf = c.planted_cdf(family, eps)
                    for t in range(self.trials):
                        y = _sample(cdf, self.sim.sample_u[fi, ei, t, self.start:stop])
                        self.planted.setdefault((family, ei, t), []).append(c.stats(y))
            for t in range(self.trials):
                self.nulls[t].append(c.stats(_sample(c.cdf, self.null_sim.sample_u[t, self.start:stop])))
        self.start = stop

    def result(self) -> Analysis:
        if not self.n:
            return Analysis(0, None, None)
        out = Analysis(self.n, TokenStats.cat(self.observed), Moments.cat(self.moments), draws=self.draws)
        if self.sim is not None:
            out.planted = {k: TokenStats.cat(v) for k, v in self.planted.items()}
            out.null = [TokenStats.cat(v) for v in self.nulls]
            out.sim, out.null_sim = self.sim, self.null_sim
        return out


def analyze(target: Scorer, proposer: Proposer | None, items: list[Item], temperature: float | GenerationSettings,
            vocab: int, power_trials: int = 0, seed: int = 0, null_seed: int = 1, null_trials: int = NULL_TRIALS,
            keep: bool = False) -> Analysis:
    """Stream the teacher-forced distributions of ``items`` in chunks, keeping only per-position scalars.

    With ``power_trials``, also draw the planted samples of the power simulation and the null
    (uniforms drawn up front from ``seed`` and ``null_seed``, so results do not depend on chunking).
    ``null_trials``: the calibration's null draws (:class:`NullDraws`; ``keep``: per position too).  ``proposer``:
    the method's proposer (:mod:`gate.engines.proposers`), whose :meth:`~gate.engines.proposers.Proposer.q` gives
    the rows that stand for ``q`` (a draft model's distribution, the n-gram lookup's proposal as a point mass), or
    None (``q = p``: the target-side tests).
    ``temperature``: the sampling settings (GenerationSettings: its truncation too), or a temperature alone.
    """
    acc = _Accumulator(sum(len(o) for _, o in items), power_trials, seed, null_seed, null_trials, keep)
    sampling = temperature if isinstance(temperature, GenerationSettings) else GenerationSettings(float(temperature))
    outside = 0

    def softmax(_, rows: torch.Tensor) -> torch.Tensor:  # as served: tempered, truncated, renormalised
        return probs(rows, sampling).cpu()

    for chunk in _chunks(items, vocab):
        ps = [x for x in target.logits_rows(chunk, softmax) if x is not None]
        qs = ps if proposer is None else proposer.q([it for it in chunk if it[1]], ps, softmax)
        p, tokens = torch.cat(ps).double(), torch.tensor([t for _, o in chunk for t in o], dtype=torch.long)
        outside += int((p.gather(1, tokens[:, None]) == 0).sum()) if sampling.truncated else 0
        acc.add(p, torch.cat(qs).double(), tokens)
    out = acc.result()
    out.outside = outside
    return out


def analyze_distributions(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, power_trials: int = 0,
                          seed: int = 0, null_seed: int = 1, null_trials: int = NULL_TRIALS,
                          keep: bool = False) -> Analysis:
    """The same analysis on given distributions ([n, V] each), in chunks (for tests and simulations)."""
    acc = _Accumulator(int(tokens.shape[0]), power_trials, seed, null_seed, null_trials, keep)
    per = max(1, CHUNK_ELEMENTS // max(int(p.shape[1]), 1))
    for i in range(0, int(tokens.shape[0]), per):
        acc.add(p[i:i + per].double(), q[i:i + per].double(), tokens[i:i + per])
    return acc.result()


def sample_from(p: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """One token per row of ``p`` [n, V] (for simulations)."""
    return _sample(p.double().cumsum(1), rng.random(p.shape[0]))


def planted(p: torch.Tensor, q: torch.Tensor, family: str, eps: float) -> torch.Tensor:
    """The planted distortion of p, as a distribution (for simulations)."""
    cdf = _Chunk(p.double(), q.double()).planted_cdf(family, eps)
    return torch.diff(cdf, dim=1, prepend=torch.zeros_like(cdf[:, :1]))


def observed_pvalues(a: Analysis, rng: np.random.Generator, tests: tuple[str, ...] = TESTS,
                     asymptotic: bool = False) -> dict[str, float]:
    """The tests' p-values on the observed tokens: calibrated on the null draws where the analysis made them
    (``asymptotic``: the normal approximations' instead)."""
    if not a.n:
        return {}
    pv = pvalues(a.observed, a.moments, rng.random(a.n))
    cal = None if asymptotic else a.calibration()
    return _only(cal.apply(pv) if cal else pv, tests)


def _only(pv: dict[str, float], tests: tuple[str, ...]) -> dict[str, float]:
    """The named tests' p-values, a target test read from its draft statistic (computed with q = p)."""
    return {name: pv[SAME_STATISTIC.get(name, name)] for name in tests}


def _decided(pv: dict[str, float], cal: Calibration | None, tests: tuple[str, ...]) -> dict[str, float]:
    return _only(cal.apply(pv) if cal else pv, tests)


def power(a: Analysis, alpha: float, trials: int, tests: tuple[str, ...] = TESTS,
          families: tuple[str, ...] = FAMILIES, rule: Rule | None = None) -> dict:
    """Empirical power of the combined test (and of each test) against planted distortions; with ``rule``, also
    of the confirmed decision (``confirmed``: :meth:`Rule.power` of the one-pass rates at the floor and at alpha,
    the second pass an independent draw of the same distortion)."""
    out: dict = {"trials": trials, "n": a.n, "families": {}}
    cal = a.calibration()
    for fi, family in enumerate(FAMILIES):
        if family not in families:
            continue
        rows = []
        for ei, eps in enumerate(EPSILONS):
            hits = dict.fromkeys((*tests, "combined"), 0)
            floor = 0
            for t in range(trials):
                pv = _decided(pvalues(a.planted[(family, ei, t)], a.moments, a.sim.pit_u[fi, ei, t]), cal, tests)
                hits["combined"] += rejects(pv, alpha)
                floor += rule is not None and rejects(pv, rule.floor)
                for name in tests:
                    hits[name] += pv[name] < alpha / len(tests)
            row = {"epsilon": eps, **{k: v / trials for k, v in hits.items()}}
            if rule is not None:
                row["confirmed"] = rule.power(floor / trials, row["combined"])
            rows.append(row)
        detect = next((r["epsilon"] for r in rows if r.get("confirmed", r["combined"]) >= POWER_TARGET), None)
        out["families"][family] = {"curve": rows, "min_detectable_epsilon": detect}
    return out


def null_rate(a: Analysis, alpha: float, trials: int, tests: tuple[str, ...] = TESTS,
              rule: Rule | None = None) -> float | tuple[float, float]:
    """False-rejection rate of the combined test when tokens really are drawn from p (draws of their own, apart
    from the calibration's); with ``rule``, (one pass, confirmed) as :func:`power` computes them."""
    cal = a.calibration()
    pvs = [_decided(pvalues(a.null[t], a.moments, a.null_sim.pit_u[t]), cal, tests) for t in range(trials)]
    once = sum(rejects(pv, alpha) for pv in pvs) / trials
    if rule is None:
        return once
    return once, rule.power(sum(rejects(pv, rule.floor) for pv in pvs) / trials, once)


# --- the check ---------------------------------------------------------------------------------


def run(results, ctx) -> tuple[Distribution | None, list[VerdictLine]]:
    if ctx.config.generation.sampling is None:
        return None, []
    unreadable = ctx.config.unmeasurable("distribution")  # then the run sampled nothing (gate.run.plan)
    if unreadable is not None:
        return None, [VerdictLine.of("distribution", None, "info", f"not measured: {unreadable}")]
    groups = results.sampled_groups()
    if not groups:
        return None, []
    if ctx.retokenized:
        return None, [VerdictLine.of("distribution", None, "info", "not measured: the outputs of "
                              f"{', '.join(ctx.retokenized)} are re-tokenized text, not the tokens sampled")]
    how, _ = ctx.config.distribution_scoring()
    if how == "server":
        return _served(results, ctx, groups)

    draft_loaded = ctx.pair.draft is not None and ctx.pair.draft.model is not None
    if not ctx.local or (not draft_loaded and ctx.config.method.draft_model):
        return None, [VerdictLine.of("distribution", None, "info", "not measured: the distribution tests need the "
                                     "target and the draft loaded locally (models.local_weights is false)")]
    ctx.say("distribution tests")
    dcfg = ctx.config.checks.distribution
    sampling = ctx.config.generation.sampling
    temperature = sampling.temperature
    settings = GenerationSettings(temperature, **sampling.truncation())
    target = ctx.scorer_for(ctx.pair.target.model)
    how = _proposer(ctx, draft_loaded)
    vocab = ctx.pair.target.vocab_size
    rule = Rule.of(dcfg)
    findings: dict = {"alpha": dcfg.alpha, "num_samples": dcfg.num_samples, "temperature": temperature,
                      "tests": list(how.tests), "engines": {}, "confirm": rule.to_dict()}
    if settings.truncated:
        findings["truncation"] = {k: v for k, v in sampling.truncation().items() if k != "order" or sampling.min_p}
    if how.note:
        findings["proposer"] = how.note
    verdicts: list[VerdictLine] = []
    power_done = False

    def items_of(seqs) -> list[Item]:
        return truncate([(tuple(results.prompt(s.prompt_id).prompt_ids), tuple(s.token_ids)) for s in seqs],
                        dcfg.num_samples)

    for engine, bs in groups:
        items = items_of(results.sampled(engine, bs))
        trials = dcfg.power_trials if not power_done else 0
        a = analyze(target, how, items, settings, vocab, power_trials=trials, null_trials=dcfg.draws)
        pv = observed_pvalues(a, np.random.default_rng(bs), how.tests)
        asymptotic = observed_pvalues(a, np.random.default_rng(bs), how.tests, asymptotic=True) if a.draws else None
        again = results.confirmation(engine, bs)

        def second(again=again, bs=bs) -> tuple[int, dict[str, float], int]:
            a2 = analyze(target, how, items_of(again), settings, vocab, null_trials=dcfg.draws,
                         null_seed=SECOND_NULL_SEED)
            return a2.n, observed_pvalues(a2, np.random.default_rng([bs, 1]), how.tests), a2.outside

        decided, confirm = decision(rule, pv, a.outside, second if again else None)
        failed = fails(decided)
        if trials and a.n:
            findings["power"] = power(a, dcfg.alpha, trials, how.tests, how.families, rule)
            findings["null_rejection_rate"], findings["null_rejection_rate_confirmed"] = \
                null_rate(a, dcfg.alpha, trials, how.tests, rule)
            power_done = True
        findings["engines"].setdefault(engine, {})[str(bs)] = {"n": a.n, "pvalues": pv, "rejected": failed,
                                                               "control": engine == REFERENCE, "asymptotic": asymptotic,
                                                               **({"outside": a.outside} if settings.truncated else {}),
                                                               **({"confirmation": confirm} if confirm else {})}
        findings["null_trials"] = a.draws.trials if a.draws else findings.get("null_trials")
        verdicts += verdicts_for(engine, bs, a.n, pv, failed, dcfg, asymptotic, a.outside, sampling, confirm, rule)
    return Distribution.model_validate(findings), verdicts


def _proposer(ctx, draft_loaded: bool) -> Proposer:
    """The method's proposer, as the tests read it: the draft model scored here where it is loaded."""
    draft = ctx.scorer_for(ctx.pair.draft.model) if draft_loaded and ctx.config.method.draft_model else None
    return proposer_for(ctx.config, draft)


def _served(results, ctx, groups) -> tuple[Distribution | None, list[VerdictLine]]:
    """The tests on a served target: each sampled row as the reference server scored it (its top-k and the rest
    as one outcome, :func:`coarsened`), the draft-aware ones only with the draft loaded here."""
    ctx.say("distribution tests on the served target's scores")
    dcfg = ctx.config.checks.distribution

    how = _proposer(ctx, ctx.pair.draft is not None and ctx.pair.draft.model is not None)
    tests, families, rule = how.tests, how.families, Rule.of(dcfg)
    sampling = ctx.config.generation.sampling
    as_served = sampling.temperature != 1.0 or sampling.truncated  # then the top-k decides what it can (as_sampled)
    findings: dict = {"alpha": dcfg.alpha, "num_samples": dcfg.num_samples, "temperature": sampling.temperature,
                      "tests": list(tests), "engines": {}, "confirm": rule.to_dict(),
                      "scoring": ("the reference server's prompt logprobs, tempered and truncated here: each sampled "
                                  "token among the tokens its top-k shows kept, renormalised; " if as_served else
                                  "the reference server's prompt logprobs: its top-k at each sampled position and "
                                  "the rest of the vocabulary as one outcome; ") + how.scoring}
    if sampling.truncated:
        findings["truncation"] = {k: v for k, v in sampling.truncation().items() if k != "order" or sampling.min_p}
    if how.note:
        findings["proposer"] = how.note
    verdicts: list[VerdictLine] = []
    power_done = False
    vocab = ctx.pair.target.vocab_size

    def rows_of(scored) -> list:
        rows, total = [], 0
        for s in scored:
            if total >= dcfg.num_samples:
                break
            take = min(len(s.token_ids), dcfg.num_samples - total)
            rows.append((tuple(results.prompt(s.prompt_id).prompt_ids), list(s.token_ids[:take]),
                         s.served_logprobs[:take], s.served_top[:take]))
            total += take
        return rows

    def categories(rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
        """(p, q, emitted outcomes, tokens outside the truncation, tokens not judged)."""
        if not as_served:
            return (*coarsened(rows, how), 0, 0)
        got = as_sampled(rows, sampling, vocab, how)
        return got.p, got.q, got.tokens, got.outside, got.beyond

    for engine, bs in groups:
        seqs = [s for s in results.sampled(engine, bs)]
        scored = [s for s in seqs if s.served_logprobs is not None and s.served_top is not None]
        trials = dcfg.power_trials if not power_done else 0
        p, q, cats, outside, beyond = categories(rows_of(scored))
        a = analyze_distributions(p, q, cats, power_trials=trials, null_trials=dcfg.draws)
        pv = observed_pvalues(a, np.random.default_rng(bs), tests)
        asymptotic = observed_pvalues(a, np.random.default_rng(bs), tests, asymptotic=True) if a.draws else None
        again = [s for s in results.confirmation(engine, bs) if s.served_logprobs is not None
                 and s.served_top is not None]

        def second(again=again, bs=bs) -> tuple[int, dict[str, float], int]:
            p2, q2, cats2, outside2, _ = categories(rows_of(again))
            a2 = analyze_distributions(p2, q2, cats2, null_trials=dcfg.draws, null_seed=SECOND_NULL_SEED)
            return a2.n, observed_pvalues(a2, np.random.default_rng([bs, 1]), tests), outside2

        decided, confirm = decision(rule, pv, outside, second if again else None)
        failed = fails(decided)
        if trials and a.n:
            findings["power"] = power(a, dcfg.alpha, trials, tests, families, rule)
            findings["null_rejection_rate"], findings["null_rejection_rate_confirmed"] = \
                null_rate(a, dcfg.alpha, trials, tests, rule)
            power_done = True
        findings["engines"].setdefault(engine, {})[str(bs)] = {
            "n": a.n, "pvalues": pv, "rejected": failed, "control": engine == REFERENCE, "asymptotic": asymptotic,
            **({"outside": outside} if sampling.truncated else {}), **({"not_judged": beyond} if as_served else {}),
            **({"confirmation": confirm} if confirm else {})}
        findings["null_trials"] = a.draws.trials if a.draws else findings.get("null_trials")
        if len(scored) < len(seqs):
            verdicts.append(VerdictLine.of("distribution", engine, "warn", f"{len(seqs) - len(scored)} of "
                                           f"{len(seqs)} sampled rows were not scored by the reference server", bs))
        if beyond:
            verdicts.append(VerdictLine.of("distribution", engine, "info", f"{beyond} of {a.n + outside + beyond} "
                                           "sampled tokens not judged: the server's top-k cannot place them in or "
                                           "out of the truncation", bs))
        verdicts += verdicts_for(engine, bs, a.n, pv, failed, dcfg, asymptotic, outside, sampling, confirm=confirm,
                              rule=rule)
    return Distribution.model_validate(findings), verdicts


__all__ = ["TARGET_TESTS", "TESTS", "Analysis", "analyze", "analyze_distributions", "coarsened", "null_rate",
           "planted", "power", "pvalues", "rejects", "run", "sample_from", "truncate"]
