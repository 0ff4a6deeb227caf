"""Deliberately broken speculative engines, one per known bug class.

``specguard selftest`` runs the gate's checks against each of them and against
the correct engine: every mutant must be caught by at least one named check,
and the correct engine must raise no alarm.  Each mutant changes exactly one
small method of :class:`~gate.engines.speculative.SpeculativeEngine` or of its
batch layout, so the diff from the correct engine *is* the bug.
"""

from __future__ import annotations

import torch

from gate.engines.layout import RaggedBatch
from gate.engines.sampling import probs, sample
from gate.engines.speculative import SpeculativeEngine
from gate.engines.tracking import Tracker


class _BatchMaxPositions(RaggedBatch):
    def positions(self, new_valid):
        # BUG: every row advances to the longest row's position, not its own.
        before = self.valid.sum(1, keepdim=True).max().expand(self.valid.shape[0], 1)
        return (before + new_valid.cumsum(1) - 1).clamp(min=0)


class PositionsBatchMax(SpeculativeEngine):
    """Position ids advanced by the batch maximum instead of per sequence."""

    layout = _BatchMaxPositions


class KVNoRollback(SpeculativeEngine):
    """Rejected draft tokens stay in the target's KV cache."""

    def rollback(self, target, draft, t_start, d_start, t_width, d_width, n, K):
        # BUG: the target keeps every verified column, rejected drafts included.
        target.rollback(t_start, torch.full_like(n, t_width + K))
        if K:
            draft.rollback(d_start, d_width + n.clamp(max=K - 1))


class _StaleMask(RaggedBatch):
    def rollback(self, start, keep):
        # BUG: the cache is cropped to the longest row, but the other rows' rejected
        # columns are not masked: the mask is stale after realignment.
        with self.realign():
            new_len = start + int(keep.max())
            if new_len < self.length:
                self._map_layers(lambda t: t[..., :new_len, :])
            self.valid = self.valid[:, :new_len]


class StaleMaskAfterRealign(SpeculativeEngine):
    """Attention mask not updated when ragged rows are realigned (only shows at batch size > 1)."""

    layout = _StaleMask


class AcceptOffByOne(SpeculativeEngine):
    """Accepted count one too high: the first rejected draft token is emitted."""

    def accept_greedy(self, drafts, logits, k_row):
        n, _ = super().accept_greedy(drafts, logits, k_row)
        n = torch.minimum(n + 1, k_row)  # BUG: off by one
        best = logits.argmax(-1)
        return n, best.gather(1, n[:, None])[:, 0]

    def accept_sampling(self, drafts, logits, q, k_row, settings, u):
        n, _ = super().accept_sampling(drafts, logits, q, k_row, settings, u)
        n = torch.minimum(n + 1, k_row)  # BUG: off by one
        dist = self.final_distribution(probs(logits, settings.temperature), q, n, k_row)
        return n, sample(dist, u[:, 2 * settings.num_draft_tokens])


class BonusFromDraft(SpeculativeEngine):
    """When every draft is accepted, the extra token comes from the draft, not the target."""

    def propose(self, draft, lags, k_row, K, settings, u):
        drafts, q = super().propose(draft, lags, k_row, K, settings, u)
        # The draft's own next proposal, from its logits after the last draft token.
        last = drafts[:, -1:]
        logits = draft.forward(last, torch.ones_like(last, dtype=torch.bool), logits_to_keep=1)
        self._draft_next = logits[:, -1].argmax(-1)
        draft.rollback(draft.length - 1, torch.zeros_like(k_row))  # leave the draft cache as the engine expects
        return drafts, q

    def _bonus(self, drafts, n, k_row, nxt):
        K = drafts.shape[1]
        if not K:
            return nxt
        full = (n == K) & (k_row == K)
        return torch.where(full, self._draft_next, nxt)  # BUG: bonus from the draft

    def accept_greedy(self, drafts, logits, k_row):
        n, nxt = super().accept_greedy(drafts, logits, k_row)
        return n, self._bonus(drafts, n, k_row, nxt)

    def accept_sampling(self, drafts, logits, q, k_row, settings, u):
        n, nxt = super().accept_sampling(drafts, logits, q, k_row, settings, u)
        return n, self._bonus(drafts, n, k_row, nxt)


class NoResidual(SpeculativeEngine):
    """On rejection, resample from the target p instead of the residual max(0, p - q)."""

    def final_distribution(self, p, q, n, k_row):
        R, _, V = p.shape
        return p.gather(1, n[:, None, None].expand(R, 1, V))[:, 0]  # BUG: residual not used


class InvertedRatio(SpeculativeEngine):
    """Acceptance test uses q/p instead of p/q."""

    def accept_sampling(self, drafts, logits, q, k_row, settings, u):
        R, K = drafts.shape
        k = settings.num_draft_tokens
        p = probs(logits, settings.temperature)
        if K:
            p_d = p[:, :K].gather(2, drafts[..., None])[..., 0]
            q_d = q.gather(2, drafts[..., None])[..., 0]
            ok = (u[:, k:k + K] * p_d < q_d) & (torch.arange(K, device=self.device)[None] < k_row[:, None])  # BUG
            n = ok.int().cumprod(1).sum(1)
        else:
            n = torch.zeros(R, dtype=torch.long, device=self.device)
        return n, sample(self.final_distribution(p, q, n, k_row), u[:, 2 * k])


class _EosOnlyAtBlockEnd(Tracker):
    def emit(self, i, toks, now):
        # BUG: EOS is honoured only as the last token of a step's block.
        kept = toks[: self.remaining(i)]
        if kept:
            self.tokens[i] += kept
            self.first[i] = self.first[i] if self.first[i] is not None else now
            self.last[i] = now
            if kept[-1] in self.eos:
                self.stop[i] = "eos"
        if self.stop[i] is None and self.remaining(i) == 0:
            self.stop[i] = "max_tokens"
        return len(kept)


class EosIgnored(SpeculativeEngine):
    """An EOS inside an accepted block does not end the sequence."""

    tracker = _EosOnlyAtBlockEnd


MUTANTS: dict[str, type[SpeculativeEngine]] = {
    "positions-batch-max": PositionsBatchMax,
    "kv-no-rollback": KVNoRollback,
    "stale-mask-after-realign": StaleMaskAfterRealign,
    "accept-off-by-one": AcceptOffByOne,
    "bonus-from-draft": BonusFromDraft,
    "sampling-no-residual": NoResidual,
    "sampling-inverted-ratio": InvertedRatio,
    "eos-ignored-in-block": EosIgnored,
}
