"""vLLM (0.32; its docs and ``vllm serve --help``, checked 2026-12-06): ``vllm serve MODEL`` or
``python -m vllm.entrypoints.openai.api_server``.

Speculation is read from ``--speculative-config`` / ``--speculative_config`` / ``-sc`` JSON, keys
``num_speculative_tokens``, ``method``, ``model`` (the draft, or for a head method the head), ``prompt_lookup_min`` /
``_max`` and ``disable_by_batch_size`` (any other key is named as unread), each also as a dotted flag of its own
(``--speculative-config.num_speculative_tokens 6``, which wins over the JSON's key, as vLLM's parser merges them);
from ``--config FILE`` (YAML, its keys the flags' names: the command line wins over the file); and from the older
``--num-speculative-tokens``, ``--speculative-model`` and ``--speculative-disable-by-batch-size``.

On the wire: token ids as ``"token_id:<n>"`` (``return_tokens_as_token_ids``), ``logprobs: 0`` on the engine under
test (the sampled token only; vLLM before about 0.14 turned speculation off for requests that ask for logprobs),
``prompt_logprobs`` to score a continuation, ``return_token_ids`` on its chat route, and the ``spec_decode_*``
Prometheus counters.  Its V1 sampler applies ``min_p`` as a logits processor before its top-k/top-p step (top-p over
what top-k kept, renormalised).
"""

from __future__ import annotations

import json

from gate.stacks.base import Flag, Found, Read, Stack, flags_of, json_object, register, whole

_JSON = ("--speculative-config", "--speculative_config", "-sc")
_DOTTED = ("--speculative-config.", "--speculative_config.")
# The keys of its speculative config the gate reads; any other is named by the line's notes
SPEC_KEYS_READ = ("num_speculative_tokens", "method", "model", "prompt_lookup_min", "prompt_lookup_max",
                  "disable_by_batch_size")


