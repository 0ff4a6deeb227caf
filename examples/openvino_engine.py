"""OpenVINO GenAI behind the plug-in contract: ``ContinuousBatchingPipeline`` with a draft model.

A production stack (paged attention, continuous batching, batched speculative decoding), gated on the demo pair
exported to OpenVINO IR by ``make openvino`` (scripts/openvino_demo.py).  Token ids in, token ids out: the IR
folders hold OpenVINO tokenizer models only because the speculative pipeline's constructor compares the target's
and the draft's tokenizers by encoding a test string (docs in scripts/openvino_demo.py).

    engines:
      - type: plugin
        name: openvino
        callable: "openvino_engine:generate"
        pythonpath: [/abs/path/to/examples]
        extra: {target_ir: ..., draft_ir: ...}     # optional: device (CPU), properties ({}), scheduler ({})
        reference: {num_draft_tokens: 0}           # the same pipeline without the draft: its own plain decoding

- ``settings.num_draft_tokens == k > 0``: the pipeline is built with ``draft_model(draft_ir)`` and every request
  asks for ``num_assistant_tokens = k``; ``k == 0``: the same pipeline without a draft (its own reference).
- ``SchedulerConfig()`` at the library's defaults, each key of ``extra.scheduler`` (default none) set on it by name
  (``max_num_batched_tokens: 8192`` prefills a long prompt in one step: no split prefill); an unknown key is an
  error naming it; ``extra.properties`` (default none) go to the pipeline as
  OpenVINO properties (e.g. ``INFERENCE_PRECISION_HINT``), and from there to the draft as well.
- Greedy (``do_sample=False``) or sampled (``do_sample=True``, ``temperature``, ``rng_seed`` = the prompt's seed:
  the library keeps one random engine per request, seeded by it; ``top_p=1``, ``min_p=0``, ``top_k`` left at its
  default, "no top-k", so the distribution is not truncated).
- Stops exactly at the gate's EOS ids: ``eos_token_id`` and ``stop_token_ids`` are set from ``settings.eos_token_ids``,
  so the IR's own ``generation_config.json`` EOS is not added; with no EOS ids (``stop_at_eos: false``),
  ``ignore_eos=True``.
- One pipeline per (IR folders, with or without draft, device, properties) per worker process.
- Counters: the library reports speculation figures only per ``generate()`` call (the ``extended_perf_metrics`` of
  every result of one call are the same batch-wide ``SDPerModelsPerfMetrics``), never per request, so they can be
  a sequence's counters only in a batch of one; see ``_counters``.
- ``wall_s``: ``generate()`` returns every sequence at once, so each sequence's is the call's wall time.
- ``precision``: what the pipeline computes in, as OpenVINO says: ``extra.properties``' ``INFERENCE_PRECISION_HINT``,
  else the device's default (bf16 on a CPU with AVX512-BF16 or AMX, f32 on one without), whatever the IR's weights
  are; the gate judges near-ties at that precision's scale (docs/checks.md, "Another stack's precision").
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import openvino as ov
import openvino_genai as ov_genai

_PIPELINES: dict[tuple, ov_genai.ContinuousBatchingPipeline] = {}


def _pipeline(extra: dict, speculative: bool) -> ov_genai.ContinuousBatchingPipeline:
    target, draft = str(extra["target_ir"]), str(extra["draft_ir"]) if speculative else None
    device = str(extra.get("device", "CPU"))
    properties = dict(extra.get("properties") or {})
    scheduler = dict(extra.get("scheduler") or {})
    key = (target, draft, device, json.dumps(properties, sort_keys=True), json.dumps(scheduler, sort_keys=True))
    if key not in _PIPELINES:  # load (and compile) once per worker, not once per batch
        props = dict(properties)
        if draft is not None:
            props["draft_model"] = ov_genai.draft_model(draft, device)
        _PIPELINES[key] = ov_genai.ContinuousBatchingPipeline(target, _scheduler(scheduler), device, props)
    return _PIPELINES[key]


def _scheduler(fields: dict) -> ov_genai.SchedulerConfig:
    """The library's default ``SchedulerConfig`` with ``fields`` set on it, each by its own name."""
    cfg = ov_genai.SchedulerConfig()
    for name, value in fields.items():
        if name.startswith("_") or not hasattr(cfg, name):
            raise ValueError(f"extra.scheduler.{name}: OpenVINO GenAI's SchedulerConfig has no such field "
                             "(e.g. max_num_batched_tokens, dynamic_split_fuse, cache_size)")
        setattr(cfg, name, value)
    return cfg


