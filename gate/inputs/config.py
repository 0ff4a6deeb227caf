"""The gate's configuration file (``specguard.yaml``): schema, loading and validation.

Validation is complete on load: every problem in the file is reported at once,
each with the file, the line, the dotted field path, what was expected and what
was found.  An unknown key suggests the closest known key.  Every field is
documented in ``docs/config.md``; keep the two in step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from gate.errors import ConfigError, Problem
from gate.inputs.config_errors import dotted, problems_from_validation
from gate.inputs.launch import mismatches
from gate.inputs.yaml_text import line_index, screen_yaml
from gate.io.files import read_input

CONFIG_VERSION = 1
REFERENCE = "reference"  # the non-speculative reference engine, which always runs
# Engine names the gate itself uses in results and reports: a configured engine may not take them.
RESERVED_ENGINE_NAMES = (REFERENCE, "gate", "base", "head")
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # gate/
BUILTIN_PREFIX = "specguard:"  # paths inside the installed package, e.g. specguard:demo/target

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
# Every number has a stated range: NaN and infinities are refused (allow_inf_nan), and so is an integer beyond
# any real batch size, token budget or count, which would only hang the planner.
MAX_BATCH_SIZE = 4096
MAX_COUNT = 1 << 20
MAX_SECONDS = 7 * 86400.0
PositiveInt = Annotated[StrictInt, Field(gt=0, le=MAX_COUNT)]
BatchSize = Annotated[StrictInt, Field(gt=0, le=MAX_BATCH_SIZE)]
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSpec(_Strict):
    path: str = Field(description="Local directory, 'specguard:demo/...' or a hub id.")
    revision: str | None = None
    dtype: Dtype = "float32"

    @field_validator("path")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("expected a model directory or hub id, got an empty string")
        return v


class ModelsConfig(_Strict):
    target: ModelSpec
    draft: ModelSpec
    device: str = "auto"
    trust_remote_code: StrictBool = False
    local_weights: StrictBool = True  # false: only configs and tokenizers load; the models run behind servers
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", v):
            raise ValueError(f"expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {v!r}")
        return v


class SpeculationConfig(_Strict):
    num_draft_tokens: Annotated[StrictInt, Field(ge=1, le=32)] = 4


class BatchingConfig(_Strict):
    batch_sizes: list[BatchSize] = Field(default_factory=lambda: [1, 4, 8], min_length=1, max_length=64)
    compositions: Annotated[StrictInt, Field(ge=1, le=16)] = 2

    @field_validator("batch_sizes")
    @classmethod
    def _unique_sorted(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"expected distinct batch sizes, got {v}")
        return sorted(v)


class SamplingConfig(_Strict):
    temperature: Annotated[float, Field(gt=0.0, le=10.0)] = 0.8
    seed: Annotated[StrictInt, Field(ge=-(1 << 63), lt=1 << 63)] = 0
    batch_sizes: list[BatchSize] | None = None  # default: every batching.batch_sizes entry


class GenerationConfig(_Strict):
    max_new_tokens: Annotated[StrictInt, Field(ge=1, le=4096)] = 48
    greedy: StrictBool = True
    sampling: SamplingConfig | None = None
    stop_at_eos: StrictBool = True

    @model_validator(mode="after")
    def _some_mode(self) -> GenerationConfig:
        if not self.greedy and self.sampling is None:
            raise ValueError("nothing to generate: set greedy: true or add a sampling: section")
        return self


class SuiteConfig(_Strict):
    path: str = "specguard:suites/default.jsonl"
    slices: list[str] = Field(default_factory=list)
    max_prompts_per_slice: PositiveInt | None = None
    stress_mix: StrictBool = False
    truncate_long_prompts: StrictBool = False
    # a Jinja chat template for rows with `messages` (default: the target tokenizer's own); left out of the digest
    # while unset, so configs written before it keep theirs
    chat_template: str | None = Field(None, exclude_if=lambda v: v is None)


class EndpointConfig(_Strict):
    """Where a serving stack answers, and optionally how the gate starts it."""

    url: str
    launch: list[str] | None = None  # a command the gate runs (own process group), waits on and tears down
    health: str = "/health"
    startup_timeout_s: Seconds = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    log: str | None = None  # file for a launched server's output

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", v):
            raise ValueError(f"expected an http(s):// URL, got {v!r}")
        if "@" in v.split("/", 3)[2]:  # user:password@host would be written to logs and results
            raise ValueError("credentials in the URL would end up in logs and reports: put the key in an "
                             "environment variable and name it in http.api_key_env")
        return v.rstrip("/")

    @field_validator("launch")
    @classmethod
    def _launch(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not all(isinstance(x, str) and x for x in v)):
            raise ValueError("expected a command as a list of strings, e.g. [vllm, serve, org/model, --port, '8000']")
        return v


class HttpConfig(_Strict):
    """A serving stack behind its OpenAI-compatible API (docs/serving.md)."""

    preset: Literal["vllm", "sglang", "tgi", "llamacpp", "openai"] = "vllm"
    server: EndpointConfig  # speculation on: the engine under test
    reference: EndpointConfig | None = None  # the same stack with speculation off: the gate's reference
    model: str | None = None  # the request's "model" (default: the first of /v1/models)
    api_key_env: str | None = None  # the environment variable holding the API key (never the key itself)
    logprobs: Annotated[StrictInt, Field(ge=0, le=20)] = 5
    request_timeout_s: Seconds = 300.0
    extra_body: dict[str, Any] = Field(default_factory=dict)  # more request fields (a custom mapping)
    metrics: str | None = "/metrics"  # the Prometheus endpoint; null: no counters
    counters: dict[str, str] = Field(default_factory=dict)  # SpecCounters field -> metric family (custom mapping)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError(f"expected the name of an environment variable (the key itself never goes in the "
                             f"config), got {v[:4] + '…' if len(v) > 4 else v!r}")
        return v


OWN_REFERENCE_SUFFIX = ".reference"  # a plug-in's own reference is timed as "<engine>.reference"


class PluginReference(_Strict):
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
        if self.callable is not None and not re.fullmatch(r"(entrypoint:[\w.-]+|[\w.]+:[\w.]+)", self.callable):
            raise ValueError(f"expected 'package.module:function' or 'entrypoint:NAME', got {self.callable!r}")
        if self.extra and self.callable is None:
            raise ValueError("'extra' goes with 'callable' (the same callable keeps the engine's own extra)")
        return self


class EngineConfig(_Strict):
    type: Literal["speculative", "hf_assisted", "plugin", "http"]
    name: str | None = Field(None, validate_default=True)
    callable: str | None = Field(None, validate_default=True)
    max_batch_size: BatchSize | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    timeout_s: Seconds | None = None  # per batch; default: 60 s + 1 s per budgeted token
    # plugin: "process" (default) runs it in its own worker process, "thread" in the gate's (docs/reliability.md).
    # Not part of the config's digest (exclude): it changes how a failure is contained, not what is measured.
    isolation: Literal["process", "thread"] | None = Field(None, exclude=True)
    # plugin: more folders its modules import from (relative to the config's folder), before the config's folder
    # and the repository root; `specguard changed` watches the same roots
    # (left out of the config's digest while empty: configs written before it existed keep their digest)
    pythonpath: list[str] = Field(default_factory=list, max_length=32, exclude_if=lambda v: not v)
    http: HttpConfig | None = None
    # plugin: its own plain decoding, timed beside it (left out of the digest while unset: older configs keep theirs)
    reference: PluginReference | None = Field(None, exclude_if=lambda v: v is None)

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

    @model_validator(mode="after")
    def _plugin_only(self) -> EngineConfig:
        if self.type == "http" and self.http is None:
            raise ValueError("an http engine needs an 'http:' section (preset, server, reference): docs/serving.md")
        if self.type != "http" and self.http is not None:
            raise ValueError(f"only http engines take 'http' (this engine is {self.type!r})")
        if self.type != "plugin":
            if self.extra:
                raise ValueError(f"only plugin engines take 'extra' (this engine is {self.type!r})")
            if self.max_batch_size is not None:
                raise ValueError(f"only plugin engines take 'max_batch_size' (this engine is {self.type!r})")
            if self.timeout_s is not None:
                raise ValueError(f"only plugin engines take 'timeout_s' (this engine is {self.type!r})")
            if self.isolation is not None:
                raise ValueError(f"only plugin engines take 'isolation' (this engine is {self.type!r})")
            if self.pythonpath:
                raise ValueError(f"only plugin engines take 'pythonpath' (this engine is {self.type!r})")
            if self.reference is not None:
                hint = " (an http engine names its reference under http.reference)" if self.type == "http" else \
                    " (the gate's own engines are timed against the gate's reference, their own plain decoding)"
                raise ValueError(f"only plugin engines take 'reference' (this engine is {self.type!r}){hint}")
        return self

    @field_validator("callable")
    @classmethod
    def _callable(cls, v: str | None, info) -> str | None:
        kind = info.data.get("type")
        if kind == "plugin":
            if not v:
                raise ValueError("a plugin engine needs 'callable': 'package.module:function' "
                                 "or 'entrypoint:NAME'")
            if not re.fullmatch(r"(entrypoint:[\w.-]+|[\w.]+:[\w.]+)", v):
                raise ValueError(f"expected 'package.module:function' or 'entrypoint:NAME', got {v!r}")
        elif v is not None:
            raise ValueError(f"only plugin engines take a callable (this engine is {kind!r})")
        return v

    @property
    def label(self) -> str:
        return self.name or self.type


class EquivalenceCheck(_Strict):
    logit_tolerance: float | Literal["auto"] = "auto"
    max_confident_divergences: Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)] = 0
    max_confident_inconsistencies: Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)] = 0
    min_exact_match: Fraction = 0.0

    @field_validator("logit_tolerance")
    @classmethod
    def _tol(cls, v):
        if v != "auto" and not v > 0:
            raise ValueError(f"expected 'auto' or a number > 0, got {v!r}")
        return v


class ReproducibilityCheck(_Strict):
    repeat_batch_size: BatchSize | None = None
    require_bitwise: StrictBool = False


class DistributionCheck(_Strict):
    num_samples: Annotated[StrictInt, Field(ge=100, le=1_000_000)] = 2000
    alpha: Annotated[float, Field(gt=0.0, lt=0.5)] = 0.01
    power_trials: Annotated[StrictInt, Field(ge=0, le=1000)] = 40


class SpeedupCheck(_Strict):
    min_speedup: Annotated[float, Field(gt=0.0, le=1e6)] | None = None
    ci_half_width: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.03
    time_budget_s: Seconds = 120.0
    warmup: Annotated[StrictInt, Field(ge=0, le=1000)] = 1
    min_repeats: Annotated[StrictInt, Field(ge=2, le=100_000)] = 3
    max_repeats: Annotated[StrictInt, Field(ge=2, le=100_000)] = 30
    max_batches_per_cell: PositiveInt | None = 4
    bootstrap_resamples: Annotated[StrictInt, Field(ge=100, le=1_000_000)] = 2000
    context_buckets: list[PositiveInt] = Field(default_factory=lambda: [128, 512])
    # timed forwards per step cost (draft step, target step, verification) and batch size; the median is kept
    calibration_trials: Annotated[StrictInt, Field(ge=3, le=1000)] = 30

    @model_validator(mode="after")
    def _repeats(self) -> SpeedupCheck:
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"max_repeats ({self.max_repeats}) must be >= min_repeats ({self.min_repeats})")
        if sorted(set(self.context_buckets)) != list(self.context_buckets):
            raise ValueError(f"context_buckets must be strictly increasing, got {self.context_buckets}")
        return self


MAX_TRACE_S = 3600.0  # the longest arrival trace one replay may take


class TrafficSLO(_Strict):
    """A request meets the SLO when every bound given here holds; goodput counts those per second."""

    ttft_s: Seconds | None = None  # time to first token
    tpot_s: Seconds | None = None  # time per output token after the first
    e2e_s: Seconds | None = None  # end-to-end latency


class TrafficCheck(_Strict):
    """Sustained request-rate load (docs/serving.md): an open-loop arrival trace per rate, replayed to each http
    engine and to its reference in interleaved repeats, so both see identical traffic."""

    rates: list[Annotated[float, Field(gt=0.0, le=10_000.0)]] = Field(min_length=1, max_length=32)
    arrival: Literal["poisson", "constant"] = "poisson"
    requests: Annotated[StrictInt, Field(ge=4, le=100_000)] = 32  # per rate and replay
    repeats: Annotated[StrictInt, Field(ge=1, le=100)] = 2  # replays per side and rate, in ABBA order
    seed: Annotated[StrictInt, Field(ge=0, lt=1 << 63)] = 0
    slo: TrafficSLO = TrafficSLO()
    max_in_flight: Annotated[StrictInt, Field(ge=1, le=1024)] = 256  # past it a replay is cut short (a thread each)

    @field_validator("rates")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if sorted(set(v)) != list(v):
            raise ValueError(f"rates must be strictly increasing requests per second, got {v}")
        return v

    def trace_span_s(self, rate: float) -> float:
        """How long one replay's arrivals take at ``rate`` (the expected span of a Poisson trace, a constant one's)."""
        return (self.requests - 1) / rate

    @model_validator(mode="after")
    def _bounded(self) -> TrafficCheck:
        slowest = self.trace_span_s(self.rates[0])
        if slowest > MAX_TRACE_S:
            raise ValueError(f"at {self.rates[0]:g} req/s, {self.requests} requests take about {slowest:,.0f} s per "
                             f"replay (at most {MAX_TRACE_S:.0f}): raise the lowest rate or lower 'requests'")
        return self


class ChecksConfig(_Strict):
    equivalence: EquivalenceCheck = EquivalenceCheck()
    reproducibility: ReproducibilityCheck = ReproducibilityCheck()
    distribution: DistributionCheck = DistributionCheck()
    speedup: SpeedupCheck = SpeedupCheck()
    # off unless given; left out of the digest while unset, so configs written before it keep theirs
    traffic: TrafficCheck | None = Field(None, exclude_if=lambda v: v is None)


HARDWARE_KEY = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")


class BaselineConfig(_Strict):
    dir: str = "baselines"
    name: str | None = None  # default: the config file's name without .yaml
    history: Annotated[StrictInt, Field(ge=0, le=1000)] = 20
    acceptance_drop: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.05
    speedup_drop: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.10
    exact_match_drop: Fraction | Literal["auto"] = "auto"
    # Which baseline this runner compares with (Bencher's "testbed"): default, read off the hardware.
    hardware_key: str | None = None
    on_missing: Literal["neutral", "fail"] = "neutral"  # no baseline for this hardware key yet

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


class OutputConfig(_Strict):
    dir: str = "specguard-out"
    cache_dir: str | None = ".specguard-cache"


class Config(_Strict):
    version: Literal[1] = 1
    models: ModelsConfig
    speculation: SpeculationConfig = SpeculationConfig()
    batching: BatchingConfig = BatchingConfig()
    generation: GenerationConfig = GenerationConfig()
    suite: SuiteConfig = SuiteConfig()
    engines: list[EngineConfig] = Field(
        default_factory=lambda: [EngineConfig(type="speculative")], min_length=1)
    checks: ChecksConfig = ChecksConfig()
    baseline: BaselineConfig = BaselineConfig()
    output: OutputConfig = OutputConfig()
    watch: list[str] = Field(default_factory=list)  # more paths or globs whose change should run the gate

    @field_validator("engines")
    @classmethod
    def _engines(cls, v: list[EngineConfig], info) -> list[EngineConfig]:
        labels = [e.label for e in v]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"engine names must be unique; give each a distinct 'name' (repeated: {dupes})")
        spec, models = info.data.get("speculation"), info.data.get("models")
        if spec is None or models is None:  # reported on their own fields
            return v
        problems = []
        for i, e in enumerate(v):
            if e.http is None:
                continue
            for role, endpoint in (("server", e.http.server), ("reference", e.http.reference)):
                if endpoint is None or endpoint.launch is None:
                    continue
                where = f"engines[{i}].http.{role}.launch"
                try:
                    found = mismatches(e.http.preset, endpoint.launch, spec.num_draft_tokens, models.draft.path,
                                       role)
                except ValueError as err:
                    found = [str(err)]
                problems += [f"{where}: {m}" for m in found]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @model_validator(mode="after")
    def _traffic_needs_a_stack(self) -> Config:
        if self.checks.traffic is not None and not any(e.type == "http" and e.http.reference for e in self.engines):
            raise ValueError("checks.traffic replays request-rate traffic to an engine that takes requests while "
                             "others run, and to its own reference on the same trace: add an http engine with "
                             "http.reference (docs/serving.md), or remove checks.traffic")
        return self


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

    def import_roots(self, engine: EngineConfig) -> list[Path]:
        """Where a plug-in engine's modules are imported from, first to last: its ``pythonpath`` entries, the
        config's folder, and the repository that holds the config (never the working directory: a model
        repository's own ``gate.py`` must not stand in for specguard's).  ``specguard changed`` watches these."""
        roots = [self.resolve_path(p) for p in engine.pythonpath] + [self.source.parent]
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
        raw = yaml.safe_load(text)
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
        raise ConfigError(problems_from_validation(exc, Config, name, line_index(text))) from None
    problems = _cross_field_problems(cfg, name, line_index(text))
    if problems:
        raise ConfigError(problems)
    return LoadedConfig(config=cfg, source=Path(source).resolve(), raw=raw)


def _cross_field_problems(cfg: Config, source: str, lines: dict[tuple, int]) -> list[Problem]:
    """Rules that relate fields in different sections (reported at the field that must change)."""
    out = []
    refs = [i for i, e in enumerate(cfg.engines) if e.http is not None and e.http.reference is not None]
    for i in refs:
        http = cfg.engines[i].http
        if http.reference.url == http.server.url:
            loc = ("engines", i, "http", "reference", "url")
            out.append(Problem(source, f"the reference is the engine under test ({http.server.url}): every "
                                       "output would equal itself", field=dotted(loc), line=lines.get(loc),
                               hint="point http.reference at the same stack with speculation off"))
    for i in refs[1:]:
        loc = ("engines", i, "http", "reference")
        out.append(Problem(source, "only one http engine may name the reference server (the gate has one "
                                   "reference)", field=dotted(loc), line=lines.get(loc),
                           hint=f"keep the reference on engines[{refs[0]}] only"))
    if not cfg.models.local_weights:
        loc = ("models", "local_weights")
        if not refs:
            out.append(Problem(source, "without local weights the reference must be a server",
                               field=dotted(loc), line=lines.get(loc),
                               hint="add http.reference (the stack with speculation off) to the http engine"))
        for i, e in enumerate(cfg.engines):
            if e.type in ("speculative", "hf_assisted"):
                at = ("engines", i, "type")
                out.append(Problem(source, f"a {e.type} engine runs the local models, but local_weights is false",
                                   field=dotted(at), line=lines.get(at), hint="remove it, or load the weights"))
    s = cfg.generation.sampling
    if s is not None and s.batch_sizes is not None:
        extra = sorted(set(s.batch_sizes) - set(cfg.batching.batch_sizes))
        if extra:
            loc = ("generation", "sampling", "batch_sizes")
            out.append(Problem(source, f"expected a subset of batching.batch_sizes {cfg.batching.batch_sizes}, "
                                       f"got {s.batch_sizes}", field=dotted(loc), line=lines.get(loc),
                               hint=f"remove {extra} or add them to batching.batch_sizes"))
    return out


def load_config(path: str | Path) -> LoadedConfig:
    path = Path(path)
    return parse_config(read_input(path, ConfigError, "config file", "pass the path of your specguard.yaml"), path)
