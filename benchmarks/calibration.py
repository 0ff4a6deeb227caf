"""Calibrate the checks on the demo pair: false-rejection rate of the distribution test, and bf16 noise.

    python benchmarks/calibration.py [--trials 1000] [--n 100 200 600 2000] [--skip-bf16] [--json out.json]

1. Size of the distribution test at each n: plain sampling (T=1) on the default
   suite gives the positions; tokens are redrawn from the target's own
   distribution ``--trials`` times and the combined test (and each test, at
   alpha/4) is run, with the z-tests' normal approximations and with the
   check's calibrated p-values (``--null-trials`` null draws), each rate with its
   Clopper-Pearson 95% interval.  The rates must stay within alpha's.
2. bf16 on CPU: plain and speculative greedy decoding at batch size 8 against
   plain decoding at batch size 1; the measured logit noise, the tolerance, and
   how many sequences differ, split into near-ties and confident divergences.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from gate.checks import distribution as dist
from gate.checks.analysis import run_checks
from gate.engines.base import GenerationSettings, Request
from gate.engines.proposers import DraftModel
from gate.engines.reference import ReferenceEngine
from gate.engines.scoring import Scorer
from gate.engines.speculative import SpeculativeEngine
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.inputs.models import load_pair
from gate.inputs.suite import load_suite

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers import results_doc

CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: %(dtype)s}
  draft: {path: "specguard:demo/draft", dtype: %(dtype)s}
  device: cpu
batching: {batch_sizes: [1, 8]}
"""


def generate(engine, prompts, bs, new, settings):
    out = []
    for i in range(0, len(prompts), bs):
        reqs = [Request(p, new, seed=i + j) for j, p in enumerate(prompts[i:i + bs])]
        out += [s.token_ids for s in engine.generate(reqs, settings).sequences]
    return out


def rows(scorer: Scorer, items: list, temperature: float = 1.0) -> torch.Tensor:
    """The teacher-forced distributions at every sampled position of ``items``: [n, V] (float64)."""
    out = [x for x in scorer.logits_rows(items, lambda _, r: torch.softmax(r / temperature, -1).cpu())
           if x is not None]
    return torch.cat(out).double()


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(method="exact")
    return ci.low, ci.high


def size_by_n(trials: int, alpha: float, ns: tuple[int, ...], draws: int) -> dict:
    """Each test's and the combined decision's rejection rate on tokens drawn from the target's own distribution at
    the positions of a plain sampled run, at each n: the normal approximations' (before calibration) and the
    calibrated ones (the check's decision), with Clopper-Pearson intervals.  The calibration's null draws are made
    once per n by the check's own code; the ``trials`` evaluation draws are independent of them."""
    loaded = parse_config(CONFIG % {"dtype": "float32"}, PACKAGE_DIR / "calibration.yaml")
    pair = load_pair(loaded)
    prompts = [tuple(pair.encode(p.text)) for p in load_suite(PACKAGE_DIR / "suites" / "default.jsonl").prompts]
    ref = ReferenceEngine(pair.target.model, pair.device)
    outs = generate(ref, prompts, 8, 48, GenerationSettings(temperature=1.0))
    every = list(zip(prompts, [tuple(o) for o in outs]))
    target, draft = Scorer(pair.target.model, pair.device), DraftModel(Scorer(pair.draft.model, pair.device))
    out = {"alpha": alpha, "trials": trials, "null_trials": draws, "by_n": {}}
    for n in ns:
        items = dist.truncate(every, n)
        p, q = rows(target, items), rows(draft, items)
        chunk = dist._Chunk(p, q)
        m = chunk.moments()
        cal = dist.analyze_distributions(p, q, dist.sample_from(p, np.random.default_rng(0)),
                                         null_trials=draws).calibration()
        rng = np.random.default_rng(1000 + n)
        names = (*dist.TESTS, "combined")
        hits = {"asymptotic": dict.fromkeys(names, 0), "calibrated": dict.fromkeys(names, 0)}
        for _ in range(trials):
            y = dist._sample(chunk.cdf, rng.random(p.shape[0]))
            pv = dist.pvalues(chunk.stats(y), m, rng.random(p.shape[0]))
            for how, got in (("asymptotic", pv), ("calibrated", cal.apply(pv))):
                hits[how]["combined"] += dist.rejects(got, alpha)
                for name in dist.TESTS:
                    hits[how][name] += got[name] < alpha / len(dist.TESTS)
        out["by_n"][str(p.shape[0])] = {
            how: {name: {"rate": k / trials, "ci": clopper_pearson(k, trials)} for name, k in h.items()}
            for how, h in hits.items()}
        print(f"n={p.shape[0]}: " + "; ".join(
            f"{how} combined {h['combined'] / trials:.2%}, " + ", ".join(f"{k} {v / trials:.2%}" for k, v in h.items()
                                                                         if k != "combined")
            for how, h in hits.items()), file=sys.stderr, flush=True)
    return out


