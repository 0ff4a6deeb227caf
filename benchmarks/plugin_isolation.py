"""What running a plug-in in its own worker process costs, beside running it in a thread of the gate.

    python benchmarks/plugin_isolation.py [--batches 200]

A trivial plug-in (it returns fixed tokens at once) isolates the gate's own cost per call: the pickles over the
pipe and the worker's wake-up, at batch sizes 1, 8 and 64 with 48 new tokens per prompt.  Also the worker's
start (a Python start and ``import torch``), paid once per engine and again after a crash, outside any batch's
time.  Run it alone: a second torch process on 2 cores inflates everything.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from gate.engines.base import GenerationSettings, Request
from gate.engines.plugin import PluginEngine, PluginSettings, ProcessCallable, load_callable

PLUGIN = '''
def generate(prompt_ids, batch_size, settings):
    return [{"token_ids": [5] * n} for n in settings.max_new_tokens]
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=200)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    (tmp / "trivial_plugin.py").write_text(PLUGIN)
    sys.path.insert(0, str(tmp))
    base = PluginSettings(max_new_tokens=[], seeds=[], temperature=0.0, num_draft_tokens=4, eos_token_ids=[],
                          target="t", draft="d", dtype="float32", device="cpu")
    settings = GenerationSettings(0.0, 4, ())
    worker = ProcessCallable("trivial_plugin:generate", "bench", "bench", log_path=tmp / "bench.log")
    t0 = time.perf_counter()
    worker.start()
    start_s = time.perf_counter() - t0
    engines = {"thread": PluginEngine("t", load_callable("trivial_plugin:generate"), torch.device("cpu"), base,
                                      vocab_size=100),
               "process": PluginEngine("p", worker, torch.device("cpu"), base, vocab_size=100)}
    print(f"worker start (once per engine, and after a crash): {start_s * 1000:.0f} ms")
    print(f"{'batch size':>10} {'thread ms':>10} {'process ms':>11} {'added ms':>9}")
    for bs in (1, 8, 64):
        reqs = [Request(tuple(range(1, 65)), 48, 0, f"p{i}") for i in range(bs)]
        per = {}
        for name, engine in engines.items():
            engine.generate(reqs, settings)
            t0 = time.perf_counter()
            for _ in range(args.batches):
                engine.generate(reqs, settings)
            per[name] = (time.perf_counter() - t0) / args.batches * 1000
        print(f"{bs:>10} {per['thread']:>10.2f} {per['process']:>11.2f} {per['process'] - per['thread']:>9.2f}")
    worker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
