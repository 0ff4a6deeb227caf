"""scripts/gpu_evidence.py (issue 53, item 5), without a GPU and without a gate: the steps it plans on a GPU and in
its test mode, configs the gate accepts, time limits that hold, a failing or stuck step that loses none of the
others' results, and the verdicts read from real run files. The test mode itself runs real gates for minutes: it is
a benchmark (benchmarks/gpu_evidence_cpu.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from gate.inputs.config import load_config
from tests import synthetic as syn

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpu_evidence", ROOT / "scripts" / "gpu_evidence.py")
ev = importlib.util.module_from_spec(_spec)
sys.modules["gpu_evidence"] = ev  # its dataclasses look their module up while it loads
_spec.loader.exec_module(ev)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("test_mode", [False, True])
def test_the_plan_runs_the_demo_gate_and_both_selftests_where_the_mode_says(tmp_path, test_mode):
    steps = {s.name: s for s in ev.plan(tmp_path, ev.TEST if test_mode else ev.GPU, sys.executable,
                                        tmp_path / "no-wheels", test_mode)}
    device, dtype = ("cpu", "float32") if test_mode else ("cuda", "bfloat16")
    selftest = steps[f"selftest-{dtype}"].argv
    assert selftest[selftest.index("--device") + 1] == device and selftest[selftest.index("--dtype") + 1] == dtype
    null = steps["null"].argv
    assert "--null" in null and null[null.index("--device") + 1] == device
    assert steps["wheels"].skip == "pydantic 2 is importable here"  # this venv has it
    assert (steps["nvidia-smi"].skip is not None) == test_mode
    assert (steps["demo-bfloat16"].skip is not None) == test_mode
    for name in ("demo-float32", *(() if test_mode else ("demo-bfloat16",))):
        argv = steps[name].argv
        config = Path(argv[argv.index("gate", argv.index("-m") + 2) + 1])
        loaded = load_config(config)  # the gate's own parser accepts the derived config
        models = loaded.config.models
        assert models.device == device and models.target.dtype == models.draft.dtype == name.split("-")[1]
        assert argv[argv.index("--baselines-dir") + 1] == str(tmp_path / "baselines")  # its own checks, no baseline
        if test_mode:
            assert loaded.config.suite.max_prompts_per_slice == 1 and loaded.config.batching.batch_sizes == [1, 2]
        else:  # on the GPU the demo's own sizes
            assert loaded.config.generation.max_new_tokens == 32 and loaded.config.batching.batch_sizes == [1, 4, 8]


def test_the_gpu_steps_fit_nine_minutes_when_each_takes_its_whole_limit():
    """Every step at its limit, the later ones kept their floors: the run still ends inside the budget (the main
    loop shortens a limit to what is left; here the nominal limits after the quick set-up steps)."""
    quick = {"wheels", "install", "environment", "nvidia-smi"}
    slow = sum(limit for name, (limit, _) in ev.GPU.limits.items() if name not in quick)
    assert slow + 60 <= ev.BUDGET_S - ev.SUMMARY_S  # a minute for the set-up steps


def test_a_stuck_step_is_stopped_at_its_limit_and_a_failing_one_loses_no_other_result(tmp_path, monkeypatch, capsys):
    steps = [ev.Step("fails", py("import sys; print('half'); sys.exit(3)"), "exits 3"),
             ev.Step("stuck", py("import time; time.sleep(60)"), "sleeps past its limit"),
             ev.Step("skipped", [], "never runs", skip="not here"),
             ev.Step("environment", py("import json; print(json.dumps({'python': '3', 'torch': '2.9+cu', "
                                       "'torch_cuda': '12.8', 'devices': ['NVIDIA H100 80GB HBM3'], "
                                       "'modules': {'torch': '2.9', 'pydantic': 'missing: ImportError: x'}}))"),
                     "the probe", kind="environment"),
             ev.Step("late", py("pass"), "cannot get its floor")]
    monkeypatch.setattr(ev, "plan", lambda *a: steps)
    monkeypatch.setattr(ev, "GRACE_S", 1.0)
    limits = {"fails": (30, 1), "stuck": (3, 1), "skipped": (30, 1), "environment": (30, 1), "late": (30, 35)}
    monkeypatch.setattr(ev, "TEST", ev.Settings(**{**ev.TEST.__dict__, "limits": limits}))
    started = time.monotonic()
    code = ev.main(["--out", str(tmp_path / "ev"), "--test-mode", "--budget-s", "45"])
    assert time.monotonic() - started < 20
    assert code == 1
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    by = {s["name"]: s for s in summary["steps"]}
    assert by["fails"]["exit_code"] == 3 and not by["fails"]["timed_out"]
    assert (tmp_path / "ev" / by["fails"]["stdout"]).read_text() == "half\n"
    assert by["stuck"]["timed_out"] and by["stuck"]["wall_s"] < 3.5
    assert by["skipped"]["skipped"] == "not here"
    assert by["environment"]["exit_code"] == 0 and summary["card"] == "NVIDIA H100 80GB HBM3"
    assert summary["torch"] == "2.9+cu" and summary["missing_modules"] == ["pydantic"]
    assert by["late"]["skipped"].startswith("out of time")
    md = (tmp_path / "ev" / "summary.md").read_text()
    assert "TEST MODE on the CPU: no GPU figures" in md and "| fails | 3 |" in md and "missing: pydantic" in md


def test_a_demo_run_is_read_as_near_tie_flips_against_confident_divergences(tmp_path):
    results = syn.run()
    run = tmp_path / "demo-bfloat16"
    run.mkdir()
    (run / "results.json").write_text(syn.results_json(results))
    (run / "checks.json").write_text(syn.checks_json(syn.checks_for(results, exact={4: 0.9}, confident={4: 0})))
    (run / "verdict.json").write_text(json.dumps({"outcome": "neutral", "headline": "no baseline yet", "checks": [
        {"check": "equivalence", "engine": "speculative", "batch_size": 4, "status": "pass", "why": "near ties"}]}))
    verdict = ev.demo_verdict(run)
    assert verdict["outcome"] == "neutral" and verdict["dtype"] == "float32"
    assert verdict["equivalence"]["speculative bs 4"]["exact_match"] == 0.9
    assert verdict["equivalence"]["speculative bs 4"]["confident"] == 0
    assert verdict["checks"] == ["equivalence bs 4: pass (near ties)"]
    line = ev.headline(ev.Outcome("demo-bfloat16", "", "", exit_code=0, verdict=verdict))
    assert line.startswith("neutral: no baseline yet;") and "0 confident (bugs)" in line


def test_a_selftest_cut_short_is_read_from_its_progress_lines():
    partial = ev.selftest_verdict("", "mutant kv-no-rollback: caught by equivalence\ninterrupted (SIGTERM)\n")
    assert partial == {"partial": True, "mutants_done": ["mutant kv-no-rollback: caught by equivalence"],
                       "correct_runs_done": []}
    whole = ev.selftest_verdict(json.dumps({"mutants": [{"name": "a", "caught": True, "caught_by": ["equivalence"]},
                                                        {"name": "b", "caught": False, "caught_by": []}],
                                            "correct_engine": {"passed": True, "false_alarms": 0, "runs": 2}}), "")
    assert whole["caught"] == 1 and whole["escaped"] == ["b"]
    assert ev.null_verdict("", "stored run 1: no failure; 0 of 4 speed cells marked\n")["runs_done"] == [
        "stored run 1: no failure; 0 of 4 speed cells marked"]