_PRECISIONS: dict[tuple, str] = {}


def _precision(extra: dict) -> str:
    """The precision the pipeline's matrix work runs in: the properties' ``INFERENCE_PRECISION_HINT``, else the
    device's default hint (``bf16``, ``f32``, ``f16``)."""
    device = str(extra.get("device", "CPU"))
    hint = (extra.get("properties") or {}).get("INFERENCE_PRECISION_HINT")
    key = (device, str(hint))
    if key not in _PRECISIONS:
        _PRECISIONS[key] = str(hint) if hint else ov.Core().get_property(device, "INFERENCE_PRECISION_HINT").to_string()
    return _PRECISIONS[key]


def _config(settings, max_new: int, seed: int, k: int) -> ov_genai.GenerationConfig:
    cfg = ov_genai.GenerationConfig()
    cfg.max_new_tokens = max_new
    eos = [int(t) for t in settings.eos_token_ids]
    if eos:
        cfg.eos_token_id = eos[0]
        cfg.stop_token_ids = set(eos)  # must contain eos_token_id; the IR's own EOS is then not added
    else:
        cfg.ignore_eos = True  # stop_at_eos: false
    if settings.greedy:
        cfg.do_sample = False
    else:
        cfg.do_sample = True
        cfg.temperature = float(settings.temperature)
        cfg.top_p = 1.0
        cfg.min_p = 0.0
        cfg.rng_seed = int(seed)
    if k > 0:
        cfg.num_assistant_tokens = k
    return cfg


def _counters(results, n: int, k: int) -> dict | None:
    """The library's speculation figures as a sequence's counters: only for a batch of one, where the batch-wide
    figures are that sequence's.  ``None`` when the library gives none (or gives them for several sequences)."""
    if k == 0 or len(results) != 1:
        return None
    m = results[0].extended_perf_metrics
    if m is None or not hasattr(m, "get_num_draft_tokens"):
        return None
    drafted, accepted = int(m.get_num_draft_tokens()), int(m.get_num_accepted_tokens())
    if drafted <= 0:
        return None
    steps = len(m.main_model_metrics.raw_metrics.m_durations)  # main-model steps that produced tokens
    return {"num_draft_tokens": drafted, "num_accepted_tokens": min(accepted, drafted, n),
            "num_target_forwards": steps, "num_emitted_tokens": n}


def generate(prompt_ids: list[list[int]], batch_size: int, settings) -> list[dict]:
    """The plug-in contract: one batch of prompts in, one result per prompt out, in order."""
    k = int(settings.num_draft_tokens)
    pipe = _pipeline(settings.extra, speculative=k > 0)
    inputs = [ov.Tensor(np.asarray([p], dtype=np.int64)) for p in prompt_ids]
    configs = [_config(settings, m, s, k) for m, s in zip(settings.max_new_tokens, settings.seeds)]
    start = time.perf_counter()
    results = pipe.generate(inputs, configs)
    wall = time.perf_counter() - start
    eos = set(int(t) for t in settings.eos_token_ids)
    precision = _precision(settings.extra)
    out = []
    for r in results:
        ids = [int(t) for t in r.m_generation_ids[0]]
        seq = {"token_ids": ids, "wall_s": wall,
               "stop_reason": "eos" if ids and ids[-1] in eos else "max_tokens", "precision": precision}
        counters = _counters(results, len(ids), k)
        if counters is not None:
            seq["counters"] = counters
        out.append(seq)
    return out


def generate_plain(prompt_ids: list[list[int]], batch_size: int, settings) -> list[dict]:
    """The same pipeline without the draft, whatever k the gate asks for: to judge OpenVINO's plain decoding
    itself against the gate's reference (an engine of its own in the config), apart from speculation."""
    return generate(prompt_ids, batch_size, dataclasses.replace(settings, num_draft_tokens=0))
