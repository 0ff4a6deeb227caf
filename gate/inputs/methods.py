"""Speculation methods: what proposes the draft tokens, what of it the gate can run or recompute here, and what the
serving stacks call it.

Most speculative decoding served today has no separate draft model: EAGLE and EAGLE-3 heads read the target's
hidden states, MTP layers are part of the target, n-gram lookup and suffix decoding propose from the context
itself.  A method names which one a config gates (``speculation.method``), and each method says:

* ``draft_model``: whether it proposes with a separate causal LM (``models.draft``), which the gate's own engines
  and ``local_weights: draft`` load; every other method is refused beside a ``models.draft``;
* ``head``: whether it proposes with a module that is not a causal LM the gate can run (an EAGLE head, an MTP
  module): named by its path (``speculation.head``), for the change trigger and the fingerprint, never loaded;
* ``proposer``: what the distribution check can recompute here for its draft-side tests: the draft's
  distribution (``draft``), the n-gram lookup's proposal, a deterministic function of the context (``ngram``), or
  nothing (target-side tests only);
* the names the stacks give it on a launch line (vLLM ``--speculative-config`` ``method``, SGLang
  ``--speculative-algorithm``), read back by :mod:`gate.inputs.launch` and refused on a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Method:
    name: str
    draft_model: bool
    head: bool
    proposer: Literal["draft", "ngram"] | None
    doc: str


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("draft_model", True, False, "draft", "a separate draft model (a causal LM with the target's vocabulary)"),
    Method("eagle", False, True, None, "an EAGLE head on the target's hidden states"),
    Method("eagle3", False, True, None, "an EAGLE-3 head on the target's hidden states"),
    Method("mtp", False, True, None, "multi-token-prediction layers of the target (DeepSeek, Qwen3-Next, MiMo)"),
    Method("medusa", False, True, None, "Medusa heads on the target"),
    Method("ngram", False, False, "ngram", "n-gram lookup in the context (prompt lookup decoding)"),
    Method("suffix", False, False, None, "suffix decoding (a suffix tree over the context and past outputs)"),
    Method("other", False, False, None, "any other proposer (named here, not modelled)"),
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


def ngram_proposal(context: list[int] | tuple[int, ...], k: int, min_n: int, max_n: int) -> list[int]:
    """The n-gram lookup's proposal after ``context``: the longest n in [min_n, max_n] whose last n tokens occurred
    earlier in the context, its earliest such occurrence, and up to k tokens that followed it there (fewer at the
    context's end; none without a match).  A deterministic function of the context, so the distribution check can
    recompute it at every sampled position."""
    total = len(context)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = list(context[total - n:])
        for start in range(0, total - n):  # the match must end before the context's last token
            if list(context[start:start + n]) == suffix:
                return list(context[start + n:start + n + k])
    return []


__all__ = ["METHODS", "SGLANG", "VLLM", "Method", "MethodName", "from_sglang", "from_vllm", "ngram_proposal"]
