"""What the distribution check's draft-side tests compare the sampled tokens with, per speculation method.

A speculative sampling bug pushes the output towards what the proposer proposed.  The draft-side tests look
exactly there, so they need the proposer, recomputed here at every sampled position
(:mod:`gate.inputs.methods`):

* **a draft model** (``draft_model``, loaded here): its full distribution ``q`` (``draft_top``,
  ``draft_logprob``, ``draft_ratio``);
* **n-gram lookup** (``ngram``): its proposal is a deterministic function of the context, so it is recomputed at
  every position (the longest n-gram of the context's end that occurred before, the token that followed it), and
  ``ngram_top`` counts how often the emitted token is the proposal against the target's probability of it, the
  analogue of ``draft_top`` (``q`` is the proposal as a point mass; where the lookup proposes nothing, the target's
  own top token stands in, which keeps the statistic a zero-mean martingale);
* **anything else** (EAGLE, EAGLE-3, MTP, suffix decoding; or a draft model not loaded here): target-side tests only
  (``target_top``, ``target_logprob``: ``q = p``), with the power they have.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gate.inputs.methods import ngram_proposal

NGRAM_DEFAULT = (5, 5)  # vLLM's prompt_lookup_min/max when neither is given
# The distribution check's tests, per proposer (gate.checks.distribution computes them)
TESTS = ("pit_ks", "draft_top", "draft_logprob", "draft_ratio")
# With no draft loaded (a served target, models.local_weights: false) the same martingale statistics run with the
# target in the draft's place: f(y) = 1[y = argmax p] and f(y) = log p(y).  A sampler that leans towards a draft
# trained to agree with the target emits the target's likely tokens too often, and a sharpened one does by
# definition; the ratio statistic is constant (1/2) when q = p, so it has no target form.
TARGET_TESTS = ("pit_ks", "target_top", "target_logprob")
# n-gram lookup (speculation.method: ngram): the lookup's proposal, recomputed at each position, as a point mass q
# (below); only the top statistic means anything for a point mass
NGRAM_TESTS = ("pit_ks", "ngram_top")
SAME_STATISTIC = {"target_top": "draft_top", "target_logprob": "draft_logprob", "ngram_top": "draft_top"}
FAMILIES = ("toward_draft", "sharpened")


@dataclass(frozen=True)
class NgramProposer:
    """The n-gram lookup, recomputed: for each item and position, the first token it would propose there."""

    min_n: int
    max_n: int

    def proposals(self, prompt: tuple[int, ...], out: tuple[int, ...]) -> list[int | None]:
        context = list(prompt)
        props: list[int | None] = []
        for token in out:
            found = ngram_proposal(context, 1, self.min_n, self.max_n)
            props.append(found[0] if found else None)
            context.append(token)
        return props

    def q(self, chunk: list, ps: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per item, the proposal as a point mass (the target's top token where there is none)."""
        qs = []
        for (prompt, out), p in zip(chunk, ps):
            q = torch.zeros_like(p)
            for t, prop in enumerate(self.proposals(prompt, out)):
                q[t, prop if prop is not None and prop < p.shape[1] else int(p[t].argmax())] = 1.0
            qs.append(q)
        return qs


def ngram_categories(rows: list, proposer: NgramProposer, width: int) -> torch.Tensor:
    """A served target's outcomes (its top-k by rank, then the rest: :func:`gate.checks.distribution.coarsened`),
    with the lookup's proposal as a point mass on its outcome at each position (the top outcome where it proposes
    nothing)."""
    out = []
    for prompt, tokens, _, tops in rows:
        for prop, top in zip(proposer.proposals(tuple(prompt), tuple(tokens)), tops):
            ids = sorted(top, key=top.get, reverse=True)
            q = torch.zeros(width, dtype=torch.float64)
            q[(ids.index(prop) if prop in top else width - 1) if prop is not None else 0] = 1.0
            out.append(q)
    return torch.stack(out) if out else torch.zeros(0, width, dtype=torch.float64)


def lookup_lengths(config) -> tuple[int, int]:
    """The n-gram lookup's (min, max) match lengths: the config's, else a launched server's line's, else vLLM's
    defaults; one given alone stands for both (as vLLM takes it)."""
    from gate.inputs.launch import read_launch

    sp = config.speculation
    lo, hi = sp.prompt_lookup_min, sp.prompt_lookup_max
    if lo is None and hi is None:
        for e in config.engines:
            h = getattr(e, "http", None)
            launch = h.server.launch if h is not None and h.server is not None else None
            if launch:
                try:
                    lo, hi = read_launch(h.preset, launch).lookup
                except ValueError:  # validate reports an unreadable line
                    continue
                if lo is not None or hi is not None:
                    break
    return lo or hi or NGRAM_DEFAULT[0], hi or lo or NGRAM_DEFAULT[1]


@dataclass(frozen=True)
class Plan:
    """How the check runs for this config: the tests, the planted families, what stands for ``q``, and a note."""

    tests: tuple[str, ...]
    families: tuple[str, ...]
    q: str  # "draft", "ngram" or "target"
    note: str | None = None
    ngram: NgramProposer | None = None


def plan_for(config, draft_loaded: bool) -> Plan:
    """The draft-side tests where the proposer can be recomputed here, else the target-side ones."""
    method = config.method
    if method.proposer == "draft" and draft_loaded:
        return Plan(TESTS, FAMILIES, "draft")
    if method.proposer == "ngram":
        lo, hi = lookup_lengths(config)
        return Plan(NGRAM_TESTS, FAMILIES, "ngram", f"n-gram lookup recomputed at every sampled position "
                    f"(prompt_lookup_min {lo}, prompt_lookup_max {hi}): ngram_top counts the emitted token against "
                    "the lookup's proposal", NgramProposer(lo, hi))
    why = ("the draft model is not loaded here (models.local_weights)" if method.proposer == "draft" else
           f"the {method.name} proposer ({method.doc}) cannot be recomputed here")
    return Plan(TARGET_TESTS, ("sharpened",), "target", f"target-side tests only: {why}")


__all__ = ["FAMILIES", "NGRAM_DEFAULT", "NGRAM_TESTS", "SAME_STATISTIC", "TARGET_TESTS", "TESTS", "NgramProposer",
           "Plan", "lookup_lengths", "ngram_categories", "plan_for"]
