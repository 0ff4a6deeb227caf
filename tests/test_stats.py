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


# --- paired mode's ratio: Hodges-Lehmann with its exact signed-rank CI -----------------------------------------


def test_the_signed_rank_null_matches_the_published_critical_values():
    from gate.stats import signed_rank_null_cdf

    # two-sided 5%: the largest T with P(T <= T) <= 0.025 is 8 for n = 10, 3 for n = 8, 0 for n = 6 (tables)
    for n, critical in ((10, 8), (8, 3), (6, 0)):
        cdf = signed_rank_null_cdf(n)
        assert cdf[critical] <= 0.025 < cdf[critical + 1], n
    assert signed_rank_null_cdf(3).tolist() == pytest.approx([1 / 8, 2 / 8, 3 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0])


def test_the_signed_rank_interval_covers_the_true_ratio_as_often_as_it_says():
    from gate.stats import signed_rank_ratio_ci

    rng = np.random.default_rng(7)
    for n, at_least in ((6, 0.95), (10, 0.93), (24, 0.93)):
        covered = 0
        for _ in range(1500):
            ci = signed_rank_ratio_ci(0.9 * np.exp(rng.normal(0, 0.05, n)))
            covered += ci.low <= 0.9 <= ci.high
        assert at_least <= covered / 1500 <= 0.98, (n, covered / 1500)


def test_the_signed_rank_estimate_shrugs_off_one_outlier_and_small_samples_get_their_range():
    from gate.stats import signed_rank_ratio_ci

    clean = [0.88, 0.9, 0.89, 0.91, 0.9, 0.87, 0.9, 0.92, 0.89, 0.9]
    ci = signed_rank_ratio_ci(clean)
    spoiled = signed_rank_ratio_ci([*clean[:-1], 3.0])  # one repeat where the base was descheduled
    assert ci.low < ci.estimate < ci.high < 1
    # the estimate barely moves; the interval widens on the outlier's side only (a drop is then not flagged there,
    # which errs towards no alarm), its other bound does not move
    assert abs(spoiled.estimate - ci.estimate) < 0.01 and spoiled.low == pytest.approx(ci.low, rel=1e-3)
    few = signed_rank_ratio_ci([0.9, 0.95, 0.85])
    assert (few.low, few.high) == pytest.approx((0.85, 0.95)) and few.n == 3
