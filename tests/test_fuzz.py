"""Fuzzing: whatever the config, the suite or a plug-in's return value, no traceback and a known exit code.

Configs are random YAML trees built from the real schema's keys plus junk; suites are random JSONL lines
and raw bytes; plug-in return values are random shapes and types.  The CLI must exit 0, 1 or 2, never
raise, and finish within a bound.  Example counts and run time: docs/reliability.md.
"""

from __future__ import annotations

import time

import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.cli import main
from gate.config import Config
from gate.engines.base import EngineFailure, GenerationSettings, Request
from gate.engines.plugin import PluginEngine, PluginSettings

BOUND_S = 5.0


def _keys(model, out: set) -> set:
    for name, f in model.model_fields.items():
        out.add(name)
        ann = f.annotation
        for arg in getattr(ann, "__args__", ()) + (ann,):
            if isinstance(arg, type) and hasattr(arg, "model_fields"):
                _keys(arg, out)
    return out


SCHEMA_KEYS = sorted(_keys(Config, set()) - {"callable"})  # no random imports: plug-in modules are code
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**9), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["specguard:demo/target", "specguard:demo/draft", "auto",
                                                           "bfloat16", "speculative", "plugin", "cuda:7", "0.5"]))
keys = st.one_of(st.sampled_from(SCHEMA_KEYS), st.text(min_size=1, max_size=12))
trees = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(keys, inner, max_size=5)), max_leaves=25)
GOOD_MODELS = {"target": {"path": "specguard:demo/target"}, "draft": {"path": "specguard:demo/draft"}}


def run_cli(args) -> int:
    t0 = time.monotonic()
    code = main(args)
    assert time.monotonic() - t0 < BOUND_S
    return code


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trees, st.booleans())
def test_random_configs_exit_0_or_2(tmp_path, tree, with_models):
    doc = {"models": GOOD_MODELS, **tree} if with_models and isinstance(tree, dict) else tree
    path = tmp_path / "specguard.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    assert run_cli(["validate", str(path)]) in (0, 2)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_random_config_bytes_exit_0_or_2(tmp_path, data):
    path = tmp_path / "specguard.yaml"
    path.write_bytes(data)
    assert run_cli(["validate", str(path)]) in (0, 2)


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.text(max_size=30)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=10)
lines = st.one_of(
    st.fixed_dictionaries({"id": st.text(max_size=10), "slice": st.text(max_size=10), "prompt": st.text(max_size=40)},
                          optional={"max_new_tokens": json_values, "extra": json_values}),
    json_values)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(lines.map(lambda v: __import__("json").dumps(v)), st.text(max_size=40)), max_size=8),
       st.binary(max_size=60))
def test_random_suites_exit_0_or_2(tmp_path, rows, junk):
    suite = tmp_path / "suite.jsonl"
    suite.write_bytes(("\n".join(rows)).encode("utf-8", "surrogatepass") + b"\n" + junk)
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(yaml.safe_dump({"models": GOOD_MODELS, "suite": {"path": str(suite)}}))
    assert run_cli(["validate", str(cfg)]) in (0, 2)


returns = st.one_of(
    json_values,
    st.lists(st.one_of(json_values, st.fixed_dictionaries(
        {"token_ids": st.one_of(st.lists(st.one_of(st.integers(-3, 60), st.booleans(), st.floats()), max_size=6),
                                json_values)},
        optional={"stop_reason": json_values, "wall_s": st.one_of(st.floats(), json_values),
                  "counters": st.one_of(json_values, st.dictionaries(
                      st.sampled_from(["num_drafts", "num_draft_tokens", "num_accepted_tokens", "bogus",
                                       "num_accepted_tokens_per_pos"]), json_values, max_size=3))})),
             min_size=0, max_size=4))


@settings(max_examples=150, deadline=None)
@given(returns)
def test_random_plugin_returns_are_a_result_or_a_recorded_contract_failure(value):
    engine = PluginEngine("fuzzed", lambda ids, bs, s: value, torch.device("cpu"),
                          PluginSettings([], [], 0.0, 4, [], "t", "d", "float32", "cpu"), vocab_size=50)
    requests = [Request((1, 2), 3), Request((3,), 3)]
    try:
        result = engine.generate(requests, GenerationSettings())
    except EngineFailure as exc:
        assert exc.kind == "contract" and exc.message.startswith("engine 'fuzzed'")
        return
    assert len(result.sequences) == 2
    for s in result.sequences:
        assert all(isinstance(t, int) and 0 <= t < 50 for t in s.token_ids)
