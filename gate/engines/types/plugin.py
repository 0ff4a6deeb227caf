"""``type: plugin``: an in-house engine named by a Python callable, run in its own worker process by default
(gate/engines/plugin.py, docs/engines.md), with an optional own plain decoding (``reference``)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from gate.engines.contract import capabilities_for
from gate.engines.registry import EngineType, base_engine_of, register
from gate.inputs.config import OWN_REFERENCE_SUFFIX, EngineConfig
from gate.inputs.fields import BatchSize, Seconds, Strict

CALLABLE = re.compile(r"(entrypoint:[\w.-]+|[\w.]+:[\w.]+)")


class PluginReference(Strict):
    """A plug-in's own plain decoding, timed beside it so that its speedup is against its own stack (docs/engines.md).

    ``num_draft_tokens: 0``: the same callable, called with ``settings.num_draft_tokens = 0`` (speculation off);
    or ``callable`` (and ``extra``): another callable of the same stack that decodes without a draft."""

    num_draft_tokens: StrictInt | None = None
    callable: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("num_draft_tokens")
    @classmethod
    def _off(cls, v: int | None) -> int | None:
        if v not in (None, 0):
            raise ValueError(f"expected 0 (speculation off: the reference is the engine's own plain decoding), "
                             f"got {v}")
        return v

    @model_validator(mode="after")
    def _one(self) -> PluginReference:
        if (self.num_draft_tokens is None) == (self.callable is None):
            raise ValueError("give the plug-in's reference either 'num_draft_tokens: 0' (the same callable with "
                             "speculation off) or 'callable: package.module:function' (another one), not both")
        if self.callable is not None and not CALLABLE.fullmatch(self.callable):
            raise ValueError(f"expected 'package.module:function' or 'entrypoint:NAME', got {self.callable!r}")
        if self.extra and self.callable is None:
            raise ValueError("'extra' goes with 'callable' (the same callable keeps the engine's own extra)")
        return self


class PluginEngineConfig(EngineConfig):
    type: Literal["plugin"] = "plugin"
    callable: str | None = Field(None, validate_default=True)
    max_batch_size: BatchSize | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    timeout_s: Seconds | None = None  # per batch; default: 60 s + 1 s per budgeted token
    # "process" (default) runs it in its own worker process, "thread" in the gate's (docs/reliability.md).
    # Not part of the config's digest (exclude): it changes how a failure is contained, not what is measured.
    isolation: Literal["process", "thread"] | None = Field(None, exclude=True)
    # more folders its modules import from (relative to the config's folder), before the config's folder and the
    # repository root; `specguard changed` watches the same roots (left out of the config's digest while empty:
    # configs written before it existed keep their digest)
    pythonpath: list[str] = Field(default_factory=list, max_length=32, exclude_if=lambda v: not v)
    # its own plain decoding, timed beside it (left out of the digest while unset: older configs keep theirs)
    reference: PluginReference | None = Field(None, exclude_if=lambda v: v is None)

    @field_validator("callable")
    @classmethod
    def _callable(cls, v: str | None) -> str:
        if not v:
            raise ValueError("a plugin engine needs 'callable': 'package.module:function' or 'entrypoint:NAME'")
        if not CALLABLE.fullmatch(v):
            raise ValueError(f"expected 'package.module:function' or 'entrypoint:NAME', got {v!r}")
        return v

    @property
    def own_reference_name(self) -> str | None:
        return self.label + OWN_REFERENCE_SUFFIX if self.reference is not None else None

    @property
    def plain_decoding(self) -> str | None:
        return self.own_reference_name

    def import_paths(self) -> list[str]:
        return list(self.pythonpath)

    def modules(self) -> list[str]:
        named = [self.callable] + ([self.reference.callable] if self.reference and self.reference.callable else [])
        return [c.split(":", 1)[0] for c in named if not c.startswith("entrypoint:")]

    @property
    def in_worker(self) -> bool:
        return (self.isolation or "process") == "process"


class PluginType(EngineType):
    name = "plugin"
    section = PluginEngineConfig
    paired = "base-engine"
    noun = "plug-in"

    def capabilities(self, spec):
        return capabilities_for(spec.max_batch_size)

    def _callable(self, spec, target: str, name: str, loaded, log_dir, prepared):
        from gate.engines.plugin import ProcessCallable, load_in_process

        if prepared is not None:  # its worker, started by preflight
            return prepared
        if spec.in_worker:
            return ProcessCallable(target, str(loaded.source), name,
                                   log_path=Path(log_dir) / f"{name}.log" if log_dir else None,
                                   roots=loaded.import_roots(spec))
        return load_in_process(target, str(loaded.source), loaded.import_roots(spec))

    def build(self, spec, pair, loaded, *, log_dir=None, prepared=None):
        from gate.engines.plugin import PluginEngine, PluginSettings

        fn = self._callable(spec, spec.callable, spec.label, loaded, log_dir, prepared)
        models = loaded.config.models
        base = PluginSettings(max_new_tokens=[], seeds=[], temperature=0.0, num_draft_tokens=0,
                              eos_token_ids=[], target=pair.target.location,
                              draft=pair.draft.location if pair.draft is not None else None,
                              dtype=models.target.dtype, device=str(pair.device),
                              draft_dtype=models.draft.dtype if models.draft else models.target.dtype,
                              extra=dict(spec.extra))
        return PluginEngine(spec.label, fn, pair.device, base, max_batch_size=spec.max_batch_size,
                            vocab_size=pair.target.vocab_size, timeout_s=spec.timeout_s)

    def own_reference(self, spec, engine, pair, loaded, *, log_dir=None, prepared=None):
        from gate.engines.plugin import PluginEngine, SpeculationOff

        name = spec.own_reference_name
        if name is None:
            return None
        if spec.reference.callable is None:
            return SpeculationOff(engine, name)
        fn = self._callable(spec, spec.reference.callable, name, loaded, log_dir, prepared)
        own = PluginEngine(name, fn, pair.device, replace(engine.base, extra=dict(spec.reference.extra)),
                           max_batch_size=spec.max_batch_size, vocab_size=pair.target.vocab_size,
                           timeout_s=spec.timeout_s)
        own.speculative = False
        return own

    def paired_base(self, head, base, pair, *, log_dir=None):
        """The base config's plug-in, told the base's draft and dtypes: it loads its own models (the gate loads no
        base weights)."""
        from gate.inputs.models import draft_location

        base_spec = base_engine_of(head, base, self.noun)
        base_pair = replace(pair, draft=replace(pair.draft, location=draft_location(base),
                                                spec=base.config.models.draft))
        return self.build(base_spec.model_copy(update={"name": f"base-{head.label}"}), base_pair, base,
                          log_dir=log_dir)

    def case_engine(self, spec, engine, loaded, pair, label, variant=None):
        """Its callable, called as the gate called it (replay.py needs the plug-in's own package, not specguard)."""
        base = engine.base
        return {"type": self.name, "label": label, "replay": "callable", "callable": spec.callable,
                "pythonpath": [str(r) for r in loaded.import_roots(spec)],
                "settings": {"target": base.target, "draft": base.draft, "dtype": base.dtype, "device": base.device,
                             "draft_dtype": base.draft_dtype, "extra": dict(base.extra)}}

    def preflight(self, loaded, index, spec, log_dir=None, prepared=None):
        """Import the callable (and the own reference's) in its own worker, never in the gate: a module that calls
        ``os._exit`` or prints workflow commands at import cannot end or speak for the gate."""
        from gate.engines.plugin import check_callable

        checks = [(spec.callable, spec.label, f"engines[{index}].callable", "the plug-in")]
        if spec.reference is not None and spec.reference.callable is not None:
            checks.append((spec.reference.callable, spec.own_reference_name, f"engines[{index}].reference.callable",
                           "the plug-in's reference"))
        problems: list = []
        for target, name, where, what in checks:
            problems += check_callable(loaded, spec, target, name, where, what, log_dir, prepared)
        return problems


PLUGIN = register(PluginType())
__all__ = ["PLUGIN", "PluginEngineConfig", "PluginReference"]
