"""What every engine takes and returns, and what it can do.

An engine turns a batch of requests (prompt token ids, a token budget, a seed)
into one :class:`SequenceResult` per request, plus batch-level timings.  The
dataclasses here are the contract between engines and everything downstream;
plug-in engines return the same shape (as objects or plain dicts, see
``docs/engines.md``).

Speculation counters follow vLLM's names and units (``num_drafts``,
``num_draft_tokens``, ``num_accepted_tokens``, ``num_accepted_tokens_per_pos``)
and are updated in one place, :meth:`SpecCounters.observe_step`, so numbers from
served engines and in-process engines mean the same thing.  Acceptance rate and
mean acceptance length are derived from them in one place too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol, runtime_checkable

from gate.errors import EngineFailure  # noqa: F401 (the engine contract's failure: plug-ins may raise it)

StopReason = Literal["eos", "max_tokens"]
SCORE_TOP = 20  # top tokens a reference server is asked for per scored position by default: vLLM's --max-logprobs
CounterSource = Literal["engine", "none"]


# What an engine may say it computes in (a plug-in result's ``precision``), by the names libraries use for it, and
# each precision's machine epsilon (torch.finfo(dtype).eps; TF32 keeps 10 mantissa bits in its matmuls).
PRECISION_EPS = {"float32": 2.0 ** -23, "tf32": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}
PRECISIONS = {"float32": "float32", "fp32": "float32", "f32": "float32", "tf32": "tf32",
              "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
              "f16": "float16", "half": "float16"}


def precision_name(value: str) -> str | None:
    """The canonical name of a precision an engine reports (``bf16`` -> ``bfloat16``), or None if unknown."""
    return PRECISIONS.get(value.strip().lower()) if isinstance(value, str) else None


def eps_of(precision: str) -> float:
    """The machine epsilon of a precision name (``bfloat16``: 2^-7)."""
    return PRECISION_EPS[precision_name(precision) or precision]


@dataclass(frozen=True)
class GenerationSettings:
    """Settings shared by every request of a run."""

    temperature: float = 0.0  # 0 means greedy (argmax)
    num_draft_tokens: int = 4  # k, for speculative engines
    eos_token_ids: tuple[int, ...] = ()  # empty: never stop early
    # sampling's truncation, as served (gate/inputs/generation.py; gate/engines/sampling.py applies it): 0 / 1.0 /
    # 0.0 is off, and ``order`` says how the three combine
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    order: str = "vllm"

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def truncated(self) -> bool:
        return not self.greedy and (self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0)

    def to_dict(self) -> dict:
        """The settings (the truncation only where there is one: cache keys made before it keep their digest)."""
        d = asdict(self)
        if not self.truncated:
            for name in ("top_k", "top_p", "min_p", "order"):
                del d[name]
        return d


@dataclass(frozen=True)
class Request:
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    seed: int = 0  # per-request seed: sampled output does not depend on batch composition
    prompt_id: str = ""  # for messages only
    # a chat row's messages ((role, content) pairs; prompt_ids is their rendering): an http engine on the chat
    # route sends these and checks that the server rendered them to prompt_ids
    messages: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do; the runner asks these instead of testing engine names."""

    max_batch_size: int | None = None  # None: any batch size
    batch_limit_reason: str | None = None  # why, when there is a limit
    in_process: bool = True  # runs inside the gate's process, on its loaded models
    steppable: bool = False  # its draft/target steps are the loaded pair's, so calibration applies to it
    counters: CounterSource = "engine"  # where its speculation counters come from
    per_sequence_seeds: bool = True  # sampled output depends on each request's own seed only
    # Greedy at batch size 1 it must equal transformers' generate() on the loaded target: the runner's
    # anchor (gate/run/anchor.py) checks that before any verdict.  The in-process reference says so.
    anchored_to_generate: bool = False

    def refuses(self, batch_size: int) -> str | None:
        """The reason this engine cannot run ``batch_size``, or None."""
        if self.max_batch_size is not None and batch_size > self.max_batch_size:
            return self.batch_limit_reason or f"supports batch size {self.max_batch_size} at most"
        return None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SpecCounters:
    """Speculation counters, summed over the steps a sequence (or a run) took part in.

    The same meaning as vLLM's ``SpecDecodingStats``: a *draft* is one verification
    step that had at least one draft token; ``num_accepted_tokens`` counts draft tokens
    that were accepted *and emitted* (acceptance cut short by EOS or the token budget
    does not count).
    """

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_draft_tokens_per_pos: list[int] = field(default_factory=list)  # drafts that reached position j
    num_target_forwards: int = 0  # target forward passes this sequence took part in
    num_draft_forwards: int = 0
    num_emitted_tokens: int = 0

    def observe_step(self, drafted: int, accepted: int, emitted: int, draft_forwards: int = 0) -> None:
        """One verification step: ``drafted`` draft tokens proposed, the first ``accepted`` of them
        kept, ``emitted`` tokens appended to the output (accepted drafts plus the target's own)."""
        accepted = min(accepted, emitted)
        self.num_target_forwards += 1
        self.num_draft_forwards += draft_forwards
        self.num_emitted_tokens += emitted
        if drafted:
            self.num_drafts += 1
            self.num_draft_tokens += drafted
            self.num_accepted_tokens += accepted
            _grow(self.num_draft_tokens_per_pos, drafted)
            _grow(self.num_accepted_tokens_per_pos, drafted)
            for pos in range(drafted):
                self.num_draft_tokens_per_pos[pos] += 1
            for pos in range(accepted):
                self.num_accepted_tokens_per_pos[pos] += 1

    @classmethod
    def total(cls, counters: Iterable[SpecCounters | None]) -> SpecCounters | None:
        """The sum of the counters given (None entries skipped); None when none was given."""
        total, seen = cls(), False
        for c in counters:
            if c is not None:
                total.add(c)
                seen = True
        return total if seen else None

    def add(self, other: SpecCounters) -> None:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        self.num_target_forwards += other.num_target_forwards
        self.num_draft_forwards += other.num_draft_forwards
        self.num_emitted_tokens += other.num_emitted_tokens
        self.num_accepted_tokens_per_pos = _add_lists(self.num_accepted_tokens_per_pos,
                                                      other.num_accepted_tokens_per_pos)
        self.num_draft_tokens_per_pos = _add_lists(self.num_draft_tokens_per_pos, other.num_draft_tokens_per_pos)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens over proposed draft tokens (vLLM's draft acceptance rate)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        """vLLM's mean acceptance length: ``1 + accepted / drafts``, tokens per verification step that drafted."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None

    @property
    def tokens_per_target_forward(self) -> float | None:
        """Emitted tokens per target forward, steps without drafts included (what the user sees)."""
        return self.num_emitted_tokens / self.num_target_forwards if self.num_target_forwards else None

    def acceptance_per_pos(self) -> list[float | None]:
        """P(draft token at position j accepted), over the drafts that reached position j."""
        return [a / d if d else None for a, d in zip(self.num_accepted_tokens_per_pos,
                                                     self.num_draft_tokens_per_pos)]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> SpecCounters:
        keys = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in keys})


