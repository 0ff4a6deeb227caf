"""A served target's distribution at a sampled position as a categorical over its top-k tokens and the rest of the
vocabulary, for the distribution tests (:mod:`gate.checks.distribution`) where the reference server scores the
sampled tokens (``models.local_weights: false`` or ``draft``)."""

from __future__ import annotations

import math

import torch

from gate.engines.scoring import Scorer


def coarsened(rows: list[tuple[tuple, list[int], list[float], list[dict[int, float]]]],
              draft: Scorer | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The served target's distribution at each sampled position as a categorical over its top-k tokens (by rank)
    and OTHER, the rest of the vocabulary; the emitted token's category; and the draft's probabilities of the same
    categories (loaded here), or the target's where there is no draft (the target tests then read q = p).

    Exact, not an approximation: under the null the emitted token's category is a draw from these probabilities
    (its top-k logprobs are the full-vocabulary softmax's; OTHER gets the remainder), so the four tests hold their
    size on the categories.  Power is lost only where a distortion moves mass within OTHER."""
    width = max((len(t) for _, _, _, tops in rows for t in tops), default=0) + 1
    p_rows, order, cats = [], [], []  # order[item]: each position's category ids, by rank
    for _, out, _, tops in rows:
        order.append([])
        for y, top in zip(out, tops):
            ids = sorted(top, key=top.get, reverse=True)
            p = torch.zeros(width, dtype=torch.float64)
            p[:len(ids)] = torch.tensor([math.exp(top[i]) for i in ids], dtype=torch.float64)
            p[-1] = max(0.0, 1.0 - float(p[:-1].sum()))
            p_rows.append(p / p.sum())
            cats.append(ids.index(y) if y in top else width - 1)
            order[-1].append(ids)
    p = torch.stack(p_rows) if p_rows else torch.zeros(0, width, dtype=torch.float64)
    if draft is None:
        return p, p.clone(), torch.tensor(cats, dtype=torch.long)

    def reduce(i: int, logits: torch.Tensor) -> torch.Tensor:
        """Item i's draft distributions (T = 1, as the server's prompt logprobs) on its categories: [positions,
        width], never [positions, vocabulary] for every item at once."""
        full = torch.softmax(logits.double(), -1).cpu()
        q = torch.zeros(len(order[i]), width, dtype=torch.float64)
        for j, ids in enumerate(order[i]):
            q[j, :len(ids)] = full[j, ids]
            q[j, -1] = max(0.0, 1.0 - float(q[j, :len(ids)].sum()))
        return q

    q = torch.cat([x for x in draft.logits_rows([(r[0], tuple(r[1])) for r in rows], reduce) if x is not None])
    return p, q / q.sum(1, keepdim=True).clamp(min=1e-300), torch.tensor(cats, dtype=torch.long)


__all__ = ["coarsened"]
