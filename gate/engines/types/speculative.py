"""``type: speculative``: the gate's own batched speculative decoder (gate/engines/speculative.py) on the loaded pair.

It runs the local target and draft, computes with the gate's own numerics (its plain decoding is the gate's
reference), and in paired mode the base config's draft and k are timed in the same engine beside it."""

from __future__ import annotations

from typing import ClassVar, Literal

from gate.engines.registry import EngineType, register
from gate.inputs.config import EngineConfig


class SpeculativeEngineConfig(EngineConfig):
    type: Literal["speculative"] = "speculative"
    runs_local_models: ClassVar[bool] = True
    methods: ClassVar[tuple[str, ...]] = ("draft_model",)
    gate_numerics: ClassVar[bool] = True

    @classmethod
    def foreign_key_hint(cls, key: str) -> str:
        if key == "reference":
            return " (the gate's own engines are timed against the gate's reference, their own plain decoding)"
        return ""


class SpeculativeType(EngineType):
    name = "speculative"
    section = SpeculativeEngineConfig
    paired = "base-draft"
    noun = "the gate's own engine"

    def capabilities(self, spec):
        from gate.engines.speculative import SpeculativeEngine

        return SpeculativeEngine.capabilities

    def build(self, spec, pair, loaded, *, log_dir=None, prepared=None):
        from gate.engines.speculative import SpeculativeEngine

        return SpeculativeEngine(pair.target.model, pair.draft.model, pair.device)

    def case_engine(self, spec, engine, loaded, pair, label, variant=None):
        from gate.engines.replaying import local_models

        return {"type": self.name, "label": label, "replay": "function", "callable": f"{__name__}:replay",
                "pythonpath": [], "variant": variant, **local_models(loaded, pair)}

    def report_lines(self, described):
        return ["python replay.py --engine speculative   # the correct engine: 'not reproduced'"]


def replay(engine: dict, prompts, seeds, max_new_tokens: int, settings: dict, variant: str | None = None):
    """A minimal case's replay: the gate's engine, or the self-test mutant ``variant`` names (``speculative``: the
    correct one), rebuilt alone on the case's models (:mod:`gate.engines.replaying`)."""
    from gate.engines.mutants import MUTANTS
    from gate.engines.replaying import built, run
    from gate.engines.speculative import SpeculativeEngine

    name = variant or engine.get("variant") or "speculative"
    cls = SpeculativeEngine if name == "speculative" else MUTANTS[name]
    return run(built(engine, name, cls), prompts, seeds, max_new_tokens, settings)


SPECULATIVE = register(SpeculativeType())
__all__ = ["SPECULATIVE", "SpeculativeEngineConfig"]
