"""Checks: turn a results document into findings and per-check verdicts.

``run_checks(doc, pair, config)`` returns a ``specguard.checks/1`` document:

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
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from gate.checks import distribution as dist
from gate.checks.equivalence import analyze_sequence, by_slice, example, score_outputs, summarize
from gate.checks.scoring import Scorer
from gate.checks.speedup import analyze_speedup, speedup_verdicts
from gate.checks.tolerance import measure_noise, tolerance_for
from gate.config import Config
from gate.models import ModelPair

SCHEMA = "specguard.checks/1"
REFERENCE = "reference"
NOISE_SAMPLE = 16  # sequences re-scored alone and batched to measure logit noise
MAX_EXAMPLES = 5


def greedy_outputs(doc: dict) -> dict[tuple[str, int, int], dict[str, dict]]:
    """{(engine, batch_size, run): {prompt_id: sequence}} for greedy, non-filler sequences.

    Run 0 is the equivalence data (phase ``outputs``, or ``canonical``); later runs of the
    same batches (a second ``outputs`` pass, or timing repeat r as run r + 1) are what
    run-to-run repeatability compares with it.
    """
    out: dict = defaultdict(dict)
    for ex in doc["executions"]:
        if ex["mode"] != "greedy" or ex["phase"] not in ("timing", "outputs", "canonical"):
            continue
        run = ex["repeat"] + 1 if ex["phase"] == "timing" else ex["repeat"]
        bucket = out[(ex["engine"], ex["batch_size"], run)]
        for s in ex["sequences"]:
            if not s.get("filler"):
                bucket.setdefault(s["prompt_id"], s)
    return dict(out)


def sampled_outputs(doc: dict) -> dict[tuple[str, int], list[dict]]:
    out: dict = defaultdict(list)
    for ex in doc["executions"]:
        if ex["mode"] == "sampling":
            out[(ex["engine"], ex["batch_size"])] += [s for s in ex["sequences"] if not s.get("filler")]
    return dict(out)


class Verdicts:
    def __init__(self):
        self.rows: list[dict] = []

    def add(self, check: str, engine: str | None, status: str, why: str, batch_size: int | None = None):
        self.rows.append({"check": check, "engine": engine, "batch_size": batch_size, "status": status, "why": why})


def run_checks(doc: dict, pair: ModelPair, config: Config, say: Callable[[str], None] = lambda m: None) -> dict:
    started = time.perf_counter()
    prompts = {p["id"]: p for p in doc["prompts"]}
    eos = set(doc["settings"]["eos_token_ids"])
    eq_cfg = config.checks.equivalence
    scorer = Scorer(pair.target.model, pair.device)
    verdicts = Verdicts()
    result: dict = {"schema": SCHEMA, "results_status": doc.get("status")}

    greedy = greedy_outputs(doc)
    canonical = greedy.get((REFERENCE, 1, 0), {})
    if greedy and not canonical:
        verdicts.add("equivalence", None, "fail", "no canonical reference (non-speculative, batch size 1) in the "
                                                  "results, so nothing can be compared; rerun `specguard run`")
    missing = sorted(set(prompts) - set(canonical)) if greedy else []
    if missing:
        result["incomplete"] = {"missing_canonical": missing}

    # Tolerance: fixed, or measured on this run's own outputs.
    fixed = None if eq_cfg.logit_tolerance == "auto" else float(eq_cfg.logit_tolerance)
    noise = None
    if fixed is None and canonical:
        sample = [(tuple(prompts[pid]["prompt_ids"]), tuple(s["token_ids"])) for pid, s in canonical.items()]
        sample = sample[:: max(1, len(sample) // NOISE_SAMPLE)][:NOISE_SAMPLE]
        noise = measure_noise(scorer, sample, max(config.batching.batch_sizes))
    tol = tolerance_for(pair.target.dtype, noise, fixed)
    result["tolerance"] = tol.to_dict()
    say(f"tolerance: {tol.to_dict()['rule']}; measured logit noise {noise}")

    # Re-score every greedy output (repeat 0) once; identical outputs share one forward pass.
    keys = [k for k in sorted(greedy) if k[2] == 0 and k != (REFERENCE, 1, 0)]
    items, others, index = [], [], []
    for key in keys:
        for pid, seq in greedy.get(key, {}).items():
            out, ref = seq["token_ids"], canonical.get(pid, {}).get("token_ids", [])
            j = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), None)
            items.append((tuple(prompts[pid]["prompt_ids"]), tuple(out)))
            others.append((j, ref[j]) if j is not None else None)
            index.append((key, pid))
    scored = dict(zip(index, score_outputs(scorer, items, others))) if items else {}

    equivalence: dict = defaultdict(dict)
    noise_floor: dict = {}
    for key in keys:  # the canonical reference itself is not compared with itself
        engine, bs, _ = key
        vs, exs = [], []
        for pid, seq in greedy.get(key, {}).items():
            if pid not in canonical:
                continue
            v = analyze_sequence(pid, prompts[pid]["slice"], seq["token_ids"], canonical[pid]["token_ids"],
                                 scored.get((key, pid)), tol, eos, prompts[pid]["max_new_tokens"],
                                 seq["stop_reason"])
            vs.append(v)
            if v.divergence and v.divergence["kind"] != "length" and len(exs) < MAX_EXAMPLES:
                exs.append(example(v, seq["token_ids"], canonical[pid]["token_ids"], pair.decode))
        summary = {**summarize(vs), "by_slice": by_slice(vs), "examples": exs,
                   "sequences_with_signatures": [{"prompt_id": v.prompt_id, "signatures": v.signatures}
                                                 for v in vs if v.signatures][:MAX_EXAMPLES],
                   "first_inconsistencies": [{"prompt_id": v.prompt_id, **v.inconsistent[0]}
                                             for v in vs if v.inconsistent][:MAX_EXAMPLES]}
        if engine == REFERENCE:
            noise_floor[str(bs)] = summary
        else:
            equivalence[engine][str(bs)] = summary
    result["equivalence"] = dict(equivalence)
    result["noise_floor"] = noise_floor
    _equivalence_verdicts(verdicts, equivalence, noise_floor, eq_cfg)

    result["reproducibility"] = reproducibility(greedy, config)
    _repro_verdicts(verdicts, result["reproducibility"], config)

    sampled = sampled_outputs(doc)
    if sampled:
        say("distribution tests")
        result["distribution"] = distribution_checks(sampled, prompts, pair, config, verdicts)

    if any(ex["phase"] == "timing" for ex in doc["executions"]):
        sp = config.checks.speedup
        result["speedup"] = analyze_speedup(doc, sp.bootstrap_resamples)
        speedup_verdicts(result["speedup"], sp.min_speedup, verdicts.add)

    result["verdicts"] = verdicts.rows
    result["analysis_s"] = time.perf_counter() - started
    result["rescoring_forwards"] = scorer.forwards
    return result


def _equivalence_verdicts(verdicts: Verdicts, equivalence: dict, noise_floor: dict, eq_cfg) -> None:
    for engine, per_bs in equivalence.items():
        for bs, s in per_bs.items():
            bs_i = int(bs)
            conf, incons = s["divergences"]["confident"], s["confident_inconsistencies"]
            near = s["divergences"]["near_tie"]
            problems = []
            if conf > eq_cfg.max_confident_divergences:
                problems.append(f"{conf} confident divergence(s) from the reference")
            if incons > eq_cfg.max_confident_inconsistencies:
                problems.append(f"{incons} token(s) clearly below the target's argmax")
            if s["divergences"]["length"]:
                problems.append(f"{s['divergences']['length']} sequence(s) that stop or continue where the "
                                "reference does not")
            if s["exact_match"] is not None and s["exact_match"] < eq_cfg.min_exact_match:
                problems.append(f"exact match {s['exact_match']:.0%} < min_exact_match {eq_cfg.min_exact_match:.0%}")
            if problems:
                verdicts.add("equivalence", engine, "fail", "; ".join(problems) + ": a bug, not float noise", bs_i)
            else:
                verdicts.add("equivalence", engine, "pass",
                             f"{s['exact_match']:.0%} identical to the reference; "
                             f"{near} divergence(s), all near-ties (float noise)" if near else
                             f"{s['exact_match']:.0%} identical to the reference", bs_i)
            for name, count in sorted(s["signatures"].items()):
                verdicts.add(f"signature:{name}", engine, "fail", f"{count} sequence(s) show {name}", bs_i)
    for bs, s in noise_floor.items():
        conf = s["divergences"]["confident"] + s["confident_inconsistencies"] + s["divergences"]["length"]
        differ = 1 - (s["exact_match"] or 0)
        if conf:
            verdicts.add("noise_floor", "reference", "fail",
                         f"plain decoding at batch size {bs} diverges confidently from batch size 1 ({conf} "
                         "finding(s)): the target's own batched path is broken", int(bs))
        elif differ:
            verdicts.add("noise_floor", "reference", "info",
                         f"plain decoding at batch size {bs}: {differ:.0%} of sequences differ from batch size 1, "
                         "all at near-ties (float noise)", int(bs))
        else:
            verdicts.add("noise_floor", "reference", "info",
                         f"plain decoding at batch size {bs} is identical to batch size 1", int(bs))


def _identical(a: dict[str, dict], b: dict[str, dict]) -> tuple[int, int]:
    common = sorted(set(a) & set(b))
    return sum(a[p]["token_ids"] == b[p]["token_ids"] for p in common), len(common)


def reproducibility(greedy: dict, config: Config) -> dict:
    """Bitwise identity across batch sizes and across runs, for each engine on its own."""
    engines = sorted({k[0] for k in greedy})
    sizes = config.batching.batch_sizes
    repeat_bs = config.checks.reproducibility.repeat_batch_size or max(sizes)
    out = {}
    for engine in engines:
        have = sorted(bs for (e, bs, r) in greedy if e == engine and r == 0)
        if not have:
            continue
        base = greedy[(engine, have[0], 0)]
        across_bs = {}
        for bs in have[1:]:
            same, n = _identical(base, greedy[(engine, bs, 0)])
            across_bs[str(bs)] = {"identical": same, "compared": n}
        runs = None
        repeated = sorted(bs for (e, bs, r) in greedy if e == engine and r == 1)
        if repeated:  # the configured repeat batch size, else the largest this engine ran twice
            bs = repeat_bs if repeat_bs in repeated else repeated[-1]
            same, n = _identical(greedy[(engine, bs, 0)], greedy[(engine, bs, 1)])
            runs = {"batch_size": bs, "identical": same, "compared": n}
        out[engine] = {
            "speculative": engine != REFERENCE,
            "base_batch_size": have[0],
            "across_batch_sizes": across_bs,
            "bitwise_across_batch_sizes": all(v["identical"] == v["compared"] for v in across_bs.values())
            if across_bs else None,
            "across_runs": runs,
            "bitwise_across_runs": (runs["identical"] == runs["compared"]) if runs else None,
        }
    return out


def _repro_verdicts(verdicts: Verdicts, repro: dict, config: Config) -> None:
    strict = config.checks.reproducibility.require_bitwise
    for engine, r in repro.items():
        kind = "speculative" if r["speculative"] else "non-speculative"
        parts = []
        for label, flag in (("across batch sizes", r["bitwise_across_batch_sizes"]),
                            ("across runs", r["bitwise_across_runs"])):
            if flag is not None:
                parts.append(f"{'bitwise identical' if flag else 'NOT bitwise identical'} {label}")
        if not parts:
            continue
        ok = all(f is not False for f in (r["bitwise_across_batch_sizes"], r["bitwise_across_runs"]))
        status = "pass" if ok else ("fail" if strict else "warn")
        verdicts.add("reproducibility", engine, status,
                     f"{kind} decoding is " + " and ".join(parts)
                     + ("" if ok or strict else " (reported, not gated; set require_bitwise to gate it)"))


def distribution_checks(sampled: dict, prompts: dict, pair: ModelPair, config: Config, verdicts: Verdicts) -> dict:
    dcfg = config.checks.distribution
    temperature = config.generation.sampling.temperature
    target = Scorer(pair.target.model, pair.device)
    draft = Scorer(pair.draft.model, pair.device)
    out: dict = {"alpha": dcfg.alpha, "num_samples": dcfg.num_samples, "temperature": temperature,
                 "tests": list(dist.TESTS), "engines": defaultdict(dict)}
    power_done = False
    for (engine, bs), seqs in sorted(sampled.items()):
        items = [(tuple(prompts[s["prompt_id"]]["prompt_ids"]), tuple(s["token_ids"])) for s in seqs]
        pos = dist.collect_positions(target, draft, items, temperature, dcfg.num_samples)
        rng = np.random.default_rng(bs)
        pvals = dist.statistics(pos.p, pos.q, pos.tokens, rng) if pos.n else {}
        failed = bool(pvals) and dist.rejects(pvals, dcfg.alpha)
        row = {"n": pos.n, "pvalues": pvals, "rejected": failed, "control": engine == REFERENCE}
        if not power_done and pos.n and dcfg.power_trials:
            out["power"] = dist.power(pos, dcfg.alpha, dcfg.power_trials)
            out["null_rejection_rate"] = dist.null_rate(pos, dcfg.alpha, dcfg.power_trials)
            power_done = True
        out["engines"][engine][str(bs)] = row
        if pos.n < dcfg.num_samples:
            verdicts.add("distribution", engine, "warn", f"only {pos.n} of {dcfg.num_samples} sampled tokens "
                                                         "available", bs)
        pmin = min(pvals.values()) if pvals else None
        worst = min(pvals, key=pvals.get) if pvals else None
        if engine == REFERENCE:
            if failed:
                verdicts.add("distribution", engine, "warn",
                             f"the control (plain sampling) fails too (p={pmin:.2g} on {worst}): the test "
                             "cannot separate engines on this setup", bs)
            continue
        if failed:
            verdicts.add("distribution", engine, "fail",
                         f"sampled tokens are not distributed as the target's (p={pmin:.2g} on {worst}, "
                         f"alpha={dcfg.alpha}/{len(pvals)})", bs)
        elif pvals:
            verdicts.add("distribution", engine, "pass", f"consistent with the target's distribution "
                                                         f"(smallest p={pmin:.2g}, n={pos.n})", bs)
    out["engines"] = dict(out["engines"])
    return out
