"""Issue 39: adding an engine type is one new file (tests/toy_engine.py) and its tests.  Its section validates with
its own fields, `plan` reads its capabilities before any weight loads, and `gate` builds and judges it, with no
other file of the gate touched."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import toy_engine  # noqa: F401  (registers `type: toy`)
from helpers import THREADS, replay_here

from gate.cli import main

pytestmark = pytest.mark.slow  # the gate runs on the demo pair
ROOT = Path(__file__).resolve().parents[1]

CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "specguard:demo/draft"}
  device: cpu
batching: {batch_sizes: [1, 2, 4], compositions: 1}
generation: {max_new_tokens: 6}
suite: {max_prompts_per_slice: 1, slices: [prose, code]}
engines:
  - {type: toy, name: toy, toy: %s}
checks:
  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, context_buckets: [1024]}
output: {dir: out, cache_dir: null}
"""


def test_a_toy_engine_type_runs_through_validate_plan_and_gate(tmp_path, capsys):
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(CONFIG % "{max_batch_size: 9000}")
    assert main(["validate", str(cfg)]) == 2  # its own field, validated by its own section
    assert "engines[0].toy.max_batch_size: Input should be less than or equal to 64" in capsys.readouterr().err
    cfg.write_text(CONFIG % "{max_batch_sise: 2}")
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "engines[0].toy.max_batch_sise: unknown key" in err and "did you mean 'max_batch_size'?" in err, err
    cfg.write_text(CONFIG % "{max_batch_size: 2}")
    assert main(["validate", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["plan", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert {w["batch_size"] for w in plan["work"] if w["engine"] == "toy"} == {1, 2}, "its capabilities, no weights"
    out = tmp_path / "out"
    assert main(["gate", str(cfg), "--out", str(out), "--threads", THREADS, "-q"]) == 0
    checks = json.loads((out / "checks.json").read_text())
    assert set(checks["equivalence"]["toy"]) == {"1", "2"}, "batch size 4 is beyond its capabilities: a skip"
    assert all(s["exact_match"] == 1.0 for s in checks["equivalence"]["toy"].values())
    assert set(checks["speedup"]["engines"]["toy"]["load_curve"]) == {"1", "2"}
    assert "not_a_speedup" not in checks["speedup"]["engines"]["toy"], "its plain decoding is the gate's reference"


def test_a_toy_engine_with_a_batched_bug_fails_is_shrunk_and_replays_from_its_own_file(tmp_path, capsys):
    """Issue 47, item 7: how a case is described and replayed is the type's, so a type the gate has never heard of
    (in tests/, named by no file under gate/) fails a gate, is shrunk to its minimal case, and replays."""
    named = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in (ROOT / "gate").rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if (isinstance(node, ast.Constant) and node.value in ("toy", "toy_engine"))
             or (isinstance(node, ast.Import | ast.ImportFrom) and "toy_engine" in ast.unparse(node))]
    assert not named, f"no code under gate/ may name the toy type: {named}"
    cfg = tmp_path / "specguard.yaml"
    timed = "  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, context_buckets: [1024]}"
    assert timed in CONFIG  # a correctness failure: no timing (the test above times the toy)
    cfg.write_text((CONFIG % "{max_batch_size: 2, bug: true}").replace(timed, "  speedup: {enabled: false}"))
    out = tmp_path / "out"
    assert main(["gate", str(cfg), "--out", str(out), "--threads", THREADS, "-q"]) == 1
    capsys.readouterr()
    index = json.loads((out / "repro" / "index.json").read_text())
    (case,) = [c for c in index["cases"] if c["check"] == "equivalence"]
    assert case["engine"] == "toy" and case["reproduced"], case
    folder = out / case["folder"]
    doc = json.loads((folder / "case.json").read_text())
    assert len(doc["prompts"]) == 2 and doc["finding"]["row"] == 1, "shrunk to the smallest batch the bug needs"
    assert doc["engine"]["replay"] == "function" and doc["engine"]["callable"] == "toy_engine:replay"
    assert "python replay.py --engine correct" in (folder / "REPORT.md").read_text()
    env = {**os.environ, "PYTHONPATH": ""}  # replay.py finds the toy through case.json's pythonpath alone

    def replay(*args: str) -> str:
        proc = subprocess.run([sys.executable, "replay.py", *args], cwd=folder, capture_output=True, text=True,
                              timeout=300, env=env)
        last = proc.stdout.strip().splitlines()[-1]
        assert proc.returncode == (1 if last.startswith("reproduced") else 0), proc.stderr  # 1: reproduced
        return last

    assert replay().startswith("reproduced: row 1"), "the toy's own replay function rebuilds it with its bug"
    # the counterfactual: the same replay.py, run in this process (an interpreter's imports fewer)
    assert replay_here(folder, "--engine", "correct").startswith("not reproduced: ")
