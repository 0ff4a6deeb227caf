"""SGLang (0.5; its docs and ``--help``, checked 2026-12-06): ``python -m sglang.launch_server``.

Speculation: ``--speculative-num-steps`` (draft steps per verification: k), or, without it and with
``--speculative-eagle-topk`` absent or 1, ``--speculative-num-draft-tokens`` minus 1 (SGLang verifies the k drafts
plus the bonus position); the method from ``--speculative-algorithm``; the draft (an EAGLE algorithm's head) from
``--speculative-draft-model-path``.  On the wire: ids with ``return_token_ids``; counters from
``spec_verify_calls_total`` and ``generation_tokens_total`` (launch with ``--enable-metrics``); no id-keyed logprobs
on its OpenAI route, so its reference cannot score a continuation.
"""

from __future__ import annotations

from gate.stacks.base import Chunk, Flag, Found, Read, Stack, flags_of, parse_openai, register, whole


class SGLang(Stack):
    name = "sglang"
    title = "SGLang"
    shown = "python -m sglang.launch_server"
    programs = ("sglang",)
    modules = ("sglang.", "lmsysorg/sglang")
    settings = {
        "model": (Flag(("--model-path", "--model")),),
        "tensor_parallel": (Flag(("--tp-size", "--tensor-parallel-size", "--tp"), "1"),),
        "pipeline_parallel": (Flag(("--pp-size", "--pipeline-parallel-size", "--pp"), "1"),),
        "dtype": (Flag(("--dtype",), "auto"),),
        "quantization": (Flag(("--quantization",)),),
        "kv_cache_dtype": (Flag(("--kv-cache-dtype",), "auto"),),
        "max_model_len": (Flag(("--context-length",)),),
        "batch_budget": (Flag(("--max-prefill-tokens",), "16384"), Flag(("--max-total-tokens",))),
        "max_seqs": (Flag(("--max-running-requests",)),),
        "chunked_prefill": (Flag(("--chunked-prefill-size",)),),
        "prefix_caching": (Flag(("--disable-radix-cache",), "false", switch=True),),
        "eager": (Flag(("--disable-cuda-graph",), "false", switch=True), Flag(("--cuda-graph-max-bs",))),
        "attention": (Flag(("--attention-backend",)),),
        "memory": (Flag(("--mem-fraction-static",)),),
    }
    k = ("--speculative-num-steps",)
    draft = ("--speculative-draft-model-path", "--speculative-draft-model")
    known = ("--speculative-algorithm", "--speculative-num-draft-tokens", "--speculative-eagle-topk",
             "--speculative-token-map", "--speculative-accept-threshold-single", "--speculative-accept-threshold-acc")
    about = ("--speculative",)
    memory = ("--mem-fraction-static", 0.88)
    prefill = (("--chunked-prefill-size",), None)
    prefix_cache_off = "--disable-radix-cache"
    files = ("--chat-template", "--tokenizer-path", "--speculative-token-map")

    engine_request = {"return_token_ids": True}
    reference_request = {"return_token_ids": True}
    counters = {"num_drafts": "sglang:spec_verify_calls", "_generated": "sglang:generation_tokens"}

    # its --speculative-algorithm values (upper case)
    methods = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "STANDALONE": "draft_model", "NGRAM": "ngram",
               "LOOKAHEAD": "ngram"}
    no_truncation = "SGLang masks top_k, top_p and min_p on one distribution, top_p not renormalised after top_k"
    no_scoring = "preset sglang: its input-token logprobs are not wired into the gate yet"

    def method_of(self, name: str) -> str:
        return self.methods.get(name.upper(), "other")

    def parse(self, event: dict) -> Chunk:
        """``choices[0].token_ids`` (``return_token_ids``); its logprobs are keyed by text, not usable."""
        c = parse_openai(event)
        return Chunk(c.ids, None, c.text, finish=c.finish)

    def speculation(self, argv: list[str], read: Read) -> Found:
        found = super().speculation(argv, read)
        flags = flags_of(argv)
        if found.k is None and "--speculative-num-draft-tokens" in flags \
                and flags.get("--speculative-eagle-topk", "1") == "1":
            found.k = whole("--speculative-num-draft-tokens", flags["--speculative-num-draft-tokens"]) - 1
            found.k_flag = "--speculative-num-draft-tokens (minus the bonus position)"
        if "--speculative-algorithm" in flags:
            found.method = self.method_of(flags["--speculative-algorithm"])
            found.method_flag = "--speculative-algorithm"
        return found


STACK = register(SGLang())
__all__ = ["STACK", "SGLang"]
