"""Hugging Face Text Generation Inference (3.3; its launcher's ``--help``, checked 2026-12-06):
``text-generation-launcher``.

Speculation: ``--speculate`` (k; Medusa heads come with the model, else n-gram lookup: the method is not on the
line).  On the wire: its ``/v1/completions`` takes no token ids and returns no logprobs: text in, text out, which
the gate compares as text and says so.
"""

from __future__ import annotations

from gate.stacks.base import Chunk, Flag, Stack, parse_text, register


class TGI(Stack):
    name = "tgi"
    title = "TGI"
    shown = "text-generation-launcher"
    programs = ("text-generation-launcher",)
    modules = ("ghcr.io/huggingface/text-generation-inference",)
    settings = {
        "model": (Flag(("--model-id",)),),
        "tensor_parallel": (Flag(("--num-shard",)), Flag(("--sharded",))),
        "dtype": (Flag(("--dtype",)),),
        "quantization": (Flag(("--quantize",)),),
        "kv_cache_dtype": (Flag(("--kv-cache-dtype",)),),
        "max_model_len": (Flag(("--max-total-tokens",)), Flag(("--max-input-tokens", "--max-input-length"))),
        "batch_budget": (Flag(("--max-batch-prefill-tokens",)), Flag(("--max-batch-total-tokens",))),
        "max_seqs": (Flag(("--max-batch-size",)), Flag(("--max-concurrent-requests",), "128")),
        "eager": (Flag(("--cuda-graphs",)),),
        "memory": (Flag(("--cuda-memory-fraction",), "1.0"),),
    }
    k = ("--speculate",)
    about = ("--speculate",)
    files = ("--tokenizer-config-path",)

    prompt_as_text = True
    gives_ids = False
    no_scoring = "preset tgi: its OpenAI route returns text, not token ids to score"

    def parse(self, event: dict) -> Chunk:
        return parse_text(event)


STACK = register(TGI())
__all__ = ["STACK", "TGI"]
