"""The rejection sampler on a toy p and q: every emitted token is an exact draw from the target.

The theorem (Leviathan et al. 2023, Appendix A.1; Chen et al. 2023, Theorem 1) says that a draft token accepted
with probability min(1, p/q), else a draw from norm(max(0, p - q)), is distributed as p, and that the bonus after
k accepted drafts is a plain draw from p_{k+1}. This checks the gate's own step methods (the ones the self-test's
mutants override) on 200,000 rows at once, with per-position distributions that do not depend on the prefix, so
each emitted position must follow its own p_j. The self-test covers the same theorem end to end in minutes; this
takes well under a second.
"""

from __future__ import annotations

import pytest
import torch

from gate.engines.base import GenerationSettings
from gate.engines.mutants import InvertedRatio, NoResidual
from gate.engines.speculative import SpeculativeEngine

ROWS = 200_000
# The target p_j and the draft q_j at positions 1..3 (p has a 4th row, p_{K+1}, for the bonus).
P = torch.tensor([[0.50, 0.20, 0.10, 0.10, 0.10],
                  [0.05, 0.05, 0.30, 0.30, 0.30],
                  [0.25, 0.25, 0.25, 0.15, 0.10],
                  [0.70, 0.10, 0.10, 0.05, 0.05]], dtype=torch.float64)
Q = torch.tensor([[0.10, 0.10, 0.20, 0.30, 0.30],
                  [0.40, 0.40, 0.10, 0.05, 0.05],
                  [0.25, 0.25, 0.25, 0.15, 0.10]], dtype=torch.float64)
TOLERANCE = 0.006  # over five standard errors of a frequency estimated from 200,000 draws (at most 0.0011)


def emitted(engine: SpeculativeEngine, K: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [ROWS, K+1] with -1 where a row emitted fewer, accepted counts [ROWS]) from one step."""
    gen = torch.Generator().manual_seed(seed)
    q = Q[:K].float().expand(ROWS, K, -1)
    drafts = torch.multinomial(Q[:K].repeat(ROWS, 1), 1, generator=gen).view(ROWS, K)
    logits = P[:K + 1].log().float().expand(ROWS, K + 1, -1)
    u = torch.rand(ROWS, K + 1, generator=gen, dtype=torch.float64)
    k_row = torch.full((ROWS,), K)
    settings = GenerationSettings(temperature=1.0, num_draft_tokens=K)
    n, nxt = engine.accept_sampling(drafts, logits, q, k_row, settings, u[:, :K], u[:, K])
    out = torch.full((ROWS, K + 1), -1)
    pos = torch.arange(K + 1)[None]
    out = torch.where(pos < n[:, None], torch.cat([drafts, drafts[:, :1]], 1), out)
    out[torch.arange(ROWS), n] = nxt
    return out, n


def frequencies(tokens: torch.Tensor) -> torch.Tensor:
    return torch.bincount(tokens, minlength=P.shape[1]).double() / len(tokens)


@pytest.mark.parametrize("K", [1, 3])
def test_every_emitted_position_is_a_draw_from_the_target(K):
    out, _ = emitted(SpeculativeEngine(None, None, torch.device("cpu")), K)
    for j in range(K + 1):
        at = out[:, j][out[:, j] >= 0]  # rows that reached position j+1 in this step
        assert len(at) > 10_000
        error = (frequencies(at) - P[j]).abs().max().item()
        assert error < TOLERANCE, f"position {j + 1}: off p_{j + 1} by {error:.4f}"


def test_the_acceptance_rate_is_the_overlap_of_p_and_q():
    """alpha_j = sum_x min(p_j(x), q_j(x)) (Leviathan et al., Definition 3.1): 0.5 at position 1."""
    _, n = emitted(SpeculativeEngine(None, None, torch.device("cpu")), 1)
    alpha = torch.minimum(P[0], Q[0]).sum().item()
    assert (n >= 1).double().mean().item() == pytest.approx(alpha, abs=TOLERANCE)


@pytest.mark.parametrize("mutant", [NoResidual, InvertedRatio])
def test_a_broken_rejection_rule_is_caught_here(mutant):
    out, _ = emitted(mutant(None, None, torch.device("cpu")), 1)
    assert (frequencies(out[:, 0]) - P[0]).abs().max().item() > 10 * TOLERANCE
