"""How far apart two logits must be before a different choice between them is a bug.

Greedy decoding picks the largest logit.  When two candidates are within
floating-point noise of each other, a change of batch shape can legitimately
flip the choice; when they are far apart, no numerical effect can, and the
flip is a bug.  The tolerance below which a gap counts as a near-tie is, per
position::

    tol = max(noise_factor * measured_noise, ulp_factor * ulp(dtype, |max logit|))

* ``measured_noise`` is measured on this run's own models and hardware: the
  same sequences are re-scored alone and in a padded batch, and the largest
  change in the gap between the top two logits is taken (:func:`measure_noise`).
* ``ulp(dtype, m)`` is the spacing of representable numbers near ``m`` in the
  model's dtype (``finfo(dtype).eps * 2**floor(log2 m)``): bf16 logits around 10
  are 0.0625 apart, so two such logits cannot be told apart more finely than that.

A fixed ``checks.equivalence.logit_tolerance`` in the config replaces both.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from gate.engines.scoring import Item, Scorer

NOISE_FACTOR = 4.0  # two candidates each moved by up to the noise, with 2x margin
ULP_FACTOR = 2.0


@dataclass(frozen=True)
class Tolerance:
    dtype: str
    eps: float  # finfo(dtype).eps
    measured_noise: float | None
    fixed: float | None = None
    noise_factor: float = NOISE_FACTOR
    ulp_factor: float = ULP_FACTOR
    source: str = "local"  # "server": measured from the reference server's logprobs

    def at(self, max_logit: float) -> float:
        if self.fixed is not None:
            return self.fixed
        m = max(abs(max_logit), 1e-30)
        ulp = self.eps * 2.0 ** math.floor(math.log2(m))
        return max(self.noise_factor * (self.measured_noise or 0.0), self.ulp_factor * ulp)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "eps": self.eps, "measured_noise": self.measured_noise,
                "fixed": self.fixed, "noise_factor": self.noise_factor, "ulp_factor": self.ulp_factor,
                "rule": ("max(4 x the reference server's measured logprob noise (alone vs at the highest "
                         "concurrency), 1e-3 nats)" if self.source == "server" else
                         "fixed by checks.equivalence.logit_tolerance" if self.fixed is not None else
                         f"max({self.noise_factor} x measured noise, {self.ulp_factor} x ULP of |max logit| "
                         f"in {self.dtype})")}


def _top2(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    top = rows.topk(2, dim=-1)
    return top.indices, top.values[:, 0] - top.values[:, 1]


_REUSED: dict | None = None  # measurements kept inside a `noise_reused()` block


@contextlib.contextmanager
def noise_reused() -> Iterator[None]:
    """Inside the block, a repeated measurement (the same model object, device, sequences and batch size) is
    answered from the first one.  The self-test's runs share one reference and one pair, so the noise is measured
    once, not once per mutant and seed; nothing else changes the weights of a loaded pair in between."""
    global _REUSED
    outer = _REUSED
    _REUSED = {} if outer is None else outer
    try:
        yield
    finally:
        _REUSED = outer


def measure_noise(scorer: Scorer, items: list[Item], batch_size: int) -> float:
    """Largest change of the top-2 logit gap between scoring each sequence alone and in a padded batch."""
    items = [it for it in items if it[1]]
    key = (id(scorer.model), str(scorer.device), tuple(items), batch_size)
    if _REUSED is not None and key in _REUSED:
        return _REUSED[key]
    worst = _measure_noise(scorer, items, batch_size)
    if _REUSED is not None:
        _REUSED[key] = worst
    return worst


def _measure_noise(scorer: Scorer, items: list[Item], batch_size: int) -> float:
    alone = [scorer.logits_rows([it], lambda _, rows: _top2(rows), batch_size=1)[0] for it in items]
    worst = 0.0
    for start in range(0, len(items), max(batch_size, 2)):
        chunk = items[start:start + max(batch_size, 2)]

        def change(j: int, rows: torch.Tensor, start=start) -> float:
            idx, gap = alone[start + j]
            batched = rows.gather(1, idx[:, :1])[:, 0] - rows.gather(1, idx[:, 1:2])[:, 0]
            return float((batched - gap).abs().max())

        worst = max([worst, *scorer.logits_rows(chunk, change, batch_size=max(batch_size, 2))])
    return worst


def tolerance_for(dtype: torch.dtype, measured: float | None, fixed: float | None = None) -> Tolerance:
    return Tolerance(str(dtype).replace("torch.", ""), float(torch.finfo(dtype).eps), measured, fixed)
