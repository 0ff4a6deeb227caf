"""Is a decode step of the demo target bound by memory on this machine? And what would a smaller target cost?

    python benchmarks/step_memory.py [--threads 1]

1. A 1x256 by 256x256 product (the demo target's attention projections), timed with one weight (in cache) and
   cycling over 140 distinct weights (a decode step's worth of projections, 37 MB: streamed from memory where the
   last-level cache is smaller). Bytes of weight per second are printed beside each, and beside them the rate at
   which one core reads the same 140 weights with a plain reduction (``torch.sum``): what memory allows, so that
   the product's shortfall from it is the small product's kernel, not the memory.
2. The median decode step at batch size 1 (RaggedBatch, prompt of 40 tokens) of the demo target and of random-init
   Llamas of its vocabulary with fewer layers or a narrower width, with their fp32 weights' size, and each one's
   step over the demo draft's: the pair is built for a target step of at least 8 draft steps (gate/demo/README.md),
   which is what a shallower demo target would have to keep.

Run it alone: other processes on the same cores distort the timings.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from gate.engines.clock import Clock, Stopwatch
from gate.engines.layout import RaggedBatch, right_align

DEMO = Path(__file__).resolve().parent.parent / "gate" / "demo"
SHAPES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "head_dim", "max_position_embeddings")
SMALLER = {"20 layers x 128": {"hidden_size": 128, "intermediate_size": 256, "head_dim": 32},
           "14 layers x 256": {"num_hidden_layers": 14}, "12 layers x 256": {"num_hidden_layers": 12},
           "10 layers x 256": {"num_hidden_layers": 10}, "6 layers x 256": {"num_hidden_layers": 6}}


def linear_us(weights: list[torch.Tensor], total: int = 4000) -> float:
    x = torch.randn(1, weights[0].shape[1])
    for _ in range(3):
        for w in weights:
            torch.nn.functional.linear(x, w)
    rounds = total // len(weights) + 1
    t0 = time.perf_counter()
    for _ in range(rounds):
        for w in weights:
            torch.nn.functional.linear(x, w)
    return (time.perf_counter() - t0) / (rounds * len(weights)) * 1e6


def read_gbs(weights: list[torch.Tensor], rounds: int = 30) -> float:
    """Bytes per second that one plain pass over ``weights`` (a sum of each) reads."""
    for w in weights:
        w.sum()
    t0 = time.perf_counter()
    for _ in range(rounds):
        for w in weights:
            w.sum()
    return sum(w.numel() * 4 for w in weights) * rounds / (time.perf_counter() - t0) / 1e9


def weights_mb(model) -> float:
    return sum(p.numel() for p in model.parameters()) * 4 / 1e6


def step_ms(model, steps: int = 40) -> float:
    dev = torch.device("cpu")
    with torch.inference_mode():
        b = RaggedBatch(model, 1, dev, Stopwatch(Clock(dev)))
        ids, valid = right_align([[5 + i % 7 for i in range(40)]], dev)
        b.forward(ids, valid, logits_to_keep=1)
        one, ok = torch.full((1, 1), 7), torch.ones((1, 1), dtype=torch.bool)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            b.forward(one, ok, logits_to_keep=1)
            times.append(time.perf_counter() - t0)
            b.rollback(b.length - 1, torch.zeros(1, dtype=torch.long))  # keep the context fixed
    return statistics.median(times[5:]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for n in (1, 140):
        weights = [torch.randn(256, 256) for _ in range(n)]
        us = linear_us(weights)
        print(f"1x256 @ 256x256, {n:>3} distinct weight(s): {us:6.1f} us  {256 * 256 * 4 / us / 1e3:5.2f} GB/s"
              f"  (a sum over them reads {read_gbs(weights):5.2f} GB/s)")
    demo = AutoModelForCausalLM.from_pretrained(DEMO / "target", dtype=torch.float32).eval()
    shapes = {k: v for k, v in demo.config.to_dict().items() if k in SHAPES}
    models = {"demo target (20 layers x 256)": demo}
    for name, change in SMALLER.items():
        torch.manual_seed(0)
        config = AutoConfig.for_model("llama", **{**shapes, **change})
        models[name] = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(DEMO / "draft", dtype=torch.float32).eval()
    draft_ms = [step_ms(draft) for _ in range(3)]
    print(f"{'demo draft':<30} {weights_mb(draft):6.1f} MB of fp32 weights  "
          f"step at batch size 1: {' '.join(f'{t:.2f}' for t in draft_ms)} ms")
    for name, model in models.items():
        runs = [step_ms(model) for _ in range(3)]
        print(f"{name:<30} {weights_mb(model):6.1f} MB of fp32 weights  step at batch size 1: "
              f"{' '.join(f'{t:.1f}' for t in runs)} ms  ({statistics.median(runs) / statistics.median(draft_ms):.1f}x "
              "the draft's)")


if __name__ == "__main__":
    main()
