"""A batch whose rows hold different numbers of tokens, on one transformers KV cache.

This is the part that batched speculative decoding usually gets wrong (the
ragged-tensor problem): after a verification step, each sequence has accepted
a different number of draft tokens, so the rows of one cache no longer line up.

The layout used here never moves data on the hot path:

* The cache has one *column* per token slot, shared by every row.  A boolean
  ``valid[row, column]`` says whether that column holds a real token of that
  row.  Columns that do not are *holes*: left padding, a row with nothing to
  feed in a step, or draft tokens rejected by this row but accepted by another.
* Attention masks are built from ``valid`` (plus causality by column), so a
  hole is invisible to every later query.  A sliding-window layer keeps every
  column too; its window is in its mask, counted in positions (valid columns),
  so holes never change what a token sees.  A model with several layer types
  (Gemma 2 and 3, Cohere2, Qwen2 with ``max_window_layers``) gets one mask per
  type (see :mod:`gate.inputs.architectures`).
* Position ids are the number of valid columns before a token.  Every row keeps
  its own positions, whatever holes it has.
* Rolling back rejected draft tokens is a crop of the columns no row kept, plus
  turning the rest of each row's rejected columns into holes.
* When holes take up too much of the cache, :meth:`RaggedBatch.compact` packs
  each row's valid columns to the right (one gather), and
  :meth:`RaggedBatch.select` drops finished rows.
* Each layer's keys and values are views of buffers with room to grow
  (:class:`GrowingLayer`): a step writes its new columns in place and a
  rollback's crop is a view, where transformers' ``DynamicCache`` copies the
  whole cache into a new tensor every step (at batch size 8 and a 568-token
  prompt that copy was a quarter to a third of a demo step on CPU:
  benchmarks/kv_cache.py).

Time spent in this bookkeeping is measured by the ``realign`` stopwatch, so its
overhead can be reported separately from model time.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from gate.engines.clock import Stopwatch
from gate.inputs.architectures import attention


def right_align(seqs: list[list[int]], device: torch.device, pad_id: int = 0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> ([B, W] ids, [B, W] valid), right-aligned with holes on the left."""
    width = max((len(s) for s in seqs), default=0)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    valid = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            valid[i, width - len(s):] = True
    return ids.to(device), valid.to(device)


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are prefix views of buffers with spare columns.

    ``update`` writes the new columns into the spare ones, and the views it returns hold the same values, in the
    same layout, as the tensor ``torch.cat`` would make, so attention reads the same numbers. A crop is a prefix view
    of the same buffer: the next update writes over the cropped columns. Anything else assigned to ``keys`` and
    ``values`` (a gather, a row selection) is copied into a new buffer at the next update. The spare room is an
    eighth of the columns, at least ``min_spare``: memory grows by at most that share, and the whole cache is copied
    once per that many columns, not once a step."""

    min_spare = 64

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.key_buffer = self.value_buffer = None
        self.keys, self.key_buffer = self._append(self.keys, self.key_buffer, key_states)
        self.values, self.value_buffer = self._append(self.values, self.value_buffer, value_states)
        return self.keys, self.values

    def reset(self) -> None:
        self.key_buffer = self.value_buffer = None
        super().reset()

    @classmethod
    def _append(cls, view: torch.Tensor, buffer: torch.Tensor | None, new: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``view`` (a prefix of ``buffer``, or any tensor) with ``new``'s columns after it, and its buffer."""
        used = view.shape[-2] if view.dim() == new.dim() else 0  # lazy_initialization leaves an empty 1-D tensor
        needed = used + new.shape[-2]
        if not (used and view.shape[:-2] == new.shape[:-2] and cls._writable_prefix(view, buffer, needed)):
            grown = new.new_empty((*new.shape[:-2], needed + max(cls.min_spare, needed // 8), new.shape[-1]))
            if used:
                grown[..., :used, :].copy_(view)
            buffer = grown
        buffer[..., used:needed, :].copy_(new)
        return buffer[..., :needed, :], buffer

    @staticmethod
    def _writable_prefix(view: torch.Tensor, buffer: torch.Tensor | None, needed: int) -> bool:
        """Whether ``view`` is ``buffer``'s first columns (same start, strides and other sizes), ``needed`` columns
        fit in ``buffer``, and it may be written in place here (torch forbids writing an inference-mode tensor
        outside inference mode)."""
        return (buffer is not None and needed <= buffer.shape[-2] and view.data_ptr() == buffer.data_ptr()
                and view.stride() == buffer.stride() and view.shape[:-2] == buffer.shape[:-2]
                and view.shape[-1] == buffer.shape[-1]
                and (torch.is_inference_mode_enabled() or not buffer.is_inference()))


class RaggedBatch:
    """One model's KV cache and per-row validity for a ragged batch."""

    # Compact when at least this many columns (and this share of the cache) are
    # holes in every row: attention over holes is wasted work.
    compact_min_waste = 32
    compact_ratio = 0.25
    # Each layer's cache (transformers' DynamicLayer copies the whole cache every step: benchmarks/kv_cache.py).
    layer_class: type[DynamicLayer] = GrowingLayer

    def __init__(self, model: torch.nn.Module, rows: int, device: torch.device, realign: Stopwatch):
        self.model = model
        # Plain layers for every layer type: a sliding layer that dropped old columns would no longer
        # line up with `valid`; the window is applied by the mask instead.
        self.cache = DynamicCache()
        self.cache.layer_class_to_replicate = self.layer_class  # a layer made at each layer's first update
        self.attention = attention(model.config)
        self.valid = torch.zeros((rows, 0), dtype=torch.bool, device=device)
        self.realign = realign
        self.dtype = next(model.parameters()).dtype
        self.forwards = 0

    @property
    def length(self) -> int:
        return self.valid.shape[1]

    def positions(self, new_valid: torch.Tensor) -> torch.Tensor:
        """Position id of each new token: the number of valid tokens before it in its row."""
        before = self.valid.sum(1, keepdim=True)
        return (before + new_valid.cumsum(1) - 1).clamp(min=0)

    def attention_mask(self, new_valid: torch.Tensor) -> tuple[torch.Tensor | dict[str, torch.Tensor], torch.Tensor]:
        """The additive 4D mask [B, 1, T, L+T] (one per layer type for a hybrid model) and the new validity."""
        _rows, width = new_valid.shape
        past = self.length
        valid = torch.cat([self.valid, new_valid], dim=1)
        cols = torch.arange(past + width, device=valid.device)
        query_cols = past + torch.arange(width, device=valid.device)
        causal = cols[None, :] <= query_cols[:, None]
        allowed = valid[:, None, :] & causal[None]
        # Every query also sees itself, so no row of the mask is fully masked (which
        # would give NaN, and NaN in a hole's cache entry poisons later queries).
        itself = (cols[None, :] == query_cols[:, None])[None]
        masks: dict[int | None, torch.Tensor] = {}
        for window in set(self.attention.windows.values()):
            seen = allowed
            if window is not None:  # transformers' rule, in positions: q - k < window
                pos = valid.cumsum(1) - 1  # a valid column's position; holes are masked anyway
                seen = seen & (pos[:, past:, None] - pos[:, None, :] < window)
            mask = torch.zeros(seen.shape, dtype=self.dtype, device=valid.device)
            masks[window] = mask.masked_fill_(~(seen | itself), torch.finfo(self.dtype).min)[:, None]
        if not self.attention.hybrid:
            return next(iter(masks.values())), valid
        return {kind: masks[w] for kind, w in self.attention.windows.items()}, valid

    def forward(self, ids: torch.Tensor, new_valid: torch.Tensor, logits_to_keep: int = 0) -> torch.Tensor:
        """Feed ``ids`` [B, T] (holes where ``new_valid`` is False); return logits [B, keep, V]."""
        with self.realign():
            mask, valid = self.attention_mask(new_valid)
            pos = self.positions(new_valid)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=self.cache,
                         use_cache=True, logits_to_keep=logits_to_keep)
        self.valid = valid
        self.forwards += 1
        return out.logits

    def _map_layers(self, fn) -> None:
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = fn(layer.keys)
                layer.values = fn(layer.values)

    def rollback(self, start: int, keep: torch.Tensor) -> None:
        """Keep the first ``keep[row]`` columns after ``start`` in each row; the rest are rejected."""
        with self.realign():
            # waits for the device: the cache's new length is a host-side int (the columns no row kept are cropped)
            new_len = start + int(keep.max()) if keep.numel() else start
            if new_len < self.length:  # columns no row kept: crop them
                self._map_layers(lambda t: t[..., :new_len, :])
            self.valid = self.valid[:, :new_len].clone()
            self.reject(start, keep)

    def reject(self, start: int, keep: torch.Tensor) -> None:
        """Turn each row's rejected columns (after its first ``keep[row]``) into holes."""
        offsets = torch.arange(self.length - start, device=self.valid.device)
        self.valid[:, start:] &= offsets[None, :] < keep[:, None]

    def compact(self, force: bool = False) -> bool:
        """Pack each row's valid columns to the right when holes waste enough of the cache."""
        with self.realign():
            longest = int(self.valid.sum(1).max())  # waits for the device: whether to pack is decided on the host
            waste = self.length - longest
            if not force and (waste < self.compact_min_waste or waste < self.compact_ratio * self.length):
                return False
            # A stable sort puts each row's holes first and keeps its tokens in order.
            order = torch.sort(self.valid.to(torch.int8), dim=1, stable=True).indices[:, self.length - longest:]
            self._map_layers(lambda t: t.gather(2, order[:, None, :, None].expand(
                t.shape[0], t.shape[1], longest, t.shape[3])))
            self.valid = self.valid.gather(1, order)
            return True

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the given batch rows (drop finished sequences)."""
        with self.realign():
            self._map_layers(lambda t: t.index_select(0, rows))
            self.valid = self.valid.index_select(0, rows)
