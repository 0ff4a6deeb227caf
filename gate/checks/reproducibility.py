"""Reproducibility, reported on its own line: lossless is not the same as bitwise reproducible.

For each engine on its own (speculative and non-speculative separately):

* **across batch sizes**: is each prompt's greedy output bitwise identical at every
  batch size to the smallest one?
* **across runs**: when the very same batch (same prompts, same order) ran again,
  was each output bitwise identical?  Nothing differed but time.
* **across compositions** (batch-composition invariance): at the same batch size,
  is each prompt's output bitwise identical whatever it was batched with?  This is
  what users rely on when they expect one answer per prompt (vLLM's
  batch-invariant mode exists for it).

Differences here are expected on GPUs (reduction order changes with batch shape)
and are not bugs by themselves: equivalence tells bugs from noise.  They fail the
gate only under ``checks.reproducibility.require_bitwise``.
"""

from __future__ import annotations

from gate.checks.context import CheckContext
from gate.checks.doc import Reproducibility, VerdictLine
from gate.inputs.config import REFERENCE
from gate.run.records import SequenceOutput
from gate.run.results import Results


def _identical(a: dict[str, SequenceOutput], b: dict[str, SequenceOutput]) -> tuple[int, int]:
    common = sorted(set(a) & set(b))
    return sum(a[p].token_ids == b[p].token_ids for p in common), len(common)


def _bitwise(rows) -> bool | None:
    """Identical wherever outputs were compared; None (not measured) when nothing was: an engine whose batches
    all failed or hung has no outputs, and no comparison of nothing is a pass."""
    counted = [v for v in rows if v["compared"]]
    return all(v["identical"] == v["compared"] for v in counted) if counted else None


def measure(results: Results, repeat_batch_size: int | None) -> dict[str, Reproducibility]:
    out = {}
    for engine in [REFERENCE, *results.engines()]:
        have = results.greedy_batch_sizes(engine)
        if not have:
            continue
        base = results.greedy_outputs(engine, have[0])
        across_bs = {}
        for bs in have[1:]:
            same, n = _identical(base, results.greedy_outputs(engine, bs))
            across_bs[str(bs)] = {"identical": same, "compared": n}
        runs = None
        repeated = [bs for bs in have if results.reruns(engine, bs)]
        if repeated:  # the configured repeat batch size, else the largest that ran a batch twice
            bs = repeat_batch_size if repeat_batch_size in repeated else repeated[-1]
            pairs = results.reruns(engine, bs)
            differing = {a.prompt_id for a, b in pairs if a.token_ids != b.token_ids}
            prompts = {a.prompt_id for a, _ in pairs}
            runs = {"batch_size": bs, "identical": len(prompts - differing), "compared": len(prompts)}
        across_comp = {}
        for bs in have:
            comps = results.compositions(engine, bs)
            if len(comps) < 2:
                continue
            outs = [results.greedy_outputs(engine, bs, c) for c in comps]
            common = set.intersection(*(set(o) for o in outs))
            same = sum(all(o[p].token_ids == outs[0][p].token_ids for o in outs[1:]) for p in common)
            differing = sorted(p for p in common if any(o[p].token_ids != outs[0][p].token_ids for o in outs[1:]))
            across_comp[str(bs)] = {"compositions": len(comps), "identical": same, "compared": len(common),
                                    "differing": differing[:10]}
        speculative, label = decoding(results, engine)
        out[engine] = Reproducibility.model_validate({
            "speculative": speculative,
            "label": label,
            "base_batch_size": have[0],
            "across_batch_sizes": across_bs,
            "bitwise_across_batch_sizes": _bitwise(across_bs.values()),
            "across_runs": runs,
            "bitwise_across_runs": _bitwise([runs] if runs else []),
            "across_compositions": across_comp,
            "bitwise_across_compositions": _bitwise(across_comp.values()),
        })
    return out


def decoding(results: Results, engine: str) -> tuple[bool, str | None]:
    """Whether an engine's decoding is speculative, and its label where "speculative" or "non-speculative" would
    say more than is known: a plug-in's own plain decoding, or an engine of another stack that showed no
    speculation (no counters with drafts), e.g. a library's plain pipeline gated as an engine of its own."""
    if engine == REFERENCE:
        return False, None
    if engine in results.own_references().values():
        return False, "plain decoding (speculation off)"
    if engine in results.other_stacks() and not results.speculated(engine):
        counted = any(ex.engine == engine and ex.counters() is not None for ex in results.executions)
        return False, ("decoding (its counters show no drafts)" if counted else
                       "decoding (the engine reports no speculation counters, so whether it speculated is unknown)")
    return True, None


def label_of(r: Reproducibility) -> str:
    return r.label or ("speculative decoding" if r.speculative else "non-speculative decoding")


PROPERTIES = (("across batch sizes", "bitwise_across_batch_sizes"), ("across runs", "bitwise_across_runs"),
              ("across batch compositions", "bitwise_across_compositions"))


def sentence(r: Reproducibility) -> str:
    """One clause per property: 'speculative decoding: NOT bitwise identical across batch sizes; bitwise
    identical across runs'."""
    parts = [f"{'bitwise identical' if getattr(r, key) else 'NOT bitwise identical'} {label}"
             for label, key in PROPERTIES if getattr(r, key) is not None]
    return f"{label_of(r)}: " + "; ".join(parts)


def run(results: Results, ctx: CheckContext) -> tuple[dict[str, Reproducibility] | None, list[VerdictLine]]:
    cfg = ctx.config.checks.reproducibility
    repro = measure(results, ctx.config.repeat_batch_size)
    verdicts = []
    for engine, r in repro.items():
        flags = [getattr(r, key) for _, key in PROPERTIES if getattr(r, key) is not None]
        if not flags:
            continue
        ok = all(flags)
        status = "pass" if ok else ("fail" if cfg.require_bitwise else "warn")
        verdicts.append(VerdictLine.of("reproducibility", engine, status, sentence(r)
                                + ("" if ok or cfg.require_bitwise else
                                   " (reported, not gated; set require_bitwise to gate it)")))
    return repro, verdicts
