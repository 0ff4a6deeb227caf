"""A worked example of a plug-in engine: how a team gates its own speculative decoder.

Point the config at it (with ``examples/`` on ``PYTHONPATH``)::

    engines:
      - type: plugin
        name: inhouse
        callable: "inhouse_engine:generate"

The decoder below is deliberately simple — one sequence at a time, no KV cache —
so that it is obviously correct and short.  A real in-house engine would be
batched; the contract is the same.  See ``docs/engines.md``.
"""

from __future__ import annotations

import time

import torch
from transformers import AutoModelForCausalLM

from gate.engines.base import SpecCounters

_MODELS: dict[tuple[str, str, str], torch.nn.Module] = {}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": torch.float32}


def _model(path: str, dtype: str, device: str) -> torch.nn.Module:
    key = (path, dtype, device)
    if key not in _MODELS:  # load once per process, not once per batch
        _MODELS[key] = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype]).to(device).eval()
    return _MODELS[key]


def _probs(model, ids: list[int], device: str, temperature: float) -> torch.Tensor:
    logits = model(input_ids=torch.tensor([ids], device=device)).logits[0].float()
    return logits if temperature == 0 else torch.softmax(logits / temperature, -1)


@torch.inference_mode()
def _one(target, draft, prompt: list[int], max_new: int, seed: int, settings) -> dict:
    gen = torch.Generator().manual_seed(seed)
    greedy, T, k = settings.greedy, settings.temperature, settings.num_draft_tokens
    out: list[int] = []
    counters = SpecCounters()  # vLLM's counters, updated once per verification step
    start = time.perf_counter()
    first = None
    while len(out) < max_new:
        ctx = prompt + out
        k_now = min(k, max_new - len(out) - 1)
        drafts, qs = [], []
        for _ in range(k_now):  # draft k tokens
            q = _probs(draft, ctx + drafts, settings.device, T)[-1]
            d = int(q.argmax()) if greedy else int(torch.multinomial(q.cpu(), 1, generator=gen))
            drafts.append(d)
            qs.append(q)
        p = _probs(target, ctx + drafts, settings.device, T)[len(ctx) - 1:]  # verify all at once
        n = 0
        for j, d in enumerate(drafts):  # accept the longest valid prefix
            if greedy:
                ok = int(p[j].argmax()) == d
            else:
                ok = float(torch.rand(1, generator=gen)) * float(qs[j][d]) < float(p[j][d])
            if not ok:
                break
            n += 1
        if greedy:
            nxt = int(p[n].argmax())
        else:
            dist = p[n] if n == len(drafts) else (p[n] - qs[n]).clamp(min=0)
            dist = dist / dist.sum() if dist.sum() > 0 else p[n]
            nxt = int(torch.multinomial(dist.cpu(), 1, generator=gen))
        block = [*drafts[:n], nxt][: max_new - len(out)]
        eos = next((i for i, t in enumerate(block) if t in settings.eos_token_ids), None)
        if eos is not None:
            block = block[: eos + 1]
        out += block
        first = first or time.perf_counter() - start
        counters.observe_step(drafted=k_now, accepted=n, emitted=len(block), draft_forwards=k_now)
        if eos is not None:
            break
    wall = time.perf_counter() - start
    return {"token_ids": out, "wall_s": wall, "ttft_s": first, "counters": counters.to_dict(),
            "stop_reason": "eos" if out and out[-1] in settings.eos_token_ids else "max_tokens"}


def generate(prompt_ids: list[list[int]], batch_size: int, settings) -> list[dict]:
    """The plug-in contract: one batch of prompts in, one result per prompt out, in order."""
    target = _model(settings.target, settings.dtype, settings.device)
    draft = _model(settings.draft, settings.dtype, settings.device)
    return [_one(target, draft, list(p), m, s, settings)
            for p, m, s in zip(prompt_ids, settings.max_new_tokens, settings.seeds)]
