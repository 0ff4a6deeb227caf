"""Per-sequence bookkeeping shared by the in-process engines.

Turns the tokens a step produced for a row into that sequence's output: it
stops at the first EOS (inclusive), never exceeds ``max_new_tokens``, and
records when the first and last tokens appeared.
"""

from __future__ import annotations

import torch

from gate.engines.base import GenerationSettings, Request, SequenceResult, SpecCounters
from gate.engines.layout import RaggedBatch
from gate.errors import EngineError, Problem


def check_requests(requests: list[Request]) -> None:
    """Refuse requests no engine can serve, before any engine (or plug-in) sees them."""
    for i, r in enumerate(requests):
        if not r.prompt_ids:
            raise EngineError(Problem("engine input", "empty prompt: generation needs at least one "
                                      "prompt token", field=f"requests[{i}].prompt_ids",
                                      hint="remove the empty prompt or give it text"))
        if r.max_new_tokens < 1:
            raise EngineError(Problem("engine input", f"max_new_tokens is {r.max_new_tokens}",
                                      field=f"requests[{i}].max_new_tokens", hint="use 1 or more"))


def shrink(rows: list[int], tracker: Tracker, batches: list[RaggedBatch]) -> list[int]:
    """Drop finished rows once they are at least half of the batch; return the kept request indices."""
    alive = [j for j, r in enumerate(rows) if not tracker.done(r)]
    if alive and len(alive) <= len(rows) // 2:
        keep = torch.tensor(alive, device=batches[0].valid.device)
        for b in batches:
            b.select(keep)
        return [rows[j] for j in alive]
    return rows


class Tracker:
    def __init__(self, requests: list[Request], settings: GenerationSettings, start: float,
                 speculative: bool):
        check_requests(requests)
        self.requests = requests
        self.eos = set(settings.eos_token_ids)
        self.start = start
        n = len(requests)
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.stop: list[str | None] = [None] * n
        self.first: list[float | None] = [None] * n
        self.last: list[float | None] = [None] * n
        self.counters = [SpecCounters() for _ in range(n)] if speculative else None

    def remaining(self, i: int) -> int:
        return self.requests[i].max_new_tokens - len(self.tokens[i])

    def done(self, i: int) -> bool:
        return self.stop[i] is not None

    def emit(self, i: int, toks: list[int], now: float) -> int:
        """Append a step's tokens to sequence ``i``; return how many were kept."""
        kept = toks[: self.remaining(i)]
        cut = self.eos_at(kept)
        if cut is not None:
            kept = kept[: cut + 1]
            self.stop[i] = "eos"
        if kept:
            self.tokens[i] += kept
            if self.first[i] is None:
                self.first[i] = now
            self.last[i] = now
        if self.stop[i] is None and self.remaining(i) == 0:
            self.stop[i] = "max_tokens"
        return len(kept)

    def eos_at(self, toks: list[int]) -> int | None:
        """Index of the first EOS in a step's tokens: the sequence ends there, inclusive."""
        return next((j for j, t in enumerate(toks) if t in self.eos), None)

    def results(self) -> list[SequenceResult]:
        out = []
        for i, toks in enumerate(self.tokens):
            first = self.first[i] - self.start if self.first[i] is not None else None
            last = self.last[i] - self.start if self.last[i] is not None else 0.0
            per_token = (last - first) / (len(toks) - 1) if first is not None and len(toks) > 1 else None
            out.append(SequenceResult(
                token_ids=toks, stop_reason=self.stop[i] or "max_tokens", wall_s=last,
                ttft_s=first, per_token_s=per_token,
                counters=self.counters[i] if self.counters else None,
            ))
        return out
