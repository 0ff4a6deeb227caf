"""Engine types: one module each under ``gate/engines/types/``, and this registry of them.

An engine type is everything the gate knows of one kind of engine:

* its config section: a subclass of :class:`gate.inputs.config.EngineConfig` with the type's own fields, and the
  facts the layers below the engines read from it (does it run the local models, what is its own plain decoding,
  which servers does it name, how does it relate to the rest of the config);
* its :class:`~gate.engines.base.Capabilities` known before any weight loads (``plan`` and its estimate use them);
* how to build it, its own plain decoding (timed beside it, its noise measured on it), the engine that serves the
  gate's reference where it has one;
* how paired mode times the base config's speculative configuration beside it (:mod:`gate.engines.paired`);
* what ``validate`` checks before a run (a plug-in's callable, imported in its worker);
* how a minimal case (gate/repro) describes it and how the case's replay.py rebuilds it alone.

``build_engine``, ``plan``, the checks, paired mode and the minimal cases ask the registry or the section, never the
type's name.
Adding a type is one module that defines a section and an :class:`EngineType` and calls :func:`register`: in
``gate/engines/types/`` for a built-in one (every module there is loaded the first time a config is read), or
any module imported before the config is read (tests/toy_engine.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from gate.engines.base import Capabilities, Engine
from gate.inputs.config import EngineConfig, LoadedConfig, register_section

if TYPE_CHECKING:
    from gate.errors import Problem
    from gate.inputs.models import ModelPair

# How paired mode (``gate --against BASE``) times the base config's speculative configuration beside the head's:
# "base-draft": the gate's own engine with the base's draft and k, on the head's loaded target; "base-engine": the
# base config's engine of the same type and name; None: an engine of this type is never timed in paired mode.
PairedPolicy = Literal["base-draft", "base-engine"] | None


class EngineType:
    """One kind of engine (override what the type has; the defaults are "it has none")."""

    name: ClassVar[str]
    section: ClassVar[type[EngineConfig]]
    paired: ClassVar[PairedPolicy] = None
    # how a run's report calls an engine of this type (paired mode's refusals, the plan)
    noun: ClassVar[str] = "engine"

    def capabilities(self, spec: EngineConfig) -> Capabilities:
        """What the runner may ask of it, known without loading weights (batch limit, in process, steppable...)."""
        return Capabilities()

    def build(self, spec: EngineConfig, pair: ModelPair, loaded: LoadedConfig, *, log_dir=None,
              prepared=None) -> Engine:
        """The engine; ``prepared``: what this type's :meth:`preflight` readied for it (a plug-in's worker), or
        None."""
        raise NotImplementedError(self.name)

    def own_reference(self, spec: EngineConfig, engine: Engine, pair: ModelPair, loaded: LoadedConfig, *,
                      log_dir=None, prepared=None) -> Engine | None:
        """Its own plain decoding, run and timed beside it as ``spec.own_reference_name``; None: none."""
        return None

    def reference(self, spec: EngineConfig, pair: ModelPair, loaded: LoadedConfig) -> Engine | None:
        """The engine that serves the gate's reference in place of the local target (``spec.served_reference``)."""
        return None

    def paired_base(self, head: EngineConfig, base: LoadedConfig, pair: ModelPair, *, log_dir=None) -> Engine:
        """Paired mode with ``paired = "base-engine"``: the base config's engine for the head's ``head``, named
        ``base-<head's label>`` (the gate's own engine with ``"base-draft"`` is built by gate.engines.paired)."""
        raise NotImplementedError(self.name)

    def paired_side(self, head: EngineConfig, head_config: LoadedConfig, base: LoadedConfig
                    ) -> tuple[LoadedConfig, list[str]]:
        """Paired mode: the base config as it must run beside the head's (a server moved to a port of its own),
        and what was changed, in words."""
        return base, []

    def case_engine(self, spec: EngineConfig | None, engine: Engine, loaded: LoadedConfig | None, pair: ModelPair,
                    label: str, variant: str | None = None) -> dict:
        """A minimal case's ``engine`` (case.json): what the case folder's replay.py needs to rebuild the engine
        alone.  Its ``replay`` says how: ``"requests"`` (a server: each batch's request bodies, from
        :meth:`case_batch`, sent to ``url`` + ``route``), ``"callable"`` (a plug-in's callable, called as the gate
        calls it), ``"function"`` (``callable``, imported from ``pythonpath``, rebuilds the engine and runs one
        batch: :mod:`gate.engines.replaying`), or None: it cannot be replayed alone, and the case says so (the
        default).  ``variant``: which build of the type (a self-test mutant's name); ``spec`` None: an engine
        built without a config entry (the self-test's)."""
        return {"type": self.name, "label": label, "replay": None}

    def case_batch(self, engine: Engine, requests: list, settings) -> dict:
        """What replay.py needs to re-run one batch beyond its prompts, seeds and budget (a server's bodies)."""
        return {}

    def report_lines(self, described: dict) -> list[str]:
        """REPORT.md's lines after ``python replay.py`` (another build to compare with, the requests with curl)."""
        return []

    def preflight(self, loaded: LoadedConfig, index: int, spec: EngineConfig, log_dir=None,
                  prepared: dict | None = None) -> list[Problem]:
        """What must hold before a run that the config alone cannot show (a plug-in's callable imports in its
        worker); what it readies for the run is kept in ``prepared`` by engine name (a plug-in's worker), and
        handed to :meth:`build` and :meth:`own_reference` as theirs."""
        return []


_TYPES: dict[str, EngineType] = {}


def register(kind: EngineType) -> EngineType:
    """Make ``kind`` an engine type: its section validates ``engines[].type: <kind.name>`` entries."""
    if kind.section.model_fields["type"].default != kind.name:
        raise ValueError(f"engine type {kind.name!r}: its section's type defaults to "
                         f"{kind.section.model_fields['type'].default!r}")
    _TYPES[kind.name] = kind
    register_section(kind.section)
    return kind


def engine_type(spec: EngineConfig | str) -> EngineType:
    """The type of a config's engine (or the type of that name)."""
    return _TYPES[spec if isinstance(spec, str) else spec.type]


def engine_types() -> dict[str, EngineType]:
    return dict(_TYPES)


def base_engine_of(head: EngineConfig, base: LoadedConfig, noun: str) -> EngineConfig:
    """The base config's engine that paired mode times beside the head's ``head``: the one of the same type and
    name, or the only one of that type (exit 2 naming the base config otherwise)."""
    from gate.errors import Problem, SpecguardError

    same_type = [e for e in base.config.engines if e.type == head.type]
    found = next((e for e in same_type if e.label == head.label), same_type[0] if len(same_type) == 1 else None)
    if found is None:
        raise SpecguardError(Problem(str(base.source), f"paired mode times the base's {noun} beside the head's "
                                     f"{head.label!r}; the base config has "
                                     f"{'no ' + noun if not same_type else 'no ' + noun + ' of that name'}",
                                     field="engines", line=base.line_of("engines"),
                                     hint=f"name the base's {noun} as the head's"))
    return found


__all__ = ["EngineType", "PairedPolicy", "base_engine_of", "engine_type", "engine_types", "register"]
