"""The gate's configuration file (``specguard.yaml``): schema, loading and validation.

Validation is complete on load: every problem in the file is reported at once,
each with the file, the line, the dotted field path, what was expected and what
was found.  An unknown key suggests the closest known key.  Every field is
documented in ``docs/config.md``; keep the two in step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from gate.errors import ConfigError, Problem
from gate.inputs.checks_config import REQUIRABLE, ChecksConfig
from gate.inputs.config_errors import dotted, problems_from_validation
from gate.inputs.fields import BatchSize, Dtype, Fraction, PositiveInt, Strict, Text
from gate.inputs.generation import GenerationConfig, SamplingConfig  # noqa: F401 (re-exported)
from gate.inputs.methods import METHODS, Method, MethodName, method_problems
from gate.inputs.yaml_text import line_index, load_yaml, screen_yaml
from gate.io.files import read_input

CONFIG_VERSION = 1
REFERENCE = "reference"  # the non-speculative reference engine, which always runs
# Engine names the gate itself uses in results and reports: a configured engine may not take them.
RESERVED_ENGINE_NAMES = (REFERENCE, "gate", "base", "head")
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # gate/
DEMO_CONFIG = PACKAGE_DIR / "demo" / "specguard.yaml"  # `specguard demo`'s config (out and cache in the working dir)
BUILTIN_PREFIX = "specguard:"  # paths inside the installed package, e.g. specguard:demo/target


class ModelSpec(Strict):
    path: str = Field(description="Local directory, 'specguard:demo/...' or a hub id.")
    revision: Text | None = None
    dtype: Dtype = "float32"

    @field_validator("path")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("expected a model directory or hub id, got an empty string")
        return v


class ModelsConfig(Strict):
    target: ModelSpec
    # the draft model: needed by the methods that propose with one (speculation.method: draft_model, the default
    # where it is given); left out of the digest while absent, so configs written before it was optional keep theirs
    draft: ModelSpec | None = Field(None, exclude_if=lambda v: v is None)
    device: str = "auto"
    trust_remote_code: StrictBool = False
    # false: only configs and tokenizers load, the models run behind servers; "draft": the draft loads here too (a
    # small one fits beside any runner), for the draft-aware distribution tests of a served target
    local_weights: StrictBool | Literal["draft"] = True

    @property
    def target_is_local(self) -> bool:
        return self.local_weights is True

    @property
    def draft_is_local(self) -> bool:
        return self.local_weights in (True, "draft")
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", v):
            raise ValueError(f"expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {v!r}")
        return v


class SpeculationConfig(Strict):
    num_draft_tokens: Annotated[StrictInt, Field(ge=1, le=32)] = 4
    # what proposes the drafts (gate.inputs.methods): unset, draft_model where models.draft is given
    method: MethodName | None = Field(None, exclude_if=lambda v: v is None)
    # an EAGLE/EAGLE-3/Medusa head's or an MTP module's path: named (the change trigger, the fingerprint), never loaded
    head: str | None = Field(None, exclude_if=lambda v: v is None)
    # the n-gram lookup's match lengths (method ngram; vLLM's prompt_lookup_min/max; read off a vLLM launch line)
    prompt_lookup_min: Annotated[StrictInt, Field(ge=1, le=64)] | None = Field(None, exclude_if=lambda v: v is None)
    prompt_lookup_max: Annotated[StrictInt, Field(ge=1, le=64)] | None = Field(None, exclude_if=lambda v: v is None)


class BatchingConfig(Strict):
    batch_sizes: list[BatchSize] = Field(default_factory=lambda: [1, 4, 8], min_length=1, max_length=64)
    compositions: Annotated[StrictInt, Field(ge=1, le=16)] = 2

    @field_validator("batch_sizes")
    @classmethod
    def _unique_sorted(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"expected distinct batch sizes, got {v}")
        return sorted(v)


class SuiteConfig(Strict):
    path: Text = "specguard:suites/default.jsonl"
    slices: list[str] = Field(default_factory=list)
    max_prompts_per_slice: PositiveInt | None = None
    stress_mix: StrictBool = False
    truncate_long_prompts: StrictBool = False
    # a Jinja chat template for rows with `messages` (default: the target tokenizer's own); left out of the digest
    # while unset, so configs written before it keep theirs
    chat_template: Text | None = Field(None, exclude_if=lambda v: v is None)


OWN_REFERENCE_SUFFIX = ".reference"  # a plug-in's own reference is timed as "<engine>.reference"
ENGINE_TYPES_PACKAGE = "gate.engines.types"  # one module per engine type (gate/engines/registry.py)
# Every engine's dump had these keys (at these values where the type does not take them) while one model held
# every type's fields: the config digest keeps them, so digests made then stay valid, and a document written
# then (results.json's config) still loads.
LEGACY_ENGINE_KEYS: dict[str, Any] = {"callable": None, "max_batch_size": None, "extra": {}, "timeout_s": None,
                                      "http": None}
_SECTIONS: dict[str, type[EngineConfig]] = {}  # engine type -> its config section


def register_section(section: type[EngineConfig]) -> None:
    """Make ``engines[].type: <section's type>`` validate with ``section`` (gate.engines.registry.register)."""
    _SECTIONS[section.model_fields["type"].default] = section


