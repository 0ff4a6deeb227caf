"""Sampling as it is served (issue 48, item 1): top_k, top_p and min_p truncate the target's tempered distribution
and renormalise, in the order the stack applies them.  The gate's truncation is checked against transformers' own
warpers in both orders, the engines sample from it, and the distribution check fails a sampler that ignores it."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from transformers import LogitsProcessorList, MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from gate.engines.base import GenerationSettings
from gate.engines.sampling import probs, truncate
from gate.errors import ConfigError
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.stacks import orders

WARPERS = {"top_k": lambda v: TopKLogitsWarper(v), "top_p": lambda v: TopPLogitsWarper(v),
           "min_p": lambda v: MinPLogitsWarper(v)}
SETTINGS = [dict(top_k=k, top_p=p, min_p=m) for k, p, m in itertools.product((0, 1, 5, 40), (1.0, 0.9, 0.5, 0.05),
                                                                               (0.0, 0.05, 0.3))]


def transformers_probs(logits: torch.Tensor, temperature: float, order: str, top_k: int, top_p: float,
                       min_p: float) -> torch.Tensor:
    """transformers' warpers, in the order given, each only where it is on."""
    values = {"top_k": top_k, "top_p": top_p, "min_p": min_p}
    off = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}
    chain = LogitsProcessorList([WARPERS[s](values[s]) for s in orders()[order] if values[s] != off[s]])
    return torch.softmax(chain(None, logits / temperature), -1)


@pytest.mark.parametrize("order", sorted(orders()))
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"k{s['top_k']}-p{s['top_p']}-m{s['min_p']}")
def test_the_truncation_is_transformers_warpers_in_the_stacks_order(order, setting):
    torch.manual_seed(0)
    logits = torch.randn(16, 300) * 3
    ours = probs(logits, GenerationSettings(0.7, order=order, **setting))
    theirs = transformers_probs(logits, 0.7, order, **setting)
    assert torch.equal(ours > 0, theirs > 0), "the same tokens kept"
    torch.testing.assert_close(ours, theirs)


def test_the_order_matters_where_min_p_meets_top_p():
    """min_p is a share of the largest probability, which no other truncation drops, so it commutes with top_k; with
    top_p it does not: applied first (vLLM), it raises what is left before top_p counts its mass."""
    x = torch.log(torch.tensor([[0.4, 0.3, 0.1, 0.1, 0.1]]))
    kept = {o: (truncate(x.clone(), 0, 0.5, 0.3, o) > float("-inf")).tolist() for o in ("vllm", "transformers")}
    # vLLM: min_p keeps 0.4 and 0.3 (0.57, 0.43 renormalised), and top_p 0.5 then drops the 0.43
    # transformers: top_p on the whole keeps 0.4 and 0.3 (the 0.1s sum to 0.3 <= 0.5), and min_p keeps both
    assert kept == {"vllm": [[True, False, False, False, False]],
                    "transformers": [[True, True, False, False, False]]}
    y = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    assert all((truncate(y.clone(), 2, 1.0, m, "vllm") == truncate(y.clone(), 2, 1.0, m, "transformers")).all()
               for m in (0.3, 0.6, 0.61, 0.9)), "min_p and top_k commute"


def test_a_config_says_what_it_truncates_and_a_stack_whose_order_is_unknown_is_refused():
    base = """\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cpu}
generation: {greedy: false, sampling: {temperature: 0.7, top_k: 50, top_p: 0.9%s}}
engines: [%s]
"""
    cfg = parse_config(base % ("", "{type: speculative}"), PACKAGE_DIR / "t.yaml").config
    assert cfg.generation.sampling.truncated and cfg.generation.sampling.described() == "T=0.7, top_k 50, top_p 0.9"
    with pytest.raises(ConfigError) as err:
        parse_config(base % (", top_p: 1.5", "{type: speculative}"), PACKAGE_DIR / "t.yaml")
    assert "generation.sampling.top_p" in str(err.value)
    llama = ('{type: http, name: l, http: {preset: llamacpp, server: {url: "http://127.0.0.1:8080"}, '
             'reference: {url: "http://127.0.0.1:8081"}}}')
    with pytest.raises(ConfigError) as err:
        parse_config(base % ("", llama), PACKAGE_DIR / "t.yaml")
    assert "before the temperature" in str(err.value) and "engines[0].http.preset" in str(err.value), str(err.value)
    untruncated = parse_config(base.replace(", top_k: 50, top_p: 0.9", "") % ("", "{type: speculative}"),
                               PACKAGE_DIR / "t.yaml")
    assert "top_k" not in untruncated.config.generation.sampling.model_dump(), "an older config keeps its digest"


