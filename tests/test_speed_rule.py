"""The speed rule's statistics (issue 46): variance components, the interval, Holm's correction, and what they say
about unchanged runs drawn from the model they assume."""

from __future__ import annotations

import math
import random

import pytest

from gate.verdict.noise import Spread, between_from_passes, cell_mean, variance_factor, within
from gate.verdict.speed_rule import (
    FAMILY_ALPHA,
    between_of,
    groups,
    holm,
    load_level,
    paired_cell,
    status,
    stored_cell,
)


def simulate_cell(rng: random.Random, mu: float, between: float, within_sd: float, batches: int = 2,
                  repeats: int = 2, batch_offsets: tuple = (0.0, 0.3)) -> list[list[float]]:
    """One cell in one run: a run shift, then each batch's own (real) offset and its repeats' noise."""
    shift = rng.gauss(0, between)
    return [[mu + batch_offsets[b % len(batch_offsets)] + shift + rng.gauss(0, within_sd) for _ in range(repeats)]
            for b in range(batches)]


def test_within_is_the_repeats_spread_not_the_difference_between_a_cells_batches():
    """A cell's batches are different prompts with different speedups: pooled over repeats of one batch, the
    within-run spread is the timing noise alone (the demo's bs-1 cells read 17% mixed, 5.5% per batch)."""
    rng = random.Random(1)
    runs = [simulate_cell(rng, 0.4, 0.0, 0.05, batches=2, repeats=4, batch_offsets=(0.0, 0.5)) for _ in range(200)]
    w = within([g for run in runs for g in run])
    assert w.df == 200 * 2 * 3 and w.sd == pytest.approx(0.05, rel=0.1)
    mixed = within([[x for g in run for x in g] for run in runs])
    assert mixed.sd > 4 * w.sd
    assert variance_factor([[1, 2], [3, 4]]) == pytest.approx((1 / 2 + 1 / 2) / 4)
    assert cell_mean([[1.0, 3.0], [10.0]]) == pytest.approx(6.0)


@pytest.mark.parametrize("between", [0.0, 0.03, 0.08])
def test_between_runs_is_recovered_from_passes(between):
    rng = random.Random(7)
    cells = [[simulate_cell(rng, 0.3, between, 0.05) for _ in range(4)] for _ in range(300)]
    est = between_from_passes(cells)
    assert est.passes == 4 and est.cells == 300 and est.df == 900 and est.source == "passes"
    assert est.within_sd == pytest.approx(0.05, rel=0.1)
    assert est.between_sd == pytest.approx(between, abs=0.008)


def test_the_floor_holds_where_the_passes_measure_less_and_says_so():
    rng = random.Random(3)
    quiet = [[simulate_cell(rng, 0.3, 0.01, 0.05) for _ in range(2)] for _ in range(40)]
    got = between_of(quiet, floor=0.05)
    assert got.between_sd == 0.05 and got.source.startswith("baseline.between_run_sd; the baseline's 2 timing passes")
    loud = [[simulate_cell(rng, 0.3, 0.15, 0.05) for _ in range(2)] for _ in range(40)]
    got = between_of(loud, floor=0.05)
    assert got.between_sd > 0.1 and got.source == "measured between the baseline's 2 timing passes"
    single = [[simulate_cell(rng, 0.3, 0.0, 0.05)] for _ in range(5)]
    assert between_of(single, floor=0.05).source == "baseline.between_run_sd; the baseline has one timing pass"


def test_holm_adjusts_step_down_and_keeps_the_order():
    got = holm([0.01, 0.04, 0.03, None])
    assert got[:3] == pytest.approx([0.03, 0.06, 0.06]) and got[3] is None
    assert holm([0.5]) == [0.5] and holm([]) == []
    assert holm([0.001] * 30) == pytest.approx([0.03] * 30)


