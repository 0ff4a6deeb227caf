"""Statistics: bootstrap CI coverage on synthetic paired timings, the Leviathan expectation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gate.stats import alpha_from_mean_accepted, bootstrap_median_ci, expected_speedup


@pytest.mark.parametrize("n,sigma", [(20, 0.05), (40, 0.2)])
def test_bootstrap_ci_covers_true_ratio_at_nominal_rate(n, sigma):
    """Paired timings with a known speedup, machine drift and noise: the 95% CI covers the truth ~95%."""
    true_ratio, trials, covered = 1.6, 400, 0
    rng = np.random.default_rng(1234)
    for t in range(trials):
        drift = np.linspace(1.0, 1.3, n)  # the machine slows down during the run
        ref = 0.2 * drift * np.exp(rng.normal(0, sigma, n))
        spec = 0.2 / true_ratio * drift * np.exp(rng.normal(0, sigma, n))
        ci = bootstrap_median_ci(ref / spec, resamples=1000, seed=t)
        covered += ci.low <= true_ratio <= ci.high
    assert 0.90 <= covered / trials <= 0.99


def test_ci_narrows_with_more_samples():
    rng = np.random.default_rng(0)
    x = 1.5 * np.exp(rng.normal(0, 0.1, 400))
    assert bootstrap_median_ci(x[:400]).rel_half_width < bootstrap_median_ci(x[:25]).rel_half_width


def test_degenerate_samples():
    assert math.isnan(bootstrap_median_ci([]).estimate)
    one = bootstrap_median_ci([2.0])
    assert one.estimate == 2.0 and one.rel_half_width == math.inf
    assert bootstrap_median_ci([2.0] * 10).rel_half_width == 0.0


def test_expected_speedup_matches_leviathan():
    # alpha=0, the draft never helps: pure cost overhead
    assert expected_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)
    # perfect draft, free: k+1 tokens per step
    assert expected_speedup(1.0, 4, 0.0) == pytest.approx(5.0)
    # a middle value, from the distribution of accepted drafts rather than the closed form: n = i < k accepted
    # with probability a^i (1 - a), all k with a^k; a step emits n + 1 tokens and costs 1 + c k target forwards
    a, k, c = 0.6, 3, 0.05
    tokens = sum((i + 1) * a ** i * (1 - a) for i in range(k)) + (k + 1) * a ** k
    assert expected_speedup(a, k, c) == pytest.approx(tokens / (1 + c * k))
    assert expected_speedup(a, k, c) == pytest.approx(2.1760 / 1.15)  # 1 + 0.6 + 0.36 + 0.216, by hand


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 0.8, 0.95])
def test_alpha_from_mean_accepted_inverts_the_expectation(alpha):
    k = 4
    tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert alpha_from_mean_accepted(tokens, k) == pytest.approx(alpha, abs=1e-6)

