"""A replay that cannot read the stack never says "reproduced" (issue 47, item 8): replay.py reads a row's token ids
in every dialect the http engine reads (vLLM's logprobs.tokens, SGLang's choices[].token_ids, llama-server's
tokens), and an empty or unreadable reply, or a failed request, is its own outcome (exit 3), never a departure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gate.repro import replay

EXPECTED = [11, 12, 13, 14]


def event(dialect: str, ids: list[int]) -> dict:
    if dialect == "vllm":
        return {"choices": [{"index": 0, "text": "", "logprobs": {"tokens": [f"token_id:{t}" for t in ids]}}]}
    if dialect == "sglang":
        return {"choices": [{"index": 0, "text": "", "token_ids": ids}]}
    if dialect == "llamacpp":
        return {"content": "", "tokens": ids}
    return {"choices": [{"index": 0, "text": "x"}]}  # a reply the replay cannot read ids from


def serve(dialect: str, ids: list[int], status: int = 200):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if status == 200:
                for t in ids:
                    self.wfile.write(f"data: {json.dumps(event(dialect, [t]))}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def case_folder(tmp_path: Path, url: str) -> Path:
    folder = tmp_path / "case"
    folder.mkdir()
    shutil.copy(Path(replay.__file__), folder / "replay.py")
    case = {"check": "equivalence", "engine": {"type": "http", "replay": "requests", "url": url,
                                               "route": "/v1/completions"},
            "bodies": [{"prompt": [1, 2, 3], "max_tokens": 4, "stream": True}],
            "settings": {"max_new_tokens": 4, "temperature": 0.0, "num_draft_tokens": 4, "eos_token_ids": []},
            "prompts": [[1, 2, 3]],
            "finding": {"row": 0, "position": 2, "expected": EXPECTED, "kind": "confident"}}
    (folder / "case.json").write_text(json.dumps(case))
    return folder


def run(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "replay.py"], cwd=folder, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("dialect", ["vllm", "sglang", "llamacpp"])
@pytest.mark.parametrize(("ids", "said"), [(EXPECTED, "not reproduced"), ([11, 99, 13, 14], "reproduced")])
def test_every_dialect_is_read_both_ways(tmp_path, dialect, ids, said):
    server = serve(dialect, ids)
    try:
        proc = run(case_folder(tmp_path, f"http://127.0.0.1:{server.server_port}"))
    finally:
        server.shutdown()
    assert proc.returncode == (1 if said == "reproduced" else 0), proc.stderr  # 1: reproduced (git bisect's "bad")
    assert proc.stdout.strip().splitlines()[-1].startswith(said + ":"), proc.stdout


@pytest.mark.parametrize(("dialect", "status"), [("unknown", 200), ("vllm", 500)])
def test_an_unreadable_or_failed_reply_is_neither_reproduced_nor_not(tmp_path, dialect, status):
    server = serve(dialect, EXPECTED, status)
    try:
        proc = run(case_folder(tmp_path, f"http://127.0.0.1:{server.server_port}"))
    finally:
        server.shutdown()
    assert proc.returncode == 3, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("unreadable: row 0:") and "reproduced" not in last, last


def test_a_sampling_cases_report_names_the_serving_stacks_version():
    """Issue 47, item 6: the REPORT.md of a distribution case lists the stack's version results.json recorded."""
    import synthetic as syn

    from gate.repro.sampling import _report
    from gate.run.results import StackIdentity

    results = syn.run()
    results.fingerprint.stacks = {"vllm": StackIdentity(version="0.32.0", launch=["vllm", "serve"])}
    count = {"tokens": 100, "draft_argmax_hits": 60, "expected": 20.0, "z": 9.1}
    doc = {"count": {"engine": count, "control": None}, "engine_label": "vllm", "trigger": "sampling at T=1",
           "by_position": [], "settings": {"alpha": 0.01}, "smallest_rejecting_tokens": 100,
           "engine": {"type": "http", "replay": "requests", "url": "http://127.0.0.1:8000", "route": "/v1/completions"}}
    text = _report(doc, results)
    assert "- serving stacks: vllm: 0.32.0" in text and text.endswith("\n")
    assert "python replay.py" in text
    doc["engine"] = {"type": "unheard-of", "replay": None}  # a type that says nothing of how to rebuild it
    text = _report(doc, results)
    assert "No replay: the engine's type (`unheard-of`)" in text and "python replay.py" not in text


def test_a_case_whose_type_gives_no_replay_says_so_and_gives_no_verdict(tmp_path):
    folder = case_folder(tmp_path, "http://127.0.0.1:9")
    case = json.loads((folder / "case.json").read_text())
    case["engine"] = {"type": "unheard-of", "replay": None}
    (folder / "case.json").write_text(json.dumps(case))
    proc = run(folder)
    assert proc.returncode == 2 and "reproduced" not in proc.stdout, proc.stdout
    assert "cannot replay: the engine's type ('unheard-of') says no way to rebuild it alone" in proc.stderr
