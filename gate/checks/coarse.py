"""A served target's distribution at a sampled position as a categorical over its top-k tokens and the rest of the
vocabulary, for the distribution tests (:mod:`gate.checks.distribution`) where the reference server scores the
sampled tokens (``models.local_weights: false`` or ``draft``)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from gate.engines.proposers import Proposer, Row, ranked


def coarsened(rows: list[Row], proposer: Proposer | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The served target's distribution at each sampled position as a categorical over its top-k tokens (by rank)
    and OTHER, the rest of the vocabulary; the emitted token's category; and what stands for ``q`` on the same
    categories: the proposer's (:meth:`gate.engines.proposers.Proposer.outcomes`: the draft's probabilities where it
    is loaded here, the n-gram lookup's proposal as a point mass), or the target's where it has none (the target
    tests then read q = p).

    Exact, not an approximation: under the null the emitted token's category is a draw from these probabilities
    (its top-k logprobs are the full-vocabulary softmax's; OTHER gets the remainder), so the four tests hold their
    size on the categories.  Power is lost only where a distortion moves mass within OTHER."""
    width = max((len(t) for _, _, _, tops in rows for t in tops), default=0) + 1
    p_rows, cats = [], []
    for _, out, _, tops in rows:
        for y, top in zip(out, tops):
            ids = ranked(top)
            p = torch.zeros(width, dtype=torch.float64)
            p[:len(ids)] = torch.tensor([math.exp(top[i]) for i in ids], dtype=torch.float64)
            p[-1] = max(0.0, 1.0 - float(p[:-1].sum()))
            p_rows.append(p / p.sum())
            cats.append(ids.index(y) if y in top else width - 1)
    p = torch.stack(p_rows) if p_rows else torch.zeros(0, width, dtype=torch.float64)
    q = proposer.outcomes(rows, width) if proposer is not None else None
    return p, (p.clone() if q is None else q.to(p.dtype)), torch.tensor(cats, dtype=torch.long)




# --- sampled at another temperature, or truncated: what the served top-k determines --------------------


@dataclass
class Kept:
    """What a served position's top-k (log-probabilities at T = 1, the rest of the vocabulary ``rest`` of the mass)
    determines of the distribution a stack samples from at temperature ``T`` after its truncation (vLLM's order:
    min_p on the tempered distribution, then top_k, then top_p over what is left, renormalised).

    ``sure``: the top-k tokens kept whatever the rest of the vocabulary holds, most likely first, with their tempered
    log-weights (``log p / T``: renormalised over ``sure`` they are the sampled distribution conditioned on emitting
    one of them, exactly); ``dropped``: top-k tokens no completion of the vocabulary keeps; ``tail``: whether a token
    outside the top-k may be kept."""

    sure: list[tuple[int, float]]
    dropped: set[int]
    tail: bool


def kept(top: dict[int, float], temperature: float, top_k: int, top_p: float, min_p: float,
         vocab: int) -> Kept:
    """:class:`Kept` for one position.  The rest of the vocabulary (``vocab - len(top)`` tokens holding the mass the
    top-k leaves, each no likelier than the k-th) is unknown, so its tempered mass is bounded: for T <= 1 between 0
    and ``p_k**(1/T - 1) * rest``; for T > 1 between ``p_k**(1/T - 1) * rest`` and ``n**(1 - 1/T) * rest**(1/T)``
    (n tokens holding it evenly).  A token's fate under top_p moves one way with that mass, so both bounds decide
    it or leave it uncertain; min_p and top_k compare a token with the top one or count ranks, which the top-k
    decides by itself."""
    ids = ranked(top)
    inv = 1.0 / temperature
    logw = [top[i] * inv for i in ids]
    rest = max(0.0, 1.0 - sum(math.exp(top[i]) for i in ids))
    n_rest = max(0, vocab - len(ids))
    tail = rest > 1e-12 and n_rest > 0
    p_last = math.exp(top[ids[-1]]) if ids else 1.0
    scale = p_last ** (inv - 1.0)  # each unknown token's tempered weight is at most/least this times its p
    lo, hi = (0.0, scale * rest) if inv >= 1.0 else (scale * rest, n_rest ** (1.0 - inv) * rest ** inv)
    lo, hi = (lo, hi) if tail else (0.0, 0.0)
    top_w = math.exp(logw[0]) if ids else 0.0
    w = [math.exp(x) for x in logw]
    n = len(ids)
    dropped: set[int] = set()
    if min_p > 0.0 and ids:  # against the most likely token, which the top-k holds: decided by ratios alone
        n = sum(1 for x in w if x >= min_p * top_w)
        dropped |= set(ids[n:])
        if tail and w[-1] < min_p * top_w:  # every unknown token is below the k-th
            tail, lo, hi = False, 0.0, 0.0
        elif tail:
            lo = 0.0
    if top_k > 0:
        if n >= top_k:
            dropped |= set(ids[top_k:n])
            n, tail, lo, hi = top_k, False, 0.0, 0.0
        elif tail:  # at most top_k - n unknown tokens stay, each no heavier than the k-th
            lo, hi = 0.0, min(hi, (top_k - n) * (w[-1] if w else 0.0))
    uncertain: list[int] = []
    if top_p < 1.0 and n:
        s = sum(w[:n])
        cut = 1.0 - top_p
        # the known mass from rank r down (r itself included), lightest first: O(n), as a whole-vocabulary top
        # (http.score_logprobs: all) is 128k ranks at every position
        below = list(itertools.accumulate(reversed(w[:n])))[::-1]

        def keeps(r: int, t: float) -> bool:  # kept where the ascending cumulative mass passes 1 - top_p
            return r == 0 or (t + below[r]) / (s + t) > cut

        sure_n = sum(1 for r in range(n) if keeps(r, lo))  # ranks kept at the lightest rest are kept at any
        maybe_n = sum(1 for r in range(n) if keeps(r, hi))
        uncertain = ids[sure_n:maybe_n]
        dropped |= set(ids[maybe_n:n])
        if tail and hi / (s + hi) <= cut:
            tail = False
        n = sure_n
    return Kept([(i, logw[r]) for r, i in enumerate(ids[:n])], dropped - set(uncertain), tail)


