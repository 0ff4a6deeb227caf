"""The CLI end to end on the demo pair: gate, interruption by SIGTERM and resume, selftest."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from helpers import THREADS, default_signals

from gate import schemas
from gate.cli import main

SMALL = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "specguard:demo/draft"}
  device: cpu
batching: {batch_sizes: [1, 2]}
generation:
  max_new_tokens: 8
  sampling: {temperature: 1.0, seed: 1}
# no long-context prompt: on CPU its prefill was half the run's time
suite: {max_prompts_per_slice: 1, slices: [prose, code, questions, adversarial]}
engines:
  - type: speculative
  - type: hf_assisted
checks:
  distribution: {num_samples: 100, power_trials: 5}
  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, calibration_trials: 3}
output: {dir: out, cache_dir: cache}
"""


@pytest.fixture()
def small(tmp_path):
    path = tmp_path / "specguard.yaml"
    path.write_text(SMALL)
    return path


def _gate(cfg: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "gate", "gate", str(cfg), "--threads", THREADS, *args], env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """One whole gate on SMALL, in a subprocess as a user runs it, shared by the tests that only read what it
    printed and wrote (hf_assisted included: transformers' assisted path is where a deprecation came from)."""
    root = tmp_path_factory.mktemp("small")
    cfg = root / "specguard.yaml"
    cfg.write_text(SMALL)
    return cfg, _gate(cfg)


@pytest.mark.slow
def test_gate_end_to_end(small_run, tmp_path):
    cfg, proc = small_run
    out_dir = cfg.parent / "out"
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out_dir / "results.json").read_text())
    checks = json.loads((out_dir / "checks.json").read_text())
    assert results["status"] == "complete"
    assert {"speculative", "hf_assisted", "reference"} == {e["engine"] for e in results["executions"]}
    assert results["skipped"] and all(s["engine"] == "hf_assisted" and s["batch_size"] == 2
                                      for s in results["skipped"])
    assert "batch size 1 only" in results["skipped"][0]["reason"]
    assert set(checks["equivalence"]) == {"speculative", "hf_assisted"}
    assert checks["reproducibility"]["speculative"]["speculative"] is True
    assert checks["reproducibility"]["reference"]["speculative"] is False
    summary = (out_dir / "summary.md").read_text()
    assert "### Reproducibility" in summary and "### Speedup" in summary and "### Distribution" in summary
    assert "## Details" in summary and "## Reproducibility" in summary  # the run's full detail follows the page
    assert proc.stdout.startswith("specguard: NEUTRAL — Merging keeps outputs equivalent at bs 1/2; no baseline")
    verdict = json.loads((out_dir / "verdict.json").read_text())
    assert verdict["outcome"] == "neutral" and verdict["mode"] == "none"
    # Where the time went: every phase of the command, adding up to its wall time, in a file of its own.
    phases = json.loads((out_dir / "phases.json").read_text())
    jsonschema.validate(phases, schemas.load("phases"))
    assert {"model load", "calibration", "equivalence outputs: reference", "equivalence outputs: speculative",
            "timing", "sampling", "re-scoring", "statistics and power simulations", "report"} <= set(phases["seconds"])
    assert sum(phases["seconds"].values()) == pytest.approx(phases["wall_s"], rel=0.05)


# SMALL without assisted generation, sampling or timing: the interrupted run only needs executions to finish, and
# the plan's run only the batches it predicts (timing is SMALL's, in the shared run).
TINY = SMALL.replace("  - type: hf_assisted\n", "").replace("  sampling: {temperature: 1.0, seed: 1}\n", "").replace(
    "  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, calibration_trials: 3}\n",
    "  speedup: {enabled: false}\n")
assert "enabled: false" in TINY


@pytest.mark.slow
def test_sigterm_keeps_finished_work_and_resume_completes(tmp_path, capfd, monkeypatch):
    small = tmp_path / "specguard.yaml"
    small.write_text(TINY)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "gate", "run", str(small), "--no-cache", "--threads", "1"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    records = tmp_path / "out" / "records.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if records.exists() and len(records.read_text().splitlines()) >= 4:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["status"] == "interrupted" and doc["stopped_at"]["reason"] == "SIGTERM"
    finished = len(doc["executions"])
    assert finished >= 3 and "--resume" in err

    # The resume in this process: the interrupted run above is the one that needed a process of its own.
    monkeypatch.chdir(tmp_path)
    code = main([*cmd[3:], "--resume"])  # the same arguments: the thread count is part of the run's setup
    err = capfd.readouterr().err
    assert code == 0, err[-3000:]
    # the resume keeps every execution results.json recorded, and may find one more: an execution whose record
    # reached records.jsonl as the signal arrived (seen once in a fresh-clone run: results.json 4, resumed 5)
    resumed = re.search(r"resuming: (\d+) finished executions", err)
    assert resumed and finished <= int(resumed[1]) <= finished + 1, err[-3000:]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["status"] == "complete"


def test_check_without_results_is_a_clear_error(small, capsys):
    assert main(["check", str(small)]) == 2
    assert "results file not found" in capsys.readouterr().err


