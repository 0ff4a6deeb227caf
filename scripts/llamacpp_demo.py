"""The demo pair behind llama.cpp's llama-server: GGUF conversion, a greedy cross-check, fixture capture.

Needs the build from ``make llamacpp`` (scripts/build_llamacpp.sh); every file lands in its cache directory
(``$SPECGUARD_LLAMACPP_CACHE``, default ~/.cache/specguard-llamacpp/<version>/), never in the repository.

    python scripts/llamacpp_demo.py convert      # gguf/{target,draft}-f32.gguf, target-{f16,q8_0,q4_0}
    python scripts/llamacpp_demo.py greedy       # f32 GGUF greedy vs the transformers target, per prompt
    python scripts/llamacpp_demo.py config OUT   # a specguard.yaml gating llama-server -md (docs/serving.md)
    python scripts/llamacpp_demo.py capture      # record llama-server's responses into tests/fixtures/http/
    python scripts/llamacpp_demo.py table RUN... # the results table of gate runs (docs/serving.md)
    python scripts/llamacpp_demo.py cpu          # the gate's client share of CPU time against llama-server -md

**The pre-tokenizer.**  ``convert_hf_to_gguf.py`` identifies a BPE tokenizer's pre-tokenizer by hashing how
it splits a test string, and refuses one it has no hash for: the demo tokenizer (trained here) has none.  Its
pre-tokenizer is ``ByteLevel(use_regex=True, add_prefix_space=False)``, which is GPT-2's regex, so the
converter is told "gpt-2" -- only when tokenizer.json says exactly that, else it refuses as before.  (And
without sentencepiece installed, the Llama converter's first try raises ImportError instead of the
FileNotFoundError that sends it on to the BPE path: the shim raises the latter when there is no
tokenizer.model.)  The gate
sends token ids, so the pre-tokenizer only matters for text; ``greedy`` checks it anyway with llama-server's
``/tokenize`` on every suite prompt.
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

import requests

ROOT = Path(__file__).resolve().parent.parent
VERSION = os.environ.get("LLAMACPP_VERSION", "11434.0.0")
CACHE = Path(os.environ.get("SPECGUARD_LLAMACPP_CACHE", Path.home() / ".cache" / "specguard-llamacpp")) / VERSION
DEMO = ROOT / "gate" / "demo"
FIXTURES = ROOT / "tests" / "fixtures" / "http"

# Run inside the converter's process: name the demo tokenizer's pre-tokenizer, then run the converter.
CONVERT_SHIM = r"""
import json, sys
from pathlib import Path
src = Path(sys.argv[1]); sys.argv = [str(src / "convert_hf_to_gguf.py")] + sys.argv[2:]
sys.path[:0] = [str(src), str(src / "gguf-py")]
from conversion import base
original = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    pre = json.loads((Path(self.dir_model) / "tokenizer.json").read_text()).get("pre_tokenizer") or {}
    if pre == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}:
        return "gpt-2"  # GPT-2's byte-level regex: llama.cpp's "gpt-2" pre-tokenizer
    return original(self, tokenizer)
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
spm = base.TextModel._set_vocab_sentencepiece
def _set_vocab_sentencepiece(self, *a, **k):  # what it raises when sentencepiece is installed: no tokenizer.model
    if not (Path(self.dir_model) / "tokenizer.model").is_file():
        raise FileNotFoundError("no tokenizer.model")
    return spm(self, *a, **k)
base.TextModel._set_vocab_sentencepiece = _set_vocab_sentencepiece
import runpy
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def bin_path(name: str) -> Path:
    p = CACHE / "build" / "bin" / name
    if not p.exists():
        sys.exit(f"{p} not found: run `make llamacpp` first")
    return p


def gguf(name: str) -> Path:
    return CACHE / "gguf" / f"{name}.gguf"


def run(cmd: list[str], env: dict | None = None) -> None:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd[:1] + cmd[3:] if cmd[1:2] == ['-c'] else cmd)} failed ({proc.returncode}):\n"
                 f"{proc.stderr[-3000:]}")


