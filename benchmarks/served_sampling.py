"""Sampling as served, judged from a served target's top-k prompt logprobs (gate/checks/coarse.py: as_sampled):
how often an unchanged sampler is rejected (the tests' size, which must stay at alpha), how many sampled tokens the
top-k leaves unjudged, and how often a sampler that ignores top_p on a share of its tokens is caught, per
temperature, truncation and top-k width.  Random targets (60 tokens, logits N(0, 2^2)), one process, side by side.

    python benchmarks/served_sampling.py --runs 300 --tokens 300

Each run: ``--tokens`` positions, each token drawn from the tempered, truncated distribution (vLLM's order), the
server's top-k at T=1 as the gate gets it, the tests on the conditional outcomes with 500 calibration draws,
rejected at alpha 0.01 over the three target-side tests (the gate's decision before its confirmation), or on any
token outside the truncation.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np
import torch

from gate.checks.coarse import as_sampled
from gate.checks.distribution import analyze_distributions, observed_pvalues, rejects
from gate.engines.sampling import truncate

TESTS = ("pit_ks", "target_top", "target_logprob")


def run_once(rng: torch.Generator, tokens: int, vocab: int, width: int, t: float, top_p: float, leak: float,
             seed: int) -> tuple[bool, int, int]:
    tops, ys = [], []
    for _ in range(tokens):
        logp = torch.log_softmax(torch.randn(vocab, generator=rng) * 2.0, -1)
        p = torch.softmax(truncate((logp / t)[None].clone(), 0, top_p, 0.0, "vllm")[0], -1)
        if leak:
            p = (1 - leak) * p + leak * torch.softmax(logp / t, -1)
        ys.append(int(torch.multinomial(p, 1, generator=rng)))
        tops.append({int(i): float(logp[i]) for i in torch.argsort(logp, descending=True)[:width]})
    got = as_sampled([((1,), ys, [0.0] * tokens, tops)], SimpleNamespace(temperature=t, top_k=0, top_p=top_p,
                                                                          min_p=0.0), vocab)
    a = analyze_distributions(got.p, got.q, got.tokens, null_trials=500, null_seed=seed + 1)
    pv = observed_pvalues(a, np.random.default_rng(seed), TESTS)
    return bool(got.outside) or rejects(pv, 0.01), got.beyond, got.outside


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=300)
    args = ap.parse_args()
    cases = [(0.7, 0.9, 20, 0.0), (0.7, 1.0, 20, 0.0), (1.0, 0.9, 20, 0.0), (0.7, 0.9, 8, 0.0),
             (0.7, 0.9, 20, 0.05), (0.7, 0.9, 20, 0.1)]
    print(f"{'T':>4} {'top_p':>5} {'top-k':>5} {'leak':>5} {'rejected':>9} {'not judged':>11} {'s':>5}")
    for t, top_p, width, leak in cases:
        rng, start = torch.Generator().manual_seed(0), time.perf_counter()
        out = [run_once(rng, args.tokens, 60, width, t, top_p, leak, seed) for seed in range(args.runs)]
        rejected = sum(r for r, _, _ in out) / args.runs
        unjudged = sum(b for _, b, _ in out) / (args.runs * args.tokens)
        print(f"{t:>4} {top_p:>5} {width:>5} {leak:>5} {rejected:>9.2%} {unjudged:>11.1%} "
              f"{time.perf_counter() - start:>5.0f}", flush=True)


if __name__ == "__main__":
    main()
