"""What the http engine costs on top of the engine it serves, side by side in one run.

    python benchmarks/http_engine.py [--repeats 6] [--max-new-tokens 32] [--json out.json]

Starts the stand-in server (``gate/testing/server.py``: the gate's speculative
engine on the demo pair behind FastAPI + uvicorn, speculation on) and times the
same batches of the default suite two ways, interleaved (A B, then B A):

* in process: ``SpeculativeEngine.generate`` on this process's own copy of the pair;
* over HTTP: ``HttpEngine.generate``, one streaming ``/v1/completions`` request per
  prompt, all in flight at once (the gate's load level), plus the two ``/metrics``
  scrapes around each wave.

It prints, at concurrency 1 and 4, the median ratio of wall times (HTTP / in
process) with a bootstrap 95% CI, checks that both give the same tokens, and
the gate's client CPU time per request. The server's batching window (50 ms)
is part of what it measures: a real server has one too. Run it alone.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

import torch

from gate import stacks
from gate.engines.base import GenerationSettings, Request
from gate.engines.http import HttpEngine
from gate.engines.server import Server
from gate.engines.speculative import SpeculativeEngine
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.inputs.models import load_pair
from gate.inputs.suite import suite_for
from gate.stats import bootstrap_median_ci

CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: float32}
  draft: {path: "specguard:demo/draft", dtype: float32}
  device: cpu
suite: {slices: [prose, code, questions, grammar], max_prompts_per_slice: 2}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    loaded = parse_config(CONFIG, PACKAGE_DIR / "benchmark.yaml")
    pair = load_pair(loaded)
    local = SpeculativeEngine(pair.target.model, pair.draft.model, pair.device)
    prompts = [tuple(pair.encode(p.text)) for p in suite_for(loaded).prompts]
    settings = GenerationSettings(0.0, loaded.config.speculation.num_draft_tokens, ())
    port = free_port()
    cmd = [sys.executable, "-m", "gate.testing.server", "--port", str(port), "--mode", "speculative",
           "--threads", str(args.threads)]
    report: dict = {"command": " ".join(sys.argv), "max_new_tokens": args.max_new_tokens, "levels": {}}
    with Server(cmd, f"http://127.0.0.1:{port}", "/health", 300, {}, "stand-in"):
        served = HttpEngine("served", f"http://127.0.0.1:{port}", stacks.get("vllm"), speculative=True)
        for n in (1, 4):
            batches = [[Request(p, args.max_new_tokens, prompt_id=str(i + j)) for j, p in enumerate(prompts[i:i + n])]
                       for i in range(0, len(prompts) - n + 1, n)]
            for b in batches[:1]:  # warm-up, unrecorded
                local.generate(b, settings)
                served.generate(b, settings)
            ratios, cpu, same, requests, http_wall, tokens = [], 0.0, True, 0, 0.0, 0
            for r in range(args.repeats):
                for b in batches:
                    order = ("local", "http") if r % 2 == 0 else ("http", "local")
                    wall = {}
                    for which in order:
                        if which == "local":
                            t = time.perf_counter()
                            a = local.generate(b, settings)
                            wall["local"] = time.perf_counter() - t
                        else:
                            c, t = time.process_time(), time.perf_counter()
                            h = served.generate(b, settings)
                            wall["http"] = time.perf_counter() - t
                            cpu += time.process_time() - c
                            requests += len(b)
                            http_wall += wall["http"]
                            tokens += sum(len(s.token_ids) for s in h.sequences)
                    same &= [s.token_ids for s in a.sequences] == [s.token_ids for s in h.sequences]
                    ratios.append(wall["http"] / wall["local"])
            ci = bootstrap_median_ci(ratios, seed=0)
            report["levels"][n] = {"ratio": ci.estimate, "ci": [ci.low, ci.high], "samples": len(ratios),
                                   "identical_tokens": same, "client_cpu_ms_per_request": 1000 * cpu / requests,
                                   "client_cpu_ms_per_token": 1000 * cpu / tokens,
                                   "served_wall_ms_per_token": 1000 * http_wall / tokens}
            print(f"concurrency {n}: HTTP / in-process wall {ci.estimate:.3f}x (95% CI {ci.low:.3f}-{ci.high:.3f}, "
                  f"{len(ratios)} paired batches); identical tokens: {same}; client CPU "
                  f"{1000 * cpu / requests:.1f} ms per request, {1000 * cpu / tokens:.2f} ms per token; served wall "
                  f"{1000 * http_wall / tokens:.1f} ms per token", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
