"""Narrowing vLLM's speculative sampling failure down, through none of the gate's code (docs/serving.md).

    python scripts/vllm_sampler_probe.py kernels        # vLLM's CPU rejection-sampling kernels, given exact inputs
    python scripts/vllm_sampler_probe.py server --k 4   # a real server: seeded or not, concurrent or one at a time
    python scripts/vllm_sampler_probe.py server --k 0   # the same server without a draft (the control)

``kernels`` runs in the vLLM venv (``make vllm``) and calls the two kernels vLLM's CPU build uses for sampled
requests (``sample_recovered_tokens`` and ``rejection_random_sample``, one-hot drafts, as ``draft_sample_method:
greedy`` passes them) on target distributions that differ per row: the first emitted token at each position must be
a draw from its row's ``p``.  It prints z of ``emitted == draft`` against ``p(draft)`` and the mean of the
randomized PIT (1/2 under the null) per draft position.

``server`` starts ``vllm.entrypoints.openai.api_server`` on the demo target (with the demo draft, k tokens; k=0: no
draft), sends 48 requests of 24 sampled tokens (T=1, ``ignore_eos``) in four arms (per-request seed or none, 8 in
flight or one at a time), then re-scores every emitted token with transformers (fp32, teacher-forced) and counts
how often it is the draft's argmax and the target's argmax, against the counts the target's distribution expects.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_demo import DEMO, PYTHON, free_ports, installed, server_command

TEXTS = ("The history of the city", "Once upon a time there was", "def parse(line):", "The weather today is",
         "Scientists have found that", "In the morning we", "The best way to learn", "She opened the door and")
ARMS = (("seeded, 8 in flight", True, 8), ("unseeded, 8 in flight", False, 8),
        ("seeded, one at a time", True, 1), ("unseeded, one at a time", False, 1))


def kernels_here(n: int = 100_000, vocab: int = 8) -> None:
    """(Runs inside the vLLM venv.)  The CPU kernels on per-row target distributions, one-hot drafts."""
    import torch
    from vllm.platforms import current_platform
    from vllm.utils import cpu_triton_utils as cpu_tl

    current_platform.import_kernels()  # registers torch.ops._C: the build for this CPU (AVX2, AVX-512, AVX-512 BF16)

    torch.manual_seed(0)
    print("| k | drafts | draft position | n | z of emitted == draft | PIT mean (sd) |")
    print("|---|---|---|---|---|---|")
    for k in (1, 4):
        for pick in ("the target's argmax", "uniform at random"):
            p = torch.distributions.Dirichlet(torch.full((vocab,), 0.5)).sample((n * k,)).float().contiguous()
            drafts = (p.argmax(1) if pick.startswith("the") else torch.randint(0, vocab, (n * k,))).long()
            cu = torch.arange(1, n + 1, dtype=torch.int64) * k
            recovered = torch.empty(n * k, dtype=torch.int64)
            cpu_tl._sample_recovered_tokens_kernel_impl(recovered, cu, drafts, None, p,
                                                        (1.0 / torch.empty(n, vocab).exponential_()).contiguous(),
                                                        vocab, NO_DRAFT_PROBS=True)
            out = torch.full((n, k + 1), -1, dtype=torch.int64)
            cpu_tl._rejection_random_sample_kernel_impl(out, cu, drafts, None, p, torch.zeros(n, dtype=torch.int64),
                                                        recovered, torch.rand(n * k, dtype=torch.float64),
                                                        torch.zeros(n, dtype=torch.bool), k, vocab,
                                                        NO_DRAFT_PROBS=True)
            for pos in range(k):
                rows = torch.arange(n) * k + pos
                live = out[:, pos] >= 0
                if pos:  # reached only when the previous draft was accepted: then a fresh draw from this row's p
                    live &= out[:, pos - 1] == drafts[rows - 1]
                y, pr, x = out[live, pos], p[rows[live]].double(), drafts[rows[live]]
                m = pr.gather(1, x[:, None])[:, 0]
                z = float(((y == x).double() - m).sum() / (m * (1 - m)).sum().sqrt())
                py = pr.gather(1, y[:, None])[:, 0]
                u = pr.cumsum(1).gather(1, y[:, None])[:, 0] - py + torch.rand(len(y), dtype=torch.float64) * py
                print(f"| {k} | {pick} | {pos} | {len(y)} | {z:+.1f} | {float(u.mean()):.4f} "
                      f"({1 / math.sqrt(12 * len(y)):.4f}) |")


def kernels(_args) -> None:
    if not installed():
        sys.exit("the vLLM venv is not installed: run `make vllm` first")
    sys.exit(subprocess.call([str(PYTHON), __file__, "kernels-here"]))


def server(args) -> None:
    """A real server's sampled tokens in four arms, recounted with transformers."""
    import concurrent.futures as cf

    import requests
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not installed():
        sys.exit("the vLLM venv is not installed: run `make vllm` first")
    (port,) = free_ports(1)
    log = Path(args.log or f"vllm-probe-k{args.k}.log")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as sink:
        proc = subprocess.Popen(server_command(port, args.k or None), stdout=sink, stderr=subprocess.STDOUT, env=env)
    tok = AutoTokenizer.from_pretrained(DEMO / "target")
    prompts = [tok(t).input_ids for t in TEXTS]
    arms: dict[str, list[tuple[list[int], list[int]]]] = {}
    try:
        t0 = time.monotonic()
        while True:
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() - t0 > 900:
                sys.exit(f"the server did not come up (see {log})")
            time.sleep(2)
        print(f"server up in {time.monotonic() - t0:.0f} s (k={args.k}; log {log})")

        def one(i: int, seeded: bool) -> tuple[list[int], list[int]]:
            prompt = prompts[i % len(prompts)]
            body = {"model": str(DEMO / "target"), "prompt": prompt, "max_tokens": args.tokens, "temperature": 1.0,
                    "top_p": 1.0, "top_k": -1, "ignore_eos": True, "return_token_ids": True}
            if seeded:
                body["seed"] = 1000 + i
            reply = requests.post(f"{url}/v1/completions", json=body, timeout=600)
            reply.raise_for_status()
            return prompt, reply.json()["choices"][0]["token_ids"]

        for name, seeded, in_flight in ARMS:
            with cf.ThreadPoolExecutor(in_flight) as pool:
                arms[name] = list(pool.map(lambda i, s=seeded: one(i, s), range(args.requests)))
    finally:
        proc.terminate()
        proc.wait(60)
    target = AutoModelForCausalLM.from_pretrained(DEMO / "target", dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(DEMO / "draft", dtype=torch.float32).eval()
    print("| k | arm | tokens | emitted = draft argmax | expected | z | emitted = target argmax | expected | z |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rows in arms.items():
        hit_d = exp_d = var_d = hit_t = exp_t = var_t = total = 0.0
        for prompt, out in rows:
            ids = torch.tensor([prompt + out])
            with torch.inference_mode():
                p = torch.softmax(target(ids).logits[0, len(prompt) - 1:-1].double(), -1)
                q = torch.softmax(draft(ids).logits[0, len(prompt) - 1:-1].double(), -1)
            y = torch.tensor(out)
            for star, acc in ((q.argmax(-1), "d"), (p.argmax(-1), "t")):
                m = p.gather(1, star[:, None])[:, 0]
                hit, exp, var = int((y == star).sum()), float(m.sum()), float((m * (1 - m)).sum())
                if acc == "d":
                    hit_d, exp_d, var_d = hit_d + hit, exp_d + exp, var_d + var
                else:
                    hit_t, exp_t, var_t = hit_t + hit, exp_t + exp, var_t + var
            total += len(out)
        z_d, z_t = (hit_d - exp_d) / math.sqrt(var_d), (hit_t - exp_t) / math.sqrt(var_t)
        print(f"| {args.k} | {name} | {total:.0f} | {hit_d:.0f} | {exp_d:.1f} | {z_d:+.1f} "
              f"| {hit_t:.0f} | {exp_t:.1f} | {z_t:+.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("kernels").set_defaults(fn=kernels)
    sub.add_parser("kernels-here").set_defaults(fn=lambda _a: kernels_here())
    s = sub.add_parser("server")
    s.add_argument("--k", type=int, default=4, help="draft tokens per step (0: no draft, the control)")
    s.add_argument("--requests", type=int, default=48)
    s.add_argument("--tokens", type=int, default=24)
    s.add_argument("--log", help="the server's log (default: vllm-probe-k<K>.log here)")
    s.set_defaults(fn=server)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
