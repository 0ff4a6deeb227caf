"""Issue 39: adding an engine type is one new file (tests/toy_engine.py) and its tests.  Its section validates with
its own fields, `plan` reads its capabilities before any weight loads, and `gate` builds and judges it, with no
other file of the gate touched."""

from __future__ import annotations

import json

import pytest
import toy_engine  # noqa: F401  (registers `type: toy`)
from helpers import THREADS

from gate.cli import main

pytestmark = pytest.mark.slow  # the gate runs on the demo pair

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
