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

    def build(self, spec, pair, loaded, *, log_dir=None, prepared=None):
        from gate.engines.hf_assisted import HFAssistedEngine, PromptLookupEngine
        from gate.engines.proposers import NgramLookup, proposer_for

        pad = pair.tokenizer.pad_token_id
        proposer = proposer_for(loaded.config)
        if isinstance(proposer, NgramLookup):  # prompt lookup decoding: the lookup the check recomputes, no draft
            return PromptLookupEngine(pair.target.model, pair.device, pad if pad is not None else 0, lookup=proposer)
        return HFAssistedEngine(pair.target.model, pair.draft.model, pair.device, pad if pad is not None else 0)

    def case_engine(self, spec, engine, loaded, pair, label, variant=None):
        from gate.engines.hf_assisted import PromptLookupEngine
        from gate.engines.replaying import local_models

        lookup = engine.lookup if isinstance(engine, PromptLookupEngine) else None
        return {"type": self.name, "label": label, "replay": "function", "callable": f"{__name__}:replay",
                "pythonpath": [], "variant": variant, "pad_token_id": engine.pad_token_id,
                "ngram": [lookup.min_n, lookup.max_n] if lookup else None, **local_models(loaded, pair)}

    def report_lines(self, described):
        if _lookup(described) is None:
            return []
        return ["python replay.py --engine prompt-lookup   # the correct prompt lookup: 'not reproduced'"]


def _lookup(described: dict):
    """The n-gram lookup a case's engine proposed with (``ngram``: its lengths; ``max_ngram``, in a case written
    before the gate had its own lookup: transformers', matching from that size down to 1), or None."""
    from gate.engines.proposers import NgramLookup

    if described.get("ngram") is not None:
        return NgramLookup(*described["ngram"])
    return NgramLookup(1, described["max_ngram"]) if described.get("max_ngram") is not None else None


def replay(engine: dict, prompts, seeds, max_new_tokens: int, settings: dict, variant: str | None = None):
    """A minimal case's replay: transformers' assisted generation (prompt lookup decoding where case.json gives
    the lookup's lengths, ``ngram``; a lookup mutant, or ``prompt-lookup`` for the correct one, where ``variant``
    names it)."""
    from gate.engines.hf_assisted import HFAssistedEngine, PromptLookupEngine
    from gate.engines.mutants import LOOKUP_MUTANTS
    from gate.engines.replaying import built, run

    name = variant or engine.get("variant")
    pad = engine["pad_token_id"]
    lookup = _lookup(engine)
    if lookup is None:
        make = lambda target, draft, device: HFAssistedEngine(target, draft, device, pad)  # noqa: E731
    else:
        cls = LOOKUP_MUTANTS[name] if name and name != "prompt-lookup" else PromptLookupEngine
        make = lambda target, draft, device: cls(target, device, pad, lookup=lookup)  # noqa: E731
    return run(built(engine, name or "assisted", make), prompts, seeds, max_new_tokens, settings)


HF_ASSISTED = register(HFAssistedType())
__all__ = ["HF_ASSISTED", "HFAssistedEngineConfig"]
