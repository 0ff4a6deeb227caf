"""Teacher-forced re-scoring: one target (or draft) forward over prompt + output.

Every check that asks "what did the target think at this position?" goes
through :class:`Scorer`.  Identical (prompt, output) pairs are scored once, and
sequences are packed into padded batches by length, so re-scoring costs a
fraction of generation.  Per-position statistics are computed by a callback
while the logits are on the device, so memory stays bounded for large
vocabularies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

Item = tuple[tuple[int, ...], tuple[int, ...]]  # (prompt ids, output ids)


LOGITS_BUDGET = 1 << 25  # logits held at once per forward (tokens x vocabulary): 128 MB in float32
# What one more forward costs, in padded tokens: on the demo pair on CPU a forward's fixed cost is about 70 tokens'
# worth; eleven sequences padded to one 590-token forward took 4.4 s, against 0.5 s in three forwards by length.
FORWARD_COST_TOKENS = 64


class Scorer:
    def __init__(self, model: torch.nn.Module, device: torch.device, max_batch_tokens: int = 8192,
                 max_batch_size: int = 16):
        self.model = model
        self.device = device
        # A 128k-vocabulary target gives 0.5 MB of logits per token: bound the batch by the
        # vocabulary, so re-scoring memory does not grow with it.
        vocab = int(getattr(model.config, "vocab_size", 0) or 0)
        self.max_batch_tokens = min(max_batch_tokens, max(1, LOGITS_BUDGET // vocab)) if vocab else max_batch_tokens
        self.max_batch_size = max_batch_size
        self.forwards = 0
        self.seconds = 0.0  # time spent re-scoring (forwards and the per-row statistics beside them)

    @torch.inference_mode()
    def logits_rows(self, items: Sequence[Item], fn: Callable[[int, torch.Tensor], object],
                    batch_size: int | None = None) -> list:
        """Call ``fn(i, logits)`` with the float32 logits [len(output), V] that predicted each output token.

        Row t of the logits is the target's prediction for output token t given
        the prompt and output[:t].  Returns the callback's values, in order.
        Duplicate items share one forward pass (the callback still runs per item).
        """
        started = time.perf_counter()
        try:
            return self._logits_rows(items, fn, batch_size)
        finally:
            self.seconds += time.perf_counter() - started

    def _logits_rows(self, items: Sequence[Item], fn: Callable[[int, torch.Tensor], object],
                     batch_size: int | None) -> list:
        out: list = [None] * len(items)
        unique: dict[Item, list[int]] = {}
        for i, it in enumerate(items):
            unique.setdefault((tuple(it[0]), tuple(it[1])), []).append(i)
        keys = sorted(unique, key=lambda k: len(k[0]) + len(k[1]))
        lengths = [len(k[0]) + len(k[1]) for k in keys]
        if batch_size:  # the caller's batch shape (the noise measurement pads sequences beside each other on purpose)
            groups = fill(lengths, batch_size, self.max_batch_tokens)
        else:
            groups = pack(lengths, self.max_batch_size, self.max_batch_tokens)
        for start, end in groups:
            batch = keys[start:end]
            for k, rows in zip(batch, self._forward(batch)):
                for i in unique[k]:
                    out[i] = fn(i, rows) if rows is not None else None
        return out

    def _forward(self, batch: list[Item]) -> list[torch.Tensor | None]:
        seqs = [list(p) + list(o) for p, o in batch]
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
        self.forwards += 1
        rows = []
        for i, (p, o) in enumerate(batch):
            if not o:
                rows.append(None)
                continue
            # logits at position j predict token j+1: outputs start at len(p)
            rows.append(logits[i, len(p) - 1: len(p) - 1 + len(o)].float())
        return rows


def fill(lengths: Sequence[int], limit: int, max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive batches of ``limit`` sequences (sorted by length), fewer where the padded batch would hold more
    than ``max_tokens``; a single sequence always gets its batch."""
    groups, start = [], 0
    for end in range(1, len(lengths) + 1):
        if end - start > limit or (end - start > 1 and lengths[end - 1] * (end - start) > max_tokens):
            groups.append((start, end - 1))
            start = end - 1
    if start < len(lengths):
        groups.append((start, len(lengths)))
    return groups


def pack(lengths: Sequence[int], limit: int, max_tokens: int,
         forward_cost: int = FORWARD_COST_TOKENS) -> list[tuple[int, int]]:
    """Split length-sorted sequences into consecutive batches with the fewest padded tokens, a forward counting
    as ``forward_cost`` more: short sequences are not padded to a long one's length for the sake of one forward
    fewer.  Same bounds as :func:`fill`.  Dynamic programming over the split points: O(n * limit)."""
    n = len(lengths)
    cost = [0.0] + [float("inf")] * n  # cost[j]: the best split of the first j sequences
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, max(j - 1 - limit, -1), -1):
            size = j - i
            if size > 1 and lengths[j - 1] * size > max_tokens:
                break
            c = cost[i] + forward_cost + size * lengths[j - 1]
            if c < cost[j]:
                cost[j], cut[j] = c, i
    groups, j = [], n
    while j > 0:
        groups.append((cut[j], j))
        j = cut[j]
    return groups[::-1]
