"""Per-sequence randomness and inverse-CDF sampling.

Every request owns a random stream seeded from its own seed, and every step
draws a fixed number of uniforms from it.  A sequence's sampled output then
depends on its prompt and seed only, not on which other sequences share its
batch, so sampled runs can be compared across batch sizes too.
"""

from __future__ import annotations

import torch


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


def probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def sample(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sample from each row of ``p`` [..., V] with uniforms ``u`` [...]."""
    cdf = p.double().cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[..., -1]).unsqueeze(-1), right=True).squeeze(-1)
    return idx.clamp_(max=p.shape[-1] - 1)
