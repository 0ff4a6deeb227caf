"""Batched speculative decoding that stays correct when rows accept different numbers of tokens.

One step, for a batch of rows (Leviathan et al. 2023; Chen et al. 2023):

1. *Draft.*  The draft model proposes ``k_row`` tokens per row, one forward per
   position.  ``k_row = min(k, remaining - 1)`` so a row never drafts past its
   token budget; positions past ``k_row`` are holes for that row.
2. *Verify.*  One target forward over ``[pending tokens, d_1 .. d_K]`` for the
   whole batch gives the target's distribution at every draft position plus one.
3. *Accept.*
   - Greedy: accept the longest prefix where ``d_j == argmax p_j``; then emit
     the target's own token at the first mismatch (or the bonus position).
   - Sampling: accept ``d_j`` with probability ``min(1, p_j(d_j) / q_j(d_j))``
     (p: target, q: draft).  At the first rejection emit a sample from the
     residual ``norm(max(0, p_j - q_j))``; if every draft was accepted, sample the
     bonus token from ``p_{k+1}``.  This makes every emitted token an exact draw
     from the target's distribution.
4. *Roll back.*  Each row keeps its pending tokens and its accepted drafts in the
   target cache; the draft cache keeps what the draft saw of them.  Rejected
   entries become holes (see :mod:`gate.engines.layout`), so each row keeps its
   own positions, mask and cache length.

EOS inside an accepted block ends that sequence there, and ``max_new_tokens`` is
never exceeded (:class:`gate.engines.tracking.Tracker`).

Each row draws exactly ``2k + 1`` uniforms per step from its own stream, so a
sampled sequence does not depend on its batch-mates.

The step is split into small methods (``propose``, ``accept_greedy``,
``accept_sampling``, ``final_distribution``, ``rollback``) so that the self-test's
mutants can each break exactly one of them.
"""

from __future__ import annotations

import torch

from gate.engines.base import BatchResult, GenerationSettings, Request
from gate.engines.layout import RaggedBatch, right_align
from gate.engines.sampling import RowRandom, probs, sample
from gate.engines.tracking import Tracker, shrink
from gate.timing import Clock, Stopwatch, peak_memory_bytes, reset_peak_memory


