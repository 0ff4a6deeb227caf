"""The planner: equivalence batches look like traffic; timing keeps its cells; every skip has a reason."""

from __future__ import annotations

from collections import Counter

from helpers import demo_config
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.engines.base import Capabilities
from gate.run.plan import (
    EngineInfo,
    PromptInfo,
    equivalence_batches,
    plan,
    plan_batches_mixed,
    plan_batches_per_cell,
    plan_batches_stress,
)


def prompts_of(lengths: list[int], slices: int = 3, edges=(128, 512)) -> list[PromptInfo]:
    from gate.run.plan import bucket_name

    return [PromptInfo(i, f"p{i}", f"s{i % slices}", bucket_name(n, list(edges)), tuple(range(1, n + 1)), 4)
            for i, n in enumerate(lengths)]


suites = st.lists(st.integers(1, 700), min_size=1, max_size=40).flatmap(
    lambda lengths: st.tuples(st.just(lengths), st.integers(1, 6), st.integers(1, 12), st.integers(0, 3)))


@settings(max_examples=150, deadline=None)
@given(suites)
def test_mixed_batches_cover_every_prompt_and_never_copy_a_row(case):
    lengths, n_slices, batch_size, composition = case
    prompts = prompts_of(lengths, n_slices)
    batches = plan_batches_mixed(prompts, batch_size, composition)
    assert all(len(b.members) == batch_size for b in batches)
    assert {i for b in batches for i in b.members} == set(range(len(prompts))), "every prompt at least once"
    assert sum(b.n_real for b in batches) == len(prompts), "each prompt is a real row exactly once"
    for b in batches:
        if len(prompts) >= batch_size:
            assert not b.duplicates, "no copies of a row when the suite is large enough"
        else:
            assert b.duplicates and len(batches) == 1, "copies only when the suite is smaller, and then reported"


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.integers(0, 3))
def test_mixed_batches_put_different_buckets_in_one_batch(batch_size, composition):
    """The default suite's shape: many short prompts and a few long ones, in different context buckets."""
    prompts = prompts_of([20] * 40 + [590] * 8, slices=6)
    batches = plan_batches_mixed(prompts, batch_size, composition)
    mixed = [b for b in batches if len({prompts[i].bucket for i in b.members}) > 1]
    assert mixed, "some batch must mix a long prompt with short ones"
    assert all(len({prompts[i].slice for i in b.members}) > 1 for b in batches if batch_size > 6)


def test_compositions_differ_and_the_reference_cache_can_reuse_them():
    prompts = prompts_of(list(range(10, 60)), slices=5)
    a, b = plan_batches_mixed(prompts, 8, 0), plan_batches_mixed(prompts, 8, 1)
    assert [x.members for x in a] != [x.members for x in b]
    assert [x.members for x in a] == [x.members for x in plan_batches_mixed(prompts, 8, 0)], "deterministic"
    assert [x.members for x in plan_batches_mixed(prompts, 1, 3)] == [(i,) for i in range(len(prompts))]


def test_stress_batches_pair_the_longest_with_the_shortest():
    prompts = prompts_of([5, 900, 10, 800, 15, 700, 20, 600])
    first = plan_batches_stress(prompts, 4, composition=2)[0]
    assert sorted(len(prompts[i].prompt_ids) for i in first.members) == [5, 10, 800, 900]
    assert first.kind == "stress" and first.composition == 2


def test_per_cell_batches_never_mix_buckets_and_fill_with_copies():
    prompts = prompts_of([20] * 3 + [590] * 2, slices=1)
    for b in plan_batches_per_cell(prompts, 4):
        assert len({prompts[i].bucket for i in b.members}) == 1
    assert any(b.duplicates for b in plan_batches_per_cell(prompts, 4))


