"""Calibrate the checks on the demo pair: false-rejection rate of the distribution test, and bf16 noise.

    python benchmarks/calibration.py [--trials 1000] [--json out.json]

1. Size of the distribution test: plain sampling (T=1) on the default suite gives
   the positions; tokens are redrawn from the target's own distribution
   ``--trials`` times and the combined test (and each test, at alpha/4) is run.
   The rejection rate must stay at or below alpha = 0.01.
2. bf16 on CPU: plain and speculative greedy decoding at batch size 8 against
   plain decoding at batch size 1; the measured logit noise, the tolerance, and
   how many sequences differ, split into near-ties and confident divergences.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from gate.checks import distribution as dist
from gate.checks.analysis import run_checks
from gate.engines.base import GenerationSettings, Request
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


def size_of_test(trials: int, alpha: float) -> dict:
    loaded = parse_config(CONFIG % {"dtype": "float32"}, PACKAGE_DIR / "calibration.yaml")
    pair = load_pair(loaded)
    prompts = [tuple(pair.encode(p.text)) for p in load_suite(PACKAGE_DIR / "suites" / "default.jsonl").prompts]
    ref = ReferenceEngine(pair.target.model, pair.device)
    outs = generate(ref, prompts, 8, 48, GenerationSettings(temperature=1.0))
    items = dist.truncate(list(zip(prompts, [tuple(o) for o in outs])), 2000)
    # Tokens really drawn from p: the null simulation's rejection rate is the test's size.
    a = dist.analyze(Scorer(pair.target.model, pair.device), Scorer(pair.draft.model, pair.device), items, 1.0,
                     pair.target.vocab_size, power_trials=trials, null_seed=7)
    hits = dict.fromkeys((*dist.TESTS, "combined"), 0)
    for t in range(trials):
        pv = dist.pvalues(a.null[t], a.moments, a.null_sim.pit_u[t])
        hits["combined"] += dist.rejects(pv, alpha)
        for name in dist.TESTS:
            hits[name] += pv[name] < alpha / len(dist.TESTS)
    return {"n": a.n, "trials": trials, "alpha": alpha,
            "rejection_rate": {k: v / trials for k, v in hits.items()}}


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
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    report = {"distribution_test_size": size_of_test(args.trials, 0.01), "bf16": bf16_noise()}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
