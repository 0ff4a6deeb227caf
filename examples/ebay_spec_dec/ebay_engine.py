"""A plug-in that gates eBay/spec_dec's batched speculative decoders ("Batch Speculative Decoding Done Right",
arXiv 2510.22876): EQSPEC (src/custom/batch_speculative.py) and the baselines BSP and DSD (src/baselines/).

spec_dec pins transformers 4.51.3 (later KV-cache APIs break it) while the gate runs transformers 5, so this module
(in the gate's plug-in worker) imports neither: it starts ONE persistent ``bridge.py`` process in spec_dec's own venv
per worker and sends it each batch as token ids over JSON lines.  Config (``engines[].extra``):

    spec_dec: ~/.cache/specguard-ebay/src          # an extracted checkout of eBay/spec_dec (imported, never copied)
    python:   ~/.cache/specguard-ebay/venv/bin/python   # torch 2.13.0+cpu, transformers 4.51.3
    batcher:  eqspec | bsp | dsd
    threads:  2                                       # torch threads in the bridge (optional)

``generate`` runs the batcher with ``k = settings.num_draft_tokens``; ``generate_plain`` runs spec_dec's own
non-speculative baseline (src/baselines/inference.py, ``run_standard_inference``: batched ``model.generate``), the
engine's own reference (``engines[].reference.callable``).

What the adapter does to their output, and only this: every batcher here is greedy-only (their benchmark drops
``temperature`` for them), so a sampled request is refused; their functions take one ``max_new_tokens`` per batch,
so a batch is run with its largest budget and each row cut to its own; each row is cut at the first of the gate's EOS
ids and at its budget (their own throughput counting stops at the first EOS too; BSP and DSD decode past EOS, and
EQSPEC's last block can carry one token over the budget).  How often each cut happened is written to the engine log.
Counters: their functions return batch-wide totals only, so none are reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_BRIDGES: dict[tuple[str, str], subprocess.Popen] = {}
_LOCK = threading.Lock()


def _bridge(extra: dict) -> subprocess.Popen:
    python = os.path.expanduser(str(extra.get("python") or "~/.cache/specguard-ebay/venv/bin/python"))
    spec_dec = os.path.expanduser(str(extra.get("spec_dec") or "~/.cache/specguard-ebay/src"))
    key = (python, spec_dec)
    proc = _BRIDGES.get(key)
    if proc is None or proc.poll() is not None:
        if proc is not None:
            print(f"[ebay_engine] bridge exited with {proc.returncode}; starting another", file=sys.stderr)
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        env.pop("PYTHONPATH", None)  # the gate's modules must not shadow theirs (their package is also called src)
        proc = subprocess.Popen([python, os.path.join(_HERE, "bridge.py"), spec_dec], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=sys.stderr.fileno(), text=True, bufsize=1, env=env)
        hello = proc.stdout.readline()
        if not hello:
            raise RuntimeError(f"eBay/spec_dec bridge ({python} {spec_dec}) exited with {proc.wait()} before it was "
                               "ready; its stderr is in this engine's log")
        print(f"[ebay_engine] bridge ready: {hello.strip()}", file=sys.stderr)
        _BRIDGES[key] = proc
    return proc


def _call(extra: dict, request: dict) -> dict:
    with _LOCK:
        proc = _bridge(extra)
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"eBay/spec_dec bridge died mid-batch (exit {proc.wait()}); its stderr is in this "
                           "engine's log")
    reply = json.loads(line)
    if "error" in reply:
        print(reply.get("traceback", ""), file=sys.stderr)
        raise RuntimeError(f"eBay/spec_dec {request['batcher']}: {reply['error']}")
    return reply


def _run(batcher: str, prompt_ids, settings) -> list[dict]:
    if not settings.greedy:
        raise RuntimeError(f"eBay/spec_dec {batcher} is greedy only (argmax drafting and verification; their "
                           "benchmark drops temperature for it): sampling is not supported")
    extra = dict(settings.extra or {})
    budgets = [int(m) for m in settings.max_new_tokens]
    request = {"batcher": batcher, "prompts": [[int(t) for t in p] for p in prompt_ids],
               "max_new_tokens": max(budgets), "k": int(settings.num_draft_tokens), "target": settings.target,
               "draft": settings.draft, "dtype": settings.dtype, "draft_dtype": settings.draft_dtype,
               "threads": extra.get("threads")}
    reply = _call(extra, request)
    eos = {int(t) for t in settings.eos_token_ids}
    out, cut_eos, cut_budget = [], 0, 0
    for row, budget in zip(reply["rows"], budgets):
        ids = [int(t) for t in row]
        first = next((i for i, t in enumerate(ids) if t in eos), None)
        if first is not None and first + 1 < len(ids):
            ids, cut_eos = ids[: first + 1], cut_eos + 1
        if len(ids) > budget:
            ids, cut_budget = ids[:budget], cut_budget + 1
        precision = settings.dtype if settings.dtype in ("float32", "bfloat16", "float16") else "float32"
        out.append({"token_ids": ids, "wall_s": reply["wall_s"], "precision": precision,
                    "stop_reason": "eos" if ids and ids[-1] in eos else "max_tokens"})
    if cut_eos or cut_budget:
        print(f"[ebay_engine] {batcher} bs={len(out)}: {cut_eos} row(s) cut after EOS, {cut_budget} row(s) cut "
              f"to max_new_tokens", file=sys.stderr)
    return out


def generate(prompt_ids: list[list[int]], batch_size: int, settings) -> list[dict]:
    """The plug-in contract: the batcher named by ``extra.batcher`` (eqspec, bsp, dsd) on one batch."""
    batcher = str((settings.extra or {}).get("batcher", "eqspec"))
    if int(settings.num_draft_tokens) <= 0:
        raise RuntimeError("eBay/spec_dec's batchers need k >= 1; the engine's own reference is generate_plain")
    return _run(batcher, prompt_ids, settings)


def generate_plain(prompt_ids: list[list[int]], batch_size: int, settings) -> list[dict]:
    """spec_dec's own plain decoding (run_standard_inference: left-padded batched model.generate, greedy)."""
    return _run("standard", prompt_ids, settings)
