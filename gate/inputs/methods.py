"""Speculation methods: what proposes the draft tokens, what of it the gate can run or recompute here, and what the
serving stacks call it.

Most speculative decoding served today has no separate draft model: EAGLE and EAGLE-3 heads read the target's
hidden states, MTP layers are part of the target, n-gram lookup and suffix decoding propose from the context
itself.  A method names which one a config gates (``speculation.method``), and each method says:

* ``draft_model``: whether it proposes with a separate causal LM (``models.draft``), which the gate's own engines
  and ``local_weights: draft`` load; every other method is refused beside a ``models.draft``;
* ``head``: whether it proposes with a module that is not a causal LM the gate can run (an EAGLE head, an MTP
  module): named by its path (``speculation.head``), for the change trigger and the fingerprint, never loaded;
* the names the stacks give it on a launch line (vLLM ``--speculative-config`` ``method``, SGLang
  ``--speculative-algorithm``), read back by :mod:`gate.inputs.launch` and refused on a mismatch.

What proposes a method's drafts, as the in-process engines run it and the distribution check's draft-side tests
recompute it, is its proposer class in :mod:`gate.engines.proposers` (one per method; the n-gram lookup lives there,
once, with its default lengths).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Method:
    name: str
    draft_model: bool
    head: bool
    doc: str


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("draft_model", True, False, "a separate draft model (a causal LM with the target's vocabulary)"),
    Method("eagle", False, True, "an EAGLE head on the target's hidden states"),
    Method("eagle3", False, True, "an EAGLE-3 head on the target's hidden states"),
    Method("mtp", False, True, "multi-token-prediction layers of the target (DeepSeek, Qwen3-Next, MiMo)"),
    Method("medusa", False, True, "Medusa heads on the target"),
    Method("ngram", False, False, "n-gram lookup in the context (prompt lookup decoding)"),
    Method("suffix", False, False, "suffix decoding (a suffix tree over the context and past outputs)"),
    Method("other", False, False, "any other proposer (named here, not modelled)"),
)}
MethodName = Literal["draft_model", "eagle", "eagle3", "mtp", "medusa", "ngram", "suffix", "other"]

# vLLM's speculative_config "method" values (vllm/config/speculative.py); every MTP variant is MTP here
VLLM = {"draft_model": "draft_model", "eagle": "eagle", "eagle3": "eagle3", "ngram": "ngram", "suffix": "suffix",
        "medusa": "medusa", "mlp_speculator": "other", "mtp": "mtp"}
# SGLang's --speculative-algorithm values
SGLANG = {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "STANDALONE": "draft_model", "NGRAM": "ngram",
          "LOOKAHEAD": "ngram"}


def from_vllm(name: str) -> str:
    """vLLM's method name as the gate's (``deepseek_mtp``, ``qwen3_next_mtp``, … are ``mtp``)."""
    return VLLM.get(name) or ("mtp" if name.endswith("_mtp") else "other")


def from_sglang(name: str) -> str:
    return SGLANG.get(name.upper(), "other")


__all__ = ["METHODS", "SGLANG", "VLLM", "Method", "MethodName", "from_sglang", "from_vllm"]
