"""A toy engine type, in one file outside gate/: the proof that adding a type touches nothing else.

``type: toy`` decodes greedily with the gate's own reference engine on the loaded target, one batch at a time,
up to its own ``toy.max_batch_size``; its section has a field of its own, its capabilities are known before any
weight loads, and its own plain decoding is the gate's reference (it computes with the gate's numerics).
Importing this module registers it (tests/test_toy_engine.py)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, StrictInt

from gate.engines.base import Capabilities
from gate.engines.registry import EngineType, register
from gate.inputs.config import EngineConfig
from gate.inputs.fields import Strict


class ToySection(Strict):
    max_batch_size: StrictInt = Field(4, ge=1, le=64)


class ToyEngineConfig(EngineConfig):
    type: Literal["toy"] = "toy"
    toy: ToySection = ToySection()
    runs_local_models: ClassVar[bool] = True
    gate_numerics: ClassVar[bool] = True


class ToyEngine:
    """Plain greedy decoding, as an engine under test: the gate's reference engine under another name."""

    speculative = True  # judged as an engine under test (its counters are none)

    def __init__(self, inner, limit: int):
        self.inner = inner
        self.capabilities = ToyType.caps(limit)

    def generate(self, requests, settings):
        return self.inner.generate(requests, settings)


class ToyType(EngineType):
    name = "toy"
    section = ToyEngineConfig
    noun = "toy engine"

    @staticmethod
    def caps(limit: int) -> Capabilities:
        return Capabilities(max_batch_size=limit, batch_limit_reason=f"toy.max_batch_size is {limit}",
                            counters="none")

    def capabilities(self, spec):
        return self.caps(spec.toy.max_batch_size)

    def build(self, spec, pair, loaded, *, log_dir=None, callable_=None):
        from gate.engines.reference import ReferenceEngine

        return ToyEngine(ReferenceEngine(pair.target.model, pair.device), spec.toy.max_batch_size)


TOY = register(ToyType())
