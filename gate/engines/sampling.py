"""Per-sequence randomness and inverse-CDF sampling.

Every request owns a random stream seeded from its own seed, and every step
draws a fixed number of uniforms from it.  A sequence's sampled output then
depends on its prompt and seed only, not on which other sequences share its
batch, so sampled runs can be compared across batch sizes too.
"""

from __future__ import annotations

import torch

from gate.stacks import orders


class RowRandom:
    """One CPU generator per row; uniforms are drawn per row and moved to the device."""

    def __init__(self, seeds: list[int], device: torch.device):
        self.device = device
        self.generators = []
        for s in seeds:
            g = torch.Generator(device="cpu")
            g.manual_seed(int(s) & 0xFFFF_FFFF_FFFF)
            self.generators.append(g)

    def uniform(self, rows: list[int], n: int) -> torch.Tensor:
        """[len(rows), n] uniforms in [0, 1), each row from its own stream."""
        u = torch.stack([torch.rand(n, generator=self.generators[r], dtype=torch.float64) for r in rows])
        return u.to(self.device)


def probs(logits: torch.Tensor, settings) -> torch.Tensor:
    """The distribution a token is drawn from: ``logits`` [..., V] at the settings' temperature, truncated by their
    ``top_k``, ``top_p`` and ``min_p`` in their ``order`` and renormalised (float32)."""
    x = logits.float() / settings.temperature
    if settings.truncated:
        x = truncate(x, settings.top_k, settings.top_p, settings.min_p, settings.order)
    return torch.softmax(x, dim=-1)


def truncate(x: torch.Tensor, top_k: int, top_p: float, min_p: float, order: str = "vllm") -> torch.Tensor:
    """Tempered logits ``x`` [..., V] with every token the truncation drops set to -inf, in ``order``: a stack's
    truncation order (gate/stacks/: vLLM V1's sampler applies min_p as a logits processor before its top-k/top-p
    step, top-p over the top-k renormalised) or ``transformers`` (generate()'s warpers: top-k, top-p, min-p).  Each
    mask is the same in every order (ties at the k-th logit kept, at least one token kept by top-p, min_p against
    the largest probability of what reaches it)."""
    for step in orders()[order]:
        if step == "top_k" and 0 < top_k < x.shape[-1]:
            kth = x.topk(top_k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, float("-inf"))
        elif step == "top_p" and top_p < 1.0:
            ordered, index = x.sort(dim=-1, descending=False)
            drop = ordered.softmax(-1).cumsum(-1) <= 1.0 - top_p
            drop[..., -1] = False  # the most likely token always stays
            x = x.masked_fill(torch.zeros_like(drop).scatter(-1, index, drop), float("-inf"))
        elif step == "min_p" and min_p > 0.0:
            p = x.softmax(-1)
            x = x.masked_fill(p < min_p * p.amax(-1, keepdim=True), float("-inf"))
    return x


def sample(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sample from each row of ``p`` [..., V] with uniforms ``u`` [...]."""
    cdf = p.double().cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[..., -1]).unsqueeze(-1), right=True).squeeze(-1)
    return idx.clamp_(max=p.shape[-1] - 1)
