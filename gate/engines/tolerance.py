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

**Another stack's precision** (a plug-in or a server: its own kernels, often bf16 or TF32 where the config says
float32).  Its near-ties flip at its own noise scale, which the gate's torch measurement does not see:

* where the engine has its own plain decoding (a plug-in's ``engines[].reference``, an http engine's
  ``http.reference``), that decoding's departures from the target (re-scored here) are by definition not
  speculation: the largest one within the cross-stack band is the stack's measured noise, and the engine's
  tolerance becomes ``max(rule above, STACK_FACTOR x that noise)`` (``stack_noise``);
* where it has none, nothing measures its noise: a departure within the **cross-stack band**
  (``BAND_ULPS`` bf16 ULPs of the largest logit, :func:`band`; 0.25 nats at a logit of 10) cannot be told from
  noise and is reported as such (``band_ulps``), and one beyond the band is a bug as before;
* ``dtype`` is the precision the engine says it computes in (a plug-in result's ``precision``), else the config's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from gate.engines.base import PRECISION_EPS as _EPS
from gate.engines.base import precision_name
from gate.engines.scoring import Item, Scorer

NOISE_FACTOR = 4.0  # two candidates each moved by up to the noise, with 2x margin
ULP_FACTOR = 2.0
STACK_FACTOR = 4.0  # as NOISE_FACTOR: the stack's largest plain-decoding departure, for each of two candidates, x2
BAND_DTYPE = "bfloat16"  # the lowest precision serving stacks compute logits in by default (fp8 weights aside)
BAND_ULPS = 4.0  # the cross-stack band: departures within it cannot be told from another stack's float noise


def ulp(eps: float, max_logit: float) -> float:
    """The spacing of representable numbers near ``max_logit`` in a format whose machine epsilon is ``eps``."""
    m = max(abs(max_logit), 1e-30)
    return eps * 2.0 ** math.floor(math.log2(m))


def band(max_logit: float) -> float:
    """The cross-stack band at a position whose largest logit is ``max_logit``: BAND_ULPS ULPs of it in bf16."""
    return BAND_ULPS * ulp(_EPS[BAND_DTYPE], max_logit)


BAND_RULE = f"{BAND_ULPS:g} {BAND_DTYPE} ULPs of the largest logit ({band(10.0):.2g} nats at a logit of 10)"


@dataclass(frozen=True)
class Tolerance:
    dtype: str
    eps: float  # finfo(dtype).eps
    measured_noise: float | None
    fixed: float | None = None
    noise_factor: float = NOISE_FACTOR
    ulp_factor: float = ULP_FACTOR
    source: str = "local"  # "server": measured from the reference server's logprobs
    # another stack's own plain decoding: its largest departure from the target within the band (nats)
    stack_noise: float | None = None
    stack_factor: float = STACK_FACTOR
    # another stack whose noise was not measured: departures up to this many bf16 ULPs cannot be told from noise
    band_ulps: float | None = None

    def at(self, max_logit: float) -> float:
        if self.fixed is not None:
            return self.fixed
        own = max(self.noise_factor * (self.measured_noise or 0.0), self.ulp_factor * ulp(self.eps, max_logit))
        return max(own, self.stack_factor * self.stack_noise) if self.stack_noise else own

    def classify(self, gap: float, max_logit: float) -> str:
        """``near_tie`` (within the tolerance), ``band`` (beyond it but within the cross-stack band, where this
        tolerance has one: not told from another stack's noise) or ``confident``."""
        if abs(gap) <= self.at(max_logit):
            return "near_tie"
        if self.band_ulps is not None and self.fixed is None and abs(gap) <= self.band_at(max_logit):
            return "band"
        return "confident"

    def band_at(self, max_logit: float) -> float:
        return (self.band_ulps or BAND_ULPS) * ulp(_EPS[BAND_DTYPE], max_logit)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "eps": self.eps, "measured_noise": self.measured_noise,
                "fixed": self.fixed, "noise_factor": self.noise_factor, "ulp_factor": self.ulp_factor,
                "rule": self.rule}

    @property
    def rule(self) -> str:
        if self.source == "server":
            return ("max(4 x the reference server's measured logprob noise (alone vs at the highest concurrency), "
                    "1e-3 nats)")
        if self.fixed is not None:
            return "fixed by checks.equivalence.logit_tolerance"
        own = f"{self.noise_factor} x measured noise, {self.ulp_factor} x ULP of |max logit| in {self.dtype}"
        if self.stack_noise:
            return f"max({own}, {self.stack_factor:g} x its own plain decoding's largest departure " \
                   f"{self.stack_noise:.2g})"
        return f"max({own})"


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


def tolerance_for(dtype: torch.dtype | str, measured: float | None, fixed: float | None = None) -> Tolerance:
    """The rule for a computation in ``dtype`` (a torch dtype, or a precision name an engine reported)."""
    if isinstance(dtype, str):
        name = precision_name(dtype) or dtype
        return Tolerance(name, _EPS[name], measured, fixed)
    return Tolerance(str(dtype).replace("torch.", ""), float(torch.finfo(dtype).eps), measured, fixed)
