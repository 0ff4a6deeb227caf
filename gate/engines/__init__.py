"""Engines: turn a batch of prompts into tokens, timings and speculation counters.

* ``reference``: the target alone (:mod:`gate.engines.reference`);
* the engine types a config names (``engines[].type``), one module each under :mod:`gate.engines.types`, in one
  registry (:mod:`gate.engines.registry`): ``speculative`` (the gate's own batched speculative decoder,
  :mod:`gate.engines.speculative`), ``hf_assisted`` (transformers' assisted generation, batch size 1,
  :mod:`gate.engines.hf_assisted`), ``plugin`` (an in-house engine named by a callable, :mod:`gate.engines.plugin`),
  ``http`` (a serving stack over its OpenAI-compatible API, :mod:`gate.engines.http`);
* paired mode's base engine (:mod:`gate.engines.paired`);
* mutants: deliberately broken speculative engines for the self-test (:mod:`gate.engines.mutants`).
"""

from __future__ import annotations

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
from gate.engines.registry import engine_type, engine_types
from gate.inputs.config import REFERENCE, EngineConfig, LoadedConfig

if TYPE_CHECKING:  # models import torch; the contract types must not (compare and report run without it)
    from gate.errors import Problem
    from gate.inputs.models import ModelPair

# Bump when an engine's output or timing behaviour changes: cached reference
# generations are keyed by it.
ENGINE_VERSION = "2"

__all__ = ["ENGINE_VERSION", "REFERENCE", "BatchResult", "Capabilities", "Engine", "GenerationSettings", "Request",
           "SequenceResult", "SpecCounters", "build_engine", "build_own_reference", "build_reference",
           "preflight_problems"]


def build_reference(pair: ModelPair, loaded: LoadedConfig | None = None) -> Engine:
    """The non-speculative reference: the engine that serves it where the config names one (a serving stack with
    speculation off), else the target alone, in process."""
    for spec in (loaded.config.engines if loaded is not None else []):
        if spec.served_reference is not None:
            return engine_type(spec).reference(spec, pair, loaded)
    from gate.engines.reference import ReferenceEngine

    return ReferenceEngine(pair.target.model, pair.device)


def build_engine(spec: EngineConfig, pair: ModelPair, loaded: LoadedConfig, log_dir=None, prepared=None) -> Engine:
    """``prepared``: what its type's preflight readied for it (:func:`preflight_problems`; a plug-in's worker)."""
    engine = engine_type(spec).build(spec, pair, loaded, log_dir=log_dir, prepared=prepared)
    engine.name = spec.label
    return engine


def build_own_reference(spec: EngineConfig, engine: Engine, pair: ModelPair, loaded: LoadedConfig,
                        log_dir=None, prepared=None) -> Engine | None:
    """An engine's own plain decoding (a plug-in's ``engines[].reference``), run and timed beside it as
    ``spec.own_reference_name``; None when it has none (its speedup is then throughput against the gate's
    reference, and says so).  ``prepared``: what its type's preflight readied for it (:func:`preflight_problems`)."""
    return engine_type(spec).own_reference(spec, engine, pair, loaded, log_dir=log_dir, prepared=prepared)


def preflight_problems(loaded: LoadedConfig, log_dir=None, prepared: dict | None = None) -> list[Problem]:
    """What every engine's type checks before a run (a plug-in's callable, imported in its own worker); workers that
    loaded are kept in ``prepared`` by engine name for the run to use, and stopped without it."""
    problems: list = []
    for i, spec in enumerate(loaded.config.engines):
        problems += engine_type(spec).preflight(loaded, i, spec, log_dir=log_dir, prepared=prepared)
    return problems


def capabilities_of(spec: EngineConfig) -> Capabilities:
    """An engine's capabilities as its type knows them before any weight loads (``plan``)."""
    return engine_type(spec).capabilities(spec)


__all__ += ["capabilities_of", "engine_type", "engine_types"]

# The built-in engine types, one module each: importing the package registers them all (gate/engines/registry.py)
from gate.engines import types as _builtin_types  # noqa: E402,F401
