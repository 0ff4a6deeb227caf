"""Any other OpenAI-compatible completions server: ids only if it volunteers them (``choices[0].token_ids``), else a
text comparison, said so.  The gate reads no flags of its launch lines and models no truncation order."""

from __future__ import annotations

from gate.stacks.base import Stack, register


class OpenAI(Stack):
    name = "openai"
    title = "an OpenAI-compatible server"
    gives_ids = False
    no_scoring = "preset openai: an OpenAI-compatible completions route scores only what it generates"


STACK = register(OpenAI())
__all__ = ["STACK", "OpenAI"]
