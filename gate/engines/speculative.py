"""Batched speculative decoding that stays correct when rows accept different numbers of tokens.

One step, for a batch of rows (Leviathan et al. 2023; Chen et al. 2023),
p: target distribution, q: draft distribution, as in the papers:

1. *Draft.*  The draft proposes ``k_row`` tokens per row, one forward per
   position.  ``k_row = min(k, remaining - 1)`` so a row never drafts past its
   token budget; positions past ``k_row`` are holes for that row.
2. *Verify.*  One target forward over ``[pending tokens, d_1 .. d_K]`` gives p at
   every draft position plus one.
3. *Accept.*  Greedy: the longest prefix with ``d_j == argmax p_j``.  Sampling:
   accept ``d_j`` with probability ``min(1, p_j(d_j) / q_j(d_j))``.
4. *Residual or bonus.*  At the first rejection the next token comes from the
   residual ``norm(max(0, p_j - q_j))``; if every draft was accepted, the bonus
   token comes from ``p_{K+1}``.  Every emitted token is then an exact draw from p.
5. *Roll back.*  Each row keeps its accepted drafts; rejected entries become
   holes (see :mod:`gate.engines.layout`), so each row keeps its own positions,
   mask and cache length.

Each row draws exactly ``2k + 1`` uniforms per step from its own stream
(``u_draft``, ``u_accept``, ``u_final``), so a sampled sequence does not depend
on its batch-mates.  EOS inside an accepted block ends that sequence there, and
``max_new_tokens`` is never exceeded (:class:`gate.engines.tracking.Tracker`).

:meth:`SpeculativeEngine.step` is the algorithm on one screen; the per-row
bookkeeping (pending tokens, counters, dropping finished rows) lives beside it
in :class:`Rows`.
"""

from __future__ import annotations

import torch

from gate.engines.base import BatchResult, Capabilities, GenerationSettings, Request
from gate.engines.clock import Clock, Stopwatch, peak_memory_bytes, reset_peak_memory
from gate.engines.layout import RaggedBatch, right_align
from gate.engines.sampling import RowRandom, probs, sample
from gate.engines.tracking import Tracker, shrink


class Rows:
    """Per-row state of one batch: which request each cache row holds, and its pending tokens."""

    def __init__(self, requests: list[Request], tracker: Tracker):
        self.tracker = tracker
        self.ids = list(range(len(requests)))  # cache row -> request index
        # Pending tokens: what each cache has not seen yet (the prompt at first, then each step's last token).
        self.target_pending = {i: list(r.prompt_ids) for i, r in enumerate(requests)}
        self.draft_pending = {i: list(r.prompt_ids) for i, r in enumerate(requests)}

    def active(self) -> list[int]:
        return [j for j, r in enumerate(self.ids) if not self.tracker.done(r)]

    def draft_budget(self, active: list[int], k: int) -> list[int]:
        """k_row: drafts per row, never past the row's token budget; 0 for finished rows."""
        k_list = [0] * len(self.ids)
        for j in active:
            k_list[j] = min(k, self.tracker.remaining(self.ids[j]) - 1)
        return k_list

    def commit(self, active: list[int], k_list: list[int], K: int, drafts: list[list[int]],
               n: list[int], nxt: list[int], now: float) -> None:
        """Emit each row's accepted drafts and next token; count; set what each cache must see next."""
        for j in active:
            r, nj = self.ids[j], n[j]
            emitted = self.tracker.emit(r, drafts[j][:nj] + [nxt[j]], now)
            self.tracker.counters[r].observe_step(k_list[j], nj, emitted, draft_forwards=K)
            if self.tracker.done(r):
                self.target_pending.pop(r, None)
                self.draft_pending.pop(r, None)
                continue
            self.target_pending[r] = [nxt[j]]
            if not K:  # the draft did not run: it still has to see this step's token
                self.draft_pending[r] = self.draft_pending.get(r, []) + [nxt[j]]
            elif nj == K:  # every draft accepted: the draft never fed its own last token
                self.draft_pending[r] = [drafts[j][K - 1], nxt[j]]
            else:
                self.draft_pending[r] = [nxt[j]]


