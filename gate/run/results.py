"""The results of ``specguard run``: typed records, written incrementally, read through query helpers.

While a run is in progress every finished batch execution is appended to
``records.jsonl`` (flushed and fsynced), and ``results.json`` is rewritten
atomically at the end, or when the run is interrupted, with ``status`` saying
which.  A crash mid-run therefore loses at most the batch in flight, and
``specguard run --resume`` picks up where it stopped.

The types below are the contract between the runner and every later stage;
``gate/schemas/results.schema.json`` is generated from them
(``python scripts/make_schemas.py``).  Checks read a :class:`Results` through its
query helpers (:meth:`Results.greedy_outputs`, :meth:`Results.timing_pairs`,
:meth:`Results.sampled`, :meth:`Results.reruns`), never raw dicts, and never the
runner's protocol.

Schema history, every older version loading through :func:`migrate`:
``specguard.results/1`` (flat dicts, no ``composition``); ``specguard.results/2``
(no ``anchor``: the reference was not checked against ``transformers.generate``); ``specguard.results/3``
(no ``baseline_name``, no text-keyed top-k of a text-only stack).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from gate.engines.base import SpecCounters, eps_of
from gate.errors import Problem, ResultsError
from gate.inputs.config import REFERENCE, Config
from gate.io.documents import Document, RunRef, omitted_when_none
from gate.io.files import parse_json, read_input, split_lines
from gate.io.rundir import RESULTS, DocumentKind, load_document
from gate.run.load import RunnerLoad
from gate.run.records import (
    Execution,
    Mode,
    Phase,
    Record,
    SequenceOutput,
    TrafficReplay,
)

SCHEMA = "specguard.results/4"
OLDER_SCHEMAS = ("specguard.results/1", "specguard.results/2", "specguard.results/3")

Status = Literal["complete", "interrupted", "failed"]


# --- the header ----------------------------------------------------------------------------


class ModelFingerprint(Record):
    location: str
    fingerprint: str
    dtype: str
    revision: str | None = None


class SuiteFingerprint(Record):
    name: str
    fingerprint: str
    prompts: int
    slices: list[str]


class StackIdentity(Record):
    """A serving stack as the run found it: its version as it reports it (vLLM's ``/version``, llama.cpp's
    ``/props``, TGI's ``/info``; None where it says none) and its launch line (None: the gate did not launch it)."""

    version: str | None = None
    launch: list[str] | None = None


class Fingerprint(Record):
    """What a measurement depends on; resume, the cache and comparisons check it."""

    hardware: dict[str, Any]
    hardware_key: str
    libraries: dict[str, str]
    models: dict[str, ModelFingerprint]
    config: str  # digest of the validated config
    suite: SuiteFingerprint
    # the serving stacks, by engine (and "reference" where a server is the reference); left out while none
    stacks: dict[str, StackIdentity] = Field(default_factory=dict, exclude_if=lambda v: not v)

    def differences(self, other: Fingerprint) -> list[str]:
        """What differs from ``other``, one readable line each (empty: the same run setup)."""
        out = []
        if self.suite.fingerprint != other.suite.fingerprint:
            out.append(f"suite: {other.suite.name} ({other.suite.fingerprint}) -> "
                       f"{self.suite.name} ({self.suite.fingerprint})")
        if self.config != other.config:
            out.append(f"config digest: {other.config} -> {self.config}")
        for role in sorted(set(self.models) | set(other.models)):
            a, b = other.models.get(role), self.models.get(role)
            if a is None or b is None or (a.fingerprint, a.dtype) != (b.fingerprint, b.dtype):
                out.append(f"{role} model: {a.fingerprint if a else None} -> {b.fingerprint if b else None}")
        for lib in sorted(set(self.libraries) | set(other.libraries)):
            if self.libraries.get(lib) != other.libraries.get(lib):
                out.append(f"{lib}: {other.libraries.get(lib)} -> {self.libraries.get(lib)}")
        if self.hardware_key != other.hardware_key:
            out.append(f"hardware: {other.hardware_key} -> {self.hardware_key}")
        for name in sorted(set(self.stacks) | set(other.stacks)):
            a, b = other.stacks.get(name), self.stacks.get(name)
            if (a.version if a else None) != (b.version if b else None):
                out.append(f"{name} server: {a.version if a else None} -> {b.version if b else None}")
        return out


class Settings(Record):
    num_draft_tokens: int
    batch_sizes: list[int]
    max_new_tokens: int
    eos_token_ids: list[int]
    greedy: bool
    sampling: dict[str, Any] | None = None
    engines: list[str]
    engine_version: str
    capabilities: dict[str, dict[str, Any]] = Field(default_factory=dict)
    compositions: int = 1
    stress_mix: bool = False


class PromptRecord(Record):
    id: str
    slice: str
    bucket: str
    n_prompt_tokens: int
    max_new_tokens: int
    prompt_ids: list[int]


class BatchPlanRecord(Record):
    """One planned equivalence batch: its composition, members and prompt-length spread."""

    batch_size: int
    composition: int
    batch: int
    kind: Literal["mixed", "stress", "cell"]
    prompts: list[str]
    n_real: int
    min_prompt_tokens: int
    max_prompt_tokens: int
    duplicates: bool = False  # a prompt twice in the batch: the suite is smaller than the batch size


class Skip(Record):
    engine: str
    batch_size: int
    mode: Mode
    reason: str


class BudgetLeftOut(Record):
    """One unit of work the budget left out (:mod:`gate.run.budget`): not run, so never judged or stored."""
    what: Literal["equivalence", "sampling", "timing", "traffic", "confirmation", "minimal cases"]
    batch_size: int | None = None
    engine: str | None = None
    cell: str | None = None  # a timing cell, slice|bucket
    estimate_s: float | None = None  # what it was estimated to take
    left_s: float  # what was left of the budget when it was weighed
    reason: str


class BudgetSampling(Record):
    """A sampling group the budget cut below ``checks.distribution.num_samples``."""
    engine: str
    batch_size: int
    tokens: int  # sampled
    need: int  # checks.distribution.num_samples


class BudgetRecord(Record):
    """``checks.budget_minutes`` (or ``--budget-minutes``) and what it left out (:mod:`gate.run.budget`)."""

    minutes: float
    source: str  # the field or flag that set it
    reserve_s: float  # kept for the checks and the report after the run
    estimates: str  # where the units' estimates came from, in words
    run_s: float = 0.0  # seconds from the command's start to the run's end
    left_out: list[BudgetLeftOut] = Field(default_factory=list)
    sampling: list[BudgetSampling] = Field(default_factory=list)
    repeats_cut: list[int] = Field(default_factory=list)  # load levels whose adaptive repeats the budget stopped

    @property
    def cut(self) -> bool:  # whether the budget left anything out or cut anything short
        return bool(self.left_out or self.sampling or self.repeats_cut)


class AnchorDifference(Record):
    """The first difference between the gate's reference and ``generate()`` on one anchor prompt."""

    prompt_id: str
    position: int  # output position of the first difference
    reference_token: int | None  # None: that output had already ended (EOS)
    generate_token: int | None
    logit_gap: float | None = None  # teacher-forced logit of the reference's token minus generate()'s
    tolerance: float | None = None  # the near-tie tolerance at that position
    near_tie: bool = False


class AnchorRecord(Record):
    """The reference checked against ``transformers.generate`` on a few suite prompts (:mod:`gate.run.anchor`)."""

    key: str  # the cache key: target, dtype, device, hardware, libraries, engine version, prompts, settings
    model_type: str
    prompts: int
    identical: int
    near_ties: int
    differences: list[AnchorDifference] = Field(default_factory=list)
    seconds: float = 0.0  # what the anchor cost this run (0 when reused from the cache)
    cached: bool = False

    @property
    def line(self) -> str:
        return anchor_line(self.model_dump())


def anchor_line(anchor: dict | AnchorRecord) -> str:
    """The one line the summary and the PR comment give the anchor (from the record or its JSON)."""
    a = anchor if isinstance(anchor, dict) else anchor.model_dump()
    n = a["near_ties"]
    cost = "reused from the cache" if a["cached"] else f"{a['seconds']:.1f} s"
    return (f"reference anchored to transformers.generate: {a['identical']}/{a['prompts']} prompts identical, "
            f"{n} near-tie{'s' if n != 1 else ''} ({a['model_type']}; {cost})")


class StoppedAt(Record):
    model_config = ConfigDict(extra="allow")
    reason: str
    phase: str | None = None
    engine: str | None = None
    batch_size: int | None = None
    batch: int | None = None
    repeat: int | None = None


class RunHeader(Record):
    """The first line of ``records.jsonl`` and the head of ``results.json``."""

    schema_id: str = Field(SCHEMA, alias="schema")
    fingerprint: Fingerprint
    settings: Settings
    config: Config | None = None  # the validated config the run was made with (None: a run from before it was kept)
    prompts: list[PromptRecord]
    batches: list[BatchPlanRecord] = Field(default_factory=list)
    shard: tuple[int, int] | None = None  # (index, count) of a sharded run; None for a whole run
    run_id: str | None = None  # this invocation's id: verdict.json names it, so a stale verdict is never judged
    # the baseline name the run was made under (gate.inputs.config.baseline_name of its config file), so that `compare`
    # without the config looks up the same baseline as `baseline refresh` with it
    baseline_name: str | None = None

    def ref(self) -> RunRef:
        """How the documents derived from this run name it."""
        return RunRef(id=self.run_id, config=self.fingerprint.config, suite=self.fingerprint.suite.fingerprint)


class PairedRun(Document):
    """Paired mode: the base config's speculative engine, timed beside the head's, interleaved, in one run."""

    engine: str  # the base engine's name in the results, e.g. "base-speculative"
    head_engine: str  # the head engine it is compared with
    num_draft_tokens: int  # the base's k
    calibration: dict[str, dict[str, float]] = Field(default_factory=dict)  # the base pair's step costs
    config: dict[str, Any] = Field(default_factory=dict)  # the base config, as loaded
    source: str | None = None  # the base config's file


VOCAB_HINT = "these results were not made with this config's target, or were edited; rerun `specguard run`"


class NeighbourProbe(Document):
    """One engine's first timing batch run alone (the other launched servers frozen) and beside them
    (gate.run.isolation), round by round (``alone_s[i]`` and ``beside_s[i]`` are one round): ``slowdown`` is the
    median round's beside / alone - 1; ``interfered`` when it is above the threshold and the rounds lean slower
    beside the others by the exact signed-rank test (``gate.run.isolation.judged``)."""

    engine: str
    alone_s: list[float]
    beside_s: list[float]
    slowdown: float
    interfered: bool


class Results(RunHeader):
    """``results.json``: the header, every execution, and how the run ended."""

    status: Status
    stopped_at: StoppedAt | None = None
    calibration: dict[str, dict[str, float]] = Field(default_factory=dict)  # batch size -> step timings
    calibrated_engines: list[str] = Field(default_factory=list)  # engines the pair's calibration applies to
    timing: dict[str, dict[str, dict[str, Any]]] = Field(default_factory=dict)  # bs -> cell -> repeats
    executions: list[Execution] = Field(default_factory=list)
    skipped: list[Skip] = Field(default_factory=list)
    cache: dict[str, list[str]] = Field(default_factory=lambda: {"reused": []})
    paired: PairedRun | None = None  # paired mode only
    # Where the time went, in runs made before phases.json held it (a run writes it empty now).
    phases: dict[str, Any] = Field(default_factory=dict)
    # The reference checked against transformers.generate; None when the reference is a serving stack.
    anchor: AnchorRecord | None = None
    # request-rate replays (checks.traffic); left out while empty, so runs without them keep their documents
    traffic: list[TrafficReplay] = Field(default_factory=list, exclude_if=lambda v: not v)
    # launched servers timed alone and beside each other (gate.run.isolation); left out while none was probed
    neighbours: list[NeighbourProbe] = Field(default_factory=list, exclude_if=lambda v: not v)
    isolated: bool = Field(False, exclude_if=lambda v: not v)  # timed one server at a time (isolate_servers)
    # the runner while the gate timed: load, other processes, steal, clocks (gate.run.load); absent without timing
    runner_load: RunnerLoad | None = omitted_when_none()
    # checks.budget_minutes and what it left out (gate.run.budget); absent without a budget
    budget: BudgetRecord | None = omitted_when_none()
    _prompt_index: dict[str, PromptRecord] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _rows_name_this_runs_prompts(self) -> Results:
        """Every batch and row names one of this run's prompts: the checks look each one up."""
        known = {p.id for p in self.prompts}
        for i, ex in enumerate(self.executions):
            for j, pid in enumerate(ex.prompts):
                if pid not in known:
                    raise ValueError(f"executions[{i}].prompts[{j}]: {pid!r} is not one of this run's prompts")
            for j, seq in enumerate(ex.sequences):
                if seq.prompt_id not in known:
                    raise ValueError(f"executions[{i}].sequences[{j}].prompt_id: {seq.prompt_id!r} is not one of "
                                     "this run's prompts")
        return self

    def vocabulary_problem(self, vocab_size: int, source: str) -> Problem | None:
        """The first token id (of a prompt or an output) the target's vocabulary does not hold, as a Problem."""
        for i, p in enumerate(self.prompts):
            bad = next((k for k, t in enumerate(p.prompt_ids) if t >= vocab_size), None)
            if bad is not None:
                return Problem(source, f"token id {p.prompt_ids[bad]} is outside the target's vocabulary (size "
                                       f"{vocab_size})", field=f"prompts[{i}].prompt_ids[{bad}]", hint=VOCAB_HINT)
        for i, ex in enumerate(self.executions):
            for j, seq in enumerate(ex.sequences):
                bad = next((k for k, t in enumerate(seq.token_ids) if t >= vocab_size), None)
                if bad is not None:
                    return Problem(source, f"token id {seq.token_ids[bad]} is outside the target's vocabulary "
                                           f"(size {vocab_size})", field=f"executions[{i}].sequences[{j}].token_ids"
                                                                         f"[{bad}]", hint=VOCAB_HINT)
        return None

    # --- queries ----------------------------------------------------------------------

    def prompt(self, prompt_id: str) -> PromptRecord:
        if self._prompt_index is None:
            self._prompt_index = {p.id: p for p in self.prompts}
        return self._prompt_index[prompt_id]

    def engines(self) -> list[str]:
        """Engines under test (the reference excluded), in run order."""
        seen = dict.fromkeys(e.engine for e in self.executions if e.engine != REFERENCE)
        return list(seen)

    def greedy_outputs(self, engine: str, batch_size: int, composition: int | None = 0
                       ) -> dict[str, SequenceOutput]:
        """{prompt_id: output} of an engine's greedy equivalence run at one batch size.

        For the reference at batch size 1 this is the canonical reference.  ``composition=None``
        merges all compositions (first seen wins).  Filler rows are left out.  Ordered as the suite, not as
        the batches ran: a run merged from shards gives the same answer as one run.
        """
        out: dict[str, SequenceOutput] = {}
        for ex in self.executions:
            if (ex.mode == "greedy" and ex.engine == engine and ex.batch_size == batch_size and ex.repeat == 0
                    and ex.phase in (Phase.OUTPUTS, Phase.CANONICAL)
                    and (composition is None or ex.composition == composition)):
                for s in ex.real():
                    out.setdefault(s.prompt_id, s)
        order = {p.id: i for i, p in enumerate(self.prompts)}
        return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))

    def canonical(self) -> dict[str, SequenceOutput]:
        """The canonical reference: non-speculative, greedy, batch size 1."""
        return self.greedy_outputs(REFERENCE, 1)

    def greedy_batch_sizes(self, engine: str) -> list[int]:
        return sorted({ex.batch_size for ex in self.executions if ex.engine == engine and ex.mode == "greedy"
                       and ex.phase in (Phase.OUTPUTS, Phase.CANONICAL)})

    def compositions(self, engine: str, batch_size: int) -> list[int]:
        return sorted({ex.composition for ex in self.executions if ex.engine == engine and ex.mode == "greedy"
                       and ex.batch_size == batch_size and ex.phase == Phase.OUTPUTS and ex.repeat == 0})

    def reruns(self, engine: str, batch_size: int) -> list[tuple[SequenceOutput, SequenceOutput]]:
        """(first, later) outputs of a prompt whose identical batch (same prompts, same order) ran again.

        This is run-to-run repeatability: nothing differs between the two runs but time.
        """
        first: dict[tuple, SequenceOutput] = {}
        pairs = []
        for ex in self.executions:
            if ex.engine != engine or ex.mode != "greedy" or ex.batch_size != batch_size:
                continue
            members = tuple(ex.prompts)
            for row, s in enumerate(ex.sequences):
                key = (members, row)
                if key in first:
                    pairs.append((first[key], s))
                else:
                    first[key] = s
        return pairs

    def sampled(self, engine: str, batch_size: int) -> list[SequenceOutput]:
        """The sampling phase's outputs (the distribution test's first pass)."""
        return [s for ex in self.executions if ex.mode == "sampling" and ex.phase != Phase.CONFIRMATION
                and ex.engine == engine and ex.batch_size == batch_size for s in ex.real()]

    def confirmation(self, engine: str, batch_size: int) -> list[SequenceOutput]:
        """The confirmation pass's outputs (new seeds, the same batches), where ``specguard gate`` ran one."""
        return [s for ex in self.executions if ex.phase == Phase.CONFIRMATION and ex.engine == engine
                and ex.batch_size == batch_size for s in ex.real()]

    def sampled_groups(self) -> list[tuple[str, int]]:
        return sorted({(ex.engine, ex.batch_size) for ex in self.executions if ex.mode == "sampling"})

    def timing_pairs(self, engine: str | None = None, against: str = REFERENCE) -> list[TimingPair]:
        """Paired (``against``, engine) executions of the same timed batch and repeat, in run order: by default
        against the gate's reference; ``against`` an engine's own reference (a plug-in's ``<engine>.reference``)."""
        by_key: dict[tuple, dict[str, Execution]] = defaultdict(dict)
        for ex in self.executions:
            if ex.phase == Phase.TIMING:
                by_key[(ex.batch_size, ex.composition, ex.batch, ex.repeat)][ex.engine] = ex
        out = []
        for engines in by_key.values():
            ref = engines.get(against)
            if ref is None:
                continue
            for name, ex in engines.items():
                if name not in (REFERENCE, against) and (engine is None or name == engine):
                    out.append(TimingPair(name, ref, ex))
        return out

    def judged_timing_pairs(self) -> list[TimingPair]:
        """Every engine's speedup samples as judged: against its own reference where it has one (a plug-in's
        ``engines[].reference``), else against the gate's; the own references themselves are not engines."""
        own = self.own_references()
        engines = sorted({p.engine for p in self.timing_pairs()} - set(own.values()))
        return [p for e in engines for p in self.timing_pairs(e, own.get(e, REFERENCE))]

    def own_references(self) -> dict[str, str]:
        """Engine -> the name its own plain decoding is run and timed under beside it (a plug-in's
        ``engines[].reference`` in the run's config)."""
        engines = self.config.engines if self.config is not None else []
        return {e.label: e.own_reference_name for e in engines if e.own_reference_name is not None}

    def other_stacks(self) -> dict[str, str | None]:
        """Engines of another stack than the gate's torch (plug-ins and servers) -> the engine whose greedy outputs
        are that stack's own plain decoding (``EngineConfig.plain_decoding``); None where the stack has none (its
        noise is not measured)."""
        engines = self.config.engines if self.config is not None else []
        return {e.label: e.plain_decoding for e in engines if not e.gate_numerics}

    def precision(self, engine: str) -> str | None:
        """The lowest precision an engine said it computed in (a plug-in result's ``precision``), or None."""
        said = {s.precision for ex in self.executions if ex.engine == engine for s in ex.sequences if s.precision}
        return max(said, key=eps_of) if said else None

    def speculated(self, engine: str) -> bool:
        """Whether an engine's executions show speculation: counters with drafts."""
        for ex in self.executions:
            if ex.engine == engine:
                c = ex.counters()
                if c is not None and (c.num_drafts or c.num_draft_tokens):
                    return True
        return False

    def failures(self) -> list[Execution]:
        return [ex for ex in self.executions if ex.failure is not None]

    def has_timing(self) -> bool:
        return any(ex.phase == Phase.TIMING for ex in self.executions)


