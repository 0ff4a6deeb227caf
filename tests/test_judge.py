"""Properties of the judge over synthetic run summaries and stored baselines.

``judge(head, stored, rules)`` is pure: these tests build both sides from chosen acceptance and speedup per cell
(tests/synthetic.py, the real documents and the real summarizer), never read a clock and never patch one.
"""

from __future__ import annotations

from functools import cache

import synthetic as syn
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.checks.doc import VerdictLine
from gate.verdict.judge import judge
from gate.verdict.store import Stored
from gate.verdict.summary import summarize

CELLS = [(s, bs) for s in syn.SLICES for bs in syn.SIZES]
SPEEDUPS = st.sampled_from([1.1, 1.5, 2.0, 2.5])
SCALES = st.sampled_from([0.5, 0.7, 0.85, 0.95, 1.0, 1.1, 1.4])
# At least 2 drafts accepted per step (3 tokens per target forward): the profiles' speedups (up to 2.5x, scaled to
# 3.5x) are then possible; a cell faster than its acceptance allows is interference, neither judged nor stored
# (gate.checks.speedup.beyond_acceptance, tests/test_interference.py).
ACCEPTED = st.integers(min_value=2, max_value=syn.K)
PROFILE = st.tuples(*[SPEEDUPS] * len(CELLS))
ACCEPTANCE = st.tuples(*[ACCEPTED] * len(CELLS))
HARDWARE = st.sampled_from(["a", "b"])
EXAMPLES = settings(max_examples=25, deadline=None)


@cache
def _documents(speedups: tuple, accepted: tuple, hardware: str):
    results = syn.run(accepted=dict(zip(CELLS, accepted, strict=True)),
                      speedup=dict(zip(CELLS, speedups, strict=True)),
                      hardware=syn.HW_A if hardware == "a" else syn.HW_B)
    return results, syn.checks_for(results)


@cache
def head_of(speedups: tuple, accepted: tuple, hardware: str = "a"):
    results, checks = _documents(speedups, accepted, hardware)
    return summarize(results, checks, syn.config(), "demo")


@cache
def stored_of(speedups: tuple, accepted: tuple, hardware: str = "a", against: str = "a") -> Stored:
    results, checks = _documents(speedups, accepted, hardware)
    return Stored(syn.baseline_of(results, checks, syn.config()), "baselines/demo/x.json", "demo",
                  same_hardware=hardware == against)


def scaled(speedups: tuple, scale: float) -> tuple:
    return tuple(round(s * scale, 4) for s in speedups)


def failing(doc, check: str) -> set:
    return {(v.slice, v.batch_size) for v in doc.checks if v.check == check and v.status == "fail"}


RULES = syn.config().baseline


@EXAMPLES
@given(PROFILE, ACCEPTANCE, PROFILE, ACCEPTANCE, HARDWARE)
def test_the_judge_is_pure_and_its_outcome_is_the_one_exit_rule(base_s, base_a, head_s, head_a, hw):
    head, stored = head_of(head_s, head_a), stored_of(base_s, base_a, hw)
    before = (head.model_dump(), stored.baseline.model_dump())
    first, second = judge(head, stored, RULES), judge(head, stored, RULES)
    assert first.model_dump() == second.model_dump()  # no clock, no environment, no randomness left in
    assert (head.model_dump(), stored.baseline.model_dump()) == before  # neither side is touched
    failed = any(v.status == "fail" for v in first.checks)
    assert (first.outcome == "fail") == failed and first.exit_code == int(failed)
    assert first.outcome in ("pass", "fail") and first.mode == "stored"


@EXAMPLES
@given(PROFILE, ACCEPTANCE)
def test_a_run_against_its_own_baseline_only_fails_its_own_checks(speedups, accepted):
    head = head_of(speedups, accepted)
    doc = judge(head, stored_of(speedups, accepted), RULES)
    own = {(v.check, v.slice, v.batch_size) for v in head.checks if v.status == "fail"}
    assert {(v.check, v.slice, v.batch_size) for v in doc.checks if v.status == "fail"} == own
    assert all(c.status != "fail" for c in doc.speedup + doc.acceptance + doc.equivalence)


@EXAMPLES
@given(PROFILE, ACCEPTANCE, SCALES, SCALES)
def test_a_slower_head_never_fails_fewer_speedup_cells(speedups, accepted, a, b):
    low, high = sorted((a, b))
    stored = stored_of(speedups, accepted)
    slower = judge(head_of(scaled(speedups, low), accepted), stored, RULES)
    faster = judge(head_of(scaled(speedups, high), accepted), stored, RULES)
    cells = lambda doc: {(c.slice, c.batch_size) for c in doc.speedup if c.status == "fail"}  # noqa: E731
    assert cells(faster) <= cells(slower)
    if high >= 1.0:
        assert not cells(faster), "a head at least as fast as its baseline fails no speedup cell"
    if low <= 0.7:  # beyond the 10% tolerance by more than the 95% interval's reach (2 x 5% between runs)
        assert cells(slower) == set(CELLS), "a drop well beyond the tolerance fails every cell"