def engine_sections() -> dict[str, type[EngineConfig]]:
    """Every registered engine type's config section.  The config never reaches up into the engine layer: importing
    :mod:`gate.engines` registers the built-in types (each module of ``gate/engines/types/``), and every command
    that reads a config has imported it before (a type of the user's own registers from its own module)."""
    if not _SECTIONS:
        raise RuntimeError("no engine type is registered: import gate.engines before reading a config (it registers "
                           "the built-in types)")
    return _SECTIONS


def _refuse(key: str, value: Any, message: str | None = None, allowed: tuple = ()) -> None:
    """Raise pydantic's own error for ``key`` of an engine entry (so that it carries the key's location): ``message``
    as a value error, or, with ``allowed``, "Input should be one of them"."""
    from pydantic import create_model

    if allowed:  # ``value`` is ... where the key is missing
        create_model("EngineEntry", **{key: (Literal[allowed], ...)}).model_validate(
            {} if value is ... else {key: value})
        raise AssertionError(f"{value!r} is one of {allowed}")

    def refuse(cls, v):
        raise ValueError(message)

    create_model("EngineEntry", **{key: (Any, ...)},
                 __validators__={"refuse": field_validator(key)(refuse)}).model_validate({key: value})


class EngineConfig(Strict):
    """An entry of ``engines``: its ``type`` names an engine type, whose own section (a subclass of this one, in the
    type's module under gate/engines/types/) holds and validates the rest.  What the layers below the engines need
    to know of a type they read here, from the section, never by testing its name."""

    type: str
    name: str | None = Field(None, validate_default=True)

    runs_local_models: ClassVar[bool] = False  # runs the gate's loaded target and draft (refused without weights)
    # the speculation methods the engine runs itself (gate.inputs.methods); None: whatever its stack runs
    methods: ClassVar[tuple[str, ...] | None] = None
    gate_numerics: ClassVar[bool] = False  # computes with the gate's own torch models: its float noise is the gate's

    @model_validator(mode="wrap")
    @classmethod
    def _as_its_type(cls, data: Any, handler):
        if cls is not EngineConfig or not isinstance(data, dict):
            return handler(data)  # a section validating itself, or an engine already validated
        sections = engine_sections()
        kind = data.get("type")
        if not isinstance(kind, str) or kind not in sections:
            _refuse("type", data.get("type", ...), allowed=tuple(sections))
        section = sections[kind]
        data = {k: v for k, v in data.items()
                if k in section.model_fields or k not in LEGACY_ENGINE_KEYS or v != LEGACY_ENGINE_KEYS[k]}
        for key in data:
            owners = [t for t, other in sections.items() if t != kind and key in other.model_fields]
            if key not in section.model_fields and owners:
                _refuse(key, data[key], f"only {' and '.join(owners)} engines take {key!r} (this engine is {kind!r})"
                        + section.foreign_key_hint(key))
        return section.model_validate(data)

    @classmethod
    def foreign_key_hint(cls, key: str) -> str:
        """Said after "only X engines take 'key'": where this type has what the user meant."""
        return ""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema, handler):
        """An entry of ``engines`` is one of the engine types' sections (gate/schemas/*.schema.json)."""
        if cls is not EngineConfig:
            return handler(core_schema)
        return {"oneOf": [handler(section.__pydantic_core_schema__) for section in engine_sections().values()]}

    @classmethod
    def keys_model(cls, raw: Any) -> type[EngineConfig]:
        """The class whose keys an entry ``raw`` may hold (its type's section), for "did you mean" hints."""
        section = engine_sections().get(raw.get("type")) if cls is EngineConfig and isinstance(raw, dict) else None
        return section or cls

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None, info) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", v):
            raise ValueError(f"expected 1-64 characters from [A-Za-z0-9_.-], got {v!r}")
        if v is not None and (v.lower() in RESERVED_ENGINE_NAMES or v.lower().startswith("base-")
                              or v.lower().endswith(OWN_REFERENCE_SUFFIX)):
            raise ValueError(f"{v!r} is reserved: the gate uses it for its own engines "
                             f"({', '.join(RESERVED_ENGINE_NAMES)}, base-* and *{OWN_REFERENCE_SUFFIX}); choose "
                             "another name")
        return v

    @property
    def label(self) -> str:
        return self.name or self.type

    @property
    def own_reference_name(self) -> str | None:
        """The name its own plain decoding is run and timed under beside it (a plug-in's ``<label>.reference``)."""
        return None

    @property
    def plain_decoding(self) -> str | None:
        """The engine whose greedy outputs are this engine's own plain decoding (its speedup is against it, its
        float noise measured on it): the gate's reference for the gate's own engines, a plug-in's own reference, a
        server's own reference server; None: it has none (timed against the gate's reference, as throughput)."""
        return REFERENCE if self.gate_numerics else None

    @property
    def served_reference(self) -> Any | None:
        """The endpoint serving the gate's reference in the local target's place (``http.reference``), or None."""
        return None

    @property
    def takes_traffic(self) -> bool:
        """Replays request-rate traffic (``checks.traffic``): takes requests while others run; so does its reference."""
        return False

    @property
    def scores_continuations(self) -> bool:
        """The reference it serves gives the target's log-probabilities of a given continuation, teacher-forced
        (vLLM's ``prompt_logprobs``): the distribution test can run without the target's weights here."""
        return False

    @property
    def why_no_scoring(self) -> str | None:
        """Why the reference it serves cannot score a given continuation (None: it can, or it serves none)."""
        return None

    @property
    def score_width(self) -> int | None:
        """How many of the target's log-probabilities its reference returns per scored position (-1: every token's;
        None: it scores nothing)."""
        return None

    def endpoints(self) -> list[tuple[str, Any]]:
        """(field, endpoint) of each server it names (``http.server``: the engine under test, ``http.reference``:
        its stack with speculation off); the gate starts those with a ``launch`` line."""
        return []

    def memory_shares(self) -> list[tuple[str, float, bool, str]]:
        """(field of a launch line, the share of a GPU's memory it claims, whether the line says so or it is the
        stack's default, the flag that sets it) for each launched server that claims a fixed share."""
        return []

    @property
    def launch_preset(self) -> str | None:
        """The stack its launch lines start, as ``gate.inputs.launch`` reads them (None: no server)."""
        return None

    def server_launch(self) -> tuple[str, list[str]] | None:
        """(stack, launch line) of the server under test where the gate launches it (None: it launches none)."""
        return None

    @property
    def prefix_cache_off(self) -> str | None:
        """The flag that turns its stack's prefix cache off (None: it has none the gate knows of)."""
        return None

    def launch_warnings(self, config: Config) -> list[str]:
        """What ``validate`` and ``plan`` warn of its launch lines (field under the engine: what), e.g. flags the
        gate does not read, a deliberate difference between a server and its reference."""
        return []

    def import_paths(self) -> list[str]:
        """Folders its modules import from, relative to the config's folder (a plug-in's ``pythonpath``)."""
        return []

    def modules(self) -> list[str]:
        """The Python modules its code is in (a plug-in's callables), which `specguard changed` watches."""
        return []

    def problems(self, config: Config, index: int) -> list[tuple[tuple, str, str]]:
        """Rules that relate this engine to the rest of the config: (location under the engine, message, hint)."""
        return []