@dataclass(frozen=True)
class TimingPair:
    """One paired speedup sample: the reference and an engine on the same batch, back to back."""

    engine: str
    reference: Execution
    execution: Execution

    @property
    def batch_size(self) -> int:
        return self.execution.batch_size

    @property
    def slice(self) -> str | None:
        return self.execution.slice

    @property
    def bucket(self) -> str | None:
        return self.execution.bucket

    @property
    def repeat(self) -> int:
        return self.execution.repeat

    @property
    def ratio(self) -> float | None:
        if self.reference.failure or self.execution.failure or self.execution.wall_s <= 0:
            return None
        return self.reference.wall_s / self.execution.wall_s


# --- reading ---------------------------------------------------------------------------------


def read_records(path: Path) -> tuple[RunHeader | None, list[Execution]]:
    """The header and the complete execution records of a log (:func:`read_log` also gives the traffic replays)."""
    header, records, _ = read_log(path)
    return header, records


def read_log(path: Path) -> tuple[RunHeader | None, list[Execution], list[TrafficReplay]]:
    """The header and the complete records of a log; a torn last line (a crash mid-write) is dropped.

    A log from another schema version, or one that does not parse, gives no header and no
    records: it cannot be resumed.
    """
    if not path.exists():
        return None, [], []
    hint = "delete the output directory and run again"
    lines = split_lines(read_input(path, ResultsError, "record log", hint))
    while lines and not lines[-1].strip():
        lines.pop()
    header, records, traffic = None, [], []
    for n, line in enumerate(lines, start=1):
        try:
            rec = parse_json(line, ResultsError, str(path), "a record", hint, line=n)
        except ResultsError:
            if n == len(lines):
                break  # torn write of the batch in flight
            raise
        if not isinstance(rec, dict):
            raise ResultsError(Problem(str(path), "corrupt record (not an object)", line=n,
                                       hint="delete the output directory and run again"))
        try:
            if rec.get("kind") == "header":
                if rec.get("schema") != SCHEMA:
                    return None, [], []
                header = RunHeader.model_validate({k: v for k, v in rec.items() if k != "kind"})
            elif rec.get("kind") == "traffic":
                traffic.append(TrafficReplay.model_validate(rec))
            else:
                records.append(Execution.model_validate(rec))
        except ValidationError as exc:
            raise ResultsError(Problem(str(path), f"corrupt record: {_first_error(exc)}", line=n,
                                       hint="delete the output directory and run again")) from None
    return header, records, traffic