def test_an_untruncated_settings_dict_keeps_its_cache_key():
    assert set(GenerationSettings(0.8, 4, ()).to_dict()) == {"temperature", "num_draft_tokens", "eos_token_ids"}
    assert GenerationSettings(0.8, 4, (), top_p=0.9).to_dict()["top_p"] == 0.9


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["correct", "ignores-min-p"])
def test_the_distribution_check_fails_a_sampler_that_drops_a_truncation_and_passes_the_correct_one(
        demo_pair, tmp_path, engine):
    from gate.checks.analysis import run_checks
    from gate.engines.reference import ReferenceEngine
    from gate.engines.speculative import SpeculativeEngine
    from gate.run.runner import Runner
    from gate.selftest import selftest_suite

    class Ignoring(SpeculativeEngine):
        """A speculative path that verifies against the target tempered and cut by top_k and top_p, never min_p
        (vLLM turns its logits processors, min_p's among them, off while speculation is on)."""

        def accept_sampling(self, drafts, logits, q, k_row, settings, u_accept, u_final):
            return super().accept_sampling(drafts, logits, q, k_row, dataclasses.replace(settings, min_p=0.0),
                                           u_accept, u_final)

    cfg = parse_config("""\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cpu}
batching: {batch_sizes: [4], compositions: 1}
generation: {max_new_tokens: 24, greedy: false, sampling: {temperature: 0.7, top_k: 50, top_p: 0.9, min_p: 0.1}}
# 100 samples, not 300: one token outside the truncation fails the sampler, and about 15% of its tokens are
# (44 of 300, 15 of 100 on this seed: none in 100 has odds near 0.85^100); the correct one is never outside
checks: {distribution: {num_samples: 100, power_trials: 0}}
output: {cache_dir: null}
""", PACKAGE_DIR / "t.yaml")
    cls = SpeculativeEngine if engine == "correct" else Ignoring
    e = cls(demo_pair.target.model, demo_pair.draft.model, torch.device("cpu"))
    e.name = engine
    runner = Runner(cfg, demo_pair, selftest_suite(), ReferenceEngine(demo_pair.target.model, torch.device("cpu")),
                    [e], tmp_path, log=lambda m: None, timed=False, repeat_runs=False)
    checks = run_checks(runner.run(), demo_pair, cfg.config)
    rows = checks.distribution.engines
    assert checks.distribution.truncation == {"top_k": 50, "top_p": 0.9, "min_p": 0.1, "order": "vllm"}
    assert rows["reference"]["4"].outside == 0 and not rows["reference"]["4"].rejected, "the reference truncates"
    failing = [v for v in checks.failing() if v.engine == engine and v.check == "distribution"]
    if engine == "correct":
        assert rows[engine]["4"].outside == 0 and not failing, rows[engine]
    else:
        assert rows[engine]["4"].outside > 0 and failing, rows[engine]
        assert "lie outside the truncated distribution (T=0.7, top_k 50, top_p 0.9, min_p 0.1 (vllm order)" \
            in failing[0].why


def test_a_server_is_sent_the_truncation_and_an_untruncated_request_is_unchanged():
    from gate import stacks
    from gate.engines.base import Request
    from gate.engines.http import HttpEngine

    engine = HttpEngine("x", "http://127.0.0.1:9", stacks.get("vllm"), True, model="m")
    req = Request((1, 2, 3), 8, seed=7)
    body = engine.body(req, GenerationSettings(0.7, 4, (2,), top_k=50, top_p=0.9))
    assert (body["top_k"], body["top_p"], body["min_p"], body["seed"]) == (50, 0.9, 0.0, 7)
    plain = engine.body(req, GenerationSettings(0.7, 4, (2,)))
    assert not {"top_k", "top_p", "min_p"} & set(plain), plain


@pytest.mark.slow
def test_assisted_generation_samples_inside_the_truncation(demo_pair, demo_prompts):
    """hf_assisted hands generate() the gate's own truncation (a logits processor), so its draws stay inside it."""
    from gate.engines.base import Request
    from gate.engines.hf_assisted import HFAssistedEngine

    engine = HFAssistedEngine(demo_pair.target.model, demo_pair.draft.model, torch.device("cpu"),
                              demo_pair.tokenizer.pad_token_id or 0)
    settings = GenerationSettings(1.0, 4, (), top_k=3)
    for seed, prompt in enumerate(demo_prompts[:4]):
        prompt = list(prompt[:30])
        out = engine.generate([Request(tuple(prompt), 16, seed)], settings).sequences[0].token_ids
        ids = torch.tensor([prompt + list(out)])
        with torch.inference_mode():
            logits = demo_pair.target.model(ids).logits[0, len(prompt) - 1:-1]
        top3 = logits.topk(3, -1).indices
        assert all(t in row for t, row in zip(out, top3.tolist())), (out, top3.tolist())


def test_a_refusal_streamed_as_an_event_is_reported_in_the_servers_words(httpserver):
    """vLLM 0.32 refuses min_p with speculation by an error event in the stream (status 200): the failure quotes it,
    never "malformed stream chunk"."""
    from gate import stacks
    from gate.engines.base import Request
    from gate.engines.http import HttpEngine
    from gate.errors import EngineFailure

    message = "The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."
    httpserver.expect_request("/v1/completions").respond_with_data(
        f'data: {{"error": {{"message": "{message}", "type": "BadRequestError", "code": 400}}}}\n\ndata: [DONE]\n\n',
        content_type="text/event-stream")
    engine = HttpEngine("vllm", httpserver.url_for("/").rstrip("/"), stacks.get("vllm"), True, model="m",
                        metrics_path=None)
    with pytest.raises(EngineFailure) as err:
        engine.generate([Request((1, 2, 3), 4, 0)], GenerationSettings(0.7, 4, (), min_p=0.1))
    assert f"the server answered with an error: {message}" in err.value.message, err.value.message
