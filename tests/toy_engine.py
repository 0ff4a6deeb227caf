"""A toy engine type, in one file outside gate/: the proof that adding a type touches nothing else.

``type: toy`` decodes greedily with the gate's own reference engine on the loaded target, one batch at a time,
up to its own ``toy.max_batch_size``; its section has fields of its own, its capabilities are known before any
weight loads, and its own plain decoding is the gate's reference (it computes with the gate's numerics).
``toy.bug: true`` plants a batched bug (every row but the first of a batch of two or more ends on the wrong token),
which the gate must catch, shrink to a minimal case, and replay with this module's own :func:`replay`.
Importing this module registers it (tests/test_toy_engine.py)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, StrictBool, StrictInt

from gate.engines.base import Capabilities
from gate.engines.registry import EngineType, register
from gate.inputs.config import EngineConfig
from gate.inputs.fields import Strict


class ToySection(Strict):
    max_batch_size: StrictInt = Field(4, ge=1, le=64)
    bug: StrictBool = False


class ToyEngineConfig(EngineConfig):
    type: Literal["toy"] = "toy"
    toy: ToySection = ToySection()
    runs_local_models: ClassVar[bool] = True
    gate_numerics: ClassVar[bool] = True


class ToyEngine:
    """Plain greedy decoding, as an engine under test: the gate's reference engine under another name."""

    speculative = True  # judged as an engine under test (its counters are none)

    def __init__(self, inner, limit: int, bug: bool = False):
        self.inner = inner
        self.bug = bug
        self.capabilities = ToyType.caps(limit)

    def generate(self, requests, settings):
        out = self.inner.generate(requests, settings)
        if self.bug and len(requests) > 1:  # BUG: a batched one: the rows after the first end on the next token id
            vocab = self.inner.target.config.vocab_size
            for seq in out.sequences[1:]:
                if seq.token_ids:
                    seq.token_ids[-1] = (seq.token_ids[-1] + 1) % vocab
        return out


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

    def build(self, spec, pair, loaded, *, log_dir=None, prepared=None):
        from gate.engines.reference import ReferenceEngine

        return ToyEngine(ReferenceEngine(pair.target.model, pair.device), spec.toy.max_batch_size, spec.toy.bug)

    def case_engine(self, spec, engine, loaded, pair, label, variant=None):
        from gate.engines.replaying import local_models

        return {"type": self.name, "label": label, "replay": "function", "callable": "toy_engine:replay",
                "pythonpath": [str(Path(__file__).resolve().parent)], "bug": engine.bug,
                **local_models(loaded, pair), "draft": None}

    def report_lines(self, described):
        return ["python replay.py --engine correct   # the toy without its bug: 'not reproduced'"]


def replay(engine: dict, prompts, seeds, max_new_tokens: int, settings: dict, variant: str | None = None):
    """A minimal case's replay.py calls this: the toy rebuilt alone on the case's target (``correct``: no bug)."""
    from gate.engines.reference import ReferenceEngine
    from gate.engines.replaying import built, run

    inner = built(engine, "toy", lambda target, draft, device: ReferenceEngine(target, device))
    toy = ToyEngine(inner, 64, engine["bug"] and variant != "correct")
    return run(toy, prompts, seeds, max_new_tokens, settings)


TOY = register(ToyType())
