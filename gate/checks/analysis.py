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
from gate.checks.doc import CHECKS_SCHEMA, UNMEASURED, ChecksDoc, Incomplete, Tolerance, VerdictLine
from gate.inputs.checks_config import REQUIRABLE
from gate.inputs.config import REFERENCE, Config
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


def measured(name: str, findings) -> bool:
    """Whether a check measured an engine under test (the reference alone, sampled as the control, is not one)."""
    if name == "distribution":
        return findings is not None and any(e != REFERENCE for e in findings.engines)
    if name == "speedup":
        return findings is not None and bool(findings.engines)
    return bool(findings)


PHASE_MODE = {"equivalence": "greedy", "speedup": "greedy", "distribution": "sampling"}


def required_failure(name: str, found: list[VerdictLine], results: Results) -> list[VerdictLine]:
    """A required check that measured nothing: its own "not measured" lines become one failure with their reasons;
    without one, the run's skipped batches of its phase say why (else that the results hold none of it)."""
    said = [v.why.removeprefix("not measured: ") for v in found if v.status == "info"
            and v.why.startswith("not measured")]
    skipped = [s.reason for s in results.skipped if s.mode == PHASE_MODE[name]]
    why = "; ".join(dict.fromkeys(said or skipped)) or (
        f"the results hold no {name} measurement of an engine under test (its batches failed or were not run: "
        "see the run's failures)")
    return [v for v in found if not (v.status == "info" and v.why.startswith("not measured"))] + [
        VerdictLine.of(name, None, "fail", f"{UNMEASURED}{why} (checks.{name}.required: true)")]


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
        if name in REQUIRABLE and getattr(config.checks, name).required and not measured(name, findings):
            found = required_failure(name, found, results)
        verdicts += found
    from gate.checks import budget

    sections["budget"], said = budget.section(results, sections.get("distribution"), sections.get("speedup"))
    verdicts += said
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
