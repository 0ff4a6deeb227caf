"""Checks: turn a results document into findings and per-check verdicts.

Each check is a module with ``run(results, ctx) -> (findings, verdicts)`` and its
verdict rule beside it; this module only lists them.  ``run_checks`` returns a
:class:`gate.checksdoc.ChecksDoc` (written as ``checks.json``, ``specguard.checks/2``):

* ``engine_failures`` — batches on which an engine crashed, hung, ran out of memory
  or broke the contract (findings about the engine, recorded as failed executions);
* ``equivalence`` — per engine and batch size, against the canonical reference
  (non-speculative, batch size 1): exact match, prefix match, argmax
  consistency, first-divergence classes, corruption signatures, examples;
* ``noise_floor`` — the same for the non-speculative reference at each batch size;
* ``reproducibility`` — bitwise identity across batch sizes and across runs,
  separately for speculative and non-speculative decoding;
* ``distribution`` — the sampling tests, with the control and measured power;
* ``speedup`` — see :mod:`gate.checks.speedup`;
* ``verdicts`` — one line per check and engine: pass, fail, warn or info, and why.

Only the target (and, for sampling, the draft) is needed: no generation happens here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gate.checks import distribution, equivalence, failures, noise_floor, reproducibility, speedup
from gate.checks.context import CheckContext
from gate.checksdoc import CHECKS_SCHEMA, ChecksDoc, Incomplete, Tolerance, Verdict, VerdictLine
from gate.config import Config
from gate.models import ModelPair
from gate.results import Results

SCHEMA = CHECKS_SCHEMA

CHECKS = (
    ("engine_failures", failures),
    ("equivalence", equivalence),
    ("noise_floor", noise_floor),
    ("reproducibility", reproducibility),
    ("distribution", distribution),
    ("speedup", speedup),
)


def run_checks(results: Results, pair: ModelPair, config: Config,
               say: Callable[[str], None] = lambda m: None) -> ChecksDoc:
    started = time.perf_counter()
    ctx = CheckContext(results, pair, config, say)
    missing = sorted({p.id for p in results.prompts} - set(ctx.canonical)) if results.greedy_batch_sizes("reference") \
        else []
    sections: dict = {}
    verdicts: list[Verdict] = []
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
        verdicts=[VerdictLine.model_validate(v.to_dict()) for v in verdicts],
        analysis_s=analysis_s, rescoring_s=ctx.rescoring_s, rescoring_forwards=sum(s.forwards for s in ctx.scorers),
    )


__all__ = ["CHECKS", "SCHEMA", "CheckContext", "Verdict", "run_checks"]
