"""Deliberately broken speculative engines, one per known bug class.

``specguard selftest`` runs the gate's checks against each of them and against
the correct engine: every mutant must be caught by at least one named check,
and the correct engine must raise no alarm.  Each mutant overrides one small
hook of :class:`~gate.engines.speculative.SpeculativeEngine` (or of its batch
layout or tracker) in a line or two, so the diff from the correct engine *is*
the bug, and stays so as the engine changes.
"""

from __future__ import annotations

import torch

from gate.engines.hf_assisted import PromptLookupEngine
from gate.engines.layout import RaggedBatch
from gate.engines.speculative import SpeculativeEngine
from gate.engines.tracking import Tracker


class _BatchMaxPositions(RaggedBatch):
    def positions(self, new_valid):
        # BUG: every row advances to the longest row's position, not its own.
        return (self.valid.sum(1, keepdim=True).max() + new_valid.cumsum(1) - 1).clamp(min=0)


class PositionsBatchMax(SpeculativeEngine):
    """Position ids advanced by the batch maximum instead of per sequence."""

    layout = _BatchMaxPositions


class KVNoRollback(SpeculativeEngine):
    """Rejected draft tokens stay in the target's KV cache."""

    def target_keep(self, width, n, K):
        return torch.full_like(n, width + K)  # BUG: every verified column kept, rejected drafts included


class _StaleMask(RaggedBatch):
    def reject(self, start, keep):
        pass  # BUG: the cache is cropped to the longest row, but the other rows' rejected columns stay visible


class StaleMaskAfterRealign(SpeculativeEngine):
    """Attention mask not updated when ragged rows are realigned (only shows at batch size > 1)."""

    layout = _StaleMask


class AcceptOffByOne(SpeculativeEngine):
    """Accepted count one too high: the first rejected draft token is emitted."""

    def accepted_count(self, ok, k_row):
        return torch.minimum(super().accepted_count(ok, k_row) + 1, k_row)  # BUG: off by one


class BonusWrongPosition(SpeculativeEngine):
    """When every draft is accepted, the bonus token is read at the last draft's position, not the next one."""

    def next_position(self, n, k_row):
        return torch.where((n >= k_row) & (k_row > 0), n - 1, n)  # BUG: p_K instead of p_{K+1}


class NoResidual(SpeculativeEngine):
    """On rejection, resample from the target p instead of the residual max(0, p - q)."""

    sampling_only = True  # its seam (residual) is reached only when sampling: greedy output is the correct engine's

    def residual(self, p_n, q_n):
        return p_n  # BUG: residual not used


class GreedyDraft(SpeculativeEngine):
    """Sampling: the draft proposes its argmax, but the acceptance test and the residual use its full
    distribution q, as if the token had been drawn from q (a proposer and verifier that disagree on how drafts
    are drawn): output leans hard towards the draft's top choice."""

    sampling_only = True  # its seam (draft_token) is reached only when sampling: greedy output is the correct engine's

    def draft_token(self, q, u):
        return q.argmax(-1)  # BUG: verified with q, so the proposal must be a draw from q (or q one-hot)


class InvertedRatio(SpeculativeEngine):
    """Acceptance test uses q/p instead of p/q."""

    sampling_only = True  # its seam (accept_test) is reached only when sampling: greedy output is the correct engine's

    def accept_test(self, u, p_d, q_d):
        return u * p_d < q_d  # BUG: min(1, q/p)


class _EosOnlyAtBlockEnd(Tracker):
    def eos_at(self, toks):
        return len(toks) - 1 if toks and toks[-1] in self.eos else None  # BUG: EOS honoured only at a block's end


class EosIgnored(SpeculativeEngine):
    """An EOS inside an accepted block does not end the sequence."""

    tracker = _EosOnlyAtBlockEnd


BUCKET_WIDTH = 128  # the first context bucket's width (checks.speedup.context_buckets defaults to [128, 512])


class _ShortestPromptBuffer(RaggedBatch):
    lost = None  # per row: how many of its oldest tokens fall outside the buffer

    def attention_mask(self, new_valid):
        mask, valid = super().attention_mask(new_valid)
        if self.lost is None:  # the first forward is the prefill
            lengths = new_valid.sum(1)
            self.lost = (lengths - lengths.min() - BUCKET_WIDTH).clamp(min=0)  # BUG: sized from the shortest prompt
        cols = torch.arange(valid.shape[1], device=valid.device)
        itself = cols[None, :] == (self.length + torch.arange(new_valid.shape[1], device=valid.device))[:, None]
        hidden = (valid & (valid.cumsum(1) <= self.lost[:, None]))[:, None, :] & ~itself[None]
        mask[:, 0].masked_fill_(hidden, torch.finfo(self.dtype).min)
        return mask, valid

    def select(self, rows):
        super().select(rows)
        self.lost = self.lost.index_select(0, rows)


class LengthMixBuffer(SpeculativeEngine):
    """Attention buffer sized from the shortest prompt in the batch: long rows lose context, but only when a
    batch mixes prompt lengths that differ by more than a context bucket's width."""

    layout = _ShortestPromptBuffer


class StaleRowMap(SpeculativeEngine):
    """Per-row state indexed by the row's position in the first step: once finished rows are dropped, cache
    rows are matched with the wrong requests (harmless while a batch holds copies of one row)."""

    def drop_finished(self, rows, batches):
        super().drop_finished(rows, batches)
        rows.ids = list(range(len(rows.ids)))  # BUG: the row -> request map of the first step


MUTANTS: dict[str, type[SpeculativeEngine]] = {
    "positions-batch-max": PositionsBatchMax,
    "kv-no-rollback": KVNoRollback,
    "stale-mask-after-realign": StaleMaskAfterRealign,
    "accept-off-by-one": AcceptOffByOne,
    "bonus-wrong-position": BonusWrongPosition,
    "sampling-no-residual": NoResidual,
    "sampling-inverted-ratio": InvertedRatio,
    "sampling-greedy-draft": GreedyDraft,
    "eos-ignored-in-block": EosIgnored,
    "length-mix-buffer": LengthMixBuffer,
    "stale-row-map": StaleRowMap,
}


class LookupLean(PromptLookupEngine):
    """Prompt lookup decoding whose verification leans towards the lookup's proposal: each proposed token's logit
    is raised by ``LEAN`` nats before the target's choice is made, as a fused accept kernel that favours the draft
    would.  Greedy: a proposal within ``LEAN`` of the argmax wins; sampled: the proposal is emitted too often."""

    LEAN = 1.0

    def generate(self, requests, settings):
        def lean(module, args, kwargs, output):
            ids = kwargs.get("input_ids", args[0] if args else None)
            logits = getattr(output, "logits", None)
            if ids is not None and ids.shape[1] > 1 and logits is not None and logits.shape[1] == ids.shape[1]:
                nxt = ids[:, 1:]  # the token each position is verified against: the proposal (or the prompt's next)
                rows = torch.arange(ids.shape[0], device=ids.device)[:, None]
                cols = torch.arange(nxt.shape[1], device=ids.device)[None, :]
                logits[rows, cols, nxt] += self.LEAN  # BUG: the verification favours the proposal
            return output

        handle = self.target.register_forward_hook(lean, with_kwargs=True)
        try:
            return super().generate(requests, settings)
        finally:
            handle.remove()


# Mutants of the draft-free method (speculation.method: ngram), gated with the prompt lookup engine
LOOKUP_MUTANTS: dict[str, type[PromptLookupEngine]] = {"lookup-lean": LookupLean}
