"""What ``records.jsonl`` holds: one record per finished batch execution (and per request-rate replay), and the
append-only log that writes them as they finish (flushed and fsynced: a crash loses at most the batch in flight;
``specguard run --resume`` reads them back through :func:`gate.run.results.read_log`).

The records are the contract between the runner and every later stage, inside ``results.json`` too
(:mod:`gate.run.results`, whose schema is generated from them)."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from gate.engines.base import SpecCounters
from gate.io.documents import Document, omitted_when_none
from gate.io.files import named_error

Mode = Literal["greedy", "sampling"]


class Phase(str, Enum):
    """What an execution was for."""

    CALIBRATION = "calibration"  # step timings of the loaded pair (not an execution record)
    OUTPUTS = "outputs"  # greedy equivalence data: the whole suite at every batch size
    TIMING = "timing"  # paired, interleaved speedup samples of per-cell batches
    CANONICAL = "canonical"  # the reference at batch size 1 when 1 is not a configured size
    SAMPLING = "sampling"  # sampled tokens for the distribution test
    CONFIRMATION = "confirmation"  # sampling again, new seeds, for a group near alpha (gate.checks.confirmation)


class Record(Document):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


# Numbers are finite and in range at this boundary: a NaN, an infinity, a negative time or count, or a batch
# size beyond any real one is refused with its field path (exit 2), never judged.
MAX_BATCH_SIZE = 1 << 16
Seconds = Annotated[float, Field(ge=0.0, le=1e7)]
Count = Annotated[int, Field(ge=0)]
BatchSize = Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]


def _counters_not_negative(c):
    if c is None:
        return c
    for k, v in vars(c).items():
        if any(x < 0 for x in (v if isinstance(v, list) else [v])):
            raise ValueError(f"{k}: expected counts >= 0, got {v}")
    return c


# --- one execution ------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class JobKey:
    """Identity of one batch execution: the runner never runs the same key twice, merging unions by it."""

    phase: str
    engine: str
    mode: str
    batch_size: int
    composition: int
    batch: int
    repeat: int

    def label(self) -> str:
        return (f"{self.phase}/{self.engine}/{self.mode}/bs{self.batch_size}/c{self.composition}"
                f"/batch{self.batch}/r{self.repeat}")


class SequenceOutput(Record):
    """One row of one executed batch."""

    prompt_id: str
    filler: bool = False  # a repeat of a prompt already in this composition (the suite was too small)
    seed: int = 0
    text: str = ""
    token_ids: list[Count]
    stop_reason: Literal["eos", "max_tokens"]
    wall_s: Seconds
    ttft_s: Seconds | None = None
    per_token_s: Seconds | None = None
    counters: SpecCounters | None = None
    top_logprobs: list[dict[int, float]] | None = None  # a server's top-k logprobs per emitted token
    text_only: bool = False  # the engine gave only text: these ids are its text re-tokenized
    # a text-only stack's own token pieces and top-k keyed by text (None: not given)
    token_texts: list[str] | None = omitted_when_none()
    top_text_logprobs: list[dict[str, float]] | None = omitted_when_none()
    precision: str | None = omitted_when_none()  # what the engine says it computed in (None: the config's dtype)
    # a sampled row scored by the reference server (the target behind it, T=1, teacher-forced: gate.engines.http
    # HttpEngine.score): the logprob of each emitted token and the server's top-k at each position (None: not scored)
    served_logprobs: list[float] | None = omitted_when_none()
    served_top: list[dict[int, float]] | None = omitted_when_none()

    _counters = field_validator("counters")(_counters_not_negative)


class Failure(Record):
    """Why an engine produced no output for a batch: a finding about the engine under test, not a gate error."""

    kind: Literal["crash", "timeout", "out_of_memory", "contract"]
    type: str  # the exception's type, e.g. RuntimeError
    message: str


class TrafficRequest(Record):
    """One request of a request-rate replay; times in seconds from the replay's start."""

    prompt_id: str
    slice: str
    scheduled_s: Seconds  # its arrival in the trace
    sent_s: Seconds  # when the replay sent it (late when the sender falls behind the trace)
    first_token_s: Seconds | None = None
    end_s: Seconds | None = None  # its last token
    tokens: Count = 0
    gaps_s: list[Seconds] = Field(default_factory=list)  # between token bursts (ITL; gate/run/traffic.py BURST_S)
    error: str | None = omitted_when_none()


