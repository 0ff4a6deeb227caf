"""Measure the embedded demo pair against its four targets (see gate/demo/README.md).

    python benchmarks/demo_pair.py [--json]

1. weights in git: total size of the shipped *.safetensors (target <= 32 MB);
2. cost ratio: median fp32 decode step (context 64) of the target vs the draft at batch size 1 (target >= 8x);
3. greedy outputs not degenerate: no output is one token repeated, and distinct-token share per output;
4. tokens per target forward at k=4 on the default suite, greedy (target >= 2.0).

Run it alone: other torch processes on the same cores distort the timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gate.engines.base import GenerationSettings, Request, SpecCounters
from gate.engines.clock import Clock, Stopwatch
from gate.engines.layout import RaggedBatch, right_align
from gate.engines.speculative import SpeculativeEngine
from gate.inputs.suite import load_suite

DEMO = Path(__file__).resolve().parent.parent / "gate" / "demo"
SUITE = DEMO.parent / "suites" / "default.jsonl"


def step_time(model, batch_size: int = 1, context: int = 64, trials: int = 50) -> float:
    clock = Clock(torch.device("cpu"))
    with torch.inference_mode():
        b = RaggedBatch(model, batch_size, torch.device("cpu"), Stopwatch(clock))
        ids, valid = right_align([[5] * context] * batch_size, torch.device("cpu"))
        b.forward(ids, valid, logits_to_keep=1)
        one, ok = torch.full((batch_size, 1), 7), torch.ones((batch_size, 1), dtype=torch.bool)
        times = []
        for _ in range(trials):
            t0 = time.perf_counter()
            b.forward(one, ok, logits_to_keep=1)
            times.append(time.perf_counter() - t0)
            b.rollback(b.length - 1, torch.zeros(batch_size, dtype=torch.long))  # keep the context fixed
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    size = sum(f.stat().st_size for f in DEMO.glob("*/*.safetensors"))
    tok = AutoTokenizer.from_pretrained(DEMO / "target")
    target = AutoModelForCausalLM.from_pretrained(DEMO / "target", dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(DEMO / "draft", dtype=torch.float32).eval()
    t_step, d_step = step_time(target), step_time(draft)

    suite = load_suite(SUITE)
    engine = SpeculativeEngine(target, draft, torch.device("cpu"))
    settings = GenerationSettings(temperature=0.0, num_draft_tokens=4, eos_token_ids=(tok.eos_token_id,))
    total = SpecCounters()
    per_slice: dict[str, SpecCounters] = {}
    degenerate, distinct = [], []
    for p in suite.prompts:
        ids = tuple(tok(p.text, add_special_tokens=False)["input_ids"])
        seq = engine.generate([Request(ids, args.max_new_tokens)], settings).sequences[0]
        total.add(seq.counters)
        per_slice.setdefault(p.slice, SpecCounters()).add(seq.counters)
        out = seq.token_ids
        if len(out) > 1 and len(set(out)) == 1:
            degenerate.append(p.id)
        distinct.append(len(set(out)) / max(1, len(out)))

    report = {
        "weights_bytes": size,
        "weights_mb": round(size / 1e6, 2),
        "target_params": sum(p.numel() for p in target.parameters()),
        "draft_params": sum(p.numel() for p in draft.parameters()),
        "target_step_ms": round(t_step * 1e3, 3),
        "draft_step_ms": round(d_step * 1e3, 3),
        "cost_ratio_target_over_draft": round(t_step / d_step, 2),
        "degenerate_outputs": degenerate,
        "mean_distinct_token_share": round(statistics.mean(distinct), 3),
        "k": 4,
        "tokens_per_target_forward": round(total.tokens_per_target_forward, 3),
        "acceptance_rate": round(total.acceptance_rate, 3),
        "tokens_per_target_forward_by_slice": {s: round(c.tokens_per_target_forward, 3)
                                               for s, c in sorted(per_slice.items())},
        "threads": args.threads,
        "torch": torch.__version__,
    }
    report["targets_met"] = {
        "weights<=32MB": size <= 32e6,
        "cost_ratio>=8": t_step / d_step >= 8,
        "not_degenerate": not degenerate,
        "tokens_per_forward>=2.0": total.tokens_per_target_forward >= 2.0,
    }
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