HARDWARE_KEY = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")


class BaselineConfig(Strict):
    dir: Text = "baselines"
    name: str | None = None  # default: the config file's name without .yaml
    history: Annotated[StrictInt, Field(ge=0, le=1000)] = 20
    acceptance_drop: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.05
    speedup_drop: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.10
    exact_match_drop: Fraction | Literal["auto"] = "auto"
    # Which baseline this runner compares with (Bencher's "testbed"): default, read off the hardware.
    hardware_key: str | None = None
    # No baseline for this hardware key yet: neutral, fail (after the run), or stop (before it: exit 3, nothing run)
    on_missing: Literal["neutral", "fail", "stop"] = "neutral"
    # The speed rule's family (docs/baselines.md): a cell or load level warns only when its drop is beyond this and
    # significant after Holm's correction over every cell and load level of the run.
    min_effect: Annotated[float, Field(ge=0.0, lt=1.0)] = Field(0.05, exclude_if=lambda v: v == 0.05)
    # How far a cell's mean log speedup moves between two jobs on this hardware key at least (a day, a process, a
    # machine of the same key apart): a floor under what a baseline's own passes measure, which share one job.
    between_run_sd: Annotated[float, Field(ge=0.0, le=1.0)] = Field(0.05, exclude_if=lambda v: v == 0.05)
    # A refresh times each cell in this many passes, each in a process of its own (gate.run.passes).
    timing_passes: Annotated[StrictInt, Field(ge=1, le=10)] = Field(2, exclude_if=lambda v: v == 2)

    @field_validator("hardware_key")
    @classmethod
    def _hardware_key(cls, v: str | None) -> str | None:
        if v is not None and not HARDWARE_KEY.fullmatch(v):
            raise ValueError(f"expected 1-100 characters from [a-z0-9_.-], starting with a letter or digit, got {v!r}")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", v):
            raise ValueError(f"expected 1-64 characters from [A-Za-z0-9_.-], got {v!r}")
        return v