def convert(_args) -> None:
    src = CACHE / "src"
    if not (src / "convert_hf_to_gguf.py").exists():
        sys.exit(f"{src}/convert_hf_to_gguf.py not found: run `make llamacpp` first")
    (CACHE / "gguf").mkdir(parents=True, exist_ok=True)
    jobs = [("target", "f32"), ("draft", "f32"), ("target", "f16"), ("target", "q8_0")]
    for model, outtype in jobs:
        out = gguf(f"{model}-{outtype}")
        if out.exists():
            print(f"{out}: exists")
            continue
        t0 = time.perf_counter()
        run([sys.executable, "-c", CONVERT_SHIM, str(src), str(DEMO / model), "--outtype", outtype,
             "--outfile", str(out)], env={**os.environ, "NO_LOCAL_GGUF": "1"})
        print(f"{out}: {out.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s")
    out = gguf("target-q4_0")  # the converter writes no Q4_0: llama.cpp's own quantizer, from the f32 file
    if not out.exists():
        run([str(bin_path("llama-quantize")), str(gguf("target-f32")), str(out), "Q4_0"])
        print(f"{out}: {out.stat().st_size / 1e6:.1f} MB")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(port: int, model: str, draft: str | None = None, slots: int = 8, threads: int = 1,
                   draft_max: int = 4) -> list[str]:
    """llama-server as the gate launches it: greedy-friendly, no prompt cache reuse across requests."""
    cmd = [str(bin_path("llama-server")), "-m", str(gguf(model)), "--host", "127.0.0.1", "--port", str(port),
           "-np", str(slots), "-c", str(1024 * slots), "-t", str(threads), "--metrics", "--no-webui",
           "--cache-reuse", "0", "--seed", "0", "--alias", model]  # the served model's name, not its path
    if draft:
        # --draft-max/--draft-min are removed in this version (arg_removed): the --spec-draft-* names replace them
        cmd += ["-md", str(gguf(draft)), "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max),
                "--spec-draft-n-min", "0", "-td", str(threads)]
    return cmd


class Running:
    def __init__(self, cmd: list[str], port: int, log: Path):
        self.cmd, self.port, self.log = cmd, port, log

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"llama-server exited with {self.proc.returncode}: see {self.log}")
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.3)
        self.proc.terminate()
        sys.exit(f"llama-server did not get healthy: see {self.log}")

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def suite_prompts(n: int | None = None):
    from gate.inputs.suite import load_suite

    prompts = load_suite(ROOT / "gate" / "suites" / "default.jsonl").prompts
    return prompts[:n] if n else prompts


def greedy(args) -> None:
    """Greedy tokens of the f32 GGUF target through llama-server vs the transformers target, prompt by prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(DEMO / "target")
    model = AutoModelForCausalLM.from_pretrained(DEMO / "target", dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    prompts = suite_prompts()
    port = free_port()
    same = tokenized_same = 0
    first_diff = []
    with Running(server_command(port, f"target-{args.dtype}", slots=1, threads=2), port, CACHE / "greedy.log"):
        for p in prompts:
            ids = tok(p.text, add_special_tokens=False)["input_ids"]
            with torch.inference_mode():
                out = model.generate(torch.tensor([ids]), max_new_tokens=args.tokens, do_sample=False,
                                     attention_mask=torch.ones(1, len(ids), dtype=torch.long))[0, len(ids):].tolist()
            r = requests.post(f"http://127.0.0.1:{port}/v1/completions",
                              json={"prompt": ids, "max_tokens": args.tokens, "temperature": 0, "logprobs": 1,
                                    "ignore_eos": True, "cache_prompt": False}, timeout=120).json()
            got = [e["id"] for e in r["choices"][0]["logprobs"]["content"]]
            same += got == out
            if got != out:
                j = next(i for i, (a, b) in enumerate(zip(got + [None], out + [None])) if a != b)
                first_diff.append((p.id, j))
            server_ids = requests.post(f"http://127.0.0.1:{port}/tokenize", json={"content": p.text},
                                       timeout=30).json()["tokens"]
            tokenized_same += server_ids == ids
    print(f"{args.dtype} GGUF vs transformers fp32 target, greedy, {args.tokens} tokens: {same}/{len(prompts)} "
          f"prompts identical; first differences (prompt, position): {first_diff}")
    print(f"llama-server /tokenize == the HF tokenizer on {tokenized_same}/{len(prompts)} prompts")


def config(args) -> None:
    """A gate config: llama-server -md (the engine under test) against llama-server (the reference)."""
    e = args.port
    r = args.reference_port or e + 1
    engine_model = f"target-{args.control}" if args.control else f"target-{args.dtype}"
    traffic = ""
    if args.traffic:
        traffic = (f"\n  traffic: {{rates: [{args.traffic}], requests: {args.traffic_requests}, repeats: 2, "
                   "slo: {ttft_s: 0.5, tpot_s: 0.05}}")
    # a control serves another GGUF than the reference on purpose (the gate must fail it): allowed by name
    allow = "\n      allow_differences: [model]" if engine_model != f"target-{args.dtype}" else ""
    text = f"""\
