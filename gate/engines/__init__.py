"""Engines: turn a batch of prompts into tokens, timings and speculation counters.

* ``reference``: the target alone (:mod:`gate.engines.reference`);
* ``speculative``: the gate's own batched speculative decoder (:mod:`gate.engines.speculative`);
* ``hf_assisted``: transformers' assisted generation, batch size 1 (:mod:`gate.engines.hf_assisted`);
* ``plugin``: an in-house engine named by a callable (:mod:`gate.engines.plugin`);
* ``http``: a serving stack (vLLM, SGLang, TGI, llama.cpp) over its OpenAI-compatible API (:mod:`gate.engines.http`);
* mutants: deliberately broken speculative engines for the self-test (:mod:`gate.selftest.mutants`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gate.engines.base import (
    BatchResult,
    Capabilities,
    Engine,
    GenerationSettings,
    Request,
    SequenceResult,
    SpecCounters,
)
from gate.inputs.config import OWN_REFERENCE_SUFFIX, REFERENCE, EngineConfig, LoadedConfig

if TYPE_CHECKING:  # models import torch; the contract types must not (compare and report run without it)
    from gate.inputs.models import ModelPair

# Bump when an engine's output or timing behaviour changes: cached reference
# generations are keyed by it.
ENGINE_VERSION = "2"

__all__ = ["ENGINE_VERSION", "REFERENCE", "BatchResult", "Capabilities", "Engine", "GenerationSettings", "Request",
           "SequenceResult", "SpecCounters", "build_engine", "build_reference"]


def build_reference(pair: ModelPair, loaded: LoadedConfig | None = None) -> Engine:
    """The non-speculative reference: a serving stack with speculation off when the config names one,
    else the target alone, in process."""
    for spec in (loaded.config.engines if loaded is not None else []):
        if spec.http is not None and spec.http.reference is not None:
            return http_engine(spec, spec.http.reference.url, pair, loaded, speculative=False, name=REFERENCE)
    from gate.engines.reference import ReferenceEngine

    return ReferenceEngine(pair.target.model, pair.device)


def http_engine(spec: EngineConfig, url: str, pair: ModelPair, loaded: LoadedConfig, speculative: bool, name: str):
    """An engine over a serving stack's OpenAI-compatible API (``spec`` is an entry of ``loaded``'s engines)."""
    from gate.engines.http import PRESETS, HttpEngine, api_key

    h = spec.http
    return HttpEngine(name, url, PRESETS[h.preset], speculative, model=h.model,
                      api_key=api_key(h.api_key_env, f"engine {spec.label!r}"), logprobs=h.logprobs,
                      timeout_s=h.request_timeout_s, extra_body=h.extra_body, metrics_path=h.metrics,
                      counters=h.counters, tokenize=pair.encode, detokenize=pair.decode,
                      where=(str(loaded.source), f"engines[{loaded.config.engines.index(spec)}].http"))


def build_engine(spec: EngineConfig, pair: ModelPair, loaded: LoadedConfig, log_dir=None, callable_=None) -> Engine:
    """``callable_``: a plug-in's callable already loaded (its worker started by the gate's import check)."""
    if spec.type == "speculative":
        from gate.engines.speculative import SpeculativeEngine

        engine = SpeculativeEngine(pair.target.model, pair.draft.model, pair.device)
    elif spec.type == "http":
        engine = http_engine(spec, spec.http.server.url, pair, loaded, speculative=True, name=spec.label)
    elif spec.type == "hf_assisted":
        from gate.engines.hf_assisted import HFAssistedEngine

        pad = pair.tokenizer.pad_token_id
        engine = HFAssistedEngine(pair.target.model, pair.draft.model, pair.device,
                                  pad if pad is not None else 0)
    else:
        from gate.engines.plugin import PluginEngine, PluginSettings, ProcessCallable, load_in_process

        if callable_ is not None:
            fn = callable_
        elif (spec.isolation or "process") == "process":
            fn = ProcessCallable(spec.callable, str(loaded.source), spec.label,
                                 log_path=Path(log_dir) / f"{spec.label}.log" if log_dir else None,
                                 roots=loaded.import_roots(spec))
        else:
            fn = load_in_process(spec.callable, str(loaded.source), loaded.import_roots(spec))
        models = loaded.config.models
        base = PluginSettings(max_new_tokens=[], seeds=[], temperature=0.0, num_draft_tokens=0,
                              eos_token_ids=[], target=pair.target.location, draft=pair.draft.location,
                              dtype=models.target.dtype, device=str(pair.device),
                              draft_dtype=models.draft.dtype, extra=dict(spec.extra))
        engine = PluginEngine(spec.label, fn, pair.device, base, max_batch_size=spec.max_batch_size,
                              vocab_size=pair.target.vocab_size, timeout_s=spec.timeout_s)
    engine.name = spec.label
    return engine


def build_own_reference(spec: EngineConfig, engine: Engine, pair: ModelPair, loaded: LoadedConfig,
                        log_dir=None, callable_=None) -> Engine | None:
    """A plug-in's own plain decoding (``engines[].reference``), timed beside it as ``<label>.reference``; None
    when the config names none (its speedup is then throughput against the gate's reference, and says so).
    ``callable_``: its reference callable already loaded (the worker started by the gate's import check)."""
    if spec.type != "plugin" or spec.reference is None:
        return None
    from gate.engines.plugin import PluginEngine, ProcessCallable, SpeculationOff, load_in_process

    name = spec.label + OWN_REFERENCE_SUFFIX
    ref = spec.reference
    if ref.callable is None:
        return SpeculationOff(engine, name)
    if callable_ is not None:
        fn = callable_
    elif (spec.isolation or "process") == "process":
        fn = ProcessCallable(ref.callable, str(loaded.source), name,
                             log_path=Path(log_dir) / f"{name}.log" if log_dir else None,
                             roots=loaded.import_roots(spec))
    else:
        fn = load_in_process(ref.callable, str(loaded.source), loaded.import_roots(spec))
    base = replace(engine.base, extra=dict(ref.extra))
    own = PluginEngine(name, fn, pair.device, base, max_batch_size=spec.max_batch_size,
                       vocab_size=pair.target.vocab_size, timeout_s=spec.timeout_s)
    own.speculative = False
    return own
