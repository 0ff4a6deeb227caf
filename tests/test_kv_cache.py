"""The ragged batch's KV cache layer (gate/engines/layout.py, GrowingLayer): a step writes its columns in place, and
attention reads bit for bit what transformers' DynamicLayer (a torch.cat every step) would give it."""

from __future__ import annotations

import pytest
import torch
from architectures import build_model
from transformers.cache_utils import DynamicLayer

from gate.engines.clock import Clock, Stopwatch
from gate.engines.layout import GrowingLayer, RaggedBatch, right_align


def states(rows: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, width, 8, generator=g), torch.randn(rows, 2, width, 4, generator=g)


def test_a_step_writes_in_place_and_returns_what_cat_would():
    layer, keys, values = GrowingLayer(), None, None
    buffers = []
    for step, width in enumerate([5, 1, 3, 1, 1, 60, 2]):
        k, v = states(3, width, step)
        got_k, got_v = layer.update(k, v)
        keys = k if keys is None else torch.cat([keys, k], dim=-2)
        values = v if values is None else torch.cat([values, v], dim=-2)
        assert torch.equal(got_k, keys) and torch.equal(got_v, values)  # K and V may differ in head size (MLA)
        assert got_k.shape == keys.shape and got_v.shape == values.shape
        assert layer.get_seq_length() == keys.shape[-2]
        buffers.append(layer.key_buffer)  # held, so that no later buffer can be given a freed one's address
    # 5 columns get a 64-column spare room: the next four steps write into it; the 60-column step outgrows it
    assert all(b is buffers[0] for b in buffers[:5]) and buffers[5] is not buffers[4] and buffers[6] is buffers[5]
    assert layer.key_buffer.shape[-2] == 71 + 64  # the 71 columns after the sixth step, and 64 spare


def test_a_crop_is_a_view_and_the_next_step_overwrites_the_cropped_columns():
    layer = GrowingLayer()
    k, v = states(2, 10, 0)
    layer.update(k, v)
    buffer = layer.key_buffer.data_ptr()
    layer.keys, layer.values = layer.keys[..., :6, :], layer.values[..., :6, :]  # what RaggedBatch.rollback does
    k2, v2 = states(2, 3, 1)
    got_k, got_v = layer.update(k2, v2)
    assert layer.key_buffer.data_ptr() == buffer  # nothing copied
    assert torch.equal(got_k, torch.cat([k[..., :6, :], k2], dim=-2))
    assert torch.equal(got_v, torch.cat([v[..., :6, :], v2], dim=-2))


@pytest.mark.parametrize("change", ["select rows", "gather columns", "reset"])
def test_anything_but_a_crop_is_copied_into_a_new_buffer(change):
    layer = GrowingLayer()
    k, v = states(3, 10, 0)
    layer.update(k, v)
    buffer = layer.key_buffer  # held: its memory cannot be reused for the new one
    if change == "select rows":  # RaggedBatch.select
        rows = torch.tensor([2, 0])
        layer.keys, layer.values = layer.keys.index_select(0, rows), layer.values.index_select(0, rows)
        k, v = k.index_select(0, rows), v.index_select(0, rows)
    elif change == "gather columns":  # RaggedBatch.compact
        order = torch.tensor([1, 3, 5, 7, 9])
        layer.keys, layer.values = layer.keys[..., order, :], layer.values[..., order, :]
        k, v = k[..., order, :], v[..., order, :]
    else:
        layer.reset()
        k, v = k[..., :0, :], v[..., :0, :]
    k2, v2 = states(k.shape[0], 2, 1)
    got_k, got_v = layer.update(k2, v2)
    assert layer.key_buffer.data_ptr() != buffer.data_ptr()
    assert torch.equal(got_k, torch.cat([k, k2], dim=-2)) and torch.equal(got_v, torch.cat([v, v2], dim=-2))


def test_a_cache_begun_in_inference_mode_goes_on_outside_it():
    """torch forbids writing into an inference tensor outside inference mode: such a buffer is copied, not written."""
    layer = GrowingLayer()
    k, v = states(2, 4, 0)
    with torch.inference_mode():
        layer.update(k, v)
    k2, v2 = states(2, 1, 1)
    got_k, got_v = layer.update(k2, v2)
    assert not layer.key_buffer.is_inference()
    assert torch.equal(got_k, torch.cat([k, k2], dim=-2)) and torch.equal(got_v, torch.cat([v, v2], dim=-2))


class PlainBatch(RaggedBatch):
    layer_class = DynamicLayer  # transformers' own layer: a torch.cat every step


def logits_through(batch_class, model, prompts) -> list[torch.Tensor]:
    """Logits of a ragged batch's steps: prefill, then steps of 1 to 5 columns with holes, each rolled back to a
    random number of kept columns per row; the holes packed after step 4, a row dropped after step 7."""
    g = torch.Generator().manual_seed(0)
    rows, dev = len(prompts), torch.device("cpu")
    out = []
    with torch.inference_mode():
        batch = batch_class(model, rows, dev, Stopwatch(Clock(dev)))
        ids, valid = right_align(prompts, dev)
        out.append(batch.forward(ids, valid, logits_to_keep=1))
        for step in range(10):
            width = 1 + step % 5
            ids = torch.randint(3, model.config.vocab_size, (rows, width), generator=g)
            new_valid = torch.rand((rows, width), generator=g) > 0.2
            start = batch.length
            out.append(batch.forward(ids, new_valid, logits_to_keep=width))
            batch.rollback(start, torch.randint(0, width + 1, (rows,), generator=g))
            if step == 4:
                assert batch.compact(force=True)
            if step == 7:
                batch.select(torch.arange(rows - 1))
                rows -= 1
    return out


@pytest.mark.parametrize("name", ["llama", "gemma2", "qwen2_sliding", "deepseek_v3", "falcon"])
def test_ragged_steps_give_bitwise_the_logits_of_transformers_own_cache(name):
    """SDPA (llama), eager attention with soft-capping and sliding layers (gemma2), a hybrid sliding/full model
    (qwen2), multi-head latent attention with K and V of different head sizes (deepseek_v3), one K/V head (falcon)."""
    model = build_model(name, 2, 0)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 200, (n,), generator=g).tolist() for n in (3, 17, 9, 30)]
    growing, plain = logits_through(RaggedBatch, model, prompts), logits_through(PlainBatch, model, prompts)
    assert len(growing) == len(plain) == 11
    assert all(torch.equal(a, b) for a, b in zip(growing, plain))