class SpeculativeEngine:
    name = "speculative"
    speculative = True
    capabilities = Capabilities(steppable=True)
    layout = RaggedBatch
    tracker = Tracker

    def __init__(self, target: torch.nn.Module, draft: torch.nn.Module, device: torch.device):
        self.target = target
        self.draft = draft
        self.device = device

    # --- the algorithm --------------------------------------------------------------------

    def step(self, rows: Rows, tgt: RaggedBatch, drf: RaggedBatch, settings: GenerationSettings,
             rnd: RowRandom | None, clock: Clock) -> None:
        """One step for every active row: draft, verify, accept, then the residual or bonus token.

        The step is split into small methods so that each rule of the algorithm is one to three lines that the
        self-test can break on its own (the *seams*, e.g. :meth:`accepted_count`, :meth:`next_position`,
        :meth:`target_keep`, :meth:`accept_test`, :meth:`residual`: all listed above their definitions); a mutant
        overrides one and must be caught.

        Shapes: R rows in the batch (finished rows included until they are dropped), V the vocabulary, P the
        widest pending-token list. Draft lengths, by name: ``k`` is the configured ``num_draft_tokens`` (it
        sizes each row's random draws, so a row's stream does not depend on its budget); ``k_row[r]``
        (``k_list``) is row r's draft length this step, ``k`` capped by what the row may still generate;
        ``K = max(k_row)`` is the width drafted and verified for the batch (rows with ``k_row[r] < K`` carry
        invalid columns).
        """
        k = settings.num_draft_tokens
        active = rows.active()
        # Host-side bookkeeping, no wait on the device: which rows are live and how far each may draft come from
        # the tracker's plain-Python token budgets (set by the previous step's one read-back, below).
        k_list = rows.draft_budget(active, k)
        k_row, K = torch.tensor(k_list, device=self.device), max(k_list)  # k_row: [R] long (a copy to it); K: int
        u_draft = u_accept = u_final = None
        if rnd is not None:
            u = torch.zeros(len(rows.ids), 2 * k + 1, dtype=torch.float64, device=self.device)  # [R, 2k+1]
            u[active] = rnd.uniform([rows.ids[j] for j in active], 2 * k + 1)
            u_draft, u_accept, u_final = u[:, :k], u[:, k:2 * k], u[:, 2 * k]  # [R, k], [R, k], [R]

        draft_pending = [rows.draft_pending.get(r, []) for r in rows.ids]
        d_start, d_width = drf.length, max(len(p) for p in draft_pending)
        drafts, q = self.propose(drf, draft_pending, k_row, K, settings, u_draft)  # [R, K] long; [R, K, V] | None

        t_start = tgt.length
        pending_ids, pending_valid = right_align(  # [R, P] long, [R, P] bool (left holes where a row has fewer)
            [rows.target_pending.get(r, []) for r in rows.ids], self.device)
        draft_valid = self._real(K, k_row)  # [R, K] bool: d_j is real where j < k_row
        logits = tgt.forward(torch.cat([pending_ids, drafts], 1), torch.cat([pending_valid, draft_valid], 1),
                             logits_to_keep=K + 1)  # [R, K+1, V]: p_1 .. p_{K+1}

        if settings.greedy:
            n, nxt = self.accept_greedy(drafts, logits, k_row)  # [R] long, [R] long
        else:
            n, nxt = self.accept_sampling(drafts, logits, q, k_row, settings, u_accept, u_final)

        # Sync 1 of the step, the one read-back: the host learns what each row emitted, once for the whole batch
        # (drafts, accepted counts, next tokens in one transfer).  It must: EOS and the token budget end rows, and
        # the next step's draft lengths and pending tokens depend on them (Rows.commit, on the host).
        out = torch.cat([drafts, n[:, None], nxt[:, None]], 1).tolist()  # [R, K+2]: d_1..d_K, n, next
        rows.commit(active, k_list, K, [r[:K] for r in out], [r[K] for r in out], [r[K + 1] for r in out],
                    clock.now())
        # Syncs 2-3: each cache's rollback reads the longest row it keeps (RaggedBatch.rollback crops the columns
        # no row kept, a host-side length); compact() reads the longest valid row of each, once per step as well.
        tgt.rollback(t_start, self.target_keep(pending_ids.shape[1], n, K))  # keep [R] columns per row
        if K:
            drf.rollback(d_start, d_width + n.clamp(max=K - 1))  # [R]: what the draft itself fed

    def propose(self, draft: RaggedBatch, pending: list[list[int]], k_row: torch.Tensor, K: int,
                settings: GenerationSettings, u_draft: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Draft K tokens per row: ([R, K] token ids, [R, K, V] draft distributions q, or None)."""
        if not K:
            return torch.zeros(len(pending), 0, dtype=torch.long, device=self.device), None
        ids, valid = right_align(pending, self.device)  # [R, P] long, [R, P] bool
        drafts, qs = [], []
        for j in range(K):
            logits = draft.forward(ids, valid, logits_to_keep=1)[:, -1]  # [R, V]
            if settings.greedy:
                d = logits.argmax(-1)  # [R]
            else:
                q = probs(logits, settings)  # [R, V]: q_j, the draft distribution at position j
                d = self.draft_token(q, u_draft[:, j])  # [R]
                qs.append(q)
            drafts.append(d)
            ids, valid = d[:, None], (k_row > j)[:, None]  # [R, 1] each: d_{j+1} is real only where j < k_row
        return torch.stack(drafts, 1), (torch.stack(qs, 1) if qs else None)

    def draft_token(self, q: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Sampling: the draft token at one position, a draw from q [R, V] with the uniforms u [R]."""
        return sample(q, u)

    def accept_greedy(self, drafts: torch.Tensor, logits: torch.Tensor, k_row: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """(accepted count n [R], next token [R]): the longest prefix the target agrees with, then its own token."""
        R, K = drafts.shape
        assert drafts.dtype == k_row.dtype == torch.long and logits.shape[:2] == (R, K + 1) and k_row.shape == (R,), \
            (drafts.shape, logits.shape, k_row.shape)
        best = logits.argmax(-1)  # [R, K+1]: the target's choice at each position
        match = (drafts == best[:, :K]) & self._real(K, k_row)  # [R, K] bool
        n = self.accepted_count(match, k_row)  # [R]
        return n, best.gather(1, self.next_position(n, k_row)[:, None])[:, 0]

    def accept_sampling(self, drafts: torch.Tensor, logits: torch.Tensor, q: torch.Tensor | None,
                        k_row: torch.Tensor, settings: GenerationSettings, u_accept: torch.Tensor,
                        u_final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(accepted count n [R], next token [R]) by the rejection rule, then the residual or bonus draw."""
        R, K = drafts.shape
        assert logits.shape[:2] == (R, K + 1) and k_row.shape == (R,) and u_final.shape == (R,), \
            (drafts.shape, logits.shape, k_row.shape, u_final.shape)
        assert K == 0 or (q is not None and q.shape == (R, K, logits.shape[2]) and u_accept.shape[0] == R), \
            (None if q is None else q.shape, logits.shape)
        p = probs(logits, settings)  # [R, K+1, V]: p_1 .. p_{K+1}
        if K:
            p_d = p[:, :K].gather(2, drafts[..., None])[..., 0]  # [R, K]: p_j(d_j)
            q_d = q.gather(2, drafts[..., None])[..., 0]  # [R, K]: q_j(d_j)
            n = self.accepted_count(self.accept_test(u_accept[:, :K], p_d, q_d) & self._real(K, k_row), k_row)
        else:
            n = torch.zeros(len(drafts), dtype=torch.long, device=self.device)
        return n, sample(self.final_distribution(p, q, n, k_row), u_final)

    # --- mutation seams: the self-test's broken engines (gate/engines/mutants.py) override the ones below
    # --- (accept_test, accepted_count, next_position, residual, target_keep, drop_finished), draft_token above, the
    # --- batch layout's (gate/engines/layout.py: positions, attention_mask, reject, select) or the tracker's
    # --- (gate/engines/tracking.py: eos_at); the correct versions ignore some parameters on purpose, so a mutant
    # --- can use them.

    def accept_test(self, u: torch.Tensor, p_d: torch.Tensor, q_d: torch.Tensor) -> torch.Tensor:
        assert u.shape == p_d.shape == q_d.shape, (u.shape, p_d.shape, q_d.shape)  # [R, K] each
        return u * q_d < p_d  # accept d with probability min(1, p(d) / q(d)); p >= q: always

    def accepted_count(self, ok: torch.Tensor, k_row: torch.Tensor) -> torch.Tensor:
        """Seam: drafts accepted per row. ``k_row`` is unused here (``ok`` is already False past it)."""
        return ok.int().cumprod(1).sum(1)  # the accepted prefix ends at the first rejection

    def next_position(self, n: torch.Tensor, k_row: torch.Tensor) -> torch.Tensor:
        """Seam: where the target's own next token is read. ``k_row`` is unused here."""
        return n  # the token after n accepted drafts is drawn at position n + 1 (index n)

    def final_distribution(self, p: torch.Tensor, q: torch.Tensor | None, n: torch.Tensor,
                           k_row: torch.Tensor) -> torch.Tensor:
        """Where the token after the accepted prefix comes from: the residual, or p for the bonus."""
        R, _, V = p.shape
        at = self.next_position(n, k_row)[:, None, None].expand(R, 1, V)  # [R, 1, V]
        p_n = p.gather(1, at)[:, 0]  # [R, V]
        if q is None:
            return p_n
        q_n = torch.cat([q, torch.zeros_like(q[:, :1])], 1).gather(1, at)[:, 0]  # [R, V]; 0 past the drafts
        bonus = (n >= k_row)[:, None]  # [R, 1]: every real draft accepted, a plain draw from p_{K+1}
        return torch.where(bonus, p_n, self.residual(p_n, q_n))

    def residual(self, p_n: torch.Tensor, q_n: torch.Tensor) -> torch.Tensor:
        assert p_n.shape == q_n.shape and p_n.ndim == 2 and p_n.is_floating_point(), (p_n.shape, q_n.shape, p_n.dtype)
        r = (p_n - q_n).clamp_(min=0)  # [R, V]: norm(max(0, p - q))
        total = r.sum(-1, keepdim=True)  # [R, 1]
        return torch.where(total > 0, r / total.clamp(min=1e-30), p_n)

    def target_keep(self, width: int, n: torch.Tensor, K: int) -> torch.Tensor:
        """Seam: target-cache columns kept per row after verification. ``K`` is unused here."""
        return width + n  # pending tokens and accepted drafts stay in the target cache; rejected ones go

    def _real(self, K: int, k_row: torch.Tensor) -> torch.Tensor:
        return torch.arange(K, device=self.device)[None] < k_row[:, None]

    # --- the loop --------------------------------------------------------------------------

    def drop_finished(self, rows: Rows, batches: list[RaggedBatch]) -> None:
        rows.ids = shrink(rows.ids, rows.tracker, batches)

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
        rows = Rows(requests, tracker)
        while rows.active():
            self.step(rows, tgt, drf, settings, rnd, clock)
            self.drop_finished(rows, [tgt, drf])
            tgt.compact()
            drf.compact()
        wall = clock.now() - start
        return BatchResult(tracker.results(), wall_s=wall, realign_s=realign.total,
                           num_target_forwards=tgt.forwards, num_draft_forwards=drf.forwards,
                           peak_memory_bytes=peak_memory_bytes(self.device))