def test_plan_uses_mixed_batches_for_outputs_and_cells_for_timing():
    cfg = demo_config(extra="batching: {batch_sizes: [1, 4], compositions: 3}\nsuite: {stress_mix: true}\n"
                            "generation: {sampling: {temperature: 1.0}}\n").config
    prompts = prompts_of([20] * 10 + [590] * 3, slices=4)
    engines = [EngineInfo("speculative", Capabilities(steppable=True)),
               EngineInfo("assisted", Capabilities(max_batch_size=1, batch_limit_reason="bs 1 only"))]
    p = plan(cfg, prompts, engines)
    at4 = [j.batch for j in p.outputs if j.batch.batch_size == 4 and j.engine == "reference"]
    assert Counter(b.kind for b in at4) == {"mixed": 3 * 4, "stress": 4}
    assert {b.composition for b in at4} == {0, 1, 2, 3}
    assert {(j.engine, j.batch.batch_size) for j in p.outputs} == {
        ("reference", 1), ("speculative", 1), ("assisted", 1), ("reference", 4), ("speculative", 4)}
    assert [s.reason for s in p.skips] == ["assisted bs 1 only", "assisted bs 1 only"]  # greedy and sampling
    assert all(b.kind == "cell" for lvl in p.timing for c in lvl.cells for b in c.batches)
    assert all(g.batches[0].kind == "mixed" for g in p.sampling)
    assert p.calibrate == [1, 4] and p.calibrated_engines == ["speculative"]


def test_a_correctness_only_gate_plans_no_calibration_no_timing_and_repeats_the_outputs():
    """checks.speedup.enabled: false: what the self-test plans (the outputs at the repeat batch size twice, for
    run-to-run reproducibility), in a gate; the config keeps its digest while the flag is left at true."""
    import pytest

    from gate.errors import ConfigError

    on = demo_config(extra="batching: {batch_sizes: [1, 4], compositions: 1}\n")
    off = demo_config(extra="batching: {batch_sizes: [1, 4], compositions: 1}\n"
                            "checks: {speedup: {enabled: false}}\n")
    prompts = prompts_of([20] * 10, slices=2)
    engines = [EngineInfo("speculative", Capabilities(steppable=True))]
    timed, untimed = plan(on.config, prompts, engines), plan(off.config, prompts, engines)
    assert timed.timing and timed.calibrate and not untimed.timing and not untimed.calibrate
    repeats = Counter((j.engine, j.batch.batch_size, j.repeat) for j in untimed.outputs)
    assert repeats[("speculative", 4, 1)] == repeats[("speculative", 4, 0)] > 0 and not repeats[("speculative", 1, 1)]
    assert not any(j.repeat for j in timed.outputs)
    explicit = demo_config(extra="batching: {batch_sizes: [1, 4], compositions: 1}\n"
                                 "checks: {speedup: {enabled: true}}\n")
    assert explicit.config.digest() == on.config.digest() != off.config.digest()
    with pytest.raises(ConfigError) as err:
        demo_config(extra="checks: {speedup: {enabled: false, min_speedup: 1.2}}\n")
    assert "checks.speedup" in str(err.value) and "min_speedup (1.2) needs the timing" in str(err.value)


def test_equivalence_batches_at_batch_size_1_have_one_composition():
    prompts = prompts_of([3, 4, 5])
    assert len(equivalence_batches(prompts, 1, compositions=4, stress_mix=True)) == 3


def test_composition_invariance_finds_one_planted_composition_dependent_output():
    from helpers import results_doc

    from gate.checks.reproducibility import measure, sentence

    same = [([1, 2, 3], "max_tokens"), ([4, 5, 6], "max_tokens"), ([7, 8, 9], "max_tokens")]
    planted = [same[0], ([4, 5, 0], "max_tokens"), same[2]]  # p1 changes with its batch-mates
    doc = results_doc([(1,), (2,), (3,)], {("reference", 1): same, ("speculative", 4, 0): same,
                                          ("speculative", 4, 1): planted, ("reference", 4, 0): same,
                                          ("reference", 4, 1): same}, 3)
    r = measure(doc, None)
    spec = r["speculative"].across_compositions["4"]
    assert spec.model_dump() == {"compositions": 2, "identical": 2, "compared": 3, "differing": ["p1"]}
    assert r["speculative"].bitwise_across_compositions is False
    assert r["reference"].bitwise_across_compositions is True
    assert sentence(r["speculative"]).endswith("NOT bitwise identical across batch compositions")
