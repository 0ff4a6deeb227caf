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
  ``--speculative-algorithm``) are each stack's own (``methods`` in gate/stacks/), read back by
  :mod:`gate.inputs.launch` and refused on a mismatch.

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

def method_problems(cfg) -> list[tuple[tuple, str, str | None]]:
    """The method of a ``Config`` and what it needs: a draft model exactly where the method proposes with one, a head
    only where it has one, the n-gram lengths only for n-gram lookup (issue 47).  (location, message, hint) each."""
    out = []
    sp, draft = cfg.speculation, cfg.models.draft
    if sp.method is None and draft is None:
        out.append((("models", "draft"), "required field is missing", "give the draft model's path (speculation."
                    "method draft_model, the default), or name the method the server runs without one: speculation."
                    "method: one of " + ", ".join(m for m in METHODS if m != "draft_model")))
        return out
    m = cfg.method
    if m.draft_model and draft is None:
        out.append((("models", "draft"), "required field is missing: method draft_model proposes with a draft model",
                    "give its path, or name the method the server runs (speculation.method: eagle3, ngram, …)"))
    if not m.draft_model and draft is not None:
        out.append((("models", "draft"), f"method {m.name} proposes without a draft model ({m.doc}), so no test "
                    "may read one as its proposer", "drop models.draft (name an EAGLE head or MTP module in "
                    "speculation.head), or set speculation.method: draft_model if the server runs one"))
    if sp.head is not None and not m.head:
        out.append((("speculation", "head"), f"method {m.name} has no head to name",
                    "drop speculation.head, or set the method that uses it (eagle, eagle3, mtp, medusa)"))
    if (sp.prompt_lookup_min or sp.prompt_lookup_max) and m.name != "ngram":
        out.append((("speculation", "prompt_lookup_min" if sp.prompt_lookup_min else "prompt_lookup_max"),
                    f"the n-gram lookup's lengths, with method {m.name}",
                    "drop them, or set speculation.method: ngram"))
    if sp.prompt_lookup_min and sp.prompt_lookup_max and sp.prompt_lookup_min > sp.prompt_lookup_max:
        out.append((("speculation", "prompt_lookup_min"), f"{sp.prompt_lookup_min} is above prompt_lookup_max "
                    f"{sp.prompt_lookup_max}", "make min <= max"))
    if cfg.models.local_weights == "draft" and not m.draft_model:
        out.append((("models", "local_weights"), f"'draft' loads the draft model here, and method {m.name} has none",
                    "set local_weights: false (the target-side tests run without it)"))
    for i, e in enumerate(cfg.engines):
        if e.methods is not None and m.name not in e.methods:
            out.append((("engines", i, "type"), f"the {e.type} engine runs {' or '.join(e.methods)}, and the method "
                        f"is {m.name}", "gate a server or a plug-in that runs this method, or change the method"))
    return out


__all__ = ["METHODS", "Method", "MethodName", "method_problems"]
