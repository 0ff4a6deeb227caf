"""A failing distribution check as a case a maintainer can recompute: the run's own sampled batches (prompts and
per-row seeds, so the engine draws the same), the smallest number of them at which the gate's test still rejects
at alpha, where the excess concentrates, and one simple count anyone can redo: how often the emitted token is the
draft's argmax against the count the target's distribution expects (the sum of p(draft's argmax) over positions,
variance the sum of p(1 - p)), with its z-score, for the engine and for the plain reference as the control.

Nothing is re-sampled here: the run's tokens are re-scored (the target and the draft, teacher-forced, at the run's
temperature, as the check does), so this needs the target and the draft loaded locally.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from gate.checks.distribution import analyze, observed_pvalues, pvalues, rejects
from gate.engines.proposers import DraftModel
from gate.inputs.config import REFERENCE
from gate.repro.case import CASE_SCHEMA, Written, no_case, replay_section, replayable, write_folder
from gate.run.records import Phase

STEP = 8  # the smallest rejecting n is searched on a grid of this many tokens, then token by token below it
FEWEST = 100  # no smaller prefix is tried: the check's own minimum of num_samples (its z-tests are normal
# approximations, and a handful of tokens that all hit a rare draft token would "reject" on the approximation alone)


def _head(x, n: int):
    return type(x)(*(getattr(x, f.name)[:n] for f in dataclasses.fields(x)))


def count(a, n: int | None = None) -> dict:
    """The draft-argmax count over the first ``n`` tokens: hits, the expected count under the target, z."""
    s, m = (_head(a.observed, n), _head(a.moments, n)) if n else (a.observed, a.moments)
    hits, expected = float(s.top_hit.sum()), float(m.top_mean.sum())
    var = float((m.top_mean * (1 - m.top_mean)).sum())
    return {"tokens": int(s.top_hit.shape[0]), "draft_argmax_hits": int(hits), "expected": round(expected, 2),
            "z": round((hits - expected) / math.sqrt(var), 2) if var > 0 else None}


def smallest_rejecting(a, alpha: float, seed: int) -> int | None:
    """The fewest of the engine's sampled tokens (in run order, at least FEWEST) from which on the combined test
    rejects at ``alpha`` at every longer prefix (on a grid of STEP tokens, then token by token below the grid
    point): a single small prefix that happens to reject is no such point, since the search looks at many."""
    u = np.random.default_rng(seed).random(a.n)

    def fails(n: int) -> bool:  # the check's own decision on the prefix: its p-values calibrated on that prefix
        pv = pvalues(_head(a.observed, n), _head(a.moments, n), u[:n])
        cal = a.calibration(n) if a.draws is not None else None
        return rejects(cal.apply(pv) if cal else pv, alpha)

    if a.n < FEWEST:
        return None
    grid = sorted({*range(FEWEST, a.n, STEP), a.n})
    held = None
    for n in reversed(grid):  # the longest prefixes first: walk down while every one rejects
        if not fails(n):
            break
        held = n
    if held is None:
        return None
    for n in range(held - 1, max(held - STEP, FEWEST - 1), -1):
        if not fails(n):
            break
        held = n
    return held


def by_position(a, lengths: list[int], k: int) -> list[dict]:
    """Excess draft-argmax hits by position in the output: the first new token, new tokens 1..k, and later ones
    (engines report no per-token provenance, so a step's accepted drafts, rejections and bonus tokens are not told
    apart here)."""
    pos = np.concatenate([np.arange(n) for n in lengths]) if lengths else np.zeros(0, dtype=int)
    out = []
    for name, sel in (("first new token", pos == 0), (f"new tokens 1-{k}", (pos >= 1) & (pos <= k)),
                      (f"new tokens {k + 1}+", pos > k)):
        idx = np.nonzero(sel[:a.n])[0]
        if not len(idx):
            continue
        hit, mean = a.observed.top_hit[idx], a.moments.top_mean[idx]
        var = float((mean * (1 - mean)).sum())
        excess = float((hit - mean).sum())
        out.append({"positions": name, "tokens": len(idx), "excess": round(excess, 2),
                    "z": round(excess / math.sqrt(var), 2) if var > 0 else None})
    return out


def write_sampling_case(folder: Path, rel: str, ctx, results, label: str, bs: int, engine: dict, say,
                        extra=None) -> Written:
    """The sampling case's folder (case.json, replay.py, REPORT.md) from the run's own sampled tokens.
    ``extra(requests, settings)``: what replay.py needs for one batch beyond its prompts (the engine type's)."""
    if not ctx.config.method.draft_model:
        return no_case(folder, rel, "distribution", label, bs, f"a sampling case's replay recounts against a draft "
                       f"model's argmax, and method {ctx.config.method.name} has none (not built for it yet)", say)
    if ctx.config.generation.sampling.truncated:
        return no_case(folder, rel, "distribution", label, bs, "a sampling case's replay re-scores at the temperature "
                       "alone, and this run truncates (top_k/top_p/min_p): not built for it yet; the run's "
                       "checks.json has the verdict", say)
    if not ctx.local or ctx.pair.draft is None or ctx.pair.draft.model is None:
        return no_case(folder, rel, "distribution", label, bs, "the run's tokens are re-scored with the target "
                       f"and the draft, which are not both loaded here (models.local_weights is "
                       f"{ctx.config.models.local_weights!r}; `true` loads both and writes the case)", say)
    dcfg = ctx.config.checks.distribution
    temperature = ctx.config.generation.sampling.temperature
    target, draft = ctx.scorer_for(ctx.pair.target.model), DraftModel(ctx.scorer_for(ctx.pair.draft.model))
    vocab = ctx.pair.target.vocab_size
    found: dict[str, tuple] = {}
    for name in (label, REFERENCE):
        seqs = results.sampled(name, bs)
        items = [(tuple(results.prompt(s.prompt_id).prompt_ids), tuple(s.token_ids)) for s in seqs]
        n = sum(len(o) for _, o in items)  # every prefix's calibration is kept: [n, 3, draws] float32, capped
        draws = min(dcfg.draws, max(math.ceil(10 / dcfg.alpha), 10_000_000 // max(n, 1)))
        found[name] = (analyze(target, draft, items, temperature, vocab, null_trials=draws, keep=True), seqs)
    a, seqs = found[label]
    n = smallest_rejecting(a, dcfg.alpha, bs)
    k = results.settings.num_draft_tokens
    engine_count, control = count(a), count(found[REFERENCE][0]) if found[REFERENCE][0].n else None
    batches = []
    for ex in results.executions:
        if ex.engine == label and ex.batch_size == bs and ex.phase == Phase.SAMPLING and ex.failure is None:
            batch = {"prompts": [list(results.prompt(s.prompt_id).prompt_ids) for s in ex.sequences],
                     "seeds": [s.seed for s in ex.sequences],
                     "max_new_tokens": max(results.prompt(s.prompt_id).max_new_tokens for s in ex.sequences)}
            if extra is not None:  # a server's own requests, seeds included
                from gate.engines.base import GenerationSettings, Request

                settings = GenerationSettings(temperature, k, tuple(results.settings.eos_token_ids))
                batch.update(extra([Request(tuple(p), batch["max_new_tokens"], seed)
                                    for p, seed in zip(batch["prompts"], batch["seeds"])], settings))
            batches.append(batch)
    where = by_position(a, [len(s.token_ids) for s in seqs], k)
    pv = observed_pvalues(a, np.random.default_rng(bs)) if a.n else {}
    strongest = min(pv, key=pv.get) if pv else None
    sentence = (f"sampling at T={temperature:g}, batch size {bs}, k={k}"
                + (f": over {a.n} sampled tokens the gate's {strongest} test gives p={_p(pv[strongest])}" if pv else "")
                + "; the emitted token is the draft's argmax "
                f"{engine_count['draft_argmax_hits']} times in {engine_count['tokens']} tokens where the target's "
                f"distribution expects {engine_count['expected']:.1f} (z = {engine_count['z']})"
                + (f"; the plain reference's count is z = {control['z']}" if control else "")
                + (f"; the gate's test rejects at alpha={dcfg.alpha:g} at every prefix of {n} tokens or more"
                   if n else ""))
    models = ctx.config.models
    doc = {"schema": CASE_SCHEMA, "check": "distribution", "engine_label": label, "engine": engine,
           "settings": {"temperature": temperature, "num_draft_tokens": k,
                        "eos_token_ids": list(results.settings.eos_token_ids), "alpha": dcfg.alpha},
           "models": {"target": ctx.pair.target.location, "draft": ctx.pair.draft.location,
                      "dtype": models.target.dtype, "draft_dtype": models.draft.dtype},
           "batches": batches, "emitted": [list(s.token_ids) for s in seqs],
           "smallest_rejecting_tokens": n, "count": {"engine": engine_count, "control": control},
           "by_position": where, "trigger": sentence, "reproduced": True}
    write_folder(folder, doc, _report(doc, results), replay=replayable(engine))
    say(f"repro: {folder.name}: {sentence}")
    return Written("distribution", label, rel, True, sentence, bs)


def _p(p: float) -> str:
    return f"{p:.2g}" if p > 0 else "< 1e-300"


def _report(doc: dict, results) -> str:
    c, ctl = doc["count"]["engine"], doc["count"]["control"]
    fp = results.fingerprint
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
                                 "'reproduced' or 'not reproduced' (it needs torch and transformers to re-score)."),
             "## Versions", "",
             f"- hardware: {fp.hardware_key}", f"- {', '.join(f'{k} {v}' for k, v in sorted(fp.libraries.items()))}"]
    if fp.stacks:  # the serving stack's own version, as results.json recorded it (issue 47, item 6)
        lines.append("- serving stacks: " + "; ".join(f"{name}: {st.version or 'version not reported'}"
                                                       for name, st in fp.stacks.items()))
    return "\n".join([*lines, ""])


__all__ = ["by_position", "count", "smallest_rejecting", "write_sampling_case"]
