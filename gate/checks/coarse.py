"""A served target's distribution at a sampled position as a categorical over its top-k tokens and the rest of the
vocabulary, for the distribution tests (:mod:`gate.checks.distribution`) where the reference server scores the
sampled tokens (``models.local_weights: false`` or ``draft``)."""

from __future__ import annotations

import math

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


__all__ = ["coarsened"]
