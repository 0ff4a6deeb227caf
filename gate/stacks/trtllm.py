"""NVIDIA TensorRT-LLM's ``trtllm-serve MODEL`` (1.x, PyTorch backend; from its ``commands/serve.py``,
``serve/openai_protocol.py`` and ``llmapi/llm_args.py`` on main, 1.2.0rc2, and its docs; read 2026-12-06).

**The launch line.**  ``--tp_size`` / ``--tensor_parallel_size``, ``--pp_size`` / ``--pipeline_parallel_size``,
``--max_seq_len``, ``--max_num_tokens`` (a step's token budget), ``--max_batch_size``,
``--kv_cache_free_gpu_memory_fraction`` / ``--free_gpu_memory_fraction`` (0.9 of the memory left after the
weights), ``--enable_chunked_prefill``, and an options file, ``--config`` or its alias ``--extra_llm_api_options``
(YAML of the LLM API's arguments), **which wins over the command line** (the command line wins in vLLM).
Speculation is only in that file: ``speculative_config`` with ``decoding_type`` (the method), ``max_draft_len`` (k),
``speculative_model`` / ``speculative_model_dir`` (the draft, or a head method's head) and ``max_concurrency``
(speculation off at batch sizes above it: read as off from ``max_concurrency + 1`` running requests); any other key
is named as unread.  The settings the file alone holds are read from it under the names this table gives them:
``dtype``, ``kv_cache_config.dtype`` (``kv_cache_dtype``), ``kv_cache_config.enable_block_reuse`` (the prefix
cache, on by default), ``cuda_graph_config`` (graphs), ``attn_backend``, ``quant_config.quant_algo``.

Its ``NGram`` proposer keeps a pool of n-grams across requests (``is_public_pool``), which is not the prompt lookup
the gate's n-gram proposer recomputes: it reads as method ``other`` (gate it with ``speculation.method: other``, and
the draft-side tests that would model another proposer do not run).

**The wire.**  ``/v1/completions`` takes the prompt as token ids and gives the generated ids in
``choices[0].token_ids`` only with ``detokenize: false`` (then ``text`` is empty); its logprobs are keyed by the
token's text, so no top-k keyed by id, and there is no ``prompt_logprobs``: its reference cannot score a given
continuation.  Its ``/metrics`` is JSON iteration statistics, not Prometheus: no speculation counters are scraped.
Its chat route gives no token ids.  Its sampler applies the temperature, then top-k, then top-p; where min-p sits is
not documented, so truncated sampling is not modelled.
"""

from __future__ import annotations

from pathlib import Path

from gate.stacks.base import Chunk, Flag, Found, Read, Stack, flags_of, parse_openai, register, whole, yaml_flags

# speculative_config keys the gate reads; any other is named as unread
SPEC_KEYS_READ = ("decoding_type", "max_draft_len", "speculative_model", "speculative_model_dir", "max_concurrency")
# options-file settings nested in a section, flattened to the names this stack's table reads them under
_NESTED = {("kv_cache_config", "free_gpu_memory_fraction"): "kv-cache-free-gpu-memory-fraction",
           ("kv_cache_config", "enable_block_reuse"): "enable-block-reuse",
           ("kv_cache_config", "dtype"): "kv-cache-dtype",
           ("quant_config", "quant_algo"): "quant-algo"}


