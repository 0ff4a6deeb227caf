"""What a minimal case's ``replay.py`` calls to rebuild an in-process engine alone.

An engine type whose engine runs in the gate's process names one of its own functions in case.json (``"replay":
"function"``, :meth:`gate.engines.registry.EngineType.case_engine`); replay.py imports it and calls it once per
batch as ``fn(engine, prompts, seeds, max_new_tokens, settings, variant)`` (case.json's ``engine`` and ``settings``;
``variant``: ``--engine``, another build of the same type, such as the correct engine beside a self-test mutant).
The helpers here load the case's models once per process and run one batch, so such a function is a few lines.
"""

from __future__ import annotations

from collections.abc import Callable

_BUILT: dict = {}
DTYPES = ("float32", "bfloat16", "float16")


def local_models(loaded, pair) -> dict:
    """case.json's description of the loaded pair: where its models are and how they load."""
    models = loaded.config.models if loaded is not None else None
    return {"target": pair.target.location, "draft": pair.draft.location if pair.draft is not None else None,
            "dtype": models.target.dtype if models else "float32",
            "draft_dtype": models.draft.dtype if models and models.draft else "float32", "device": str(pair.device)}


def built(engine: dict, key: str, make: Callable) -> object:
    """The engine ``make(target, draft, device)`` builds on the models case.json's ``engine`` names (the draft None
    where it names none), built once per process and ``key``."""
    if key not in _BUILT:
        import torch
        from transformers import AutoModelForCausalLM

        def load(path: str, dtype: str):
            dt = getattr(torch, dtype) if dtype in DTYPES else torch.float32  # "auto": the gate loads float32 on CPU
            return AutoModelForCausalLM.from_pretrained(path, dtype=dt).to(device).eval()

        device = torch.device(engine.get("device", "cpu"))
        target = load(engine["target"], engine["dtype"])
        draft = load(engine["draft"], engine.get("draft_dtype", engine["dtype"])) if engine.get("draft") else None
        _BUILT[key] = make(target, draft, device)
    return _BUILT[key]


def run(built_engine, prompts: list, seeds: list, max_new_tokens: int, settings: dict) -> list[list[int]]:
    """One batch through an engine of the gate's contract: each row's token ids."""
    from gate.engines.base import GenerationSettings, Request

    requests = [Request(tuple(p), max_new_tokens, seed) for p, seed in zip(prompts, seeds)]
    t = {k: v for k, v in (settings.get("truncation") or {}).items() if k in ("top_k", "top_p", "min_p", "order")}
    gen = GenerationSettings(settings["temperature"], settings["num_draft_tokens"], tuple(settings["eos_token_ids"]),
                             **t)  # a sampling case's truncation, as the run sampled
    return [list(r.token_ids) for r in built_engine.generate(requests, gen).sequences]


__all__ = ["built", "local_models", "run"]
