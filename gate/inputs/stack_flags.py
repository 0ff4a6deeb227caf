"""What each serving stack's launch line can say, flag by flag: one table per preset, and nothing else here.

:mod:`gate.inputs.launch` reads lines with these tables: k, the draft or head and the method (speculation), and the
serving settings on which the reference must match the server (``http.allow_differences`` names a deliberate
difference by the setting's name).  A flag's first name is the stack's own spelling, the rest its aliases; its
default is the stack's documented one where that is fixed, and None where the stack picks by version, hardware or
model (then a line that sets it and a line that does not are not known to agree).  Flags from the stacks' docs and
``--help`` (vLLM 0.32, SGLang 0.5, llama.cpp b7000, TGI 3.3; checked 2026-12-06).  A stack's ``files`` are the flags
that name a file or folder the server loads (a config file, a chat template, a tokenizer): ``specguard changed``
follows them into the repository, with the draft, the head and the served model (gate/inputs/launch_diff.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One flag of a launch line: its names, the stack's default, and whether it is a switch (no value)."""

    names: tuple[str, ...]
    default: str | None = None  # None: the stack picks (version, hardware, the model's own config)
    switch: bool = False  # present means "true"
    off: tuple[str, ...] = ()  # a switch's negations (vLLM's --no-enable-prefix-caching): present means "false"


@dataclass(frozen=True)
class Setting:
    """A serving setting the reference must share with the server, as the gate names it in every stack."""

    doc: str
    distorts: str  # what a difference would distort: said in the refusal or warning
    refused: bool = True  # False: a difference is a warning (validate, plan), not exit 2


# The settings compared between a server's line and its reference's (the names http.allow_differences takes)
SETTINGS: dict[str, Setting] = {
    "model": Setting("the served model (a path or a hub id)",
                     "the reference would serve another model: equivalence, the noise floor and the speedup would "
                     "compare two models"),
    "tensor_parallel": Setting("tensor parallelism (llama.cpp: how the model is split over GPUs)",
                               "another split changes a step's cost (the speedup) and the reduction order (the noise "
                               "floor, and divergences the gate would blame on speculation)"),
    "pipeline_parallel": Setting("pipeline parallelism",
                                 "another split changes a step's cost (the speedup) and the reduction order (the "
                                 "noise floor)"),
    "dtype": Setting("the weights' and activations' dtype",
                     "other arithmetic: its divergences read as speculation's (equivalence), and the noise floor and "
                     "the speedup would measure two stacks"),
    "quantization": Setting("the weights' quantization",
                            "other arithmetic: its divergences read as speculation's (equivalence), and the noise "
                            "floor and the speedup would measure two stacks"),
    "kv_cache_dtype": Setting("the KV cache's dtype",
                              "other arithmetic in attention: its divergences read as speculation's (equivalence), "
                              "and the noise floor would measure two stacks"),
    "max_model_len": Setting("the longest sequence (prompt and output)",
                             "a prompt that fits one side and not the other fails on one side only, and the KV "
                             "cache is laid out for another length (the speedup at high load)", refused=False),
    "batch_budget": Setting("the tokens one scheduler step takes",
                            "the scheduler batches differently at the same load: the speedup would compare two "
                            "schedulers, and other batch shapes change the reduction order (the noise floor)"),
    "max_seqs": Setting("the most sequences in flight",
                        "one side queues requests the other runs: the speedup would compare two load levels"),
    "chunked_prefill": Setting("chunked prefill and its chunk",
                               "prompts are prefilled in other chunks: other kernels and reduction order (the noise "
                               "floor), another prefill cost (the speedup)"),
    "prefix_caching": Setting("the prefix cache",
                              "one side serves repeated prefixes from its cache: the speedup is flattered or "
                              "deflated"),
    "eager": Setting("eager mode against CUDA graphs (or compilation)",
                     "a step costs differently with graphs (the speedup), and other kernels may round differently "
                     "(the noise floor)"),
    "attention": Setting("the attention backend (llama.cpp: flash attention)",
                         "other attention kernels round differently (the noise floor) and cost differently (the "
                         "speedup)"),
    "memory": Setting("the share of GPU memory it takes",
                      "the KV cache differs in size: at high load one side preempts or queues where the other does "
                      "not (the speedup); the server's draft or head takes its memory from the same share",
                      refused=False),
    "gpu_layers": Setting("the layers offloaded to the GPU",
                          "layers left on the CPU on one side only: the speedup would measure offloading"),
}


