"""A verdict is a file, not an exit code: verdict.json names its run, and only a passing verdict of this run
counts (``python -m gate.verdict.file``, what the Action's Outcome step runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import synthetic as syn
import yaml

from gate.cli import main
from gate.verdict import file as verdictfile

ROOT = Path(__file__).resolve().parent.parent


def write_run(run_dir: Path, run_id: str | None = "run-1", results=None) -> Path:
    results = (results or syn.run()).model_copy(update={"run_id": run_id})
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(syn.results_json(results))
    (run_dir / "checks.json").write_text(syn.checks_json(syn.checks_for(results)))
    return run_dir


def compare(run: Path, tmp_path: Path) -> int:
    return main(["compare", str(run), "--baselines-dir", str(tmp_path / "baselines"), "--quiet"])


def test_the_verdict_names_its_run_and_only_that_run_passes(tmp_path):
    run = write_run(tmp_path / "out")
    assert compare(run, tmp_path) == 0  # neutral: no baseline yet
    v = json.loads((run / "verdict.json").read_text())
    results = json.loads((run / "results.json").read_text())
    assert v["run"] == {"id": "run-1", "config": results["fingerprint"]["config"],
                        "suite": results["fingerprint"]["suite"]["fingerprint"]}
    assert verdictfile.check(run).outcome == "neutral" and verdictfile.check(run).exit_code == 0
    assert verdictfile.check(run, "run-1").passed
    other = verdictfile.check(run, "run-2")
    assert (other.outcome, other.exit_code) == ("error", 2) and "not 'run-2'" in other.reason


def test_a_stale_verdict_beside_newer_results_is_an_error(tmp_path):
    run = write_run(tmp_path / "out")
    assert compare(run, tmp_path) == 0
    write_run(run, "run-2")  # a later run wrote its results and died before its verdict (kill -9, os._exit)
    got = verdictfile.check(run)
    assert got.outcome == "error" and "belongs to another run" in got.reason


def test_no_verdict_a_hand_written_one_or_none_with_no_run_id_is_an_error(tmp_path):
    run = write_run(tmp_path / "out")
    assert verdictfile.check(run).reason.endswith("no verdict was written")
    (run / "verdict.json").write_text('{"outcome": "pass", "exit_code": 0}')
    assert verdictfile.check(run).outcome == "error"
    run2 = write_run(tmp_path / "old", run_id=None)
    assert compare(run2, tmp_path) == 0
    assert "names no run id" in verdictfile.check(run2).reason
    os.mkfifo(run / "verdict-fifo")
    (run / "verdict.json").unlink()
    (run / "verdict.json").symlink_to(run / "verdict-fifo")  # a FIFO must not hang the check
    assert verdictfile.check(run).outcome == "error"


def test_a_failing_verdict_of_this_run_is_fail(tmp_path):
    r = syn.run()
    run = write_run(tmp_path / "out", results=r)
    (run / "checks.json").write_text(syn.checks_json(syn.checks_for(r.model_copy(update={"run_id": "run-1"}),
                                                               confident={4: 2})))
    assert compare(run, tmp_path) == 1
    assert verdictfile.check(run).outcome == "fail" and verdictfile.check(run).exit_code == 1


def test_the_entry_point_prints_one_word_and_imports_nothing_heavy(tmp_path):
    run = write_run(tmp_path / "out")
    assert compare(run, tmp_path) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "gate.verdict.file", str(run), "--run-id", "run-1"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "neutral\n"), proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gate.verdict.file", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "error\n")
    code = ("import sys, gate.verdict.file as v; v.check(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'transformers', 'numpy', 'pydantic', 'yaml') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr


def test_checks_of_another_run_are_refused_naming_both_files(tmp_path, capsys):
    """Issue 30 item 1: checks.json carries the run and the digest of the results.json it was made from; compare and
    baseline refresh refuse another run's (exit 2), naming both files, and leave the outputs as they were."""
    run = write_run(tmp_path / "out")
    other = syn.run(speedup={("code", 4): 0.6}).model_copy(update={"run_id": "run-1"})  # the same id, other bytes
    (run / "checks.json").write_text(syn.checks_json(syn.checks_for(other)))
    assert compare(run, tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{run / 'checks.json'}: results_digest: made from another run's results" in err
    assert f"but {run / 'results.json'} is run 'run-1'" in err and not (run / "verdict.json").exists()
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(yaml.safe_dump(syn.config().model_dump(mode="json")))
    assert main(["baseline", "refresh", str(cfg), "--from", str(run), "--dir", str(tmp_path / "b")]) == 2
    assert "made from another run's results" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_a_verdict_judged_from_other_documents_is_an_error(tmp_path):
    run = write_run(tmp_path / "out")
    assert compare(run, tmp_path) == 0
    checks = syn.checks_for(syn.run().model_copy(update={"run_id": "run-1"}))
    (run / "checks.json").write_text(syn.checks_json(checks).replace("\n", "\n "))  # same content, other bytes
    got = verdictfile.check(run)
    assert got.outcome == "error" and "was judged from another checks.json" in got.reason
