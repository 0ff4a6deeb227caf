"""Engines on the real demo pair: the speculative engine is exact under ragged acceptance."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from gate.engines.base import GenerationSettings, Request
from gate.engines.hf_assisted import HFAssistedEngine
from gate.engines.reference import ReferenceEngine
from gate.engines.speculative import SpeculativeEngine
from gate.errors import EngineError

CPU = torch.device("cpu")
NEW = 20


def greedy(k: int = 4, eos: tuple[int, ...] = ()) -> GenerationSettings:
    return GenerationSettings(temperature=0.0, num_draft_tokens=k, eos_token_ids=eos)


def run(engine, prompts, settings, batch_size, max_new=NEW):
    out = []
    for i in range(0, len(prompts), batch_size):
        reqs = [Request(p, max_new, seed=i + j) for j, p in enumerate(prompts[i:i + batch_size])]
        out += engine.generate(reqs, settings).sequences
    return out


@pytest.fixture(scope="module")
def reference(demo_pair):
    return ReferenceEngine(demo_pair.target.model, CPU)


@pytest.fixture(scope="module")
def canonical(reference, demo_prompts):
    return [s.token_ids for s in run(reference, demo_prompts, greedy(), 1)]


@pytest.fixture(scope="module")
def speculative(demo_pair):
    return SpeculativeEngine(demo_pair.target.model, demo_pair.draft.model, CPU)


@pytest.mark.slow
def test_reference_matches_transformers_generate(demo_pair, demo_prompts, canonical):
    model = demo_pair.target.model
    for prompt, ours in list(zip(demo_prompts, canonical))[:4]:
        ids = torch.tensor([prompt])
        hf = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                            do_sample=False, eos_token_id=None, pad_token_id=0)
        assert hf[0, len(prompt):].tolist() == ours


@pytest.mark.slow
def test_reference_batched_equals_batch_1_in_fp32(reference, demo_prompts, canonical):
    assert [s.token_ids for s in run(reference, demo_prompts, greedy(), 8)] == canonical


@pytest.mark.slow
def test_speculative_bs1_equals_reference(speculative, demo_prompts, canonical):
    seqs = run(speculative, demo_prompts, greedy(), 1)
    assert [s.token_ids for s in seqs] == canonical
    total = sum(s.counters.num_accepted_tokens for s in seqs)
    assert total > 0, "the demo draft should get some tokens accepted"


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [4, 8])
def test_speculative_ragged_batches_equal_reference(speculative, demo_prompts, canonical, batch_size):
    lengths = [len(p) for p in demo_prompts]
    assert max(lengths) > 10 * min(lengths), "the batch must mix very different prompt lengths"
    seqs = run(speculative, demo_prompts, greedy(), batch_size)
    assert [s.token_ids for s in seqs] == canonical
    accepted = {s.counters.num_accepted_tokens for s in seqs}
    assert len(accepted) > 1, "rows must accept different numbers of tokens (ragged acceptance)"


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_draft_lengths(speculative, demo_prompts, canonical, k):
    seqs = run(speculative, demo_prompts[:6], greedy(k), 3)
    assert [s.token_ids for s in seqs] == canonical[:6]
    for s in seqs:
        c = s.counters
        assert len(c.num_accepted_tokens_per_pos) == k
        assert c.num_emitted_tokens == len(s.token_ids) == NEW
        assert c.num_accepted_tokens + c.num_target_forwards == c.num_emitted_tokens


@pytest.mark.slow
def test_identical_draft_accepts_everything(demo_pair, demo_prompts, canonical):
    engine = SpeculativeEngine(demo_pair.target.model, demo_pair.target.model, CPU)
    seqs = run(engine, demo_prompts[:4], greedy(4), 4)
    assert [s.token_ids for s in seqs] == canonical[:4]
    for s in seqs:
        assert s.counters.acceptance_rate == 1.0
        assert s.counters.num_target_forwards == -(-NEW // 5)  # ceil(20 / (k+1))


@pytest.mark.slow
def test_random_draft_accepts_almost_nothing(demo_pair, demo_prompts, canonical):
    torch.manual_seed(0)
    rand = LlamaForCausalLM(demo_pair.draft.model.config).eval()
    engine = SpeculativeEngine(demo_pair.target.model, rand, CPU)
    seqs = run(engine, demo_prompts[:6], greedy(4), 3)
    assert [s.token_ids for s in seqs] == canonical[:6]
    rates = [s.counters.acceptance_rate for s in seqs]
    assert sum(rates) / len(rates) < 0.05


@pytest.mark.slow
def test_eos_inside_accepted_block_ends_sequence_there(demo_pair, speculative, reference, demo_prompts):
    # Make a frequent token the EOS, so it appears inside accepted blocks.
    eos = demo_pair.encode(",")[0]
    settings = greedy(4, eos=(eos,))
    ref = run(reference, demo_prompts, settings, 1, max_new=40)
    spec = run(speculative, demo_prompts, settings, 4, max_new=40)
    stopped = [s for s in ref if s.stop_reason == "eos"]
    assert len(stopped) >= 3, "the test needs sequences that hit the EOS"
    for r, s in zip(ref, spec):
        assert s.token_ids == r.token_ids
        assert s.stop_reason == r.stop_reason
        if s.stop_reason == "eos":
            assert s.token_ids[-1] == eos and eos not in s.token_ids[:-1]
    mid_block = [s for s in spec if s.stop_reason == "eos" and s.counters.num_accepted_tokens_per_pos[0]]
    assert mid_block


@pytest.mark.slow
@pytest.mark.parametrize("max_new", [1, 2, 3])
def test_max_new_tokens_smaller_than_k(speculative, reference, demo_prompts, max_new):
    ref = run(reference, demo_prompts, greedy(8), 1, max_new=max_new)
    spec = run(speculative, demo_prompts, greedy(8), 4, max_new=max_new)
    for r, s in zip(ref, spec):
        assert len(s.token_ids) == max_new and s.token_ids == r.token_ids and s.stop_reason == "max_tokens"


@pytest.mark.slow
def test_mixed_budgets_in_one_batch(speculative, reference, demo_prompts):
    reqs = [Request(p, n) for p, n in zip(demo_prompts[:8], [1, 30, 3, 17, 2, 25, 9, 5])]
    spec = speculative.generate(reqs, greedy(4)).sequences
    for req, s in zip(reqs, spec):
        assert s.token_ids == reference.generate([req], greedy()).sequences[0].token_ids


@pytest.mark.slow
def test_empty_prompt_is_rejected(speculative, reference):
    for engine in (speculative, reference):
        with pytest.raises(EngineError, match=r"requests\[1\]\.prompt_ids: empty prompt"):
            engine.generate([Request((5, 6), 4), Request((), 4)], greedy())


@pytest.mark.slow
def test_sampling_is_reproducible_and_batch_independent(speculative, reference, demo_prompts):
    # The ten short prompts (13 to 28 tokens: each batch of 4 still pads rows of different lengths); the two
    # long-context ones were two thirds of the time, and their batches are greedy's tests above.
    prompts = [p for p in demo_prompts if len(p) < 100]
    assert len(prompts) == len(demo_prompts) - 2
    settings = GenerationSettings(temperature=1.0, num_draft_tokens=4)
    a = [s.token_ids for s in run(speculative, prompts, settings, 4)]
    b = [s.token_ids for s in run(speculative, prompts, settings, 4)]
    c = [s.token_ids for s in run(speculative, prompts, settings, 1)]
    assert a == b
    assert a == c  # per-request random streams: batch-mates do not change a sequence
    r1 = [s.token_ids for s in run(reference, prompts, settings, 4)]
    assert r1 == [s.token_ids for s in run(reference, prompts, settings, 4)]
    assert a != r1, \
        "speculative and plain sampling consume randomness differently; identical output would be suspicious"


@pytest.mark.slow
def test_timings_and_realignment_are_reported(speculative, demo_prompts):
    res = speculative.generate([Request(p, NEW) for p in demo_prompts[:8]], greedy())
    assert res.wall_s > 0 and 0 < res.realign_s < res.wall_s
    assert res.num_target_forwards > 0 and res.num_draft_forwards >= res.num_target_forwards
    for s in res.sequences:
        assert 0 < s.ttft_s <= s.wall_s <= res.wall_s
        assert s.per_token_s > 0


@pytest.mark.slow
def test_hf_assisted_matches_reference_at_batch_1(demo_pair, demo_prompts, canonical):
    engine = HFAssistedEngine(demo_pair.target.model, demo_pair.draft.model, CPU, 0)
    seqs = run(engine, demo_prompts[:4], greedy(4), 1)
    assert [s.token_ids for s in seqs] == canonical[:4]
    c = seqs[0].counters
    assert c is not None and c.num_target_forwards > 0 and c.num_emitted_tokens == NEW
    with pytest.raises(EngineError, match="batch size 1 only"):
        engine.generate([Request(demo_prompts[0], 4), Request(demo_prompts[1], 4)], greedy())


@pytest.mark.slow
def test_engines_do_not_change_what_other_engines_see(demo_pair, demo_prompts):
    """Bug: hf_assisted mutated the shared draft's generation_config and the global RNG."""
    sampled = GenerationSettings(temperature=1.0, num_draft_tokens=4)
    prompts = demo_prompts[:3]

    def outputs(order):
        engines = {"hf": HFAssistedEngine(demo_pair.target.model, demo_pair.draft.model, CPU, 0),
                   "spec": SpeculativeEngine(demo_pair.target.model, demo_pair.draft.model, CPU),
                   "ref": ReferenceEngine(demo_pair.target.model, CPU)}
        return {(name, mode): [s.token_ids for s in run(engines[name], prompts, settings, 1, max_new=12)]
                for name in order for mode, settings in (("greedy", greedy()), ("sampled", sampled))}

    before_cfg = demo_pair.draft.model.generation_config.to_dict()
    before_rng = torch.random.get_rng_state()
    forward = outputs(["hf", "spec", "ref"])
    backward = outputs(["ref", "spec", "hf"])
    assert len(forward) == 6 and forward == backward
    assert demo_pair.draft.model.generation_config.to_dict() == before_cfg
    assert torch.equal(torch.random.get_rng_state(), before_rng)
    assert not hasattr(demo_pair.target.model, "_get_candidate_generator") or \
        "_get_candidate_generator" not in vars(demo_pair.target.model)
