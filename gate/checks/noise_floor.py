"""The batch noise floor: how often plain, non-speculative decoding changes with the batch shape.

The reference at each batch size above 1 is judged against itself at batch size
1, with the same classifier as the engines (:mod:`gate.checks.equivalence`).
Near-tie flips here are the floor that speculative decoding must not be blamed
for; a confident divergence means the target's own batched path is broken.
"""

from __future__ import annotations

from gate.checks.context import CheckContext
from gate.checks.doc import EquivalenceSummary, VerdictLine
from gate.checks.equivalence import summary_of
from gate.inputs.config import REFERENCE
from gate.run.results import Results


def run(results: Results, ctx: CheckContext) -> tuple[dict[str, EquivalenceSummary] | None, list[VerdictLine]]:
    findings, verdicts = {}, []
    for engine, bs in ctx.compared_keys():
        if engine != REFERENCE:
            continue
        s = summary_of(ctx.compared(engine, bs), ctx.canonical, ctx.pair.decode)
        findings[str(bs)] = s
        conf = s.divergences.confident + s.confident_inconsistencies + s.divergences.length
        differ = 1 - (s.exact_match or 0)
        if conf:
            verdicts.append(VerdictLine.of("noise_floor", REFERENCE, "fail",
                                    f"plain decoding at batch size {bs} diverges confidently from batch size 1 "
                                    f"({conf} finding(s)): the target's own batched path is broken", bs))
        elif differ:
            verdicts.append(VerdictLine.of("noise_floor", REFERENCE, "info",
                                    f"plain decoding at batch size {bs}: {differ:.0%} of sequences differ from "
                                    "batch size 1, all at near-ties (float noise)", bs))
        else:
            verdicts.append(VerdictLine.of("noise_floor", REFERENCE, "info",
                                    f"plain decoding at batch size {bs} is identical to batch size 1", bs))
    return findings, verdicts