class OutputConfig(Strict):
    dir: Text = "specguard-out"
    cache_dir: Text | None = ".specguard-cache"


class Config(Strict):
    version: Literal[1] = 1
    models: ModelsConfig
    speculation: SpeculationConfig = SpeculationConfig()
    batching: BatchingConfig = BatchingConfig()
    generation: GenerationConfig = GenerationConfig()
    suite: SuiteConfig = SuiteConfig()
    engines: list[SerializeAsAny[EngineConfig]] = Field(
        default_factory=lambda: [EngineConfig.model_validate({"type": "speculative"})], min_length=1)
    checks: ChecksConfig = ChecksConfig()
    baseline: BaselineConfig = BaselineConfig()
    output: OutputConfig = OutputConfig()
    watch: list[str] = Field(default_factory=list)  # more paths or globs whose change should run the gate

    @field_validator("engines")
    @classmethod
    def _engines(cls, v: list[EngineConfig]) -> list[EngineConfig]:
        labels = [e.label for e in v]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"engine names must be unique; give each a distinct 'name' (repeated: {dupes})")
        return v

    @model_validator(mode="after")
    def _traffic_needs_a_stack(self) -> Config:
        if self.checks.traffic is not None and not any(e.takes_traffic for e in self.engines):
            raise ValueError("checks.traffic replays request-rate traffic to an engine that takes requests while "
                             "others run, and to its own reference on the same trace: add an http engine with "
                             "http.reference (docs/serving.md), or remove checks.traffic")
        return self

    @property
    def method(self) -> Method:
        """The speculation method this config gates: ``speculation.method``, else draft_model where a draft is given
        (a config without either is refused at load, by :func:`_cross_field_problems`)."""
        name = self.speculation.method or ("draft_model" if self.models.draft is not None else "other")
        return METHODS[name]

    @property
    def noise_batch_size(self) -> int:
        """The batch size the logit noise is measured at (alone vs batched): the largest one, where batching moves
        the numbers most."""
        return max(self.batching.batch_sizes)

    def distribution_scoring(self) -> tuple[str | None, str]:
        """Where the distribution test gets the target's distribution at each sampled token: ``local`` (the loaded
        target), ``server`` (the reference server scores the sampled continuations), or None, with the reason."""
        if self.models.target_is_local:
            return "local", "the target and the draft are loaded here"
        if not any(e.scores_continuations for e in self.engines):
            gaps = sorted({e.why_no_scoring for e in self.engines if e.why_no_scoring})
            return None, ("the distribution tests need the target's distribution at each sampled token: load the "
                          "target here (models.local_weights: true), or serve the reference with a stack that scores "
                          "a given continuation (preset: vllm, prompt_logprobs)" + "".join(f"; {g}" for g in gaps))
        sampling = self.generation.sampling
        width = next(e.score_width for e in self.engines if e.scores_continuations)
        top = ("every token's log-probability (the reference's launch line must allow it, vLLM's --max-logprobs -1: "
               "a server that allows fewer is asked for as many as it allows)" if width == -1 else
               f"the top {width} log-probabilities")
        if sampling is not None and (sampling.temperature != 1.0 or sampling.truncated):
            return "server", (f"the reference server scores each sampled continuation, teacher-forced, with {top} "
                              f"(T=1), tempered and truncated here as the stack samples ({sampling.described()}): "
                              "each sampled token is judged among the tokens they show kept, renormalised, a token "
                              "the truncation drops for certain fails outright, and one they cannot place is counted, "
                              "not judged (docs/checks.md)")
        return "server", (f"the reference server scores each sampled continuation, teacher-forced, with {top} "
                          "(the rest of the vocabulary as one outcome)")

    def unmeasurable(self, check: str) -> str | None:
        """Why this config alone leaves ``check`` (one of ``REQUIRABLE``) nothing to measure, or None: the one rule
        behind a required check refused at load, the phase ``plan`` and the run skip, and the warning they print."""
        gen = self.generation
        if check == "equivalence":
            return None if gen.greedy else "generation.greedy is false: no greedy outputs are generated to compare"
        if check == "speedup":
            if not self.checks.speedup.enabled:
                return "checks.speedup.enabled is false: nothing is timed"
            return None if gen.greedy else "the timing phase times greedy decoding, and generation.greedy is false"
        if gen.sampling is None:
            return "generation.sampling is not set: nothing is sampled"
        how, why = self.distribution_scoring()
        return None if how is not None else f"the distribution test cannot read the sampled tokens: {why}"

    @property
    def repeat_batch_size(self) -> int:
        """The batch size run-to-run repeatability is measured at: ``checks.reproducibility.repeat_batch_size``, else
        the largest one."""
        return self.checks.reproducibility.repeat_batch_size or max(self.batching.batch_sizes)

    def digest(self) -> str:
        """The config's fingerprint in results, baselines and verdicts: what it measures, not how it contains
        failures (``isolation``), with every engine's keys as they were dumped before types had sections."""
        from gate.io.documents import short_digest

        data = self.model_dump(mode="json")
        data["engines"] = [{**LEGACY_ENGINE_KEYS, **e} for e in data["engines"]]
        return short_digest(data)


