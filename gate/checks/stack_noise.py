"""Another stack's own numerical noise, measured on its own plain decoding (issue 38).

The gate's tolerance is measured on the gate's torch reference.  A plug-in or a server computes with its own
kernels, often at a lower precision than the config says (OpenVINO's default bf16 inference on a CPU with
AVX512-BF16, a GPU server's bf16 or TF32 kernels), and flips near-ties at its own scale, which the gate's
measurement never sees.  So, for each engine of another stack:

* **measured**: where it has its own plain decoding (a plug-in's ``engines[].reference``, run on the engine's
  equivalence batches; an http engine's ``http.reference``, which is then the gate's reference), every token of
  that decoding is re-scored with the target.  A token beyond the gate's own tolerance is a *departure*: not
  speculation, by definition.  The largest departure within the cross-stack band (:func:`band`) is the stack's
  noise, and the engine's tolerance becomes ``max(the gate's rule, STACK_FACTOR x that noise)``.  Departures
  beyond the band are no precision effect: the plain decoding's own line fails (:mod:`gate.checks.noise_floor`).
  And what the engine shares with its plain decoding (the same prefix for the same prompt) is that stack's
  behaviour, never blamed on speculation (:func:`gate.checks.equivalence.analyze_sequence`, ``plain``);
* **unmeasured**: where it has none, its departures within the band cannot be told from noise; they warn, and
  only those beyond the band fail.

The precision in the gate's ULP term is the one the engine reports (a plug-in result's ``precision``), else the
config's dtype.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gate.checks.doc import StackNoise, VerdictLine
from gate.engines.tolerance import BAND_RULE, BAND_ULPS, Tolerance, band

CHECK = "stack_noise"


@dataclass
class Departures:
    """How a stack's plain decoding departs from the target's argmax, over every token of it re-scored."""

    tokens: int = 0
    within_band: int = 0  # beyond the gate's tolerance, within the band: the stack's precision
    beyond_band: int = 0
    largest: float | None = None  # the largest departure within the band (nats): the stack's measured noise

    def add(self, scored, base: Tolerance) -> None:
        """``scored``: one re-scored output (:class:`gate.checks.equivalence.Scored`); ``base``: the gate's rule at
        the precision the stack computes in."""
        for t in range(len(scored.chosen)):
            self.tokens += 1
            gap = scored.gap(t)
            if gap <= base.at(scored.best[t]):
                continue
            if gap <= band(scored.best[t]):
                self.within_band += 1
                self.largest = max(self.largest or 0.0, gap)
            else:
                self.beyond_band += 1


def engine_tolerance(base: Tolerance, plain: Departures | None) -> Tolerance:
    """An engine of another stack's tolerance: widened by its plain decoding's measured noise, or, unmeasured, with
    the cross-stack band.  A tolerance fixed by the config stays fixed."""
    if plain is not None and plain.tokens:
        return dataclasses.replace(base, stack_noise=plain.largest)
    return dataclasses.replace(base, band_ulps=BAND_ULPS)


def plain_tolerance(base: Tolerance) -> Tolerance:
    """A stack's own plain decoding is judged with the band: departures within it are that stack's precision."""
    return dataclasses.replace(base, band_ulps=BAND_ULPS)


def describe(engine: str, plain: str | None, departures: Departures | None, tol: Tolerance, precision: str,
             reported: bool, config_dtype: str) -> StackNoise:
    measured = plain is not None and departures is not None and departures.tokens > 0
    return StackNoise(plain=plain if measured else None, mode="measured" if measured else "unmeasured",
                      precision=precision, precision_reported=reported, config_dtype=config_dtype,
                      noise=departures.largest if measured else None,
                      departures=departures.within_band if measured else 0,
                      beyond_band=departures.beyond_band if measured else 0,
                      tokens=departures.tokens if measured else 0, rule=tol.rule,
                      tolerance_at_10=tol.at(10.0), band_at_10=band(10.0))


def run(results, ctx) -> tuple[dict[str, StackNoise] | None, list[VerdictLine]]:
    """The check: each engine of another stack's noise and tolerance, measured while the context compared the
    outputs (:meth:`gate.checks.context.CheckContext._measure_stacks`), in words."""
    ctx.compared_keys()  # the comparison measures the stacks
    if not ctx.stack_noise:
        return None, []
    return ctx.stack_noise, [line(engine, s) for engine, s in ctx.stack_noise.items()]


def line(engine: str, s: StackNoise) -> VerdictLine:
    """The verdict line of an engine's stack noise (status info: the verdicts are equivalence's)."""
    return VerdictLine.of(CHECK, engine, "info", sentence(engine, s))


def sentence(engine: str, s: StackNoise) -> str:
    """What the report says of an engine's stack noise, in words."""
    said = f"it reports computing in {s.precision}" if s.precision_reported else None
    held = f"tolerance for {engine}: {s.tolerance_at_10:.2g} at a logit of 10 ({s.rule})"
    if s.mode == "unmeasured":
        why = (f"cross-stack noise not measured for {engine}: it has no own plain decoding (a plug-in's "
               "engines[].reference, an http engine's http.reference), so its departures from the target within "
               f"the cross-stack band ({BAND_RULE}) cannot be told from float noise and warn, and beyond it fail as "
               f"bugs; {held}" + (f"; {said}" if said else ""))
    elif s.departures:
        why = (f"{engine}'s plain decoding ({s.plain}) differs from the {s.config_dtype} target at near-ties up to "
               f"{s.noise:.2g} nats ({s.departures} of {s.tokens} tokens): "
               + (said or f"it computes at lower precision than the config says ({s.config_dtype})") + f"; {held}")
    else:
        why = (f"{engine}'s plain decoding ({s.plain}) is within the {s.precision} rule's tolerance of the "
               f"{s.config_dtype} target on all {s.tokens} tokens" + (f" ({said})" if said else "") + f"; {held}")
    if s.beyond_band:
        why += (f"; {s.beyond_band} token(s) of its plain decoding lie beyond the band, which no precision explains "
                "(see noise_floor)")
    return why


__all__ = ["CHECK", "Departures", "describe", "engine_tolerance", "line", "plain_tolerance", "run", "sentence"]
