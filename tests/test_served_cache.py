"""A served reference's outputs are cached like a local one's (issue 48, item 6): keyed by the stack's version,
launch line and environment, so a second gate of the same head reads them back, and a changed launch line
misses. Real servers on localhost (gate/testing/server.py): the reference launched by the gate, the engine's on a
thread of the test process."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import sys
from pathlib import Path

import pytest
from helpers import THREADS

from gate.cli import main

pytestmark = pytest.mark.slow  # launches a stand-in server per run

CONFIG = """\
version: 1
models: {target: {path: "specguard:demo/target"}, device: cpu, local_weights: false}
speculation: {num_draft_tokens: 4, method: other}
batching: {batch_sizes: [1]}  # the cache is per batch; one batch size shows hit and miss
generation: {max_new_tokens: 8}
suite: {path: "specguard:suites/default.jsonl", max_prompts_per_slice: 1, slices: [prose, code]}
checks: {speedup: {enabled: false}}
output: {dir: out, cache_dir: cache}
engines:
  - type: http
    name: served
    http:
      preset: vllm
      server: {url: "http://127.0.0.1:%(server)d"}
      reference: {url: "http://127.0.0.1:%(reference)d", startup_timeout_s: 180,
                  launch: [%(py)s, -m, gate.testing.server, --port, "{port}", --mode, reference, --threads,
                           "%(ref_threads)s"]}
"""


def ports() -> dict[str, int]:
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        return {"server": a.getsockname()[1], "reference": b.getsockname()[1]}


def here(tmp_path: Path, *argv: str) -> tuple[int, str]:
    """A specguard command in this process, in tmp_path (its servers are still launched, as processes of their
    own): its exit code and what it printed."""
    out = io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(argv))
    return code, out.getvalue()


def run(tmp_path: Path, ref_threads: str, where: dict[str, int]) -> tuple[dict, str]:
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(CONFIG % {**where, "py": json.dumps(sys.executable), "ref_threads": ref_threads})
    code, plan = here(tmp_path, "plan", str(cfg))
    assert code == 0 and "cache: the served reference's" in plan, plan
    code, log = here(tmp_path, "run", str(cfg), "--threads", THREADS)
    assert code == 0, log[-6000:]
    return json.loads((tmp_path / "out" / "results.json").read_text()), log


@pytest.fixture(scope="module")
def engine_server():
    """The engine under test's server, on a thread of this process: the cache keys the reference's launch line, so
    only the reference is launched (an interpreter and a weight load per run, not two)."""
    from gate.testing.server import engine_for, in_thread, load, make_app

    pair, k = load()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with in_thread(make_app(pair, engine_for("speculative", pair), k), port):
        yield port


def test_a_served_reference_is_read_from_the_cache_and_missed_when_its_launch_line_changes(tmp_path, engine_server):
    where = {**ports(), "server": engine_server}
    first, _ = run(tmp_path, "1", where)
    assert first["cache"]["reused"] == []
    made = {(ex["phase"], ex["batch_size"], ex["batch"]) for ex in first["executions"] if ex["engine"] == "reference"}
    second, log = run(tmp_path, "1", where)
    reused = second["cache"]["reused"]
    assert reused and "reference batches read from" in log and "not generated again" in log, log[-3000:]
    cached = [ex for ex in second["executions"] if ex.get("cached")]
    assert cached and all(ex["engine"] == "reference" for ex in cached)
    same = {(ex["phase"], ex["batch_size"], ex["batch"]): ex["sequences"] for ex in second["executions"]
            if ex["engine"] == "reference"}
    assert {k for k in same} == made  # the same reference batches, each from the cache or regenerated
    third, _ = run(tmp_path, "2", where)  # the reference server's launch line changed: nothing of it is reused
    assert third["cache"]["reused"] == []
