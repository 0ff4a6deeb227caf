"""Minimal reproductions on real engines (issue 41): a failing gate shrinks its failing checks to replayable cases
within checks.repro.budget_s, the comment lists them, and each replay.py prints "reproduced" against the broken
engine and "not reproduced" against a correct one.  The shrinker's own logic is tests/test_repro_shrink.py (fast);
every built-in mutant is `python benchmarks/repro_mutants.py` (docs/checks.md has its table)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gate.cli import main

pytestmark = pytest.mark.slow

BROKEN = '''\
"""A plug-in that runs one of specguard's self-test mutants (extra.mutant; "none": the correct engine)."""
import torch
from transformers import AutoModelForCausalLM

from gate.engines.base import GenerationSettings, Request
from gate.engines.speculative import SpeculativeEngine
from gate.engines.mutants import MUTANTS

_E = {}


def generate(prompt_ids, batch_size, settings):
    name = settings.extra.get("mutant", "none")
    if name not in _E:
        t = AutoModelForCausalLM.from_pretrained(settings.target, dtype=torch.float32).eval()
        d = AutoModelForCausalLM.from_pretrained(settings.draft, dtype=torch.float32).eval()
        _E[name] = (SpeculativeEngine if name == "none" else MUTANTS[name])(t, d, torch.device("cpu"))
    reqs = [Request(tuple(p), m, s) for p, m, s in zip(prompt_ids, settings.max_new_tokens, settings.seeds)]
    res = _E[name].generate(reqs, GenerationSettings(settings.temperature, max(settings.num_draft_tokens, 1),
                                                     tuple(settings.eos_token_ids)))
    return [{"token_ids": s.token_ids, "counters": s.counters.to_dict()} for s in res.sequences]
'''

CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "specguard:demo/draft"}
  device: cpu
batching: {batch_sizes: [1], compositions: 1}
generation: {max_new_tokens: 16, greedy: true}
suite: {max_prompts_per_slice: 1}
checks:
  speedup: {enabled: false}  # a correctness failure: no timing
  repro: {budget_s: 90}
output: {dir: out, cache_dir: null}
engines:
  - {type: plugin, name: broken, callable: "broken_engine:generate", pythonpath: ["."],
     extra: {mutant: kv-no-rollback}}
"""


def replay(folder: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "replay.py", *args], cwd=folder, capture_output=True, text=True,
                          timeout=300)
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == (1 if last.startswith("reproduced") else 0), proc.stderr[-2000:]  # 1: reproduced
    return last


def test_a_failing_gate_writes_minimal_cases_the_comment_lists_and_replay_reproduces(tmp_path):
    (tmp_path / "broken_engine.py").write_text(BROKEN)
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(CONFIG)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["gate", str(cfg), "--threads", "1"])
    said = out.getvalue() + err.getvalue()
    assert code == 1, said[-4000:]
    index = json.loads((tmp_path / "out" / "repro" / "index.json").read_text())
    cases = index["cases"]
    assert [(c["check"], c["engine"], c["folder"], c["reproduced"]) for c in cases] == \
        [("equivalence", "broken", "repro/equivalence-1", True)], cases
    folder = tmp_path / "out" / "repro" / "equivalence-1"
    case = json.loads((folder / "case.json").read_text())
    assert case["engine"]["type"] == "plugin" and case["engine"]["callable"] == "broken_engine:generate"
    assert len(case["prompts"]) <= case["shrunk_from"]["batch_size"]
    assert case["settings"]["max_new_tokens"] <= 16 and case["evidence"]["gap"] > case["evidence"]["tolerance"]
    report = (folder / "REPORT.md").read_text()
    assert case["trigger"] in report and "## Versions" in report and "torch" in report
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert "### Minimal cases" in comment and "`repro/equivalence-1/`" in comment
    assert str(tmp_path) not in comment, "no runner path in the comment"
    assert replay(folder).startswith("reproduced: ")
    case["engine"]["settings"]["extra"]["mutant"] = "none"  # the same plug-in with the correct engine
    (folder / "case.json").write_text(json.dumps(case))
    assert replay(folder).startswith("not reproduced: ")


def test_selftest_shrinks_mutants_to_cases_that_replay_against_the_mutant_and_not_the_correct_engine(tmp_path):
    """`specguard selftest --repro` on a mutant that fails both kinds of check (a KV cache not rolled back after a
    rejection breaks greedy output and sampling alike): a greedy case and a sampling case."""
    into = tmp_path / "cases"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["selftest", "--seeds", "0", "--samples", "100", "--mutant", "kv-no-rollback", "--repro",
                     str(into), "--threads", "1"])
    assert code == 0
    for mutant, check in (("kv-no-rollback", "equivalence"), ("kv-no-rollback", "distribution")):
        index = json.loads((into / mutant / "index.json").read_text())
        assert all(c["reproduced"] for c in index["cases"]) and check in [c["check"] for c in index["cases"]], index
        folder = into / mutant / f"{check}-1"
        case = json.loads((folder / "case.json").read_text())
        assert case["engine"]["variant"] == mutant and case["engine"]["replay"] == "function"
        if check == "equivalence":
            assert len(case["prompts"]) <= case["shrunk_from"]["batch_size"]
        else:
            assert case["smallest_rejecting_tokens"] and abs(case["count"]["control"]["z"]) < 3, case["count"]
        assert replay(folder).startswith("reproduced: "), mutant
        assert replay(folder, "--engine", "speculative").startswith("not reproduced: "), mutant
