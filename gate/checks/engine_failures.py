"""Engine failures: a batch on which an engine crashed, hung, ran out of memory or broke the contract.

The engine under test failing is a regression, not an internal error of the gate:
each engine with failed executions gets one failing verdict that names what
failed, at which batch sizes, on which prompts, with the exception's type and
message.  The run kept going with the other batches and engines, so every other
check still reports on what did finish.
"""

from __future__ import annotations

from collections import defaultdict

from gate.checks.doc import EngineFailures, FirstFailure, VerdictLine
from gate.run.results import Results

WHAT = {"crash": "crashed", "timeout": "timed out", "out_of_memory": "ran out of memory",
        "contract": "broke the engine contract"}


def run(results: Results, ctx) -> tuple[dict[str, EngineFailures] | None, list[VerdictLine]]:
    failed = results.failures()
    if not failed:
        return None, []
    by_engine: dict[str, list] = defaultdict(list)
    for ex in failed:
        by_engine[ex.engine].append(ex)
    totals: dict[str, int] = defaultdict(int)
    for ex in results.executions:
        totals[ex.engine] += 1
    findings, verdicts = {}, []
    for engine, execs in by_engine.items():
        first = execs[0]
        sizes = sorted({ex.batch_size for ex in execs})
        kinds = sorted({ex.failure.kind for ex in execs})
        findings[engine] = EngineFailures(
            failed=len(execs), executions=totals[engine], batch_sizes=sizes, kinds=kinds,
            first=FirstFailure(phase=first.phase.value, batch_size=first.batch_size, prompts=first.prompts[:8],
                               **first.failure.model_dump()))
        what = " and ".join(WHAT[k] for k in kinds)
        prompts = ", ".join(first.prompts[:4]) + (" …" if len(first.prompts) > 4 else "")
        verdicts.append(VerdictLine.of("engine_failure", engine, "fail",
                                f"{engine} {what} on {len(execs)} of {totals[engine]} batches (batch size "
                                f"{'/'.join(map(str, sizes))}); first at batch size {first.batch_size} on prompts "
                                f"{prompts}: {first.failure.type}: {first.failure.message}",
                                first.batch_size))
    return findings, verdicts