@dataclass(frozen=True)
class Stack:
    """One preset's flags: how its launch line starts, its serving settings, and its speculation flags."""

    preset: str
    programs: tuple[str, ...]  # an executable's name (its last path part), e.g. `vllm`, `llama-server`
    modules: tuple[str, ...]  # a word that starts with one of these starts it too (`python -m vllm.entrypoints…`)
    settings: dict[str, tuple[Flag, ...]]  # SETTINGS name -> its flags on this stack
    k: tuple[str, ...] = ()  # draft tokens per step
    draft: tuple[str, ...] = ()  # the draft model's (or, for a head method, the head's) path
    known: tuple[str, ...] = ()  # flags about speculation read elsewhere, or left alone on purpose: not warned
    about: tuple[str, ...] = ()  # what a flag about speculation starts with (to name one the gate does not read)
    disable_by_batch_size: tuple[str, ...] = ()  # speculation off at this many running requests and above
    positional_model_after: str | None = None  # `vllm serve MODEL`
    memory: tuple[str, float] | None = None  # the flag giving a GPU memory share, the default share
    prefill: tuple[tuple[str, ...], int | None] | None = None  # the prefill chunk's flags, the documented default
    prefix_cache_off: str | None = None  # the flag that turns the prefix cache off
    reads_config_file: bool = False  # `--config FILE` holds flags (YAML, their names without dashes)
    files: tuple[str, ...] = ()  # flags whose value names a file or folder the server loads (`specguard changed`)
    shown: str = ""  # how the line starts the stack, said when it does not


VLLM = Stack(
    "vllm", programs=("vllm",), modules=("vllm.entrypoints", "vllm/vllm-openai"),
    settings={
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
    },
    k=("--num-speculative-tokens", "--num_speculative_tokens"),
    draft=("--speculative-model", "--speculative_model"),
    known=("--config",),
    about=("--speculative", "--num-speculative", "--num_speculative", "-sc"),
    disable_by_batch_size=("--speculative-disable-by-batch-size", "--speculative_disable_by_batch_size"),
    positional_model_after="serve", memory=("--gpu-memory-utilization", 0.9),
    prefill=(("--max-num-batched-tokens", "--max_num_batched_tokens"), None),
    prefix_cache_off="--no-enable-prefix-caching", reads_config_file=True,
    files=("--config", "--chat-template", "--chat_template", "--tokenizer", "--generation-config",
           "--generation_config"),
    shown="vllm serve MODEL, or python -m vllm.entrypoints.openai.api_server",
)

SGLANG = Stack(
    "sglang", programs=("sglang",), modules=("sglang.", "lmsysorg/sglang"),
    settings={
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
    },
    k=("--speculative-num-steps",),
    draft=("--speculative-draft-model-path", "--speculative-draft-model"),
    known=("--speculative-algorithm", "--speculative-num-draft-tokens", "--speculative-eagle-topk",
           "--speculative-token-map", "--speculative-accept-threshold-single", "--speculative-accept-threshold-acc"),
    about=("--speculative",),
    memory=("--mem-fraction-static", 0.88), prefill=(("--chunked-prefill-size",), None),
    prefix_cache_off="--disable-radix-cache",
    files=("--chat-template", "--tokenizer-path", "--speculative-token-map"),
    shown="python -m sglang.launch_server",
)

LLAMACPP = Stack(
    "llamacpp", programs=("llama-server", "server"), modules=("ghcr.io/ggml-org/llama.cpp:server",),
    settings={
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
    },
    k=("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft"),
    draft=("-md", "--model-draft"),
    known=("--spec-type", "--spec-draft-n-min", "--draft-min", "--draft-p-min", "--spec-draft-p-min", "-td",
           "--threads-draft", "-tbd", "--threads-batch-draft", "-ngld", "--gpu-layers-draft", "-devd",
           "--device-draft", "-ctkd", "-ctvd", "--cache-type-k-draft", "--cache-type-v-draft"),
    about=("--spec-", "--draft", "-md", "--model-draft", "-cd", "--ctx-size-draft"),
    prefill=(("-ub", "--ubatch-size"), 512),
    files=("--chat-template-file", "--grammar-file", "--lora"),
    shown="llama-server",
)

TGI = Stack(
    "tgi", programs=("text-generation-launcher",), modules=("ghcr.io/huggingface/text-generation-inference",),
    settings={
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
    },
    k=("--speculate",),  # Medusa heads in the model, else n-gram lookup: the method is not on the line
    about=("--speculate",),
    files=("--tokenizer-config-path",),
    shown="text-generation-launcher",
)

STACKS: dict[str, Stack] = {s.preset: s for s in (VLLM, SGLANG, LLAMACPP, TGI)}

__all__ = ["SETTINGS", "STACKS", "Flag", "Setting", "Stack"]
