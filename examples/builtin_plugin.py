"""The gate's own engines behind the plug-in contract: the control that the plug-in path measures what the built-in
path does.

``generate`` runs the gate's ragged speculative engine (``gate/engines/speculative.py``) in the plug-in's worker;
with ``settings.num_draft_tokens == 0`` (``engines[].reference: {num_draft_tokens: 0}``) it runs the gate's plain
reference engine instead, so the plug-in is timed against its own plain decoding exactly as the built-in engine is
timed against the gate's reference.  docs/performance.md compares the two speedups on the demo pair.

    engines:
      - {type: speculative}
      - {type: plugin, name: builtin-plugin, callable: "builtin_plugin:generate", reference: {num_draft_tokens: 0},
         pythonpath: [examples]}
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from gate.engines.base import GenerationSettings, Request
from gate.engines.reference import ReferenceEngine
from gate.engines.speculative import SpeculativeEngine

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": torch.float32}
_ENGINES: dict[tuple, object] = {}


def _engine(settings, plain: bool):
    key = (settings.target, settings.draft, settings.dtype, settings.draft_dtype, settings.device, plain)
    if key not in _ENGINES:  # load once per worker, not once per batch
        device = torch.device(settings.device)
        target = AutoModelForCausalLM.from_pretrained(settings.target, dtype=_DTYPES[settings.dtype]).to(device).eval()
        if plain:
            _ENGINES[key] = ReferenceEngine(target, device)
        else:
            draft = AutoModelForCausalLM.from_pretrained(settings.draft, dtype=_DTYPES[settings.draft_dtype])
            _ENGINES[key] = SpeculativeEngine(target, draft.to(device).eval(), device)
    return _ENGINES[key]


def generate(prompt_ids: list[list[int]], batch_size: int, settings) -> list[dict]:
    plain = settings.num_draft_tokens == 0
    engine = _engine(settings, plain)
    requests = [Request(tuple(p), m, s) for p, m, s in zip(prompt_ids, settings.max_new_tokens, settings.seeds)]
    result = engine.generate(requests, GenerationSettings(settings.temperature, max(settings.num_draft_tokens, 1),
                                                          tuple(settings.eos_token_ids)))
    return [{"token_ids": s.token_ids, "wall_s": s.wall_s, "ttft_s": s.ttft_s, "stop_reason": s.stop_reason,
             **({"counters": s.counters.to_dict()} if s.counters is not None and not plain else {})}
            for s in result.sequences]