class TensorRTLLM(Stack):
    name = "trtllm"
    title = "TensorRT-LLM"
    shown = "trtllm-serve MODEL"
    programs = ("trtllm-serve",)
    modules = ("tensorrt_llm.commands.serve", "nvcr.io/nvidia/tensorrt-llm")
    settings = {
        "model": (Flag(("--model",)),),
        "tensor_parallel": (Flag(("--tp_size", "--tensor_parallel_size"), "1"),),
        "pipeline_parallel": (Flag(("--pp_size", "--pipeline_parallel_size"), "1"),),
        "dtype": (Flag(("--dtype",), "auto"),),
        "quantization": (Flag(("--quant_algo",)),),
        "kv_cache_dtype": (Flag(("--kv_cache_dtype",), "auto"),),
        "max_model_len": (Flag(("--max_seq_len",)),),
        "batch_budget": (Flag(("--max_num_tokens",)),),
        "max_seqs": (Flag(("--max_batch_size",)),),
        "chunked_prefill": (Flag(("--enable_chunked_prefill",), "false", switch=True),),
        "prefix_caching": (Flag(("--enable_block_reuse",), "true"),),
        "eager": (Flag(("--cuda_graph_config",)),),
        "attention": (Flag(("--attn_backend",)),),
        "memory": (Flag(("--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction"), "0.9"),),
    }
    known = ("--config", "--extra_llm_api_options")
    prefill = (("--max_num_tokens",), None)
    config_flags = ("--config", "--extra_llm_api_options")
    file_wins = True
    files = ("--config", "--extra_llm_api_options", "--tokenizer", "--chat_template")

    engine_request = {"detokenize": False}
    reference_request = {"detokenize": False}

    # speculative_config.decoding_type values, compared without case or underscores
    methods = {"eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "medusa": "medusa", "drafttarget": "draft_model",
               "ngram": "other", "lookahead": "other", "userprovided": "other", "auto": "other"}
    no_truncation = ("TensorRT-LLM applies top_k then top_p after the temperature, and where min_p sits is not "
                     "documented")
    no_scoring = ("preset trtllm: its completions route has no prompt_logprobs, and its logprobs are keyed by text, "
                  "not token ids")

    def method_of(self, name: str) -> str:
        return self.methods.get(name.replace("_", "").replace("-", "").lower(), "other")

    def parse(self, event: dict) -> Chunk:
        """``choices[0].token_ids`` (``detokenize: false``); its top-k logprobs are keyed by text, not usable."""
        c = parse_openai(event)
        return Chunk(c.ids, None, c.text, finish=c.finish)

    def positional_model(self, argv: list[str]) -> tuple[str, str] | None:
        """``trtllm-serve MODEL`` or ``trtllm-serve serve MODEL``."""
        at = next((i for i, w in enumerate(argv) if Path(w).name in self.programs), None)
        if at is None:
            return None
        rest = argv[at + 1:]
        if rest[:1] == ["serve"]:
            rest = rest[1:]
        return (rest[0], "trtllm-serve MODEL") if rest and not rest[0].startswith("-") else None

    def config_file(self, flags: dict[str, str], read: Read) -> dict:
        """The options file's keys (underscores as dashes), its nested settings flattened (``_NESTED``)."""
        at = self.config_path(flags)
        keys = (yaml_flags(at[1], read) or {}) if at else {}
        for (section, key), name in _NESTED.items():
            inner = keys.get(section.replace("_", "-"))
            if isinstance(inner, dict) and key in inner:
                keys[name] = inner[key]
        return keys

    def speculation(self, argv: list[str], read: Read) -> Found:
        found = super().speculation(argv, read)
        flags = flags_of(argv)
        at = self.config_path(flags)
        spec = self.config_file(flags, read).get("speculative-config")
        if at is None or not isinstance(spec, dict):
            return found
        where = f"{at[0]} {at[1]} speculative_config"
        found.spec_flag = where
        found.unread_keys = tuple(str(k) for k in spec if k not in SPEC_KEYS_READ)
        if "max_draft_len" in spec:
            found.k, found.k_flag = whole(f"{where}.max_draft_len", spec["max_draft_len"]), f"{where}.max_draft_len"
        if isinstance(spec.get("decoding_type"), str):
            found.method, found.method_flag = self.method_of(spec["decoding_type"]), f"{where}.decoding_type"
        for key in ("speculative_model", "speculative_model_dir"):
            if isinstance(spec.get(key), str):
                found.draft, found.draft_flag = spec[key], f"{where}.{key}"
                break
        if spec.get("max_concurrency") is not None:
            found.disable_at = whole(f"{where}.max_concurrency", spec["max_concurrency"]) + 1
            found.disable_flag = f"{where}.max_concurrency {spec['max_concurrency']} + 1 ="
        return found


STACK = register(TensorRTLLM())
__all__ = ["SPEC_KEYS_READ", "STACK", "TensorRTLLM"]
