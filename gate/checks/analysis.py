"""Every check in turn: the findings and verdict lines of one run (``checks.json``)."""


from __future__ import annotations

import time
from collections.abc import Callable

from gate.checks import (
    distribution,
    engine_failures,
    equivalence,
    noise_floor,
    reproducibility,
    speedup,
    stack_noise,
    traffic,
)
from gate.checks.context import CheckContext
from gate.checks.doc import CHECKS_SCHEMA, ChecksDoc, Incomplete, Tolerance, VerdictLine
from gate.inputs.config import Config
from gate.inputs.models import ModelPair
from gate.run.results import Results

SCHEMA = CHECKS_SCHEMA

CHECKS = (
    ("engine_failures", engine_failures),
    ("equivalence", equivalence),
    ("noise_floor", noise_floor),
    ("stack_noise", stack_noise),
    ("reproducibility", reproducibility),
    ("distribution", distribution),
    ("speedup", speedup),
    ("traffic", traffic),
)


def run_checks(results: Results, pair: ModelPair, config: Config,
               say: Callable[[str], None] = lambda m: None) -> ChecksDoc:
    started = time.perf_counter()
    ctx = CheckContext(results, pair, config, say)
    missing = sorted({p.id for p in results.prompts} - set(ctx.canonical)) if results.greedy_batch_sizes("reference") \
        else []
    sections: dict = {}
    verdicts: list[VerdictLine] = []
    for name, check in CHECKS:
        findings, found = check.run(results, ctx)
        if findings is not None:
            sections[name] = findings
        verdicts += found
    analysis_s = time.perf_counter() - started
    return ChecksDoc(  # validated against its schema (gate/schemas/checks.schema.json) as it is made
        run=results.ref(), results_digest=results.digest, results_status=results.status,
        incomplete=Incomplete(missing_canonical=missing) if missing else None,
        **sections,
        tolerance=Tolerance.model_validate(ctx.tolerance.to_dict()) if ctx.canonical else None,
        equivalence_method=ctx.method if ctx.canonical else None,
        verdicts=verdicts,
        analysis_s=analysis_s, rescoring_s=ctx.rescoring_s, rescoring_forwards=sum(s.forwards for s in ctx.scorers),
    )


__all__ = ["CHECKS", "SCHEMA", "CheckContext", "run_checks"]
