"""What every engine takes and returns.

An engine turns a batch of requests (prompt token ids, a token budget, a seed)
into one :class:`SequenceResult` per request, plus batch-level timings.  The
dataclasses here are the contract between engines and everything downstream;
plug-in engines return the same shape (as objects or plain dicts, see
``docs/engines.md``).

Speculation counters follow vLLM's names and units (``num_drafts``,
``num_draft_tokens``, ``num_accepted_tokens``, ``num_accepted_tokens_per_pos``)
so that numbers from served engines and in-process engines mean the same thing.
Acceptance rate and mean accepted length are derived from them in one place,
:class:`SpecCounters`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol

StopReason = Literal["eos", "max_tokens"]


@dataclass(frozen=True)
class GenerationSettings:
    """Settings shared by every request of a run."""

    temperature: float = 0.0  # 0 means greedy (argmax)
    num_draft_tokens: int = 4  # k, for speculative engines
    eos_token_ids: tuple[int, ...] = ()  # empty: never stop early

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Request:
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    seed: int = 0  # per-request seed: sampled output does not depend on batch composition


@dataclass
class SpecCounters:
    """Speculation counters, summed over the steps a sequence (or a run) took part in.

    ``num_accepted_tokens`` counts draft tokens that were accepted *and* emitted
    (acceptance cut short by EOS or the token budget does not count), so
    ``mean_accepted_length`` is exactly emitted tokens per target forward.
    """

    num_drafts: int = 0  # verification steps with at least one draft token
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_draft_tokens_per_pos: list[int] = field(default_factory=list)  # drafts that reached position j
    num_target_forwards: int = 0  # target forward passes this sequence took part in
    num_draft_forwards: int = 0
    num_emitted_tokens: int = 0

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
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens emitted per target forward (1 + accepted drafts per step)."""
        return self.num_emitted_tokens / self.num_target_forwards if self.num_target_forwards else None

    def acceptance_per_pos(self) -> list[float | None]:
        """P(draft token at position j accepted), over the drafts that reached position j."""
        return [a / d if d else None for a, d in zip(self.num_accepted_tokens_per_pos,
                                                     self.num_draft_tokens_per_pos)]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["acceptance_rate"] = self.acceptance_rate
        d["mean_accepted_length"] = self.mean_accepted_length
        d["acceptance_per_pos"] = self.acceptance_per_pos()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SpecCounters:
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in keys})


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


class Engine(Protocol):
    """An engine generates for one batch at a time."""

    name: str
    speculative: bool
    max_batch_size: int | None  # None: any batch size

    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult: ...
