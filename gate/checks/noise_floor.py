"""The noise floor: how plain, non-speculative decoding differs from itself and from the target.

The reference at each batch size above 1 is judged against itself at batch size
1, with the same classifier as the engines (:mod:`gate.checks.equivalence`).
Near-tie flips here are the floor that speculative decoding must not be blamed
for; a confident divergence means the target's own batched path is broken.

Another stack's plain decoding (a plug-in's ``engines[].reference``; a served reference) is judged the same way,
with the cross-stack band as its tolerance (:mod:`gate.checks.stack_noise`): its departures from the target within the
band are that stack's precision and are reported, with the noise they measure; beyond the band no precision
explains them, and the line fails.
"""

from __future__ import annotations

from gate.checks.context import CheckContext
from gate.checks.doc import EquivalenceSummary, VerdictLine
from gate.checks.equivalence import summary_of
from gate.engines.tolerance import BAND_RULE
from gate.inputs.config import REFERENCE
from gate.run.results import Results


def run(results: Results, ctx: CheckContext) -> tuple[dict[str, EquivalenceSummary] | None, list[VerdictLine]]:
    findings, verdicts = {}, []
    served = REFERENCE in ctx.stacks.values()  # the reference is a stack's own server, re-scored here
    for engine, bs in ctx.compared_keys():
        if engine != REFERENCE:
            continue
        s = summary_of(ctx.compared(engine, bs), ctx.canonical, ctx.pair.decode)
        findings[str(bs)] = s
        conf = s.divergences.confident + s.confident_inconsistencies + s.divergences.length
        band = s.divergences.band + s.band_inconsistencies
        differ = 1 - (s.exact_match or 0)
        if conf:
            verdicts.append(VerdictLine.of("noise_floor", REFERENCE, "fail",
                                    f"plain decoding at batch size {bs} diverges confidently from batch size 1 "
                                    f"({conf} finding(s)"
                                    + (f", beyond the cross-stack band: {BAND_RULE}" if served else "")
                                    + "): the target's own batched path is broken", bs))
        elif differ:
            verdicts.append(VerdictLine.of("noise_floor", REFERENCE, "info",
                                    f"plain decoding at batch size {bs}: {differ:.0%} of sequences differ from "
                                    "batch size 1, all at near-ties (float noise"
                                    + (f"; {band} beyond the gate's own tolerance, within the served stack's "
                                       "precision band" if band else "") + ")", bs))
        else:
            verdicts.append(VerdictLine.of("noise_floor", REFERENCE, "info",
                                    f"plain decoding at batch size {bs} is identical to batch size 1", bs))
    for engine, plain in ctx.stacks.items():
        if plain is not None and plain != REFERENCE:
            verdicts += _own_reference(engine, plain, ctx)
    return findings, verdicts


def _own_reference(engine: str, plain: str, ctx: CheckContext) -> list[VerdictLine]:
    """A plug-in's own plain decoding against the canonical reference, at each batch size it ran."""
    out = []
    sizes = sorted(bs for e, bs in ctx.compared_keys() if e == plain)
    for bs in sizes:
        s = summary_of(ctx.compared(plain, bs), ctx.canonical, ctx.pair.decode)
        if engine in ctx.stack_noise:
            ctx.stack_noise[engine].plain_by_batch_size[str(bs)] = s
        conf = s.divergences.confident + s.confident_inconsistencies + s.divergences.length
        band = s.divergences.band + s.band_inconsistencies
        if conf or s.signatures:
            found = ([f"{conf} divergence(s) or token(s) beyond the cross-stack band ({BAND_RULE})"] if conf else []) \
                + [f"{n} sequence(s) with {k}" for k, n in sorted(s.signatures.items())]
            out.append(VerdictLine.of(
                "noise_floor", plain, "fail",
                f"{engine}'s plain decoding (speculation off) at batch size {bs}: {'; '.join(found)}; no precision "
                f"explains that: {engine}'s own plain path is broken, or it runs another model than the target (not "
                "a speculation bug)", bs))
        else:
            out.append(VerdictLine.of(
                "noise_floor", plain, "info",
                f"{engine}'s plain decoding (speculation off) at batch size {bs}: {s.exact_match:.0%} identical to "
                "the reference" + (f"; {band} departure(s) from the target within the cross-stack band: its "
                                   "precision" if band else ""), bs))
    return out