def _value(text: str):
    """A dotted flag's value as vLLM's parser reads it: JSON where it parses, else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class VLLM(Stack):
    name = "vllm"
    title = "vLLM"
    shown = "vllm serve MODEL, or python -m vllm.entrypoints.openai.api_server"
    programs = ("vllm",)
    modules = ("vllm.entrypoints", "vllm/vllm-openai")
    settings = {
        "model": (Flag(("--model",)),),
        "tensor_parallel": (Flag(("--tensor-parallel-size", "-tp", "--tensor_parallel_size"), "1"),),
        "pipeline_parallel": (Flag(("--pipeline-parallel-size", "-pp", "--pipeline_parallel_size"), "1"),),
        "dtype": (Flag(("--dtype",), "auto"),),
        "quantization": (Flag(("--quantization", "-q")),),
        "kv_cache_dtype": (Flag(("--kv-cache-dtype", "--kv_cache_dtype"), "auto"),),
        "max_model_len": (Flag(("--max-model-len", "--max_model_len")),),
        "batch_budget": (Flag(("--max-num-batched-tokens", "--max_num_batched_tokens")),),
        "max_seqs": (Flag(("--max-num-seqs", "--max_num_seqs")),),
        "chunked_prefill": (Flag(("--enable-chunked-prefill",), switch=True, off=("--no-enable-chunked-prefill",)),),
        "prefix_caching": (Flag(("--enable-prefix-caching",), switch=True, off=("--no-enable-prefix-caching",)),),
        "eager": (Flag(("--enforce-eager", "--enforce_eager"), "false", switch=True, off=("--no-enforce-eager",)),
                  Flag(("--compilation-config", "-O"))),
        "attention": (Flag(("--attention-backend",)),),
        "memory": (Flag(("--gpu-memory-utilization", "--gpu_memory_utilization"), "0.9"),),
    }
    k = ("--num-speculative-tokens", "--num_speculative_tokens")
    draft = ("--speculative-model", "--speculative_model")
    known = ("--config",)
    about = ("--speculative", "--num-speculative", "--num_speculative", "-sc")
    disable_by_batch_size = ("--speculative-disable-by-batch-size", "--speculative_disable_by_batch_size")
    positional_model_after = "serve"
    memory = ("--gpu-memory-utilization", 0.9)
    prefill = (("--max-num-batched-tokens", "--max_num_batched_tokens"), None)
    prefix_cache_off = "--no-enable-prefix-caching"
    config_flags = ("--config",)
    files = ("--config", "--chat-template", "--chat_template", "--tokenizer", "--generation-config",
             "--generation_config")

    engine_request = {"return_tokens_as_token_ids": True, "logprobs": 0}
    reference_request = {"return_tokens_as_token_ids": True}
    counters = {"num_drafts": "vllm:spec_decode_num_drafts", "num_draft_tokens": "vllm:spec_decode_num_draft_tokens",
                "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens"}
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos"
    min_logprobs = 0

    # its speculative_config "method" values (vllm/config/speculative.py); every MTP variant is MTP here
    methods = {"draft_model": "draft_model", "eagle": "eagle", "eagle3": "eagle3", "ngram": "ngram",
               "suffix": "suffix", "medusa": "medusa", "mlp_speculator": "other", "mtp": "mtp"}
    truncation = ("min_p", "top_k", "top_p")
    chat = True

    def method_of(self, name: str) -> str:
        """``deepseek_mtp``, ``qwen3_next_mtp``, … are ``mtp``."""
        return self.methods.get(name) or ("mtp" if name.endswith("_mtp") else "other")

    def knows(self, name: str) -> bool:
        return super().knows(name) or name in _JSON or name.startswith(_DOTTED)

    def speculation(self, argv: list[str], read: Read) -> Found:
        found = super().speculation(argv, read)
        flags = flags_of(argv)
        file = self.config_file(flags, read)
        at = f"--config {flags.get('--config')}"
        if found.k is None:
            for f in self.k:
                if f[2:] in file:
                    found.k, found.k_flag = whole(f"--config {f[2:]}", file[f[2:]]), f"{at} {f[2:]}"
                    break
        if found.draft is None:
            for f in self.draft:
                if isinstance(file.get(f[2:]), str):
                    found.draft, found.draft_flag = file[f[2:]], f"{at} {f[2:]}"
                    break
        for f in self.disable_by_batch_size:
            key = f[2:].replace("_", "-")
            if found.disable_at is None and key in file:
                found.disable_at, found.disable_flag = whole(f"--config {f[2:]}", file[key]), f"{at} {f[2:]}"
        spec = self._speculative_config(flags, argv, file)
        if spec is None:
            return found
        f, keys = spec
        found.spec_flag, found.unread_keys = f, tuple(key for key in keys if key not in SPEC_KEYS_READ)
        if keys.get("disable_by_batch_size") is not None:
            found.disable_at = whole(f"{f} disable_by_batch_size", keys["disable_by_batch_size"])
            found.disable_flag = f"{f} disable_by_batch_size"
        if "num_speculative_tokens" in keys:
            found.k = whole(f"{f} num_speculative_tokens", keys["num_speculative_tokens"])
            found.k_flag = f"{f} num_speculative_tokens"
        if isinstance(keys.get("method"), str):
            found.method, found.method_flag = self.method_of(keys["method"]), f"{f} method"
        if isinstance(keys.get("model"), str):  # without a method vLLM infers it from the model
            found.draft, found.draft_flag = keys["model"], f"{f} model"
        found.lookup = tuple(whole(f"{f} {key}", keys[key]) if key in keys else None
                             for key in ("prompt_lookup_min", "prompt_lookup_max"))
        return found

    @staticmethod
    def _speculative_config(flags: dict[str, str], argv: list[str], file: dict) -> tuple[str, dict] | None:
        """The speculative config as vLLM assembles it, (where it came from, keys), or None: the file's, then the
        command line's JSON over it, then its dotted keys over both."""
        where, spec = None, {}
        if "speculative-config" in file:
            where, spec = f"--config {flags['--config']} speculative-config", \
                dict(json_object("--config speculative-config", file["speculative-config"]))
        for f in _JSON:
            if f in flags:
                where, spec = f, json_object(f, flags[f])
                break
        dotted = {}
        for i, arg in enumerate(argv):
            for prefix in _DOTTED:
                if arg.startswith(prefix):
                    key, eq, text = arg[len(prefix):].partition("=")
                    if not eq and i + 1 < len(argv):
                        text = argv[i + 1]
                    dotted[key.replace("-", "_")] = _value(text)
        if dotted:
            spec = {**spec, **dotted}
            where = where + " and its dotted flags" if where else "--speculative-config.*"
        return (where, spec) if where else None


STACK = register(VLLM())
__all__ = ["SPEC_KEYS_READ", "STACK", "VLLM"]