def test_the_stored_interval_holds_both_runs_shift_and_each_sides_repeats():
    head = [[math.log(1.2), math.log(1.2)]]  # one batch, two repeats
    base = [[[math.log(1.5), math.log(1.5)]]]  # one pass of the same
    t = stored_cell(head, base, Spread(0.04, 30), Spread(0.06, 30), between=0.05)
    assert t.d == pytest.approx(math.log(1.2 / 1.5))
    assert t.var == pytest.approx(2 * 0.05 ** 2 + 0.04 ** 2 / 2 + 0.06 ** 2 / 2)
    ci = t.interval()
    assert ci.estimate == pytest.approx(0.8) and ci.low < 0.8 < ci.high and t.p_drop < 0.05
    # paired: no between-run term, and a load level averages its cells' noise down
    cells = [paired_cell([[math.log(0.95)] * 2, [math.log(0.95)] * 2], Spread(0.05, 40)) for _ in range(6)]
    level = load_level(cells)
    assert level.var == pytest.approx(cells[0].var / 6)
    stored_level = load_level([stored_cell(head, base, Spread(0.04, 30), Spread(0.06, 30), 0.05)] * 6,
                              shared=2 * 0.05 ** 2)
    assert stored_level.var >= 2 * 0.05 ** 2  # a shift every cell shares is not averaged away


def test_status_fails_beyond_the_tolerance_and_warns_only_beyond_the_minimum_effect_when_significant():
    from gate.verdict.doc import Interval

    assert status(Interval(estimate=0.7, low=0.6, high=0.8), 0.5, 0.10, 0.05) == ("fail", True)
    assert status(Interval(estimate=0.93, low=0.9, high=0.96), 0.01, 0.10, 0.05) == ("warn", False)
    assert status(Interval(estimate=0.97, low=0.96, high=0.98), 0.0001, 0.10, 0.05) == ("pass", False)
    assert status(Interval(estimate=0.8, low=0.6, high=1.1), 0.2, 0.10, 0.05) == ("pass", False)


def test_groups_read_a_cells_batches_and_take_an_old_baselines_samples_as_one_group():
    assert groups([1.0, 2.0, 4.0], [0, 1, 0]) == [[0.0, math.log(4.0)], [math.log(2.0)]]
    assert groups([1.0, 2.0], None) == [[0.0, math.log(2.0)]]


def unchanged_run_flags(rng: random.Random, between: float, cells: int = 18, sizes: int = 3) -> bool:
    """One unchanged head against a 2-pass baseline, drawn from the model the rule assumes; whether any cell or load
    level is marked."""
    head_runs, base_runs = [], []
    for c in range(cells):
        mu = 0.2 + 0.05 * c
        head_runs.append(simulate_cell(rng, mu, between, 0.055))
        base_runs.append([simulate_cell(rng, mu, between, 0.055) for _ in range(2)])
    w_head = within([g for r in head_runs for g in r])
    w_base = within([g for runs in base_runs for r in runs for g in r])
    b = between_of(base_runs, floor=0.05).between_sd
    tested = [stored_cell(h, bs, w_head, w_base, b) for h, bs in zip(head_runs, base_runs)]
    levels = [load_level(tested[i::sizes], 2 * b * b) for i in range(sizes)]
    every = tested + levels
    adjusted = holm([t.p_drop for t in every])
    return any(status(t.interval(), p, 0.25, 0.05)[0] != "pass" for t, p in zip(every, adjusted))


def test_unchanged_runs_are_marked_in_at_most_five_percent_of_runs_under_the_model():
    """400 unchanged runs of 18 cells with a real between-run shift of 5% (the floor) and the demo's repeat noise:
    the family marks no more than FAMILY_ALPHA of them (binomial slack: 400 runs read 5% as at most about 8%)."""
    rng = random.Random(46)
    flagged = sum(unchanged_run_flags(rng, between=0.05) for _ in range(400))
    assert flagged / 400 <= FAMILY_ALPHA + 0.03, flagged