@dataclass
class Sampled:
    """A served target's sampled positions as :func:`as_sampled` judges them."""

    p: torch.Tensor  # [judged, width]: each judged position's sure tokens, tempered and renormalised
    q: torch.Tensor  # the proposer's on the same outcomes (p where it has none)
    tokens: torch.Tensor  # [judged]: the emitted token's outcome
    outside: int = 0  # emitted tokens the truncation drops, whatever the vocabulary's rest holds
    beyond: int = 0  # emitted tokens the served top-k cannot place (outside it, or where top_p is undecided)
    positions: int = 0


def as_sampled(rows: list[Row], sampling, vocab: int, proposer: Proposer | None = None) -> Sampled:
    """The tests' outcomes where the stack samples at a temperature other than 1, or truncates: at each position the
    tokens the served top-k shows kept (:func:`kept`), renormalised, and the emitted token among them.

    Exact, conditionally: given that the emitted token is one of the position's sure tokens (an event the prefix
    and the token decide), it is a draw from their renormalised tempered probabilities under the null, so the four
    tests hold their size on the positions where it is.  An emitted token the truncation drops for certain is
    counted as outside (the sampler does not apply it: no test needed); one the top-k cannot place is not judged,
    and counted."""
    judged_rows, p_rows, cats, picks = [], [], [], []
    outside = beyond = total = 0
    for prompt, out, lps, tops in rows:
        tops_kept = []
        for y, top in zip(out, tops):
            k = kept(top, sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p, vocab)
            sure = [i for i, _ in k.sure]
            if y in sure:
                w = torch.tensor([x for _, x in k.sure], dtype=torch.float64).softmax(0)
                p_rows.append(w)
                cats.append(sure.index(y))
                picks.append(total)
                tops_kept.append(dict(k.sure))
            else:
                if y in k.dropped or (y not in top and not k.tail):
                    outside += 1
                else:
                    beyond += 1
                tops_kept.append({})
            total += 1
        judged_rows.append((prompt, out, lps, tops_kept))
    width = max((len(r) for r in p_rows), default=0)
    p = torch.zeros(len(p_rows), width, dtype=torch.float64)
    for j, r in enumerate(p_rows):
        p[j, :len(r)] = r
    q = p.clone()
    if proposer is not None and p_rows:
        full = proposer.outcomes(judged_rows, width + 1)
        if full is not None:
            q = full[torch.tensor(picks)][:, :width].double().clamp(min=0) ** (1.0 / sampling.temperature)
            q = q * (p > 0)
            none = q.sum(1) <= 0  # the proposal is not among the sure tokens: the target's own stands in
            q[none] = p[none]
            q = q / q.sum(1, keepdim=True)
    return Sampled(p, q, torch.tensor(cats, dtype=torch.long), outside, beyond, total)


__all__ = ["Kept", "Sampled", "as_sampled", "coarsened", "kept"]
