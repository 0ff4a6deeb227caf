"""Sampling cases the target alone recounts: a method without a draft model (EAGLE, MTP, suffix decoding; a draft
model not loaded here) through the target-side tests, the n-gram lookup through ``ngram_top`` (the lookup recomputed
from the context), any method's tokens outside the truncation, and any method's case where the target lives only on
the server.

* **Outside the truncation.**  One emitted token the run's truncated distribution (the temperature, then top_k,
  top_p and min_p in the stack's order) gives probability 0 fails the check by itself, so the case is the run's
  batch holding the earliest such token, shrunk with :class:`gate.repro.shrink.Shrinker` (rows, then new tokens,
  then prompt lengths), each candidate re-run on the engine twice and re-scored with the target.
* **A statistical test** (``target_top``, ``target_logprob``, ``ngram_top``, ``pit_ks``).  The run's own tokens are
  recounted with the replay's own statistics (:class:`gate.repro.replay.Recount`): the case keeps the fewest of the
  run's sampled batches, in run order, from which on the replay's recount rejects at every longer prefix.
* **A target only on the server** (``models.local_weights: false`` or ``draft``).  Nothing can be re-scored here,
  so nothing is recounted or shrunk: the case holds the batch the served scores place a token outside the
  truncation in, else every sampled batch, and replay.py loads the target from the config's path where it fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gate.checks.distribution import analyze, observed_pvalues
from gate.engines.base import Request
from gate.engines.proposers import Proposer
from gate.engines.sampling import probs
from gate.inputs.config import REFERENCE
from gate.repro import sampled as sd
from gate.repro.case import CASE_SCHEMA, Written, replay_section, replayable, write_folder
from gate.repro.replay import Recount
from gate.repro.shrink import Case, OutOfBudget, Shrinker
from gate.run.records import Phase


@dataclass(frozen=True)
class Outside:
    """The earliest emitted token outside the truncation in one run of a case."""

    row: int
    position: int  # its new token's index in the row: the shortest prefix that holds it is position + 1 tokens
    token: int
    emitted: tuple[tuple[int, ...], ...]  # every row's tokens in that run


def outside_positions(scorer, items: list, gen) -> list[list[int]]:
    """Per item (prompt, emitted), the new tokens the truncated target distribution gives probability 0 (the
    check's own ``probs``)."""
    def fn(i: int, logits: torch.Tensor) -> list[int]:
        p = probs(logits, gen)
        y = torch.tensor(items[i][1], dtype=torch.long, device=p.device)
        return torch.nonzero(p.gather(1, y[:, None])[:, 0] == 0)[:, 0].tolist()

    return [found or [] for found in scorer.logits_rows(items, fn)]


class OutsideProbe:
    """Run the engine on a candidate (each row with its own seed) and re-score it: the earliest token outside the
    truncation, or None."""

    def __init__(self, engine, scorer, gen):
        self.engine, self.scorer, self.gen = engine, scorer, gen

    def __call__(self, case: Case) -> Outside | None:
        requests = [Request(tuple(p), case.max_new_tokens, s) for p, s in zip(case.prompts, case.seeds)]
        outs = [tuple(s.token_ids) for s in self.engine.generate(requests, self.gen).sequences]
        found = outside_positions(self.scorer, list(zip(case.prompts, outs)), self.gen)
        hits = [(pos[0], r) for r, pos in enumerate(found) if pos]
        if not hits:
            return None
        position, row = min(hits)
        return Outside(row, position, outs[row][position], tuple(outs))


def _runs(results, label: str, bs: int) -> list:
    return [ex for ex in results.executions if ex.engine == label and ex.batch_size == bs
            and ex.phase == Phase.SAMPLING and ex.failure is None]


def _items(results, seqs) -> list:
    return [(tuple(results.prompt(s.prompt_id).prompt_ids), tuple(s.token_ids)) for s in seqs]


def _start(results, ex) -> Case:
    return Case(tuple(tuple(results.prompt(s.prompt_id).prompt_ids) for s in ex.sequences),
                tuple(s.prompt_id for s in ex.sequences),
                max(results.prompt(s.prompt_id).max_new_tokens for s in ex.sequences),
                tuple(s.seed for s in ex.sequences))


def outside_case(folder: Path, rel: str, ctx, results, label: str, bs: int, engine_doc: dict, say, extra, how,
                 engine, budget_s: float) -> Written | None:
    """The shortest case that emits a token outside the truncation (None: the run's tokens hold none here)."""
    gen = sd.generation(ctx, results)
    scorer = ctx.scorer
    runs = _runs(results, label, bs)
    first, total, tokens = None, 0, 0
    for b, ex in enumerate(runs):
        for r, pos in enumerate(outside_positions(scorer, _items(results, ex.sequences), gen)):
            total += len(pos)
            if pos and (first is None or (pos[0], b, r) < first):
                first = (pos[0], b, r)
        tokens += sum(len(s.token_ids) for s in ex.sequences)
    if first is None:
        return None
    ctl = results.sampled(REFERENCE, bs)
    control = sum(map(len, outside_positions(scorer, _items(results, ctl), gen))) if ctl else None
    position, b, row = first
    start = _start(results, runs[b])
    case, where = start, Outside(row, position, runs[b].sequences[row].token_ids[position],
                                 tuple(tuple(s.token_ids) for s in runs[b].sequences))
    log, note, engine_runs = [], None, 0
    if engine is None:
        note = "not shrunk: the engine is not in this config"
    elif budget_s <= 0:
        note = "not shrunk: the budget (checks.repro.budget_s) was spent on the cases before it"
    else:
        shrinker = Shrinker(OutsideProbe(engine, scorer, gen), budget_s, say=say)
        try:
            again = shrinker.confirmed(start, "start", f"the run's batch holding the earliest token outside the "
                                       f"truncation ({start.describe()})")
        except OutOfBudget:
            again, note = None, "not shrunk: the budget (checks.repro.budget_s) ran out on the first replay"
        if again is not None:
            shrunk = shrinker.shrink(start, again)
            case, where, log, note, engine_runs = shrunk.case, shrunk.finding, shrunk.log, shrunk.stopped, shrunk.runs
        elif note is None:
            note = ("not shrunk: the run's batch did not emit a token outside the truncation again on two replays "
                    "in a row (a flaky failure, or one that needs the run's whole sequence of batches): the case is "
                    "that batch as the run recorded it")
            log, engine_runs = shrinker.log, shrinker.runs
    rows = "one prompt alone" if case.batch_size == 1 else f"row {where.row} of {case.batch_size} prompts in one batch"
    sentence = (f"sampling at {sd.described(gen)}, batch size {bs}: the engine emits token {where.token} as new token "
                f"{where.position} of {rows} ({len(case.prompts[where.row])} prompt tokens), a token the truncation "
                f"drops (the target's truncated distribution gives it probability 0 after its prefix); {total} of "
                f"{tokens} sampled tokens of the run lie outside it"
                + (f", {control} of the plain reference's" if control is not None else ""))
    doc = {"schema": CASE_SCHEMA, "check": "distribution", "engine_label": label, "engine": engine_doc,
           "settings": sd.settings_doc(ctx, gen), "models": sd.models_doc(ctx, Proposer()), "tests": [],
           "decide": "outside",
           "batches": [sd.batch_doc(case.prompts, case.seeds, case.max_new_tokens, where.emitted, gen, extra)],
           "outside": {"row": where.row, "position": where.position, "token": where.token, "run": total,
                       "run_tokens": tokens, "control": control},
           "shrunk_from": {"batch_size": start.batch_size, "max_new_tokens": start.max_new_tokens,
                           "prompt_lengths": [len(p) for p in start.prompts]},
           "shrink": {"engine_runs": engine_runs, "log": [s.line() for s in log], "stopped": note},
           "trigger": sentence, "reproduced": True}
    lines = [f"# Minimal case: distribution of `{label}`", "", f"**Trigger:** {sentence}.", "",
             "## Outside the truncation", "",
             f"The run samples at {sd.described(gen)} ({gen.order} order: "
             f"{' > '.join(doc['settings']['truncation']['steps'])}). Re-score the emitted tokens with the target "
             "(teacher-forced), temper its logits and apply the truncation in that order: a token it drops has "
             "probability 0, so no correct sampler emits it, and one is a failure by itself.", "",
             f"- case: {case.describe()}; the token outside is new token {where.position} of row {where.row}",
             f"- the run's batch it came from: {start.describe()}", "",
             "## Shrink log", "", *([f"- {line}" for line in doc["shrink"]["log"]] or ["- (no engine runs)"]),
             *([f"- {note}"] if note else []), "",
             *replay_section(engine_doc, "`case.json` holds the batch (prompt token ids, the per-row seeds) and what "
                             "it emitted; `python replay.py` runs the engine on it again, re-scores the tokens with "
                             "the target (torch and transformers), applies the truncation on its own (numpy) and "
                             "prints 'reproduced' (exit 1) where a token lies outside it; `--recorded` recounts the "
                             "recorded tokens without the engine."),
             *sd.versions(results)]
    write_folder(folder, doc, "\n".join([*lines, ""]), replay=replayable(engine_doc))
    say(f"repro: {folder.name}: {sentence}")
    return Written("distribution", label, rel, True, sentence, bs)


def recount_rows(scorer, recount: Recount, items: list) -> list[dict]:
    """The replay's own per-row sums of ``items``, scored with the gate's scorer (an empty row counts nothing)."""
    empty = {"tokens": 0, "outside": [], "sums": {t: (0.0, 0.0) for t in recount.tests},
             "hits": {t: (0.0, 0.0) for t in recount.tests}, "pit": ([], [])}
    rows = scorer.logits_rows(items, lambda i, logits: recount.row(items[i][0], items[i][1],
                                                                  logits.float().cpu().numpy()))
    return [r if r is not None else empty for r in rows]


def fewest_batches(recount: Recount, sizes: list[int], alpha: float) -> int | None:
    """The fewest batches (in run order) from which on the recount rejects at every longer prefix; None: not even
    all of them."""
    ends = np.cumsum(sizes).tolist()
    held = None
    for j in reversed(range(len(ends))):
        if not recount.verdict(alpha, "tests", rows=int(ends[j]))[0]:
            break
        held = j + 1
    return held


def target_case(folder: Path, rel: str, ctx, results, label: str, bs: int, engine_doc: dict, say, extra,
                how) -> Written:
    """A statistical failure recounted with the target alone (and the lookup, for n-gram)."""
    dcfg = ctx.config.checks.distribution
    gen = sd.generation(ctx, results)
    scorer, vocab = ctx.scorer, ctx.pair.target.vocab_size
    found = {}
    for name in (label, REFERENCE):
        items = _items(results, results.sampled(name, bs))
        n = sum(len(o) for _, o in items)
        draws = min(dcfg.draws, max(math.ceil(10 / dcfg.alpha), 10_000_000 // max(n, 1)))
        found[name] = analyze(scorer, how, items, gen, vocab, null_trials=draws, keep=True)
    a, seqs = found[label], results.sampled(label, bs)
    top = next((t for t in how.tests if t.endswith("_top")), None)
    engine_count, control = sd.count(a), sd.count(found[REFERENCE]) if found[REFERENCE].n else None
    pv = observed_pvalues(a, np.random.default_rng(bs), how.tests) if a.n else {}
    strongest = min(pv, key=pv.get) if pv else None
    every = sd.batches(results, label, bs, gen, extra)
    settings = sd.settings_doc(ctx, gen)
    method = sd.method_doc(how)
    recount = Recount(settings, method["tests"], method.get("ngram"), seed=bs)
    recount.rows = recount_rows(scorer, recount, [(tuple(p), tuple(o)) for b in every
                                                  for p, o in zip(b["prompts"], b["emitted"])])
    kept = fewest_batches(recount, [len(b["prompts"]) for b in every], dcfg.alpha)
    rows = sum(len(b["prompts"]) for b in every[:kept]) if kept else len(recount.rows)
    mine = recount.result(rows)
    k = results.settings.num_draft_tokens
    n = sd.smallest_rejecting(a, dcfg.alpha, bs)
    sentence = (f"sampling at {sd.described(gen)}, batch size {bs}, k={k}, method {ctx.config.method.name}"
                + (f": over {a.n} sampled tokens the gate's {strongest} test gives p={sd.p_text(pv[strongest])}"
                   if pv else "")
                + (f"; the emitted token is {sd.WHOSE_TOP[top]} {engine_count['draft_argmax_hits']} times in "
                   f"{engine_count['tokens']} tokens where the target's distribution expects "
                   f"{engine_count['expected']:.1f} (z = {engine_count['z']})" if top else "")
                + (f"; the plain reference's count is z = {control['z']}" if control and top else "")
                + (f"; the replay's own recount rejects on the run's first {kept} of {len(every)} sampled batches "
                   f"({mine['tokens']} tokens) and on every longer prefix of them" if kept else
                   f"; the replay's own recount does not reject on the run's tokens (smallest p = "
                   f"{sd.p_text(min(mine['pvalues'].values()))}): the case holds every sampled batch"))
    doc = {"schema": CASE_SCHEMA, "check": "distribution", "engine_label": label, "engine": engine_doc,
           "settings": settings, "models": sd.models_doc(ctx, how), **method, "decide": "tests",
           "batches": every[:kept] if kept else every, "shrunk_from": {"batches": len(every)},
           "recount": {"tokens": mine["tokens"], "pvalues": mine["pvalues"], "z": mine["z"]},
           "smallest_rejecting_tokens": n, "count": {"engine": engine_count, "control": control, "test": top},
           "by_position": sd.by_position(a, [len(s.token_ids) for s in seqs], k) if top else [],
           "trigger": sentence, "reproduced": kept is not None}
    write_folder(folder, doc, _report(doc, results, gen), replay=replayable(engine_doc))
    say(f"repro: {folder.name}: {sentence}")
    return Written("distribution", label, rel, kept is not None, sentence, bs)


def _report(doc: dict, results, gen) -> str:
    c, ctl, top = doc["count"]["engine"], doc["count"]["control"], doc["count"]["test"]
    lines = [f"# Minimal case: distribution of `{doc['engine_label']}`", "", f"**Trigger:** {doc['trigger']}.", "",
             "## The counts anyone can redo", "",
             f"Re-score each emitted token with the target (teacher-forced, at {sd.described(gen)}, truncated as the "
             f"run sampled); the tests are the check's for this method: {', '.join(doc['tests'])}."]
    if top:
        lines += ["", f"`{top}`: how often the emitted token is {sd.WHOSE_TOP[top]}, against the sum over positions "
                  "of the target's probability of that token (variance: the sum of p(1 - p)).", "",
                  "| engine | tokens | hits | expected under the target | z |", "|---|---|---|---|---|",
                  f"| {doc['engine_label']} | {c['tokens']} | {c['draft_argmax_hits']} | {c['expected']} | {c['z']} |",
                  *([f"| reference (control) | {ctl['tokens']} | {ctl['draft_argmax_hits']} | {ctl['expected']} | "
                     f"{ctl['z']} |"] if ctl else []), "", "Where the excess is (by position in the output):", "",
                  "| positions | tokens | excess hits | z |", "|---|---|---|---|",
                  *[f"| {w['positions']} | {w['tokens']} | {w['excess']} | {w['z']} |" for w in doc["by_position"]]]
    r = doc["recount"]
    lines += ["", f"The replay's own recount on the case's {r['tokens']} recorded tokens: "
              + ", ".join(f"{k} p={sd.p_text(v)}" for k, v in r["pvalues"].items())
              + f" (it rejects below {doc['settings']['alpha'] / max(len(r['pvalues']), 1):.3g}). The case keeps "
              f"{len(doc['batches'])} of the run's {doc['shrunk_from']['batches']} sampled batches: the fewest, in "
              "run order, from which on that recount rejects at every longer prefix.", "",
              f"The gate's own test (calibrated, Bonferroni at alpha={doc['settings']['alpha']:g}) rejects on every "
              f"prefix of {doc['smallest_rejecting_tokens']} or more of the engine's sampled tokens (in run order)."
              if doc["smallest_rejecting_tokens"] else "The gate's own calibrated test rejects on no prefix of at "
              f"least {sd.FEWEST} tokens with every longer one.", "",
              *replay_section(doc["engine"], "`case.json` holds each kept batch (prompt token ids, the per-row seeds) "
                              "and what it emitted; `python replay.py` runs the engine on them again, re-scores the "
                              "tokens with the target alone (torch and transformers), recounts the tests above on "
                              "its own (numpy) and prints 'reproduced' (exit 1) or 'not reproduced' (exit 0); "
                              "`--recorded` recounts the recorded tokens without the engine."),
              *sd.versions(results)]
    return "\n".join([*lines, ""])


def _served_outside(results, runs: list, gen, vocab: int) -> int | None:
    """The first of ``runs`` whose served scores place an emitted token outside the truncation for certain."""
    from gate.checks.coarse import kept

    for b, ex in enumerate(runs):
        for s in ex.sequences:
            for y, top in zip(s.token_ids, s.served_top or []):
                k = kept(top, gen.temperature, gen.top_k, gen.top_p, gen.min_p, vocab)
                if y in k.dropped or (y not in top and not k.tail):
                    return b
    return None


def served_case(folder: Path, rel: str, ctx, results, label: str, bs: int, engine_doc: dict, say, extra, how,
                row) -> Written:
    """The target lives only on the server: the run's batches as recorded, for a machine that can load it."""
    gen = sd.generation(ctx, results)
    every = sd.batches(results, label, bs, gen, extra)
    outside = getattr(row, "outside", None) or 0
    b = _served_outside(results, _runs(results, label, bs), gen, ctx.pair.target.vocab_size) if outside else None
    kept = [every[b]] if b is not None else every
    pv = dict(getattr(row, "pvalues", None) or {})
    worst = min(pv, key=pv.get) if pv else None
    what = (f"{outside} sampled tokens lie outside the truncation by the server's top-k" if outside else
            f"the check's {worst} test gives p={sd.p_text(pv[worst])}" if worst else "the check failed")
    where = ("the batch the served scores place the first token outside the truncation in" if b is not None else
             "every sampled batch of the engine at this batch size")
    sentence = (f"sampling at {sd.described(gen)}, batch size {bs}, method {ctx.config.method.name}: on the served "
                f"target's scores {what}; the target is only on the server here (models.local_weights: "
                f"{ctx.config.models.local_weights}), so nothing was recounted or shrunk here: the case holds {where}")
    doc = {"schema": CASE_SCHEMA, "check": "distribution", "engine_label": label, "engine": engine_doc,
           "settings": sd.settings_doc(ctx, gen), "models": sd.models_doc(ctx, how),
           **(sd.method_doc(how) if not outside else {"tests": []}), "decide": "outside" if outside else "tests",
           "batches": kept, "shrunk_from": {"batches": len(every)}, "check_pvalues": pv, "trigger": sentence,
           "reproduced": True}
    models = doc["models"]
    lines = [f"# Minimal case: distribution of `{label}`", "", f"**Trigger:** {sentence}.", "",
             "## Where the target lives", "",
             "The run kept the target on the server (`models.local_weights: "
             f"{ctx.config.models.local_weights}`): the gate judged the tokens on the server's own top-k scores and "
             "could not re-score or shrink them, so this case is the run's batches unshrunk. `replay.py` loads the "
             f"target from `{models['target']}` through transformers"
             + (f" (and the draft from `{models['draft']}`)" if models.get("draft") else "")
             + ": run it on a machine where the target fits (its memory, and the same path or hub id).", "",
             *replay_section(engine_doc, "`case.json` holds the batches (prompt token ids, the per-row seeds) and "
                             "what they emitted; `python replay.py` runs the engine on them again, re-scores the "
                             "tokens with the target, recounts on its own and prints 'reproduced' (exit 1) or 'not "
                             "reproduced' (exit 0); `--recorded` recounts the recorded tokens without the engine."),
             *sd.versions(results)]
    write_folder(folder, doc, "\n".join([*lines, ""]), replay=replayable(engine_doc))
    say(f"repro: {folder.name}: {sentence}")
    return Written("distribution", label, rel, True, sentence, bs)


__all__ = ["Outside", "OutsideProbe", "fewest_batches", "outside_case", "outside_positions", "recount_rows",
           "served_case", "target_case"]
