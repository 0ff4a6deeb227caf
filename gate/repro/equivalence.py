"""A failing equivalence check, shrunk to its smallest replayable case.

The start is the run's own failing batch: among the batches of the failing engine at the batch size the check
failed, the first whose recorded output the check judged a bug (at the smallest such batch size), re-run as it
ran (the same rows in the same order, fillers included).  It must fail on two replays in a row, else it is
reported as not reproduced and no case is kept.  Then :class:`gate.repro.shrink.Shrinker` shrinks it, the engine
re-run and the reference and the target confirming every candidate (:class:`gate.repro.probe.EquivalenceProbe`).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gate.engines.base import GenerationSettings
from gate.engines.registry import engine_type
from gate.repro.case import CASE_SCHEMA, Written, replay_section, replayable, tokens_line, write_folder
from gate.repro.probe import EquivalenceProbe, Finding
from gate.repro.shrink import Case, Shrinker, Shrunk
from gate.run.records import Phase


@dataclass
class Target:
    """What to shrink: the engine (as built for the run), how to describe it in case.json, the batch to start from."""

    engine: object
    label: str
    case: Case
    describe: dict  # case.json's "engine": what replay.py needs to rebuild it (its type's case_engine)
    plain: object | None = None  # its own plain decoding, where it has one


def failing_batches(ctx, engine: str, batch_size: int) -> list[Case]:
    """The engine's batches at ``batch_size`` whose recorded output the equivalence check judged a bug, as they
    ran (rows in order, fillers included), the first failing ones first."""
    # A prompt fails in one composition and not in another (a batched bug needs the right neighbours): the batch to
    # start from is the one whose own output of the prompt failed, never another batch that holds the prompt.
    failing = {(c.composition, c.output.prompt_id) for c in ctx.compared(engine, batch_size) if _bug(c.verdict)}
    res = ctx.results
    out = []
    for ex in res.executions:
        if (ex.engine != engine or ex.batch_size != batch_size or ex.mode != "greedy" or ex.repeat != 0
                or ex.phase not in (Phase.OUTPUTS, Phase.CANONICAL) or ex.failure is not None):
            continue
        if any((ex.composition, s.prompt_id) in failing and not s.filler for s in ex.sequences[:ex.n_real]):
            prompts = tuple(tuple(res.prompt(s.prompt_id).prompt_ids) for s in ex.sequences)
            budget = max(res.prompt(s.prompt_id).max_new_tokens for s in ex.sequences)
            out.append(Case(prompts, tuple(s.prompt_id for s in ex.sequences), budget))
    return out


def _bug(v) -> bool:
    return bool(v.inconsistent or v.signatures or (v.divergence is not None and v.divergence.kind == "confident"))


def shrink_one(target: Target, probe: EquivalenceProbe, budget_s: float, say) -> Shrunk | None:
    """The shrunk case, or None when the run's failing batch does not fail again on two replays."""
    shrinker = Shrinker(probe, budget_s, say=say)
    first = shrinker.confirmed(target.case, "start", f"the run's failing batch ({target.case.describe()})")
    return shrinker.shrink(target.case, first) if first is not None else None


def trigger(case: Case, f: Finding, greedy_k: int) -> str:
    """The case in one sentence."""
    rows = "one prompt alone" if case.batch_size == 1 else (
        f"{case.batch_size} prompts in one batch (of {', '.join(str(len(p)) for p in case.prompts)} tokens)")
    where = (f"row {f.row} (a {len(case.prompts[f.row])}-token prompt)" if case.batch_size > 1
             else f"a {len(case.prompts[0])}-token prompt")
    if f.kind == "confident divergence":
        what = (f"emits token {f.actual[f.position]} where the target's greedy choice is {f.expected[f.position]} "
                f"({f.gap:.3g} nats apart, tolerance {f.tolerance:.3g})")
    elif f.kind == "token below the target's argmax":
        what = (f"emits token {f.actual[f.position]}, {f.gap:.3g} nats below the target's argmax {f.argmax} given "
                "its own prefix")
    else:  # a corruption signature
        what = f"shows {f.kind} ({f.detail})"
    return (f"{rows}, greedy, k={greedy_k}, {case.max_new_tokens} new token(s): {where} {what} at new token "
            f"{f.position}")