# Written by `python scripts/llamacpp_demo.py config` (docs/serving.md): the demo pair in GGUF behind
# llama.cpp's llama-server, speculation on (-md) vs off, both launched by the gate.
version: 1
models:
  target: {{path: "specguard:demo/target", dtype: float32}}
  draft: {{path: "specguard:demo/draft", dtype: float32}}
  device: cpu
  local_weights: {str(args.local_weights).lower()}
speculation: {{num_draft_tokens: 4}}
batching: {{batch_sizes: [{args.batch_sizes}], compositions: 1}}
generation: {{max_new_tokens: {args.tokens}}}
suite: {{path: "specguard:suites/default.jsonl", max_prompts_per_slice: {args.per_slice}}}
checks:
  speedup: {{min_repeats: 3, max_repeats: 6, warmup: 1, time_budget_s: 30}}{traffic}
output: {{dir: {args.out or ("out-" + args.control if args.control else "out")}, cache_dir: null}}
engines:
  - type: http
    name: llamacpp{"-" + args.control if args.control else ""}
    http:
      preset: llamacpp
      logprobs: 5
      request_timeout_s: 300{allow}
      server:
        url: http://127.0.0.1:{e}
        launch: {json.dumps(server_command(e, engine_model, "draft-f32", threads=args.threads))}
        startup_timeout_s: 120
      reference:
        url: http://127.0.0.1:{r}
        launch: {json.dumps(server_command(r, f"target-{args.dtype}", threads=args.threads))}
        startup_timeout_s: 120