def baseline_name(config: Config, source: str | Path | None) -> str:
    """The one rule for a baseline's name, which every command uses (and the PR comment's marker): ``baseline.name``,
    else the config file's name without its extension (``tiny.yaml`` -> ``tiny``), else ``specguard``."""
    if config.baseline.name:
        return config.baseline.name
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(source).stem)[:64] if source else ""
    return stem or "specguard"


def comment_name(config: str | Path | None) -> str:
    """The baseline name of a config file (it names the PR comment's marker); an unreadable config still gets its
    file's name, and none at all ``specguard``."""
    if not config:
        return "specguard"
    try:
        return load_config(config).baseline_name
    except ConfigError:
        return baseline_name(Config.model_construct(), config)


class LoadedConfig(BaseModel):
    """A validated config plus where it came from, for resolving relative paths."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    config: Config
    source: Path
    raw: dict

    @property
    def baseline_name(self) -> str:
        return baseline_name(self.config, self.source)

    def resolve_path(self, value: str) -> Path:
        """A path from the config: package-relative, absolute, or relative to the config file."""
        if value.startswith(BUILTIN_PREFIX):
            return PACKAGE_DIR / value[len(BUILTIN_PREFIX):]
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.source.parent / p)

    def line_of(self, *loc: str | int) -> int | None:
        """The line of a field's key in the config file (its nearest written parent's), for an error found after
        load; None where the file cannot be read again."""
        try:
            lines = line_index(self.source.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return None
        while loc and loc not in lines:
            loc = loc[:-1]
        return lines.get(loc)

    def import_roots(self, engine: EngineConfig) -> list[Path]:
        """Where a plug-in engine's modules are imported from, first to last: its ``pythonpath`` entries, the
        config's folder, and the repository that holds the config (never the working directory: a model
        repository's own ``gate.py`` must not stand in for specguard's).  ``specguard changed`` watches these."""
        roots = [self.resolve_path(p) for p in engine.import_paths()] + [self.source.parent]
        repo = repository_root(self.source.parent)
        return list(dict.fromkeys(roots + ([repo] if repo is not None else [])))


def repository_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` that holds ``.git`` (a checkout or a worktree), or None."""
    for d in (start, *start.parents):
        if (d / ".git").exists():
            return d
    return None


