"""Calibrate the checks on the demo pair: false-rejection rate of the distribution test, and bf16 noise.

    python benchmarks/calibration.py [--trials 1000] [--n 100 200 600 2000] [--skip-bf16] [--json out.json]
    python benchmarks/calibration.py --skip-fixed --skip-bf16 --confirmation 10000 [--groups 4]
    python benchmarks/calibration.py --skip-fixed --skip-bf16 --mutants 20 [--mutant NAME]...

1. Size of the distribution test at each n: plain sampling (T=1) on the default
   suite gives the positions; tokens are redrawn from the target's own
   distribution ``--trials`` times and the combined test (and each test, at
   alpha/4) is run, with the z-tests' normal approximations and with the
   check's calibrated p-values (``--null-trials`` null draws), each rate with its
   Clopper-Pearson 95% interval.  The rates must stay within alpha's.
2. ``--confirmation GATES``: the confirmation (gate/checks/confirmation.py) on the same redraws at the demo's
   n (``--confirmation-n``, 600): per test, per group (engine x batch size) and per gate of ``--groups`` groups, the
   null rejection rate with one pass at alpha and with the confirmed rule (a second draw, its own calibration,
   where the first lands between the floor and alpha); then the power of both against the planted distortions
   (``--power-trials`` each), and with ``--mutants SEEDS`` against every built-in mutant that samples, each
   sampling ``n`` tokens at batch size 8 under SEEDS seeds through the check's own analysis (pass i confirmed
   by pass i + 1).
3. bf16 on CPU: plain and speculative greedy decoding at batch size 8 against
   plain decoding at batch size 1; the measured logit noise, the tolerance, and
   how many sequences differ, split into near-ties and confident divergences.
"""

from __future__ import annotations

import argparse
import functools
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


def _demo_rows(n: int, seed: int = 0):
    """The demo pair, and the target's and draft's distributions at the first ``n`` positions of a plain sampled
    run (T = 1) on the default suite."""
    loaded = parse_config(CONFIG % {"dtype": "float32"}, PACKAGE_DIR / "calibration.yaml")
    pair = load_pair(loaded)
    prompts = [tuple(pair.encode(p.text)) for p in load_suite(PACKAGE_DIR / "suites" / "default.jsonl").prompts]
    outs = generate(ReferenceEngine(pair.target.model, pair.device), prompts, 8, 48, GenerationSettings(1.0))
    items = dist.truncate(list(zip(prompts, [tuple(o) for o in outs])), n)
    target, draft = Scorer(pair.target.model, pair.device), Scorer(pair.draft.model, pair.device)
    return pair, rows(target, items), rows(draft, items)


@functools.cache
def _confirmation_setup(n: int, draws: int):
    """The demo's rows at n, their moments, and the two passes' calibrations (the first pass's null draws and the
    second's, seeded as the check seeds them): made once, shared by the null and the power simulations (the rows
    are the expensive part, a sampled run and two teacher-forced scorings)."""
    _, p, q = _demo_rows(n)
    chunk = dist._Chunk(p, q)
    token = dist.sample_from(p, np.random.default_rng(0))
    cal1 = dist.analyze_distributions(p, q, token, null_trials=draws).calibration()
    cal2 = dist.analyze_distributions(p, q, token, null_trials=draws, null_seed=dist.SECOND_NULL_SEED).calibration()
    return p, q, chunk, chunk.moments(), cal1, cal2