class TrafficReplay(Record):
    """One replay of one rate's arrival trace to one side: the engine under test, or its reference."""

    kind: Literal["traffic"] = "traffic"
    engine: str  # the engine under test (every side of its replays carries its name)
    side: Literal["engine", "reference", "base"]  # base: paired mode's base server, on the same trace
    rate: Annotated[float, Field(gt=0)]
    repeat: Count
    arrival: Literal["poisson", "constant"]
    seed: int
    duration_s: Seconds  # from the first arrival to the last token of the replay
    requests: list[TrafficRequest]
    cut_short: str | None = omitted_when_none()  # why the replay stopped sending (max_in_flight reached)

    @property
    def key(self) -> tuple[str, str, float, int]:
        return self.engine, self.side, self.rate, self.repeat


class Execution(Record):
    """One batch run by one engine (``kind: execution`` in ``records.jsonl``)."""

    kind: Literal["execution"] = "execution"
    phase: Phase
    engine: str
    mode: Mode
    batch_size: BatchSize
    composition: Count = 0
    batch: Count
    repeat: Count = 0
    slice: str | None = None  # the batch's cell, for per-cell batches (timing); None for mixed batches
    bucket: str | None = None
    temperature: Annotated[float, Field(ge=0.0)] = 0.0
    prompts: list[str]
    n_real: Count
    wall_s: Seconds
    realign_s: Seconds = 0.0
    num_target_forwards: Count = 0
    num_draft_forwards: Count = 0
    peak_memory_bytes: Count | None = None
    cached: bool = False
    sequences: list[SequenceOutput]
    failure: Failure | None = None  # the engine crashed, hung, ran out of memory or broke the contract
    batch_counters: SpecCounters | None = None  # a server's counters for the whole wave (per row unknown)

    _counters = field_validator("batch_counters")(_counters_not_negative)

    @property
    def key(self) -> JobKey:
        return JobKey(self.phase.value, self.engine, self.mode, self.batch_size, self.composition, self.batch,
                      self.repeat)

    @property
    def cell(self) -> tuple[str | None, str | None]:
        return (self.slice, self.bucket)

    def real(self) -> list[SequenceOutput]:
        return [s for s in self.sequences if not s.filler]

    def tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.sequences)

    def counters(self) -> SpecCounters | None:
        """The speculation counters of this batch's real rows, summed (or the whole batch's, from a server);
        None if the engine reported none."""
        total = SpecCounters.total(s.counters for s in self.real())
        if self.batch_counters is not None and (total is None or (not total.num_drafts
                                                                  and self.batch_counters.num_drafts)):
            return self.batch_counters  # also when the rows' counters lack verification steps (llama-server timings)
        return total


# --- the log ----------------------------------------------------------------------------------


class RecordLog:
    """Append-only JSONL log of a run: a header line, then one line per finished execution."""

    def __init__(self, path: Path):
        self.path = path
        self._fh = None

    def start(self, header: Document) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)  # a symlink planted here is removed, never written through
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        except OSError as exc:
            raise named_error(exc, self.path) from None
        self._fh = os.fdopen(fd, "w", encoding="utf-8")
        self._write({"kind": "header", **header.model_dump(mode="json", by_alias=True)})

    def reopen(self) -> None:
        """Append to the log a finished run wrote (the confirmation pass, gate.run.runner.Runner.confirm)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            raise named_error(exc, self.path) from None
        self._fh = os.fdopen(fd, "a", encoding="utf-8")

    def append(self, record: Execution | TrafficReplay) -> None:
        self._write(record.model_dump(mode="json"))

    def _write(self, record: dict) -> None:
        try:
            self._fh.write(json.dumps(record) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:  # a full disk or a file size limit: a torn last line, dropped on --resume
            raise named_error(exc, self.path) from None

    def close(self) -> None:
        if self._fh:
            fh, self._fh = self._fh, None
            with contextlib.suppress(OSError):  # the write that failed already said why
                fh.close()


__all__ = ["BatchSize", "Count", "Execution", "Failure", "JobKey", "Mode", "Phase", "Record", "RecordLog", "Seconds",
           "SequenceOutput", "TrafficReplay", "TrafficRequest"]
