"""llama.cpp's ``llama-server`` (b7000; its README and ``--help``, checked 2026-12-06).

Speculation: ``--spec-draft-n-max``, or the older ``--draft-max`` / ``--draft-n`` / ``--draft`` (k); the draft from
``-md`` / ``--model-draft``.  On the wire: its native ``/completions`` route streams every token's id (its OpenAI
route drops the ids of tokens accepted from the draft), top-k with ``n_probs`` (alias ``logprobs``), per-request
draft counters in ``timings``, and ``/metrics`` with ``--metrics``.  The engine under test asks for no
probabilities: they cost a softmax.  Its default sampler chain truncates before the temperature, which the gate
does not model; it gives probabilities only for the tokens it generates, so its reference cannot score a
continuation.
"""

from __future__ import annotations

from gate.stacks.base import Chunk, Flag, Stack, register


class LlamaCpp(Stack):
    name = "llamacpp"
    title = "llama.cpp"
    shown = "llama-server"
    programs = ("llama-server", "server")
    modules = ("ghcr.io/ggml-org/llama.cpp:server",)
    settings = {
        "model": (Flag(("-m", "--model")), Flag(("-hf", "--hf-repo", "-hfr")), Flag(("-mu", "--model-url"))),
        "tensor_parallel": (Flag(("-sm", "--split-mode"), "layer"), Flag(("-ts", "--tensor-split"))),
        "kv_cache_dtype": (Flag(("-ctk", "--cache-type-k"), "f16"), Flag(("-ctv", "--cache-type-v"), "f16")),
        "max_model_len": (Flag(("-c", "--ctx-size")),),
        "batch_budget": (Flag(("-b", "--batch-size"), "2048"),),
        "max_seqs": (Flag(("-np", "--parallel")),),
        "chunked_prefill": (Flag(("-ub", "--ubatch-size"), "512"),),
        "prefix_caching": (Flag(("--cache-reuse",), "0"),),
        "attention": (Flag(("-fa", "--flash-attn")),),
        "gpu_layers": (Flag(("-ngl", "--gpu-layers", "--n-gpu-layers")),),
    }
    k = ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft")
    draft = ("-md", "--model-draft")
    known = ("--spec-type", "--spec-draft-n-min", "--draft-min", "--draft-p-min", "--spec-draft-p-min", "-td",
             "--threads-draft", "-tbd", "--threads-batch-draft", "-ngld", "--gpu-layers-draft", "-devd",
             "--device-draft", "-ctkd", "-ctvd", "--cache-type-k-draft", "--cache-type-v-draft")
    about = ("--spec-", "--draft", "-md", "--model-draft", "-cd", "--ctx-size-draft")
    prefill = (("-ub", "--ubatch-size"), 512)
    files = ("--chat-template-file", "--grammar-file", "--lora")

    counters = {"num_drafts": "llamacpp:spec_decode_num_drafts",
                "num_draft_tokens": "llamacpp:spec_decode_num_draft_tokens",
                "num_accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens"}
    per_pos = "llamacpp:spec_decode_num_accepted_tokens_per_pos"
    route = "/completions"
    no_truncation = "llama.cpp's default sampler chain applies top_k, top_p and min_p before the temperature"
    no_scoring = ("preset llamacpp: llama-server gives probabilities only for the tokens it generates (n_probs), "
                  "never for a given continuation")

    def parse(self, event: dict) -> Chunk:
        """One event per token with ``content`` and ``tokens`` (its id), top-k in
        ``completion_probabilities[].top_logprobs`` ({id, logprob}) when ``n_probs`` > 0, and a last event with
        ``stop: true``, ``stop_type`` and ``timings`` (``draft_n``, ``draft_n_accepted``)."""
        ids = event["tokens"]
        if not (isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids)):
            raise TypeError("tokens is not a list of ids")
        probs = event.get("completion_probabilities")
        tops = None
        if isinstance(probs, list) and len(probs) == len(ids):
            tops = [{t["id"]: float(t["logprob"]) for t in (e.get("top_logprobs") or [])
                     if isinstance(t.get("id"), int) and isinstance(t.get("logprob"), (int, float))} for e in probs]
        timings = event.get("timings") or {}
        counters = None
        if isinstance(timings.get("draft_n"), int):
            counters = {"num_draft_tokens": timings["draft_n"],
                        "num_accepted_tokens": timings.get("draft_n_accepted", 0)}
        done = event.get("stop") is True
        finish = ("stop" if event.get("stop_type") in ("eos", "word") else "length") if done else None
        generated = event.get("tokens_predicted")
        return Chunk(ids, tops, event.get("content") or "", counters, finish=finish, done=done,
                     generated=generated if isinstance(generated, int) else None)


STACK = register(LlamaCpp())
__all__ = ["STACK", "LlamaCpp"]
