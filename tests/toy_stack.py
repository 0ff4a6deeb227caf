"""A toy serving stack, in one file outside gate/: the proof that adding a stack touches nothing else.

``preset: toy`` is a server started by ``toy-serve MODEL`` (a made-up program) that speaks vLLM's wire format
(the stand-in server, gate/testing/server.py), with launch flags of its own: ``--toy-k`` (k), ``--toy-draft`` (the
draft), ``--toy-tp`` (tensor parallelism), ``--toy-budget`` (a step's token budget), ``--toy-off-at`` (speculation
off from this many running requests), ``--toy-template`` (a file the server loads), and its own method names.
Importing this module registers it (tests/test_serving_stacks.py)."""

from __future__ import annotations

from gate.stacks.base import Flag, Stack, register


class ToyStack(Stack):
    name = "toy"
    title = "Toy"
    shown = "toy-serve MODEL"
    programs = ("toy-serve",)
    settings = {"model": (Flag(("--toy-model",)),), "tensor_parallel": (Flag(("--toy-tp",), "1"),),
                "batch_budget": (Flag(("--toy-budget",), "512"),)}
    k = ("--toy-k",)
    draft = ("--toy-draft",)
    about = ("--toy-spec",)
    disable_by_batch_size = ("--toy-off-at",)
    positional_model_after = "toy-serve"
    prefill = (("--toy-budget",), 512)
    files = ("--toy-template",)
    engine_request = {"return_tokens_as_token_ids": True, "logprobs": 0}
    reference_request = {"return_tokens_as_token_ids": True}
    min_logprobs = 0
    methods = {"DRAFT": "draft_model", "LOOKUP": "ngram"}
    truncation = ("top_k", "top_p", "min_p")


TOY = register(ToyStack())
