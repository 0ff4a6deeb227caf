"""Paired mode (``specguard gate HEAD --against BASE``): the base config's speculative configuration, built as an
engine timed beside the head's on the same batches, interleaved (docs/baselines.md).

Which of the head's engines it pairs with, and how the base's side is built, is each engine type's paired policy
(gate/engines/registry.py): the gate's own engine is built again from the base's draft and k on the head's loaded
target; a plug-in or a server is the base config's engine of the same type and name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gate.engines.base import Engine
from gate.engines.registry import engine_type
from gate.errors import Problem, SpecguardError

if TYPE_CHECKING:
    from gate.inputs.config import EngineConfig, LoadedConfig
    from gate.inputs.models import LoadedModel, ModelPair


@dataclass
class PairedBase:
    """Paired mode: the base config's speculative engine (its draft and k), timed beside the head's."""

    engine: Engine
    head_engine: str
    draft: LoadedModel | None  # the base's draft, loaded here (the gate's own engine); None: a plug-in loads its own
    num_draft_tokens: int
    config: dict
    source: str


def paired_head(loaded: LoadedConfig) -> EngineConfig | None:
    """Which of the head's engines paired mode times beside its base: the first whose type builds the base from the
    base's draft (the gate's own engine), else the first whose type takes the base config's own engine."""
    for policy in ("base-draft", "base-engine"):
        found = next((e for e in loaded.config.engines if engine_type(e).paired == policy), None)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class BaseSide:
    """Paired mode's base config, read once per run, as it runs beside the head (its server on a port of its own
    where the two would share one), and what was changed, in words."""

    loaded: LoadedConfig
    changes: tuple[str, ...] = ()


def base_side(against: str, loaded: LoadedConfig) -> BaseSide:
    """The base config for paired mode: refused (exit 2) where ``gate --against`` cannot run it beside the head,
    before any server starts or weight loads; ``plan --against`` asks the same."""
    from gate.inputs.config import load_config

    base = load_config(against)
    if not loaded.config.checks.speedup.enabled:
        raise SpecguardError(Problem(str(loaded.source), "paired mode times the head beside its base, and this "
                                     "config turns timing off", field="checks.speedup.enabled",
                                     line=loaded.line_of("checks", "speedup", "enabled"),
                                     hint="drop --against, or set checks.speedup.enabled: true"))
    head = paired_head(loaded)
    if head is None:
        raise SpecguardError(Problem(str(loaded.source), "paired mode times the gate's own engine, a plug-in or an "
                                     "http engine beside its base; this config has none",
                                     field="engines", line=loaded.line_of("engines"),
                                     hint="add `- type: speculative`"))
    moved, changes = engine_type(head).paired_side(head, loaded, base)
    return BaseSide(moved, tuple(changes))


def paired_engine(side: BaseSide, loaded: LoadedConfig, pair: ModelPair, log_dir=None) -> PairedBase:
    """The base's speculative configuration, as an engine timed beside the head's (paired mode)."""
    base = side.loaded
    head_target, base_target = loaded.config.models.target, base.config.models.target
    if (loaded.resolve_path(head_target.path), head_target.dtype, head_target.revision) != \
            (base.resolve_path(base_target.path), base_target.dtype, base_target.revision):
        raise SpecguardError(Problem(str(base.source), "paired mode times the base's draft against the head's "
                                     "with one target; the two configs name different targets",
                                     field="models.target", line=base.line_of("models", "target"),
                                     hint="compare against the stored baseline instead"))
    common = {"num_draft_tokens": base.config.speculation.num_draft_tokens,
              "config": base.config.model_dump(mode="json"), "source": str(base.source)}
    head = paired_head(loaded)
    kind = engine_type(head)
    if kind.paired == "base-draft":
        from gate.engines.speculative import SpeculativeEngine
        from gate.inputs.models import load_draft_for

        draft = load_draft_for(base, pair)
        engine = SpeculativeEngine(pair.target.model, draft.model, pair.device)
        engine.name = f"base-{head.label}"
        return PairedBase(engine=engine, head_engine=head.label, draft=draft, **common)
    engine = kind.paired_base(head, base, pair, log_dir=log_dir)
    engine.name = f"base-{head.label}"
    return PairedBase(engine=engine, head_engine=head.label, draft=None, **common)


__all__ = ["BaseSide", "PairedBase", "base_side", "paired_engine", "paired_head"]