@EXAMPLES
@given(PROFILE, ACCEPTANCE, ACCEPTANCE)
def test_acceptance_fails_exactly_where_it_fell(speedups, base, head):
    doc = judge(head_of(speedups, head), stored_of(speedups, base), RULES)
    assert doc.acceptance
    for c in doc.acceptance:  # a slice's cell, or "*": the batch size over all slices
        cells = [i for i, (s, bs) in enumerate(CELLS) if bs == c.batch_size and c.slice in (s, "*")]
        fell = sum(head[i] for i in cells) < sum(base[i] for i in cells)  # a drop of one token is over 5%
        assert (c.status == "fail") == fell, c


@EXAMPLES
@given(PROFILE, ACCEPTANCE, SCALES)
def test_timing_from_other_hardware_is_never_a_speedup_failure(speedups, accepted, scale):
    doc = judge(head_of(scaled(speedups, scale), accepted), stored_of(speedups, accepted, "b"), RULES)
    assert not doc.speedup
    assert any(v.check == "speedup" and v.status == "warn" and "not comparable" in v.why for v in doc.checks)


@EXAMPLES
@given(PROFILE, ACCEPTANCE, st.sampled_from(["complete", "interrupted", "failed"]), st.booleans())
def test_without_a_baseline_the_outcome_is_neutral_or_fail_never_pass(speedups, accepted, status, broken):
    head = head_of(speedups, accepted).model_copy(update={"status": status})
    if broken:
        head = head.model_copy(update={"checks": [*head.checks, VerdictLine(check="equivalence", status="fail",
                                                                              why="planted")]})
    doc = judge(head, Stored(None, "baselines/demo/x.json", "demo"), RULES)
    own_fail = any(v.status == "fail" for v in head.checks) or status != "complete"
    assert doc.outcome == ("fail" if own_fail else "neutral") and doc.mode == "none"
    assert not doc.speedup and not doc.acceptance and not doc.equivalence


@EXAMPLES
@given(PROFILE, ACCEPTANCE, SCALES)
def test_a_cell_warns_only_beyond_the_minimum_effect_and_significant_in_the_family(speedups, accepted, scale):
    """Issue 46: a cell or load level warns exactly when its drop is beyond baseline.min_effect and its Holm-adjusted
    p-value is below 5%, and fails exactly when its whole CI lies below 1 - speedup_drop; an unchanged head marks
    nothing."""
    doc = judge(head_of(scaled(speedups, scale), accepted), stored_of(speedups, accepted), RULES)
    assert {c.batch_size for c in doc.speedup_levels} == {c.batch_size for c in doc.speedup}
    for c in doc.speedup + doc.speedup_levels:
        fails = c.ratio.high is not None and c.ratio.high < 1 - RULES.speedup_drop
        warns = c.ratio.estimate < 1 - RULES.min_effect and c.p_adjusted is not None and c.p_adjusted < 0.05
        assert c.status == ("fail" if fails else "warn" if warns else "pass"), c
        if scale >= 1.0:
            assert c.status == "pass", c
        if c.explanation is not None and c.explanation.change is not None:
            e = c.explanation
            assert abs(e.acceptance + (e.draft_cost or 0) + (e.verify_cost or 0) + e.unexplained - e.change) < 1e-9


def test_the_headline_says_unproven_for_an_equivalence_warning_and_breaks_for_a_failure():
    """A warning (divergences the gate cannot tell from noise) is never headlined as "equivalent"; a failure at any
    batch size is "breaks", whatever else warned."""
    speedups, accepted = (1.5,) * len(CELLS), (3,) * len(CELLS)
    head = head_of(speedups, accepted)

    def planted(*lines):
        return head.model_copy(update={"checks": [*head.checks, *lines]})

    warn = VerdictLine(check="equivalence", engine="speculative", batch_size=4, status="warn", why="planted")
    fail = VerdictLine(check="equivalence", engine="speculative", batch_size=8, status="fail", why="planted")
    stored = stored_of(speedups, accepted)
    assert judge(head, stored, RULES).headline.startswith("Merging keeps outputs equivalent at bs ")
    assert judge(planted(warn), stored, RULES).headline.startswith(
        "Merging leaves output equivalence unproven at bs 4 (divergences the gate cannot tell from noise)")
    assert judge(planted(warn, fail), stored, RULES).headline.startswith("Merging breaks output equivalence at bs 8")
