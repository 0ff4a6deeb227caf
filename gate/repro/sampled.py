"""What every sampling case shares: the run's sampling as case.json writes it (the temperature, the truncation and
its order, the tests the check combined), the run's sampled batches with their seeds and emitted tokens, the
counts the REPORT.md tables show, and the versions section.

The statistics are the check's (:mod:`gate.checks.distribution`); the case's ``replay.py`` recounts them on its
own (:class:`gate.repro.replay.Recount`, numpy alone), and the gate shrinks a target-side case with that same
recount, so the case it hands over is the one its replay decides on.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gate.checks.distribution import pvalues, rejects
from gate.engines.base import GenerationSettings, Request
from gate.engines.proposers import DraftModel, NgramLookup, Proposer, proposer_for
from gate.run.records import Phase

STEP = 8  # the smallest rejecting n is searched on a grid of this many tokens, then token by token below it
FEWEST = 100  # no smaller prefix is tried: the check's own minimum of num_samples (its z-tests are normal
# approximations, and a handful of tokens that all hit a rare draft token would "reject" on the approximation alone)
# what each method's top-token count compares the emitted token with (the check's test reading it)
WHOSE_TOP = {"draft_top": "the draft's argmax", "target_top": "the target's argmax",
             "ngram_top": "the n-gram lookup's proposal"}


def proposer_of(ctx) -> Proposer:
    """The method's proposer as the check read it: the draft model where it is loaded here (beside a target only on
    the server too: ``models.local_weights: draft``), else the method's."""
    loaded = ctx.pair.draft is not None and ctx.pair.draft.model is not None
    draft = ctx.scorer_for(ctx.pair.draft.model) if loaded and ctx.config.method.draft_model else None
    return DraftModel(draft) if draft is not None else proposer_for(ctx.config, None)


def generation(ctx, results) -> GenerationSettings:
    """The run's sampling: its temperature, k, EOS and truncation (as the engines were given it)."""
    sampling = ctx.config.generation.sampling
    return GenerationSettings(sampling.temperature, results.settings.num_draft_tokens,
                              tuple(results.settings.eos_token_ids), **sampling.truncation())


def settings_doc(ctx, gen: GenerationSettings) -> dict:
    """case.json's ``settings``: the truncation with its steps in order, so replay.py applies it on its own."""
    from gate.stacks import orders

    doc = {"temperature": gen.temperature, "num_draft_tokens": gen.num_draft_tokens,
           "eos_token_ids": list(gen.eos_token_ids), "alpha": ctx.config.checks.distribution.alpha}
    if gen.truncated:
        doc["truncation"] = {"top_k": gen.top_k, "top_p": gen.top_p, "min_p": gen.min_p, "order": gen.order,
                             "steps": list(orders()[gen.order])}
    return doc


def models_doc(ctx, how: Proposer) -> dict:
    """case.json's ``models``: where replay.py loads the target (and the draft, for a draft model's tests)."""
    models = ctx.config.models
    draft = isinstance(how, DraftModel)
    return {"target": ctx.pair.target.location, "dtype": models.target.dtype,
            "draft": ctx.pair.draft.location if draft else None,
            "draft_dtype": models.draft.dtype if draft and models.draft else None}


def method_doc(how: Proposer) -> dict:
    """case.json's ``tests`` (the check's, in its order) and the n-gram lookup's lengths where it proposes."""
    return {"tests": list(how.tests), **({"ngram": [how.min_n, how.max_n]} if isinstance(how, NgramLookup) else {})}


def batches(results, label: str, bs: int, gen: GenerationSettings, extra=None) -> list[dict]:
    """The engine's sampled batches at ``bs`` in run order: each row's prompt, seed and emitted tokens, the budget,
    and what replay.py needs beyond them (``extra(requests, settings)``: a server's own request bodies)."""
    out = []
    for ex in results.executions:
        if ex.engine == label and ex.batch_size == bs and ex.phase == Phase.SAMPLING and ex.failure is None:
            out.append(batch_doc([tuple(results.prompt(s.prompt_id).prompt_ids) for s in ex.sequences],
                                 [s.seed for s in ex.sequences],
                                 max(results.prompt(s.prompt_id).max_new_tokens for s in ex.sequences),
                                 [list(s.token_ids) for s in ex.sequences], gen, extra))
    return out


def batch_doc(prompts, seeds, max_new_tokens: int, emitted, gen: GenerationSettings, extra=None) -> dict:
    batch = {"prompts": [list(p) for p in prompts], "seeds": list(seeds), "max_new_tokens": max_new_tokens,
             "emitted": [list(o) for o in emitted]}
    if extra is not None:
        batch.update(extra([Request(tuple(p), max_new_tokens, seed) for p, seed in zip(prompts, seeds)], gen))
    return batch


def _head(x, n: int):
    return type(x)(*(getattr(x, f.name)[:n] for f in dataclasses.fields(x)))


def count(a, n: int | None = None) -> dict:
    """The top-token count over the first ``n`` tokens (the draft's argmax, the target's own or the lookup's
    proposal: what the analysis's proposer stood for): hits, the expected count under the target, z."""
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
    """Excess top-token hits by position in the output: the first new token, new tokens 1..k, and later ones
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


def described(gen: GenerationSettings) -> str:
    """The sampling in a few words: ``T=0.7, top_p 0.9``."""
    parts = [f"T={gen.temperature:g}"] + [f"{k} {getattr(gen, k):g}" for k, off in
                                          (("top_k", 0), ("top_p", 1.0), ("min_p", 0.0)) if getattr(gen, k) != off]
    return ", ".join(parts)


def versions(results) -> list[str]:
    fp = results.fingerprint
    lines = ["## Versions", "", f"- hardware: {fp.hardware_key}",
             f"- {', '.join(f'{k} {v}' for k, v in sorted(fp.libraries.items()))}"]
    if fp.stacks:  # the serving stack's own version, as results.json recorded it (issue 47, item 6)
        lines.append("- serving stacks: " + "; ".join(f"{name}: {st.version or 'version not reported'}"
                                                       for name, st in fp.stacks.items()))
    return lines


def p_text(p: float) -> str:
    return f"{p:.2g}" if p > 0 else "< 1e-300"


__all__ = ["FEWEST", "STEP", "WHOSE_TOP", "batch_doc", "batches", "by_position", "count", "described", "generation",
           "method_doc", "models_doc", "p_text", "proposer_of", "settings_doc", "smallest_rejecting", "versions"]
