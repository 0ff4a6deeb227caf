"""Plug-in engines: the worked example runs through the contract; malformed returns name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import demo_config

from gate.engines import build_engine
from gate.engines.base import EngineFailure, GenerationSettings, Request
from gate.engines.plugin import PluginEngine, PluginSettings, load_callable
from gate.engines.reference import ReferenceEngine
from gate.errors import EngineError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BASE = PluginSettings([], [], 0.0, 4, [], "t", "d", "float32", "cpu")


def plugin_config():
    return demo_config(extra='engines:\n  - {type: plugin, name: inhouse, callable: "inhouse_engine:generate"}\n')


@pytest.mark.slow
def test_worked_example_matches_reference(demo_pair, demo_prompts, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    loaded = plugin_config()
    engine = build_engine(loaded.config.engines[0], demo_pair, loaded)
    assert engine.name == "inhouse"
    reqs = [Request(p, 12) for p in demo_prompts[:3]]
    res = engine.generate(reqs, GenerationSettings(0.0, 4))
    ref = ReferenceEngine(demo_pair.target.model, torch.device("cpu"))
    for req, seq in zip(reqs, res.sequences):
        assert seq.token_ids == ref.generate([req], GenerationSettings()).sequences[0].token_ids
        assert seq.counters.num_target_forwards > 0 and seq.counters.num_emitted_tokens == 12
    assert res.wall_s > 0


def test_missing_module_and_attribute():
    with pytest.raises(EngineError, match="cannot import 'no_such_module'"):
        load_callable("no_such_module:generate")
    with pytest.raises(EngineError, match="has no attribute 'nope'"):
        load_callable("json:nope")
    with pytest.raises(EngineError, match="no entry point 'ghost'"):
        load_callable("entrypoint:ghost")
    with pytest.raises(EngineError, match=r"expected \(prompt_ids, batch_size, settings\)"):
        load_callable("json:dumps")


@pytest.mark.parametrize("returned,field,message", [
    ([{"token_ids": [1]}], "return value", "expected 2 results, got 1"),
    ([{"token_ids": [1]}, {"tokens": [1]}], "result[1].token_ids", "expected a list of token ids"),
    ([{"token_ids": [1]}, {"token_ids": [True, False]}], "result[1].token_ids", "not bools"),
    ([{"token_ids": [1]}, {"token_ids": [5, 50]}], "result[1].token_ids[1]", "token id 50 is outside the target's "
                                                                              "vocabulary (size 50)"),
    ([{"token_ids": [1]}, {"token_ids": [1], "stop_reason": "tired"}], "result[1].stop_reason", "'tired'"),
    ([{"token_ids": [1]}, {"token_ids": [1], "wall_s": "slow"}], "result[1].wall_s", "seconds"),
    ([{"token_ids": [1]}, {"token_ids": [1], "counters": {"num_drafts": "lots"}}], "result[1].counters.num_drafts",
     "expected a count"),
    ([{"token_ids": [1]}, {"token_ids": [1], "counters": {"num_draft": 3}}], "result[1].counters.num_draft",
     "unknown counter 'num_draft'"),
    ([{"token_ids": [1]}, "oops"], "result[1]", "expected a dict"),
])
def test_malformed_returns_name_engine_and_field(returned, field, message):
    """A broken contract is a finding about the engine (a failed execution), with the field path."""
    engine = PluginEngine("inhouse", lambda ids, bs, s: returned, torch.device("cpu"), BASE, vocab_size=50)
    with pytest.raises(EngineFailure) as info:
        engine.generate([Request((1, 2), 3), Request((3,), 3)], GenerationSettings())
    assert info.value.kind == "contract"
    text = info.value.message
    assert text.startswith("engine 'inhouse'") and field in text and message in text


def test_behaviour_is_left_to_the_checks():
    too_long = PluginEngine("x", lambda ids, bs, s: [{"token_ids": [5] * 9}], torch.device("cpu"), BASE)
    res = too_long.generate([Request((1,), 3)], GenerationSettings(eos_token_ids=(5,)))
    assert res.sequences[0].token_ids == [5] * 9 and res.sequences[0].stop_reason == "eos"


@pytest.mark.slow
def test_settings_carry_both_dtypes_and_the_configured_extra(demo_pair):
    seen = {}

    def fn(ids, bs, settings):
        seen.update(dtype=settings.dtype, draft_dtype=settings.draft_dtype, extra=settings.extra, bs=bs, n=len(ids))
        return [{"token_ids": [1]} for _ in ids]

    loaded = demo_config(extra='engines:\n  - {type: plugin, name: x, callable: "json:dumps", max_batch_size: 2, '
                               'extra: {port: 8000}}\n')
    spec = loaded.config.engines[0]
    engine = PluginEngine("x", fn, torch.device("cpu"),
                          PluginSettings([], [], 0.0, 4, [], "t", "d", "float32", "cpu", draft_dtype="bfloat16",
                                         extra=dict(spec.extra)), max_batch_size=spec.max_batch_size)
    engine.generate([Request((1,), 2), Request((2,), 2)], GenerationSettings())
    assert seen == {"dtype": "float32", "draft_dtype": "bfloat16", "extra": {"port": 8000}, "bs": 2, "n": 2}
    assert engine.capabilities.refuses(4) == "engines[].max_batch_size is 2" and engine.capabilities.refuses(2) is None
    assert not engine.capabilities.steppable


TORCH_FREE = '''\
import sys


def generate(prompt_ids, batch_size, settings):
    loaded = int(any(m == "torch" or m.startswith(("torch.", "transformers")) for m in sys.modules))
    return [{"token_ids": [loaded] * n} for n in settings.max_new_tokens]
'''


@pytest.mark.slow  # a worker process (here without torch: under a second)
def test_a_plugin_that_does_not_use_torch_runs_in_a_worker_without_torch(tmp_path, monkeypatch):
    """The worker loads the contract's torch-free half only: a plug-in that calls a service or a C++ library does
    not pay seconds of torch and transformers imports per worker start (and per restart after a crash)."""
    from gate.engines.plugin import ProcessCallable

    (tmp_path / "torch_free.py").write_text(TORCH_FREE)
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = ProcessCallable("torch_free:generate", "specguard.yaml", "light", log_path=tmp_path / "light.log")
    engine = PluginEngine("light", fn, torch.device("cpu"), BASE, vocab_size=50)
    try:
        result = engine.generate([Request((1, 2), 3)], GenerationSettings(0.0, 4))
    finally:
        fn.stop()
    assert result.sequences[0].token_ids == [0, 0, 0], "torch or transformers was imported in the worker"
    assert result.peak_memory_bytes, "the worker's peak memory is still measured"