# The self-test's mutants in two halves (one worker each under xdist); kv-no-rollback is run by the self-test in
# tests/test_repro.py, which shrinks it (caught by equivalence and distribution), so it is not run twice.
SELFTEST_HALVES = {
    "greedy": ["positions-batch-max", "stale-mask-after-realign", "accept-off-by-one", "bonus-wrong-position",
               "eos-ignored-in-block"],
    "sampling-and-batches": ["sampling-no-residual", "sampling-inverted-ratio", "sampling-greedy-draft",
                             "length-mix-buffer", "stale-row-map", "lookup-lean"],
}


def test_the_selftest_halves_cover_every_mutant():
    from gate.engines.mutants import LOOKUP_MUTANTS, MUTANTS

    run = [m for half in SELFTEST_HALVES.values() for m in half]
    assert sorted([*run, "kv-no-rollback"]) == sorted([*MUTANTS, *LOOKUP_MUTANTS]) and len(set(run)) == len(run)


@pytest.mark.slow
@pytest.mark.parametrize("half", list(SELFTEST_HALVES))
def test_selftest_catches_every_mutant_and_passes_the_correct_engine(capsys, half):
    mutants = SELFTEST_HALVES[half]
    seeds = 1 if half == "sampling-and-batches" else 0  # the correct engine's run: once, beside the sampling mutants
    # 100 samples, not 600: the sampling mutants are still caught (and the correct engine raises no alarm)
    code = main(["selftest", "--json", "--seeds", str(seeds), "--samples", "100",
                 *[a for m in mutants for a in ("--mutant", m)]])
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"mutants", "correct_engine"}
    assert [m["name"] for m in report["mutants"]] == mutants
    assert all(set(m) == {"name", "caught", "caught_by"} for m in report["mutants"])
    assert set(report["correct_engine"]) == {"passed", "false_alarms", "runs"}
    assert all(m["caught"] for m in report["mutants"]), report
    by = {m["name"]: m["caught_by"] for m in report["mutants"]}
    if half == "sampling-and-batches":
        # the batch-composition bugs: mixed batches put long prompts beside short ones and drop finished rows
        assert "equivalence" in by["length-mix-buffer"] and "equivalence" in by["stale-row-map"], by
        # n-gram lookup (no draft model) gated too: its verification's lean flips greedy choices
        assert "equivalence" in by["lookup-lean"], by
        assert all("distribution" in by[m] for m in mutants if m.startswith("sampling-")), by
        # one run of the correct engine (seed 0), and the correct prompt lookup engine's run
        assert report["correct_engine"] == {"passed": True, "false_alarms": 0, "runs": 2}
    else:
        assert all("equivalence" in c for c in by.values()), by
        assert report["correct_engine"] == {"passed": True, "false_alarms": 0, "runs": 0}
    assert code == 0


@pytest.mark.slow
def test_the_gate_prints_no_library_warnings_or_weight_loading_bars(small_run, tmp_path):
    cfg, proc = small_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout + proc.stderr
    assert "Loading weights" not in text and "deprecated" not in text and "Warning" not in text
    assert "where the time went" in proc.stderr
    # -q on the finished run (resumed: models load and the checks run again, nothing is generated), in a copy
    # so that the shared run's outputs stay as they were.
    shutil.copytree(cfg.parent, tmp_path / "copy")
    quiet = _gate(tmp_path / "copy" / "specguard.yaml", "-q", "--resume")
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout.strip().splitlines() == [quiet.stdout.strip()] and quiet.stdout.startswith("specguard: ")


@pytest.mark.slow
def test_plan_predicts_the_runs_batches_its_cache_hits_and_a_time(small_run, tmp_path, capsys):
    """`specguard plan` before a run says what the run then did: the batches of each phase, engine and batch size,
    the reference batches the cache serves, and an estimate from the earlier run's rates.  The run is a second one
    with the cache warm: it reuses the shared run's reference generations (only the draft "changed": nothing did).
    TINY has SMALL's prompts, batches and greedy settings, so the same reference generations, and the same cache
    directory; --threads as the shared run's, since the thread count is part of the hardware key the cache is keyed
    by, and an earlier test in this process may have left torch at another one."""
    from gate.pipeline import set_threads

    cfg, proc = small_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    set_threads(int(THREADS))  # the thread count is part of the hardware key the cache is keyed by
    again = cfg.parent / "plan-again.yaml"
    again.write_text(TINY.replace("output: {dir: out,", "output: {dir: plan-again,"))
    assert main(["plan", str(again), "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["estimate_s"] is None and "no earlier run" in before["estimate_from"]
    assert main(["run", str(again), "--threads", THREADS, "-q"]) == 0
    results = json.loads((cfg.parent / "plan-again" / "results.json").read_text())
    done: dict = {}
    for ex in results["executions"]:
        if ex["phase"] in ("outputs", "canonical"):
            done[(ex["engine"], ex["batch_size"])] = done.get((ex["engine"], ex["batch_size"]), 0) + 1
    planned = {(w["engine"], w["batch_size"]): w["batches"] for w in before["work"]}
    assert planned == done
    reused = results["cache"]["reused"]
    assert reused and all(r.startswith("outputs/reference/") for r in reused), reused
    assert sum(w["cached"] for w in before["work"]) == len(reused)
    capsys.readouterr()
    assert main(["plan", str(again)]) == 0
    text = capsys.readouterr().out
    assert "estimate: " in text and " on this runner (rates of the run in " in text, text
    assert main(["plan", str(again), "--json"]) == 0
    low, high = json.loads(capsys.readouterr().out)["estimate_s"]
    assert 0 < low <= high
