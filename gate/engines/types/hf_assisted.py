"""``type: hf_assisted``: transformers' assisted generation (``generate(assistant_model=...)``), batch size 1 only
(gate/engines/hf_assisted.py), on the loaded pair."""

from __future__ import annotations

from typing import ClassVar, Literal

from gate.engines.registry import EngineType, register
from gate.inputs.config import EngineConfig


class HFAssistedEngineConfig(EngineConfig):
    type: Literal["hf_assisted"] = "hf_assisted"
    runs_local_models: ClassVar[bool] = True
    # a draft model as transformers' assistant, or its prompt lookup decoding (n-gram lookup, no draft model)
    methods: ClassVar[tuple[str, ...]] = ("draft_model", "ngram")
    gate_numerics: ClassVar[bool] = True

    @classmethod
    def foreign_key_hint(cls, key: str) -> str:
        if key == "reference":
            return " (the gate's own engines are timed against the gate's reference, their own plain decoding)"
        return ""


class HFAssistedType(EngineType):
    name = "hf_assisted"
    section = HFAssistedEngineConfig
    noun = "assisted generation"

    def capabilities(self, spec):
        from gate.engines.hf_assisted import HFAssistedEngine

        return HFAssistedEngine.capabilities

    def build(self, spec, pair, loaded, *, log_dir=None, callable_=None):
        from gate.engines.hf_assisted import HFAssistedEngine

        pad = pair.tokenizer.pad_token_id
        cfg = loaded.config
        if cfg.method.name == "ngram":  # prompt lookup decoding: the n-gram lookup proposes, no draft model
            from gate.engines.hf_assisted import PromptLookupEngine

            sp = cfg.speculation
            return PromptLookupEngine(pair.target.model, pair.device, pad if pad is not None else 0,
                                      max_ngram=sp.prompt_lookup_max or sp.prompt_lookup_min or 2)
        return HFAssistedEngine(pair.target.model, pair.draft.model, pair.device, pad if pad is not None else 0)

    def case_engine(self, spec, engine, loaded, pair, label, variant=None):
        from gate.engines.hf_assisted import PromptLookupEngine
        from gate.engines.replaying import local_models

        lookup = isinstance(engine, PromptLookupEngine)
        return {"type": self.name, "label": label, "replay": "function", "callable": f"{__name__}:replay",
                "pythonpath": [], "variant": variant, "pad_token_id": engine.pad_token_id,
                "max_ngram": engine.max_ngram if lookup else None, **local_models(loaded, pair)}

    def report_lines(self, described):
        if described.get("max_ngram") is None:
            return []
        return ["python replay.py --engine prompt-lookup   # the correct prompt lookup: 'not reproduced'"]


def replay(engine: dict, prompts, seeds, max_new_tokens: int, settings: dict, variant: str | None = None):
    """A minimal case's replay: transformers' assisted generation (its prompt lookup where case.json gives
    ``max_ngram``; a lookup mutant, or ``prompt-lookup`` for the correct one, where ``variant`` names it)."""
    from gate.engines.hf_assisted import HFAssistedEngine, PromptLookupEngine
    from gate.engines.mutants import LOOKUP_MUTANTS
    from gate.engines.replaying import built, run

    name = variant or engine.get("variant")
    pad = engine["pad_token_id"]
    if engine.get("max_ngram") is None:
        make = lambda target, draft, device: HFAssistedEngine(target, draft, device, pad)  # noqa: E731
    else:
        cls = LOOKUP_MUTANTS[name] if name and name != "prompt-lookup" else PromptLookupEngine
        make = lambda target, draft, device: cls(target, device, pad, max_ngram=engine["max_ngram"])  # noqa: E731
    return run(built(engine, name or "assisted", make), prompts, seeds, max_new_tokens, settings)


HF_ASSISTED = register(HFAssistedType())
__all__ = ["HF_ASSISTED", "HFAssistedEngineConfig"]
