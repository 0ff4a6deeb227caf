"""The shrinker alone (gate/repro/shrink.py), on engines simulated in a few lines: which rows must share the batch,
the fewest new tokens, the shortest prompts, two replays per candidate, and the budget.  No weights load here; the
real engines and mutants are in tests/test_repro.py (slow tier)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from gate.repro.shrink import Case, Shrinker


@dataclass(frozen=True)
class Found:
    position: int


def batch(lengths: list[int], max_new: int = 32) -> Case:
    prompts = tuple(tuple(range(i * 1000, i * 1000 + n)) for i, n in enumerate(lengths))
    return Case(prompts, tuple(f"p{i}" for i in range(len(lengths))), max_new)


def split_prefill_bug(case: Case) -> Found | None:
    """The shape of OpenVINO GenAI's batched bug: a short prompt beside a prompt of 500+ tokens goes wrong at its
    first new token, whatever else is in the batch; the long prompt needs 500 of its tokens for it."""
    long_ = any(len(p) >= 500 for p in case.prompts)
    short = any(len(p) < 50 for p in case.prompts)
    return Found(0) if long_ and short and case.max_new_tokens >= 1 else None


def test_the_rows_a_bug_needs_are_found_and_the_rest_dropped():
    start = batch([12, 30, 600, 20, 9, 640, 15, 11])
    shrinker = Shrinker(split_prefill_bug, budget_s=60)
    done = shrinker.shrink(start, split_prefill_bug(start))
    assert done.case.batch_size == 2, done.case.describe()
    assert sorted(len(p) for p in done.case.prompts) == [1, 500], "one long prompt cut to 500, one short cut to 1"
    assert done.case.max_new_tokens == 1, "up to the failing position"
    assert done.stopped is None and done.log and all(s.seconds >= 0 for s in done.log)
    assert split_prefill_bug(done.case) is not None, "the case still fails"


def test_every_candidate_must_fail_twice_in_a_row():
    """A candidate that fails once and passes on its replay is noise: it is never kept."""
    calls = {"n": 0}

    def flaky(case: Case) -> Found | None:
        calls["n"] += 1
        if case.batch_size == 1:  # alone, it fails only every other run
            return Found(3) if calls["n"] % 2 else None
        return Found(3)

    start = batch([10, 20, 30, 40])
    done = Shrinker(flaky, budget_s=60).shrink(start, Found(3))
    assert done.case.batch_size == 2, "no single row was confirmed, so two remain"
    assert any(not s.failed and "alone" in s.tried for s in done.log)


def test_a_budget_spent_keeps_the_smallest_case_confirmed_so_far():
    clock = {"t": 0.0}

    def slow(case: Case) -> Found | None:
        clock["t"] += 1.0  # a second per engine run
        return Found(0)

    start = batch([100, 100, 100, 100, 100, 100, 100, 100])
    done = Shrinker(slow, budget_s=5.5, clock=lambda: clock["t"]).shrink(start, Found(0))
    assert done.stopped and "budget" in done.stopped
    assert done.runs <= 7 and done.case.batch_size < 8 and slow(done.case) is not None


def test_a_row_order_the_bug_needs_is_kept():
    """Rows keep their order in the batch: the bug here needs a long row before a short one."""
    def ordered(case: Case) -> Found | None:
        lengths = [len(p) for p in case.prompts]
        return Found(0) if any(a >= 100 > b for a, b in itertools.pairwise(lengths)) else None

    start = batch([5, 120, 7, 8, 130])
    done = Shrinker(ordered, budget_s=60).shrink(start, ordered(start))
    first, second = (len(p) for p in done.case.prompts)
    assert first >= 100 > second
    assert done.case.batch_size == 2


def test_the_token_budget_is_bisected_when_the_failing_position_alone_passes():
    """A bug that shows only once the batch has run 10 steps (rows finishing early, say) though it is seen at
    position 2 of a row: the budget goes down to 10, not to 3."""
    def late(case: Case) -> Found | None:
        return Found(2) if case.max_new_tokens >= 10 else None

    done = Shrinker(late, budget_s=60).shrink(batch([4]), Found(2))
    assert done.case.max_new_tokens == 10


def test_only_failing_equivalence_and_distribution_lines_are_shrunk_at_their_smallest_batch_size():
    """What `reproduce` takes from checks.json: one case per failing (check, engine), started at the smallest batch
    size that failed; passing lines, other checks and run-wide lines are not cases."""
    from types import SimpleNamespace

    from gate.checks.doc import VerdictLine
    from gate.repro import failing

    lines = [VerdictLine.of("equivalence", "e", "fail", "x", 8), VerdictLine.of("equivalence", "e", "fail", "x", 4),
             VerdictLine.of("equivalence", "f", "pass", "x", 1), VerdictLine.of("distribution", "e", "fail", "x", 4),
             VerdictLine.of("speedup", "e", "fail", "x", 1), VerdictLine.of("equivalence", None, "fail", "x"),
             VerdictLine.of("signature:gibberish", "e", "fail", "x", 8)]
    checks = SimpleNamespace(failing=lambda: [v for v in lines if v.status == "fail"])
    assert failing(checks) == {"equivalence": [("e", 4)], "distribution": [("e", 4)]}
    assert failing(SimpleNamespace(failing=list)) == {}


def test_the_start_is_the_batch_whose_own_output_failed_not_another_batch_holding_the_prompt():
    """Bug (OpenVINO, 2026-12-04): a long prompt failed beside some neighbours (composition 1) and not beside others
    (composition 0); the start was the first batch holding the prompt, which passed on replay, so no case was
    written ("did not fail again on two replays")."""
    from types import SimpleNamespace as NS

    from gate.repro.equivalence import failing_batches
    from gate.run.records import Phase

    def batch(composition, names):
        return NS(engine="e", batch_size=2, mode="greedy", repeat=0, phase=Phase.OUTPUTS, failure=None,
                  composition=composition, n_real=len(names),
                  sequences=[NS(prompt_id=n, filler=False) for n in names])

    ok, bad = NS(inconsistent=[], signatures=[], divergence=None), \
        NS(inconsistent=[], signatures=[], divergence=NS(kind="confident"))
    prompts = {"long": (1, 2, 3), "a": (4,), "b": (5,), "c": (6,)}
    results = NS(executions=[batch(0, ["long", "a"]), batch(0, ["b", "c"]), batch(1, ["b", "long"]),
                             batch(1, ["a", "c"])],
                 prompt=lambda pid: NS(prompt_ids=prompts[pid], max_new_tokens=8))
    compared = [NS(composition=0, output=NS(prompt_id="long"), verdict=ok),
                NS(composition=1, output=NS(prompt_id="long"), verdict=bad),
                NS(composition=0, output=NS(prompt_id="a"), verdict=ok)]
    ctx = NS(results=results, compared=lambda engine, bs: compared)
    starts = failing_batches(ctx, "e", 2)
    assert [s.names for s in starts] == [("b", "long")] and starts[0].prompts == ((5,), (1, 2, 3))