def confirmation_null(gates: int, alpha: float, n: int, groups: int, draws: int) -> dict:
    """Per test, per group and per gate of ``groups`` groups: how often unchanged code fails with one pass at
    alpha and with the confirmed rule, on tokens redrawn from the target at a sampled run's positions.  Each group
    draws its own tokens; a first pass between the floor and alpha draws a second set, judged on calibration draws
    of its own (seeded as the check seeds its second pass)."""
    from gate.checks.confirmation import Rule, adjusted, fails

    rule = Rule(alpha, alpha / 100)
    p, _, chunk, m, cal1, cal2 = _confirmation_setup(n, draws)
    rng = np.random.default_rng(2026)

    def one(cal) -> dict[str, float]:
        y = dist._sample(chunk.cdf, rng.random(p.shape[0]))
        return cal.apply(dist.pvalues(chunk.stats(y), m, rng.random(p.shape[0])))

    tests = {name: [0, 0] for name in dist.TESTS}  # one pass, confirmed
    group, gate, second = [0, 0], [0, 0], 0
    for _ in range(gates):
        red = [False, False]
        for _ in range(groups):
            pv = one(cal1)
            p1 = adjusted(pv)
            decided = rule.first(p1)
            if decided == "unconfirmed":
                second += 1
                decided = rule.decide(p1, adjusted(one(cal2)))
            for k, failed in enumerate((p1 < alpha, fails(decided))):
                group[k] += failed
                red[k] |= failed
            for name in dist.TESTS:
                tests[name][0] += pv[name] < alpha / len(pv)
                tests[name][1] += pv[name] < alpha / len(pv) and fails(decided)
        gate[0] += red[0]
        gate[1] += red[1]

    def rate(k: int, total: int) -> dict:
        return {"count": k, "rate": k / total, "ci": clopper_pearson(k, total)}

    total = gates * groups
    out = {"alpha": alpha, "floor": rule.floor, "bound": rule.size(), "n": int(p.shape[0]), "gates": gates,
           "groups": groups, "null_trials": draws, "second_passes": rate(second, total),
           "tests": {name: {"one_pass": rate(a, total), "confirmed": rate(b, total)} for name, (a, b) in tests.items()},
           "group": {"one_pass": rate(group[0], total), "confirmed": rate(group[1], total)},
           "gate": {"one_pass": rate(gate[0], gates), "confirmed": rate(gate[1], gates)}}
    print(f"confirmation, null at n={out['n']}: group {group[0]}/{total} one pass, {group[1]}/{total} confirmed; "
          f"gate of {groups}: {gate[0]}/{gates} and {gate[1]}/{gates}; second passes {second}", file=sys.stderr)
    return out


def confirmation_power(trials: int, alpha: float, n: int, draws: int) -> dict:
    """Against each planted distortion at the demo's n: one pass's rejection rate at alpha and the confirmed
    rule's, the second pass an independent draw of the same distortion."""
    from gate.checks.confirmation import Rule, adjusted, fails

    rule = Rule(alpha, alpha / 100)
    p, q, chunk, m, cal1, cal2 = _confirmation_setup(n, draws)
    rng = np.random.default_rng(7)
    out = {"alpha": alpha, "floor": rule.floor, "n": int(p.shape[0]), "trials": trials, "families": {}}
    aside = np.random.default_rng(8)  # its own stream: the rates above stay as they were without it

    def second_cal(cdf) -> float:
        """One pass at alpha judged on the second pass's calibration draws: b as the second pass sees it (a
        calibration of 2,000 draws sets a test's critical value at its 5th most extreme draw, which differs
        between two sets of draws)."""
        hits = 0
        for _ in range(trials):
            y = dist._sample(cdf, aside.random(p.shape[0]))
            hits += adjusted(cal2.apply(dist.pvalues(chunk.stats(y), m, aside.random(p.shape[0])))) < alpha
        return hits / trials
    for family in dist.FAMILIES:
        rows_ = []
        for eps in dist.EPSILONS:
            cdf = dist._Chunk(dist.planted(p, q, family, eps), q).cdf

            def adj(cal, cdf=cdf) -> float:
                y = dist._sample(cdf, rng.random(p.shape[0]))
                return adjusted(cal.apply(dist.pvalues(chunk.stats(y), m, rng.random(p.shape[0]))))

            once = twice = floor = 0
            for _ in range(trials):
                p1 = adj(cal1)
                once += p1 < alpha
                floor += p1 < rule.floor
                decided = rule.first(p1)
                twice += fails(rule.decide(p1, adj(cal2)) if decided == "unconfirmed" else decided)
            rows_.append({"epsilon": eps, "one_pass": once / trials, "confirmed": twice / trials,
                          "counts": [once, twice], "one_pass_ci": clopper_pearson(once, trials),
                          "confirmed_ci": clopper_pearson(twice, trials), "below_floor": floor / trials,
                          "bound": rule.power(floor / trials, once / trials),
                          "one_pass_second_calibration": second_cal(cdf)})
        out["families"][family] = rows_
        print(f"confirmation, power ({family}): " + ", ".join(
            f"e={r['epsilon']} {r['one_pass']:.0%}/{r['confirmed']:.0%}" for r in rows_), file=sys.stderr)
    return out