def batch_of(described: dict, engine) -> Callable | None:
    """``(requests, settings) -> dict``: what replay.py needs for one batch beyond its prompts, seeds and budget (the
    engine type's :meth:`~gate.engines.registry.EngineType.case_batch`: a server's request bodies)."""
    if engine is None or not replayable(described):
        return None
    kind = engine_type(described["type"])
    return lambda requests, settings: kind.case_batch(engine, requests, settings)


def write_case(folder: Path, rel: str, target: Target, shrunk: Shrunk, probe: EquivalenceProbe, results, decode,
               say) -> Written:
    """case.json, replay.py (where the engine's type can be replayed) and REPORT.md for a shrunk equivalence
    failure."""
    case, f = shrunk.case, shrunk.finding
    settings = probe.settings
    rank = probe.rank(case.prompts[f.row], f.actual, f.position)
    sentence = trigger(case, f, settings.num_draft_tokens)
    extra = batch_of(target.describe, target.engine)
    doc = {"schema": CASE_SCHEMA, "check": "equivalence", "engine": dict(target.describe),
           "settings": {"temperature": settings.temperature, "num_draft_tokens": settings.num_draft_tokens,
                        "eos_token_ids": list(settings.eos_token_ids), "max_new_tokens": case.max_new_tokens,
                        "seed": probe.seed},
           "prompts": [list(p) for p in case.prompts], "prompt_names": list(case.names),
           **(extra(probe.requests(case), settings) if extra else {}),
           "expected": [list(probe.expected(p, case.max_new_tokens)) for p in case.prompts],
           "finding": f.to_dict(), "evidence": {"gap": f.gap, "tolerance": f.tolerance, "rank": rank,
                                                "argmax": f.argmax},
           "trigger": sentence, "reproduced": True, "runs": shrunk.runs,
           "shrunk_from": {"batch_size": target.case.batch_size, "max_new_tokens": target.case.max_new_tokens,
                           "prompt_lengths": [len(p) for p in target.case.prompts], "prompt_names":
                           list(target.case.names)},
           "stopped": shrunk.stopped, "log": [s.line() for s in shrunk.log]}
    write_folder(folder, doc, report(doc, results, decode, rank), replay=replayable(doc["engine"]))
    say(f"repro: {folder.name}: {sentence}")
    return Written("equivalence", target.label, rel, True, sentence, case.batch_size)


def report(doc: dict, results, decode, rank: int | None) -> str:
    """REPORT.md: what an upstream issue needs."""
    f, e = doc["finding"], doc["engine"]
    fp = results.fingerprint
    libs = ", ".join(f"{k} {v}" for k, v in sorted(fp.libraries.items()))
    stacks = "; ".join(f"{name}: {s.version or 'version not reported'}" for name, s in (fp.stacks or {}).items())
    lines = [f"# Minimal case: {doc['check']} of `{e.get('label') or e['type']}`", "",
             f"**Trigger:** {doc['trigger']}.", "",
             "## What was expected and what came out", "",
             f"- expected (the non-speculative reference, the prompt alone): {tokens_line(f['expected'], decode)}",
             f"- actual (row {f['row']}): {tokens_line(f['actual'], decode)}",
             f"- evidence: {f['detail']}" + (f"; the emitted token is the target's number {rank} choice there "
                                             "given the engine's own prefix" if rank else ""), "",
             *replay_section(e, "`python replay.py` runs the case's batch on the engine alone and compares the "
                                "failing row with the expected tokens.", doc.get("bodies"))]
    shrunk = doc["shrunk_from"]
    lines += ["## Versions", "", f"- hardware: {fp.hardware_key} ({platform.platform()})", f"- {libs}"]
    if stacks:
        lines.append(f"- serving stacks: {stacks}")
    lines += ["", "## How it was found", "",
              f"Shrunk from the run's failing batch of {shrunk['batch_size']} prompt(s) "
              f"({', '.join(shrunk['prompt_names'])}; {', '.join(map(str, shrunk['prompt_lengths']))} tokens) "
              f"with {shrunk['max_new_tokens']} new tokens, in {doc['runs']} engine runs; a candidate counted as "
              "failing only when it failed on two replays in a row." + (f" {doc['stopped']}." if doc["stopped"]
                                                                          else ""), "", "```text",
              *doc["log"], "```", ""]
    return "\n".join(lines)


def settings_of(results) -> GenerationSettings:
    s = results.settings
    return GenerationSettings(0.0, s.num_draft_tokens, tuple(s.eos_token_ids))


__all__ = ["Target", "batch_of", "failing_batches", "settings_of", "shrink_one", "trigger", "write_case"]
