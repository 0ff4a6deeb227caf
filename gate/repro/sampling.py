"""A failing distribution check as a case a maintainer can recompute: the run's own sampled batches (prompts and
per-row seeds, so the engine draws the same), and what the case's replay.py recounts on its own.

Which case, by the method and the run (:func:`write_sampling_case`):

* **a draft model loaded here**: the fewest of the engine's sampled tokens at which the gate's test still rejects
  at alpha, where the excess concentrates, and one simple count anyone can redo: how often the emitted token is the
  draft's argmax against the count the target's distribution expects (the sum of p(draft's argmax) over positions,
  variance the sum of p(1 - p)), with its z-score, for the engine and for the plain reference as the control;
* **any other method** (EAGLE, MTP, n-gram lookup, suffix decoding), **a token outside the truncation**, or **a
  target only on the server**: the target-side case (:mod:`gate.repro.target_side`).

Nothing is re-sampled here but the candidates of a token outside the truncation: the run's tokens are re-scored
(teacher-forced, at the run's temperature and truncation, as the check does).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from gate.checks.distribution import analyze, observed_pvalues
from gate.engines.proposers import DraftModel
from gate.inputs.config import REFERENCE
from gate.repro import sampled as sd
from gate.repro import target_side
from gate.repro.case import CASE_SCHEMA, Written, replay_section, replayable, write_folder
from gate.repro.sampled import FEWEST, STEP, by_position, count, smallest_rejecting


def write_sampling_case(folder: Path, rel: str, ctx, results, label: str, bs: int, engine: dict, say,
                        extra=None, run_engine=None, row=None, budget_s: float = 0.0) -> Written:
    """The sampling case's folder (case.json, replay.py, REPORT.md) from the run's own sampled tokens.
    ``extra(requests, settings)``: what replay.py needs for one batch beyond its prompts (the engine type's);
    ``run_engine``: the engine, to shrink a token outside the truncation on (within ``budget_s``); ``row``: the
    check's findings for the engine at ``bs`` (checks.json's, for a target only on the server)."""
    how = sd.proposer_of(ctx)
    if not ctx.local:
        return target_side.served_case(folder, rel, ctx, results, label, bs, engine, say, extra, how, row)
    if sd.generation(ctx, results).truncated:
        written = target_side.outside_case(folder, rel, ctx, results, label, bs, engine, say, extra, how,
                                           run_engine, budget_s)
        if written is not None:
            return written
    if not isinstance(how, DraftModel):
        return target_side.target_case(folder, rel, ctx, results, label, bs, engine, say, extra, how)
    dcfg = ctx.config.checks.distribution
    gen = sd.generation(ctx, results)
    target, vocab = ctx.scorer_for(ctx.pair.target.model), ctx.pair.target.vocab_size
    found: dict[str, tuple] = {}
    for name in (label, REFERENCE):
        seqs = results.sampled(name, bs)
        items = [(tuple(results.prompt(s.prompt_id).prompt_ids), tuple(s.token_ids)) for s in seqs]
        n = sum(len(o) for _, o in items)  # every prefix's calibration is kept: [n, 3, draws] float32, capped
        draws = min(dcfg.draws, max(math.ceil(10 / dcfg.alpha), 10_000_000 // max(n, 1)))
        found[name] = (analyze(target, how, items, gen, vocab, null_trials=draws, keep=True), seqs)
    a, seqs = found[label]
    n = smallest_rejecting(a, dcfg.alpha, bs)
    k = results.settings.num_draft_tokens
    engine_count, control = count(a), count(found[REFERENCE][0]) if found[REFERENCE][0].n else None
    batches = sd.batches(results, label, bs, gen, extra)
    where = by_position(a, [len(s.token_ids) for s in seqs], k)
    pv = observed_pvalues(a, np.random.default_rng(bs)) if a.n else {}
    strongest = min(pv, key=pv.get) if pv else None
    sentence = (f"sampling at {sd.described(gen)}, batch size {bs}, k={k}"
                + (f": over {a.n} sampled tokens the gate's {strongest} test gives p={sd.p_text(pv[strongest])}"
                   if pv else "")
                + "; the emitted token is the draft's argmax "
                f"{engine_count['draft_argmax_hits']} times in {engine_count['tokens']} tokens where the target's "
                f"distribution expects {engine_count['expected']:.1f} (z = {engine_count['z']})"
                + (f"; the plain reference's count is z = {control['z']}" if control else "")
                + (f"; the gate's test rejects at alpha={dcfg.alpha:g} at every prefix of {n} tokens or more"
                   if n else ""))
    doc = {"schema": CASE_SCHEMA, "check": "distribution", "engine_label": label, "engine": engine,
           "settings": sd.settings_doc(ctx, gen), "models": sd.models_doc(ctx, how), **sd.method_doc(how),
           "decide": "tests", "batches": batches, "emitted": [list(s.token_ids) for s in seqs],
           "smallest_rejecting_tokens": n, "count": {"engine": engine_count, "control": control},
           "by_position": where, "trigger": sentence, "reproduced": True}
    write_folder(folder, doc, _report(doc, results), replay=replayable(engine))
    say(f"repro: {folder.name}: {sentence}")
    return Written("distribution", label, rel, True, sentence, bs)


def _report(doc: dict, results) -> str:
    c, ctl = doc["count"]["engine"], doc["count"]["control"]
    rows = [f"| {doc['engine_label']} | {c['tokens']} | {c['draft_argmax_hits']} | {c['expected']} | {c['z']} |"]
    if ctl:
        rows.append(f"| reference (control) | {ctl['tokens']} | {ctl['draft_argmax_hits']} | {ctl['expected']} | "
                    f"{ctl['z']} |")
    lines = [f"# Minimal case: distribution of `{doc['engine_label']}`", "", f"**Trigger:** {doc['trigger']}.", "",
             "## The count anyone can redo", "",
             "Re-score each emitted token with the target and the draft (teacher-forced, at the run's temperature): "
             "count how often it is the draft's argmax, and compare with the sum over positions of the target's "
             "probability of the draft's argmax (variance: the sum of p(1 - p)).", "",
             "| engine | tokens | emitted = draft's argmax | expected under the target | z |", "|---|---|---|---|---|",
             *rows, "", "Where the excess is (by position in the output):", "",
             "| positions | tokens | excess hits | z |", "|---|---|---|---|",
             *[f"| {w['positions']} | {w['tokens']} | {w['excess']} | {w['z']} |" for w in doc["by_position"]], "",
             f"The gate's test (Bonferroni over its tests at alpha={doc['settings']['alpha']:g}) rejects on every "
             f"prefix of {doc['smallest_rejecting_tokens']} or more of the engine's sampled tokens (in run order)." if
             doc["smallest_rejecting_tokens"] else "The gate's test does not reject on any prefix of these tokens.",
             "", *replay_section(doc["engine"], "`case.json` holds each sampled batch (prompt token ids and the "
                                 "per-row seeds the engine was given) and what it emitted; `python replay.py` runs the "
                                 "engine on the same batches with the same seeds, recounts as above and prints "
                                 "'reproduced' (exit 1) or 'not reproduced' (exit 0; it needs torch and transformers "
                                 "to re-score); `--recorded` recounts the recorded tokens without the engine."),
             *sd.versions(results)]
    return "\n".join([*lines, ""])


__all__ = ["FEWEST", "STEP", "by_position", "count", "smallest_rejecting", "write_sampling_case"]