def _first_error(exc: ValidationError) -> str:
    e = exc.errors(include_url=False)[0]
    loc = ".".join(str(x) for x in e["loc"])
    return f"{loc}: {e['msg']}" if loc else e["msg"]


def migrate(doc: dict) -> dict:
    """Bring an older results document to the current schema (one function for every version)."""
    if not doc.get("config"):  # written empty by early versions: unknown, not an empty config
        doc = {**doc, "config": None}
    if doc.get("schema") == "specguard.results/1":
        doc = dict(doc)
        for ex in doc.get("executions", []):
            ex.setdefault("composition", 0)
            for s in ex.get("sequences", []):
                c = s.get("counters")
                if isinstance(c, dict):
                    s["counters"] = {k: v for k, v in c.items() if k in SpecCounters.__dataclass_fields__}
        calib = doc.get("calibration") or {}
        doc["calibrated_engines"] = [e for e in doc.get("settings", {}).get("engines", [])] if calib else []
        doc.setdefault("settings", {}).setdefault("compositions", 1)
        doc["schema"] = "specguard.results/2"
    if doc.get("schema") == "specguard.results/2":
        doc = {**doc, "anchor": None, "schema": "specguard.results/3"}  # made before the anchor: not anchored
    if doc.get("schema") == "specguard.results/3":
        # made before the text-only top-k and the recorded baseline name: neither is known
        doc = {**doc, "schema": SCHEMA}
    return doc


RESULTS_DOC = DocumentKind("results file", ResultsError, lambda: Results,
                           "the file is corrupt or was edited; rerun `specguard run`", schema=SCHEMA,
                           older=OLDER_SCHEMAS, migrate=migrate, read_hint="run `specguard run CONFIG` first",
                           json_hint="the file is corrupt; rerun, or rebuild it from records.jsonl with "
                                     "`specguard run --resume`",
                           schema_hint="produce it with this version of specguard (`specguard run`)")


def load_results(path: str | Path) -> Results:
    """Read results.json (or a directory holding it), migrate older schemas, and validate it."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    return load_document(path, RESULTS_DOC)
