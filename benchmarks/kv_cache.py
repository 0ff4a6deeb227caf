"""The ragged batch's KV cache layer against transformers' own, side by side on the demo target.

    python benchmarks/kv_cache.py [--threads 1] [--steps 30] [--rounds 4] [--cases 1x40,1x568,8x40,8x568]

For each batch size and prompt length, a RaggedBatch of the demo target is prefilled, then decodes ``--steps``
one-token steps, once with gate.engines.layout.GrowingLayer (a step writes its columns into spare room) and once
with transformers' DynamicLayer (a torch.cat of the whole cache every step), over ``--rounds`` rounds in alternating
order (A B, then B A).
It prints the median step time of each and their ratio, and checks that both gave the same logits, bit for bit.
Run it alone: other processes on the same cores distort the timings.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicLayer

from gate.engines.clock import Clock, Stopwatch
from gate.engines.layout import RaggedBatch, right_align

DEMO = Path(__file__).resolve().parent.parent / "gate" / "demo"


class PlainBatch(RaggedBatch):
    layer_class = DynamicLayer


def decode(batch_class, model, rows: int, context: int, steps: int) -> tuple[list[float], torch.Tensor]:
    dev = torch.device("cpu")
    with torch.inference_mode():
        b = batch_class(model, rows, dev, Stopwatch(Clock(dev)))
        ids, valid = right_align([[5 + i % 7 for i in range(context)]] * rows, dev)
        b.forward(ids, valid, logits_to_keep=1)
        one, ok = torch.full((rows, 1), 7), torch.ones((rows, 1), dtype=torch.bool)
        times, logits = [], []
        for _ in range(steps):
            t0 = time.perf_counter()
            logits.append(b.forward(one, ok, logits_to_keep=1))
            times.append(time.perf_counter() - t0)
    return times, torch.cat(logits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cases", default="1x40,1x568,8x40,8x568", help="batch size x prompt length, comma-separated")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(DEMO / "target", dtype=torch.float32).eval()
    print(f"{'bs':>3} {'prompt':>6} {'GrowingLayer ms':>16} {'DynamicLayer ms':>16} {'ratio':>6}  logits")
    for rows, context in (map(int, case.split("x")) for case in args.cases.split(",")):
        times: dict[type, list[float]] = {RaggedBatch: [], PlainBatch: []}
        same = True
        for i in range(args.rounds):
            got = {}
            for cls in (RaggedBatch, PlainBatch)[::1 if i % 2 == 0 else -1]:  # A B, then B A
                t, got[cls] = decode(cls, model, rows, context, args.steps)
                times[cls] += t[2:]  # the first steps warm the allocator
            same = same and torch.equal(got[RaggedBatch], got[PlainBatch])
        new, old = (statistics.median(times[c]) * 1e3 for c in (RaggedBatch, PlainBatch))
        logits = "identical" if same else "DIFFER"
        print(f"{rows:>3} {context:>6} {new:>16.1f} {old:>16.1f} {new / old:>6.2f}  {logits}")


if __name__ == "__main__":
    main()