# --- loading ---------------------------------------------------------------------------------


def parse_config(text: str, source: str | Path) -> LoadedConfig:
    """Validate config text; raise ConfigError listing every problem."""
    name = str(source)
    screen_yaml(text, name)
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(Problem(name, f"not valid YAML: {reason}",
                                  line=mark.line + 1 if mark else None,
                                  hint="fix the YAML syntax at that line")) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(Problem(name, f"expected a mapping at the top level, got {type(raw).__name__}",
                                  hint="see docs/config.md for the layout"))
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, Config, name, line_index(text), raw=raw)) from None
    problems = _cross_field_problems(cfg, name, line_index(text))
    if problems:
        raise ConfigError(problems)
    return LoadedConfig(config=cfg, source=Path(source).resolve(), raw=raw)


def _cross_field_problems(cfg: Config, source: str, lines: dict[tuple, int]) -> list[Problem]:
    """Rules that relate fields in different sections (reported at the field that must change)."""
    out = []

    def line(loc: tuple) -> int | None:  # the field's line, or its nearest written parent's (a missing field)
        while loc and loc not in lines:
            loc = loc[:-1]
        return lines.get(loc)

    def at(loc: tuple, message: str, hint: str | None = None) -> None:
        out.append(Problem(source, message, field=dotted(loc), line=line(loc), hint=hint))

    for i, e in enumerate(cfg.engines):
        for loc, message, hint in e.problems(cfg, i):
            at(("engines", i, *loc), message, hint)
    refs = [i for i, e in enumerate(cfg.engines) if e.served_reference is not None]
    for i in refs[1:]:
        at(("engines", i, "http", "reference"), "only one engine may serve the gate's reference (the gate has one "
           "reference)", hint=f"keep the reference on engines[{refs[0]}] only")
    if not cfg.models.target_is_local:
        if not refs:
            at(("models", "local_weights"), "without local weights the reference must be a server",
               hint="add http.reference (the stack with speculation off) to the http engine")
        for i, e in enumerate(cfg.engines):
            if e.runs_local_models:
                at(("engines", i, "type"), f"a {e.type} engine runs the local models, but local_weights is "
                   f"{str(cfg.models.local_weights).lower()}", hint="remove it, or load the weights")
    for loc, message, hint in method_problems(cfg):
        at(loc, message, hint)
    for check in REQUIRABLE:
        why = cfg.unmeasurable(check)
        if getattr(cfg.checks, check).required and why:
            at(("checks", check, "required"), f"the {check} check is required, and this config leaves it nothing "
               f"to measure: {why}", hint=f"change what the reason names, or drop checks.{check}.required")
    if not cfg.generation.greedy and cfg.unmeasurable("distribution"):
        at(("generation", "greedy"), "nothing this run would generate can be measured: generation.greedy is false "
           f"(no equivalence, no timing), and {cfg.unmeasurable('distribution')}",
           hint="set generation.greedy: true, or make the sampled tokens readable")
    s = cfg.generation.sampling
    if s is not None and s.batch_sizes is not None:
        extra = sorted(set(s.batch_sizes) - set(cfg.batching.batch_sizes))
        if extra:
            at(("generation", "sampling", "batch_sizes"), f"expected a subset of batching.batch_sizes "
               f"{cfg.batching.batch_sizes}, got {s.batch_sizes}",
               hint=f"remove {extra} or add them to batching.batch_sizes")
    return out


def load_config(path: str | Path) -> LoadedConfig:
    path = Path(path)
    return parse_config(read_input(path, ConfigError, "config file", "pass the path of your specguard.yaml"), path)