def sequential_size(trials: int, alpha: float, ns: tuple[int, ...], draws: int) -> dict:
    """The real null, sequence and all: each replicate is a fresh plain sampled run (its own seeds, its own prompts
    from the suite's short ones, one batch), so each token's prefix is the sampler's own; the first n of its tokens,
    for each n, go through the check's own analysis (calibration draws included).  Slower than the redraws at
    fixed positions, which condition on one run's prefixes: this one holds the martingale dependence too."""
    loaded = parse_config(CONFIG % {"dtype": "float32"}, PACKAGE_DIR / "calibration.yaml")
    pair = load_pair(loaded)
    prompts = [ids for p in load_suite(PACKAGE_DIR / "suites" / "default.jsonl").prompts
               if len(ids := tuple(pair.encode(p.text))) < 128]
    ref = ReferenceEngine(pair.target.model, pair.device)
    target, draft = Scorer(pair.target.model, pair.device), DraftModel(Scorer(pair.draft.model, pair.device))
    names = (*dist.TESTS, "combined")
    hits = {n: {"asymptotic": dict.fromkeys(names, 0), "calibrated": dict.fromkeys(names, 0)} for n in ns}
    per_prompt = 32
    rows = -(-max(ns) // per_prompt)
    for t in range(trials):
        start = (t * 7) % len(prompts)
        picked = [prompts[(start + i) % len(prompts)] for i in range(rows)]
        reqs = [Request(p, per_prompt, seed=1_000_003 * (t + 1) + i) for i, p in enumerate(picked)]
        seqs = [s.token_ids for s in ref.generate(reqs, GenerationSettings(temperature=1.0)).sequences]
        every = list(zip(picked, [tuple(x) for x in seqs]))
        for n in ns:
            a = dist.analyze(target, draft, dist.truncate(every, n), 1.0, pair.target.vocab_size, null_trials=draws,
                             null_seed=t)
            for how in ("asymptotic", "calibrated"):
                pv = dist.observed_pvalues(a, np.random.default_rng(t), asymptotic=how == "asymptotic")
                hits[n][how]["combined"] += dist.rejects(pv, alpha)
                for name in dist.TESTS:
                    hits[n][how][name] += pv[name] < alpha / len(dist.TESTS)
        if (t + 1) % 100 == 0:
            print(f"sequential: {t + 1} of {trials} runs; " + "; ".join(
                f"n={n} asymptotic {h['asymptotic']['combined']}, calibrated {h['calibrated']['combined']}"
                for n, h in hits.items()), file=sys.stderr, flush=True)
    return {"alpha": alpha, "trials": trials, "null_trials": draws,
            "by_n": {str(n): {how: {name: {"rate": k / trials, "ci": clopper_pearson(k, trials)}
                                    for name, k in h.items()} for how, h in hits[n].items()} for n in ns}}


def bf16_noise() -> dict:
    loaded = parse_config(CONFIG % {"dtype": "bfloat16"}, PACKAGE_DIR / "calibration.yaml")
    pair = load_pair(loaded)
    suite = load_suite(PACKAGE_DIR / "suites" / "default.jsonl")
    ids = [tuple(pair.encode(p.text)) for p in suite.prompts]
    ref = ReferenceEngine(pair.target.model, pair.device)
    spec = SpeculativeEngine(pair.target.model, pair.draft.model, pair.device)
    g = GenerationSettings(0.0, 4)
    outs = {("reference", 1): generate(ref, ids, 1, 48, g), ("reference", 8): generate(ref, ids, 8, 48, g),
            ("speculative", 8): generate(spec, ids, 8, 48, g)}
    doc = results_doc([i for i in ids], {key: [(o, "max_tokens") for o in out] for key, out in outs.items()}, 48)
    checks = run_checks(doc, pair, loaded.config)
    pick = ("sequences", "exact_match", "divergences", "confident_inconsistencies")
    return {"tolerance": checks.tolerance.model_dump(),
            "reference_bs8": checks.noise_floor["8"].model_dump(include=set(pick)),
            "speculative_bs8": checks.equivalence["speculative"]["8"].model_dump(include=set(pick)),
            "examples": checks.noise_floor["8"].examples[:2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--null-trials", type=int, default=dist.NULL_TRIALS)
    ap.add_argument("--n", type=int, nargs="+", default=[100, 200, 600, 2000])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-bf16", action="store_true")
    ap.add_argument("--sequential", type=int, default=0, metavar="TRIALS",
                    help="also this many fresh plain sampled runs per n (the real null, prefixes and all)")
    ap.add_argument("--sequential-n", type=int, nargs="+", default=[100, 200, 600])
    ap.add_argument("--skip-fixed", action="store_true", help="only the sequential replicates")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    report = {} if args.skip_fixed else {
        "distribution_test_size": size_by_n(args.trials, 0.01, tuple(args.n), args.null_trials)}
    if args.sequential:
        report["distribution_test_size_sequential"] = sequential_size(args.sequential, 0.01,
                                                                      tuple(args.sequential_n), args.null_trials)
    if not args.skip_bf16:
        report["bf16"] = bf16_noise()
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