def confirmation_mutants(seeds: int, alpha: float, n: int, draws: int, only: tuple[str, ...] = ()) -> dict:
    """Every built-in mutant that samples (and the correct engine), ``seeds`` sampled passes of ``n`` tokens at batch
    size 8 each, through the check's own analysis: the rate at which one pass rejects at alpha, and at which the
    confirmed rule fails, pass i confirmed by pass i + 1 (independent seeds)."""
    from gate.checks.confirmation import Rule, adjusted, fails
    from gate.engines.mutants import MUTANTS

    rule = Rule(alpha, alpha / 100)
    loaded = parse_config(CONFIG % {"dtype": "float32"}, PACKAGE_DIR / "calibration.yaml")
    pair = load_pair(loaded)
    prompts = [tuple(pair.encode(p.text)) for p in load_suite(PACKAGE_DIR / "suites" / "default.jsonl").prompts]
    target, draft = Scorer(pair.target.model, pair.device), DraftModel(Scorer(pair.draft.model, pair.device))
    settings = GenerationSettings(1.0, 4)
    per = -(-n // 32)
    out = {"alpha": alpha, "floor": rule.floor, "n": n, "seeds": seeds, "engines": {}}
    for name, cls in {"correct": SpeculativeEngine, **MUTANTS}.items():
        if only and name not in only:
            continue
        engine = cls(pair.target.model, pair.draft.model, pair.device)
        ps = []
        for s in range(seeds):
            picked = [prompts[(s * 5 + i) % len(prompts)] for i in range(per)]
            reqs = [Request(x, 32, seed=1_000_003 * (s + 1) + i) for i, x in enumerate(picked)]
            seqs = []
            for i in range(0, len(reqs), 8):
                seqs += [tuple(x.token_ids) for x in engine.generate(reqs[i:i + 8], settings).sequences]
            a = dist.analyze(target, draft, dist.truncate(list(zip(picked, seqs)), n), 1.0, pair.target.vocab_size,
                             null_trials=draws, null_seed=s)
            ps.append(adjusted(dist.observed_pvalues(a, np.random.default_rng(s))) if a.n else None)
        once = sum(x is not None and x < alpha for x in ps)
        pairs = [(ps[i], ps[(i + 1) % seeds]) for i in range(seeds)]
        twice = sum(fails(rule.decide(a, b)) for a, b in pairs)
        out["engines"][name] = {"one_pass": once / seeds, "confirmed": twice / seeds,
                                "median_p": float(np.median([x for x in ps if x is not None])),
                                "below_floor": sum(x is not None and x < rule.floor for x in ps) / seeds}
        print(f"confirmation, {name}: one pass {once}/{seeds}, confirmed {twice}/{seeds}", file=sys.stderr, flush=True)
    return out


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
    ap.add_argument("--confirmation", type=int, default=0, metavar="GATES",
                    help="the confirmed rule's null rates over this many simulated gates, and its power")
    ap.add_argument("--confirmation-n", type=int, default=600, help="sampled tokens per group (the demo's)")
    ap.add_argument("--groups", type=int, default=4, help="engine x batch size groups per simulated gate")
    ap.add_argument("--power-trials", type=int, default=200, help="per planted distortion")
    ap.add_argument("--mutants", type=int, default=0, metavar="SEEDS", help="also every sampling mutant, SEEDS passes")
    ap.add_argument("--mutant", action="append", default=[], metavar="NAME",
                    help="with --mutants: only this engine (repeatable; `correct` is the correct one)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    report = {} if args.skip_fixed else {
        "distribution_test_size": size_by_n(args.trials, 0.01, tuple(args.n), args.null_trials)}
    if args.sequential:
        report["distribution_test_size_sequential"] = sequential_size(args.sequential, 0.01,
                                                                      tuple(args.sequential_n), args.null_trials)
    if args.confirmation:
        n = args.confirmation_n
        report["confirmation_null"] = confirmation_null(args.confirmation, 0.01, n, args.groups, args.null_trials)
        report["confirmation_power"] = confirmation_power(args.power_trials, 0.01, n, args.null_trials)
    if args.mutants:
        report["confirmation_mutants"] = confirmation_mutants(args.mutants, 0.01, args.confirmation_n,
                                                              args.null_trials, tuple(args.mutant))
    if not args.skip_bf16:
        report["bf16"] = bf16_noise()
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
