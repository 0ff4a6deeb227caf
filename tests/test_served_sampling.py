"""Issue 53 item 1: sampling as served, judged from a served target's top-k prompt logprobs (T=1) at any temperature
and truncation (gate/checks/coarse.py: kept, as_sampled).  What the top-k decides is never wrong (against the gate's
own truncation on the whole vocabulary), and the conditional outcomes hold the tests' size under the null."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gate.checks.coarse import as_sampled, kept
from gate.checks.distribution import analyze_distributions, observed_pvalues, rejects
from gate.engines.sampling import truncate


def test_what_the_top_k_decides_is_what_the_whole_vocabulary_gives():
    """For random vocabularies, top-k widths, temperatures and truncations: every token the top-k calls kept for
    sure is kept by the truncation of the whole distribution, none it calls dropped is, and where it says no token
    beyond it can be kept, none is."""
    rnd = random.Random(0)
    torch.manual_seed(0)
    decided = total = 0
    for _ in range(1500):
        vocab = rnd.choice([12, 40, 200])
        width = min(vocab, rnd.choice([3, 5, 8, 20]))
        logp = torch.log_softmax(torch.randn(vocab) * rnd.choice([0.5, 1.5, 3.0, 6.0]), -1)
        t = rnd.choice([0.3, 0.7, 1.0, 1.5])
        top_k, top_p, min_p = rnd.choice([0, 0, 2, 5, 30]), rnd.choice([1.0, 0.95, 0.9, 0.5]), \
            rnd.choice([0.0, 0.0, 0.05, 0.2])
        top = {int(i): float(logp[i]) for i in torch.argsort(logp, descending=True)[:width]}
        k = kept(top, t, top_k, top_p, min_p, vocab)
        truth = truncate((logp / t)[None].clone(), top_k, top_p, min_p, "vllm")[0]
        kept_ids = {i for i in range(vocab) if truth[i] > float("-inf")}
        sure = {i for i, _ in k.sure}
        assert sure <= kept_ids and not (k.dropped & kept_ids), (t, top_k, top_p, min_p)
        assert k.tail or not (kept_ids - set(top)), (t, top_k, top_p, min_p)
        decided += len(sure)
        total += len(kept_ids & set(top))
    assert decided / total > 0.9, "the bounds leave few of the kept top-k tokens undecided"


def test_with_the_whole_vocabulary_served_everything_is_decided_exactly():
    logp = torch.log_softmax(torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0]), -1)
    top = {i: float(v) for i, v in enumerate(logp)}
    k = kept(top, 0.7, 0, 0.9, 0.0, 5)
    truth = truncate((logp / 0.7)[None].clone(), 0, 0.9, 0.0, "vllm")[0]
    assert [i for i, _ in k.sure] == [i for i in range(5) if truth[i] > float("-inf")] and not k.tail
    assert k.dropped == {i for i in range(5) if truth[i] == float("-inf")}


def _rows(n: int, vocab: int, width: int, t: float, top_p: float, rng, leak: float = 0.0):
    """n positions of a random target, each token drawn from its tempered, truncated distribution (``leak``: that
    share drawn from the untruncated one instead, a sampler that ignores top_p)."""
    tops, ys = [], []
    for _ in range(n):
        logp = torch.log_softmax(torch.randn(vocab, generator=rng) * 2.0, -1)
        p = torch.softmax(truncate((logp / t)[None].clone(), 0, top_p, 0.0, "vllm")[0], -1)
        if leak:
            p = (1 - leak) * p + leak * torch.softmax(logp / t, -1)
        ys.append(int(torch.multinomial(p, 1, generator=rng)))
        tops.append({int(i): float(logp[i]) for i in torch.argsort(logp, descending=True)[:width]})
    return [((1,), ys, [0.0] * n, tops)]


@pytest.mark.parametrize(("t", "top_p"), [(0.7, 0.9), (1.0, 0.9)])
def test_the_conditional_outcomes_hold_the_tests_size_under_the_null(t, top_p):
    """40 simulated unchanged runs of 200 tokens from the top 8 of 60: no token outside the truncation, most of them
    judged, and rejections at alpha 0.05 near 5% (at most 6 of 40: a binomial's 99th percentile).  The benchmark
    with more runs is benchmarks/served_sampling.py (docs/checks.md)."""
    settings = SimpleNamespace(temperature=t, top_k=0, top_p=top_p, min_p=0.0)
    rng = torch.Generator().manual_seed(1)
    rejected = judged = 0
    for run in range(40):
        got = as_sampled(_rows(200, 60, 8, t, top_p, rng), settings, 60)
        assert got.outside == 0 and got.positions == 200
        a = analyze_distributions(got.p, got.q, got.tokens, null_trials=200, null_seed=run + 1)
        rejected += rejects(observed_pvalues(a, np.random.default_rng(run), ("pit_ks", "target_top",
                                                                             "target_logprob")), 0.05)
        judged += a.n
    assert judged / (40 * 200) > 0.7, "most sampled tokens are judged from the top 8"
    assert rejected <= 6, rejected


def test_a_sampler_that_ignores_top_p_is_caught_by_the_tokens_it_emits_outside():
    settings = SimpleNamespace(temperature=0.7, top_k=0, top_p=0.9, min_p=0.0)
    got = as_sampled(_rows(300, 60, 20, 0.7, 0.9, torch.Generator().manual_seed(2), leak=0.3), settings, 60)
    assert got.outside > 0, "one token the truncation drops for certain fails the engine outright"
    assert math.isclose(float(got.p.sum(1).mean()), 1.0)
