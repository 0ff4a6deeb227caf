"""What the distribution check's draft-side tests compare the sampled tokens with: the method's proposer.

A speculative sampling bug pushes the output towards what the proposer proposed.  The draft-side tests look exactly
there, so they need the proposer, recomputed here at every sampled position.  Each method's proposer is one class
in :mod:`gate.engines.proposers` (the one the in-process engines propose with): it names the tests that read it
and says what stands for ``q``:

* **a draft model** (``draft_model``, loaded here): its full distribution ``q`` (``draft_top``, ``draft_logprob``,
  ``draft_ratio``);
* **n-gram lookup** (``ngram``): its proposal as a point mass (``ngram_top``, the analogue of ``draft_top``);
* **anything else** (EAGLE, EAGLE-3, MTP, suffix decoding; or a draft model not loaded here): target-side tests only
  (``target_top``, ``target_logprob``: ``q = p``), with the power they have.
"""

from __future__ import annotations

from gate.engines.proposers import DRAFT_TESTS, FAMILIES, NGRAM_DEFAULT, NGRAM_TESTS, TARGET_TESTS

TESTS = DRAFT_TESTS  # every test the check computes (a target or n-gram test reads one of these statistics)
SAME_STATISTIC = {"target_top": "draft_top", "target_logprob": "draft_logprob", "ngram_top": "draft_top"}

__all__ = ["FAMILIES", "NGRAM_DEFAULT", "NGRAM_TESTS", "SAME_STATISTIC", "TARGET_TESTS", "TESTS"]