def _grow(xs: list[int], n: int) -> None:
    if len(xs) < n:
        xs.extend([0] * (n - len(xs)))


def _add_lists(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    return [x + y for x, y in zip(a + [0] * (n - len(a)), b + [0] * (n - len(b)))]


@dataclass
class SequenceResult:
    token_ids: list[int]
    stop_reason: StopReason
    wall_s: float  # from the start of the batch to this sequence's last token
    ttft_s: float | None = None  # time to first token, from the start of the batch
    per_token_s: float | None = None  # mean time between later tokens
    counters: SpecCounters | None = None  # speculative engines only
    top_logprobs: list[dict[int, float]] | None = None  # per emitted token, a server's top-k (HTTP engines)
    text_only: bool = False  # the engine gave text, not token ids: these ids are the text re-tokenized
    text: str | None = None  # the text as the engine gave it (a text-only stack's own, not decoded here)
    # a text-only stack's own pieces: each emitted token's text, and the top-k keyed by text (OpenAI's legacy
    # ``logprobs.tokens`` and ``logprobs.top_logprobs``), what lets the gate classify a divergence on text
    token_texts: list[str] | None = None
    top_text_logprobs: list[dict[str, float]] | None = None
    # the precision the engine computed in, as it says (``bfloat16``...): its near-ties flip at that precision's
    # scale, whatever the config's dtype (gate/engines/tolerance.py); None: the config's dtype
    precision: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["counters"] = self.counters.to_dict() if self.counters else None
        return d


@dataclass
class BatchResult:
    sequences: list[SequenceResult]
    wall_s: float
    realign_s: float = 0.0  # time spent on ragged bookkeeping (masks, cache crops, compaction)
    num_target_forwards: int = 0
    num_draft_forwards: int = 0
    peak_memory_bytes: int | None = None
    counters: SpecCounters | None = None  # the whole batch's, when only that is known (a server's /metrics)


def open_log(path):
    """An engine's or server's log, opened for appending; never through a symlink planted in the output
    directory (``O_NOFOLLOW``: a planted link is an error, not a write elsewhere)."""
    import os
    from pathlib import Path

    from gate.errors import EngineError, Problem

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as exc:
        raise EngineError(Problem(str(path), f"cannot open this log for writing: {exc.strerror or exc}",
                                  hint="a symlink or a directory sits where the gate writes a log: remove it, "
                                       "or pass another --out")) from None
    return os.fdopen(fd, "ab")


def visible(text: str) -> str:
    """Control and format characters (terminal escapes, bidi overrides) written as escapes, not sent raw."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def safe_message(exc: BaseException, limit: int = 500) -> str:
    """An exception's message on one line, however broken its ``__str__`` (it may raise, or not return a str);
    one line, so that engine text can never start a line of the gate's output (``::error::`` in CI), and with
    terminal escapes and other control characters made visible (``\\x1b``), so it cannot drive the terminal."""
    try:
        text = str(exc)
    except BaseException:
        text = ""
    if not isinstance(text, str):
        text = ""
    text = " ".join(text.split())
    if not text:
        try:
            text = " ".join(repr(exc).split())
        except BaseException:
            text = f"{type(exc).__name__} (its message cannot be printed)"
    return visible(text)[:limit]


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = safe_message(exc, 2000)
    return "out of memory" in text.lower() or "can't allocate memory" in text or "DefaultCPUAllocator" in text


class Engine(Protocol):
    """An engine generates for one batch at a time."""

    name: str
    speculative: bool
    capabilities: Capabilities

    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult: ...


@runtime_checkable
class ServedEngine(Protocol):
    """An engine that is a server the gate sends requests to (gate/engines/http.py): what the gate may ask of it
    beyond :meth:`Engine.generate`.  Ask :func:`served` for it, never an attribute by name."""

    name: str
    url: str  # where it answers (the run's isolation finds the launched server it is timed on by it)

    def identity(self) -> str | None:
        """The stack's version as the server reports it (results.json's stacks), None where it reports none."""
        ...

    def stream(self, req: Request, settings: GenerationSettings) -> tuple[SequenceResult, float, list[float]]:
        """One request while others run (a request-rate replay): its result, when it was sent, each token's arrival."""
        ...

    def score(self, prompt_ids, continuation: list[int]) -> tuple[list[float], list[dict]]:
        """The target's log-probabilities of ``continuation`` after ``prompt_ids`` as the server computes them, and
        its most likely tokens at each position."""
        ...

    def body(self, req: Request, settings: GenerationSettings) -> dict:
        """The request exactly as sent (a minimal case's replay and curl lines)."""
        ...


def served(engine: object) -> ServedEngine | None:
    """``engine`` as a server the gate sends requests to, or None for an engine that is not one."""
    return engine if isinstance(engine, ServedEngine) else None