class SpeculativeEngine:
    name = "speculative"
    speculative = True
    max_batch_size = None
    layout = RaggedBatch
    tracker = Tracker

    def __init__(self, target: torch.nn.Module, draft: torch.nn.Module, device: torch.device):
        self.target = target
        self.draft = draft
        self.device = device

    # --- the algorithm, one step ---------------------------------------------------------

    def propose(self, draft: RaggedBatch, lags: list[list[int]], k_row: torch.Tensor, K: int,
                settings: GenerationSettings, u: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Draft K tokens per row: ([R, K] token ids, [R, K, V] draft probabilities or None)."""
        ids, valid = right_align(lags, self.device)
        drafts, qs = [], []
        for j in range(K):
            logits = draft.forward(ids, valid, logits_to_keep=1)[:, -1]
            if settings.greedy:
                d = logits.argmax(-1)
            else:
                q = probs(logits, settings.temperature)  # q: draft distribution at position j
                d = sample(q, u[:, j])
                qs.append(q)
            drafts.append(d)
            ids, valid = d[:, None], (k_row > j)[:, None]  # d_{j+1} is real only where j < k_row
        return torch.stack(drafts, 1), (torch.stack(qs, 1) if qs else None)

    def accept_greedy(self, drafts: torch.Tensor, logits: torch.Tensor, k_row: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """(accepted count n [R], next token [R]) for greedy decoding."""
        K = drafts.shape[1]
        best = logits.argmax(-1)  # [R, K+1]: the target's choice at each position
        match = (drafts == best[:, :K]) & (torch.arange(K, device=self.device)[None] < k_row[:, None])
        n = match.int().cumprod(1).sum(1)
        return n, best.gather(1, n[:, None])[:, 0]

    def accept_sampling(self, drafts: torch.Tensor, logits: torch.Tensor, q: torch.Tensor | None,
                        k_row: torch.Tensor, settings: GenerationSettings, u: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """(accepted count n [R], next token [R]) by the rejection rule."""
        R, K = drafts.shape
        k = settings.num_draft_tokens
        p = probs(logits, settings.temperature)  # [R, K+1, V]: target distributions
        if K:
            p_d = p[:, :K].gather(2, drafts[..., None])[..., 0]
            q_d = q.gather(2, drafts[..., None])[..., 0]
            # accept d_j with probability min(1, p/q)  <=>  u * q < p
            ok = (u[:, k:k + K] * q_d < p_d) & (torch.arange(K, device=self.device)[None] < k_row[:, None])
            n = ok.int().cumprod(1).sum(1)
        else:
            n = torch.zeros(R, dtype=torch.long, device=self.device)
        dist = self.final_distribution(p, q, n, k_row)
        return n, sample(dist, u[:, 2 * k])

    def final_distribution(self, p: torch.Tensor, q: torch.Tensor | None, n: torch.Tensor,
                           k_row: torch.Tensor) -> torch.Tensor:
        """Where the token after the accepted prefix comes from: the residual, or p for the bonus."""
        R, _, V = p.shape
        p_n = p.gather(1, n[:, None, None].expand(R, 1, V))[:, 0]
        if q is None:
            return p_n
        q_pad = torch.cat([q, torch.zeros_like(q[:, :1])], 1)
        q_n = q_pad.gather(1, n[:, None, None].expand(R, 1, V))[:, 0]
        residual = (p_n - q_n).clamp_(min=0)
        total = residual.sum(-1, keepdim=True)
        residual = torch.where(total > 0, residual / total.clamp(min=1e-30), p_n)
        bonus = (n >= k_row)[:, None]  # every real draft accepted: the next token is a plain target draw
        return torch.where(bonus, p_n, residual)

    def rollback(self, target: RaggedBatch, draft: RaggedBatch, t_start: int, d_start: int,
                 t_width: int, d_width: int, n: torch.Tensor, K: int) -> None:
        """Drop rejected drafts: keep pending + accepted in the target, what the draft saw in the draft."""
        target.rollback(t_start, t_width + n)
        if K:
            draft.rollback(d_start, d_width + n.clamp(max=K - 1))

    # --- the loop --------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult:
        k = settings.num_draft_tokens
        clock = Clock(self.device)
        realign = Stopwatch(clock)
        reset_peak_memory(self.device)
        start = clock.now()
        tracker = self.tracker(requests, settings, start, speculative=True)
        for c in tracker.counters:
            c.num_accepted_tokens_per_pos = [0] * k
            c.num_draft_tokens_per_pos = [0] * k
        rnd = None if settings.greedy else RowRandom([r.seed for r in requests], self.device)
        tgt = self.layout(self.target, len(requests), self.device, realign)
        drf = self.layout(self.draft, len(requests), self.device, realign)
        rows = list(range(len(requests)))  # batch row -> request index
        t_lag = {i: list(r.prompt_ids) for i, r in enumerate(requests)}  # not yet in the target cache
        d_lag = {i: list(r.prompt_ids) for i, r in enumerate(requests)}  # not yet in the draft cache

        while True:
            active = [j for j, r in enumerate(rows) if not tracker.done(r)]
            if not active:
                break
            k_list = [0] * len(rows)
            for j in active:
                k_list[j] = min(k, tracker.remaining(rows[j]) - 1)
            k_row = torch.tensor(k_list, device=self.device)
            K = max(k_list)
            u = None
            if rnd is not None:
                u = torch.zeros(len(rows), 2 * k + 1, dtype=torch.float64, device=self.device)
                u[active] = rnd.uniform([rows[j] for j in active], 2 * k + 1)

            d_start, d_width = drf.length, max(len(d_lag.get(r, [])) for r in rows)
            if K:
                drafts, q = self.propose(drf, [d_lag.get(r, []) for r in rows], k_row, K, settings, u)
            else:
                drafts, q = torch.zeros(len(rows), 0, dtype=torch.long, device=self.device), None

            t_start = tgt.length
            lag_ids, lag_valid = right_align([t_lag.get(r, []) for r in rows], self.device)
            draft_valid = torch.arange(K, device=self.device)[None] < k_row[:, None]
            logits = tgt.forward(torch.cat([lag_ids, drafts], 1), torch.cat([lag_valid, draft_valid], 1),
                                 logits_to_keep=K + 1)
            if settings.greedy:
                n, nxt = self.accept_greedy(drafts, logits, k_row)
            else:
                n, nxt = self.accept_sampling(drafts, logits, q, k_row, settings, u)

            n_list, nxt_list, d_list = n.tolist(), nxt.tolist(), drafts.tolist()
            now = clock.now()
            for j in active:
                r, nj = rows[j], n_list[j]
                emitted = tracker.emit(r, d_list[j][:nj] + [nxt_list[j]], now)
                c = tracker.counters[r]
                accepted = min(nj, emitted)
                c.num_target_forwards += 1
                c.num_draft_forwards += K
                c.num_emitted_tokens += emitted
                c.num_accepted_tokens += accepted
                if k_list[j]:
                    c.num_drafts += 1
                    c.num_draft_tokens += k_list[j]
                    for pos in range(k_list[j]):
                        c.num_draft_tokens_per_pos[pos] += 1
                    for pos in range(accepted):
                        c.num_accepted_tokens_per_pos[pos] += 1
                if tracker.done(r):
                    t_lag.pop(r, None)
                    d_lag.pop(r, None)
                    continue
                t_lag[r] = [nxt_list[j]]
                if not K:  # the draft did not run: it still has to see this step's token
                    d_lag[r] = d_lag.get(r, []) + [nxt_list[j]]
                elif nj == K:  # every draft accepted: the draft never fed its own last token
                    d_lag[r] = [d_list[j][K - 1], nxt_list[j]]
                else:
                    d_lag[r] = [nxt_list[j]]
            self.rollback(tgt, drf, t_start, d_start, lag_ids.shape[1], d_width, n, K)
            rows = shrink(rows, tracker, [tgt, drf])
            tgt.compact()
            drf.compact()

        wall = clock.now() - start
        return BatchResult(tracker.results(), wall_s=wall, realign_s=realign.total,
                           num_target_forwards=tgt.forwards, num_draft_forwards=drf.forwards,
                           peak_memory_bytes=peak_memory_bytes(self.device))