"""
    Path(args.path).parent.mkdir(parents=True, exist_ok=True)
    Path(args.path).write_text(text)
    print(args.path)


def capture(_args) -> None:
    """Record raw server-sent-event bodies and /metrics from the real llama-server, for the parser tests.

    The native-route requests are built by the gate's own HttpEngine.body(), so a fixture is exactly what the
    llamacpp preset sends; the others record the shapes the presets must survive."""
    from transformers import AutoTokenizer

    from gate import stacks
    from gate.engines.base import GenerationSettings, Request
    from gate.engines.http import HttpEngine

    FIXTURES.mkdir(parents=True, exist_ok=True)
    prompt = suite_prompts(1)[0]
    ids = AutoTokenizer.from_pretrained(DEMO / "target")(prompt.text, add_special_tokens=False)["input_ids"][:24]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    req, settings = Request(tuple(ids), 6), GenerationSettings(temperature=0.0)
    def record(name: str, route: str, body: dict) -> None:
        body = {k: v for k, v in body.items() if v is not None}
        resp = requests.post(url + route, json=body, timeout=120)
        doc = {"recorded_by": "scripts/llamacpp_demo.py capture", "server": f"llama-server {VERSION} " + server,
               "route": route, "request": body, "status": resp.status_code, "body": resp.text}
        (FIXTURES / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(FIXTURES / f"{name}.json", len(resp.text))

    server = "(reference, no draft)"
    with Running(server_command(port, "target-f32", slots=2, threads=2), port, CACHE / "capture.log"):
        record("llamacpp-ref-native", "/completions",
               HttpEngine("reference", url, stacks.get("llamacpp"), False, logprobs=5).body(req, settings))
    server = "-md (speculation on)"
    with Running(server_command(port, "target-f32", "draft-f32", slots=2, threads=2), port,
                 CACHE / "capture.log"):
        spec = HttpEngine("llamacpp", url, stacks.get("llamacpp"), True).body(req, settings)
        openai = {k: v for k, v in spec.items()} | {"logprobs": 1}
        cases = {
            "llamacpp-spec-native": ("/completions", spec),
            # what the llamacpp preset sent before: /v1/completions with logprobs 1 for ids (speculation on)
            "llamacpp-spec-openai-route": ("/v1/completions", openai),
            # the vllm preset's reference request sent to llama-server: ids asked the vLLM way, ignored here
            "llamacpp-openai-route-no-ids": ("/v1/completions",
                                             HttpEngine("reference", url, stacks.get("vllm"), False, logprobs=0)
                                             .body(req, settings)),
            "llamacpp-chat-include-usage": ("/v1/chat/completions",
                                            {"messages": [{"role": "user", "content": prompt.text[:60]}],
                                             "max_tokens": 4, "temperature": 0, "stream": True,
                                             "stream_options": {"include_usage": True}}),
        }
        for name, (route, body) in cases.items():
            record(name, route, body)
        metrics = requests.get(url + "/metrics", timeout=10).text
        (FIXTURES / "llamacpp-metrics.txt").write_text(metrics)
        print(FIXTURES / "llamacpp-metrics.txt", len(metrics))


def fmt(v: float | None) -> str:
    return f"{v:.3f}" if v is not None else "–"


def table(args) -> None:
    """Per concurrency: identical share, near-ties, confident divergences, acceptance from the per-request
    timings and from /metrics (and whether they agree), speedup with its CI; from a gate run directory."""
    for run in args.runs:
        run = Path(run)
        results = json.loads((run / "results.json").read_text())
        checks = json.loads((run / "checks.json").read_text())
        print(f"{run}: {checks.get('equivalence_method')}")
        print("| engine | concurrency | identical | near-ties | confident | unclassified | acceptance (timings) "
              "| acceptance (/metrics) | agree | mean accepted length | speedup (95% CI) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for engine, rows in (checks.get("equivalence") or {}).items():
            curve = checks["speedup"]["engines"].get(engine, {}).get("load_curve", {})
            for bs, s in sorted(rows.items(), key=lambda x: int(x[0])):
                t = [0, 0]
                m = [0, 0]
                for ex in results["executions"]:
                    if ex["engine"] != engine or ex["batch_size"] != int(bs) or ex["failure"] or ex["repeat"]:
                        continue
                    for q in ex["sequences"]:
                        if q["counters"]:  # fillers too: /metrics counts every request of the wave
                            t[0] += q["counters"]["num_accepted_tokens"]
                            t[1] += q["counters"]["num_draft_tokens"]
                    if ex["batch_counters"]:
                        m[0] += ex["batch_counters"]["num_accepted_tokens"]
                        m[1] += ex["batch_counters"]["num_draft_tokens"]
                row = curve.get(bs, {})
                sp = row.get("speedup") or {}
                d = s["divergences"]
                print(f"| {engine} | {bs} | {s['exact_match']:.0%} ({s['sequences']}) | {d['near_tie']} | "
                      f"{d['confident']} | {d['unclassified']} | "
                      f"{fmt(t[0] / t[1] if t[1] else None)} ({t[0]}/{t[1]}) | "
                      f"{fmt(m[0] / m[1] if m[1] else None)} ({m[0]}/{m[1]}) | {'yes' if t == m else 'no'} | "
                      f"{fmt(row.get('mean_accepted_length'))} | {fmt(sp.get('estimate'))} "
                      f"({fmt(sp.get('low'))}-{fmt(sp.get('high'))}) |")
        for engine, s in (checks.get("noise_floor") or {}).items():
            print(f"noise floor, reference at concurrency {engine}: {s['exact_match']:.0%} identical, "
                  f"{s['divergences']}")
        for v in checks["verdicts"]:
            if v["status"] in ("fail", "warn"):
                print(f"  {v['status']}: {v['check']} {v.get('engine') or ''} {v.get('batch_size') or ''}: {v['why']}")


def cpu(args) -> None:
    """The gate's client share of CPU time: waves of the suite at each concurrency against llama-server -md,
    the client's process time against the server's (utime + stime from /proc)."""
    from transformers import AutoTokenizer

    from gate import stacks
    from gate.engines.base import GenerationSettings, Request
    from gate.engines.http import HttpEngine

    tok = AutoTokenizer.from_pretrained(DEMO / "target")
    prompts = [tuple(tok(p.text, add_special_tokens=False)["input_ids"]) for p in suite_prompts()][:16]
    port = free_port()
    ticks = os.sysconf("SC_CLK_TCK")

    def server_cpu(pid: int) -> float:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / ticks

    with Running(server_command(port, "target-f32", "draft-f32", threads=args.threads), port,
                 CACHE / "cpu.log") as srv:
        engine = HttpEngine("llamacpp", f"http://127.0.0.1:{port}", stacks.get("llamacpp"), True)
        settings = GenerationSettings(temperature=0.0)
        for n in (1, 4, 8):
            client = server = wall = 0.0
            tokens = 0
            for i in range(0, len(prompts), n):
                wave = [Request(p, args.tokens) for p in prompts[i:i + n]]
                c0, s0, w0 = time.process_time(), server_cpu(srv.proc.pid), time.perf_counter()
                out = engine.generate(wave, settings)
                client += time.process_time() - c0
                server += server_cpu(srv.proc.pid) - s0
                wall += time.perf_counter() - w0
                tokens += sum(len(q.token_ids) for q in out.sequences)
            print(f"concurrency {n}: client {1000 * client / tokens:.2f} ms CPU per token, server "
                  f"{1000 * server / tokens:.2f} ms; client share {client / (client + server):.1%}; "
                  f"{tokens / wall:.0f} tokens/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("convert").set_defaults(fn=convert)
    g = sub.add_parser("greedy")
    g.add_argument("--dtype", default="f32")
    g.add_argument("--tokens", type=int, default=32)
    g.set_defaults(fn=greedy)
    c = sub.add_parser("config")
    c.add_argument("path")
    c.add_argument("--local-weights", action=argparse.BooleanOptionalAction, default=True)
    c.add_argument("--control", nargs="?", const="q4_0", choices=("q4_0", "q8_0", "f16"),
                   help="serve a quantized target (default Q4_0) as the engine under test: the negative control")
    c.add_argument("--dtype", default="f32", choices=("f32", "f16"), help="the target GGUF on both sides")
    c.add_argument("--tokens", type=int, default=32)
    c.add_argument("--per-slice", type=int, default=2)
    c.add_argument("--batch-sizes", default="1, 4, 8", help="concurrency levels (llama-server runs -np 8)")
    c.add_argument("--port", type=int, default=8090, help="the engine's port")
    c.add_argument("--reference-port", type=int, help="the reference's port (default: the engine's port + 1)")
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--traffic", metavar="RATES", help="a request-rate sweep (checks.traffic), e.g. '2, 8, 32' req/s")
    c.add_argument("--traffic-requests", type=int, default=24, help="requests per rate and replay")
    c.add_argument("--out", help="the run directory, relative to the config (default: out, out-<control>)")
    c.set_defaults(fn=config)
    sub.add_parser("capture").set_defaults(fn=capture)
    t = sub.add_parser("table")
    t.add_argument("runs", nargs="+")
    t.set_defaults(fn=table)
    u = sub.add_parser("cpu")
    u.add_argument("--tokens", type=int, default=32)
    u.add_argument("--threads", type=int, default=1)
    u.set_defaults(fn=cpu)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
