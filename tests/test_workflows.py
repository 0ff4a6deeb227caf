"""The Action and this repo's workflows pass zizmor's offline audit (template injection, permissions, pinning)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def zizmor() -> str:
    exe = Path(sys.executable).parent / "zizmor"
    return str(exe) if exe.exists() else (shutil.which("zizmor") or "zizmor")


def test_zizmor_offline_finds_nothing():
    workflows = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "action" / "workflows").glob("*.yml"))
    assert workflows, "the example workflows for model repositories"
    proc = subprocess.run([zizmor(), "--offline", "action.yml", ".github/workflows", *workflows], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_action_passes_inputs_through_env_only():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step["name"]


def test_ci_calls_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")


def _run_step(tmp_path, code: int, mode: str = "check", baseline: str = "") -> str:
    """The action's outcome step given the gate's exit code; returns the verdict output."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "result")
    out, summary = tmp_path / "out.txt", tmp_path / "summary.md"
    env = {"PATH": "/usr/bin:/bin", "CODE": str(code), "REFUSED": "false", "OUT": str(tmp_path / "o"),
           "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary), "MODE": mode, "BASELINE": baseline,
           "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "RUN_ID": "42-1", "ACTION_PATH": str(ROOT)}
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in out.read_text().splitlines())["verdict"]


@pytest.mark.parametrize("code,verdict", [(0, "pass"), (1, "fail"), (2, "error"), (3, "baseline-error"),
                                          (130, "interrupted"), (7, "error")])
def test_action_maps_exit_codes_to_verdicts_and_keeps_the_code(tmp_path, code, verdict):
    """Bug: every non-zero exit became verdict=fail, so bad input looked like a failed gate."""
    write_run(tmp_path / "o", "pass" if code == 0 else "fail")
    assert _run_step(tmp_path, code) == verdict
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    last = action["runs"]["steps"][-1]
    proc = subprocess.run(["bash", "-c", last["run"]], env={"PATH": "/usr/bin:/bin", "CODE": str(code),
                                                            "REFUSED": "false", "VERDICT": verdict})
    assert proc.returncode == code, "the job keeps the gate's exit code"


def write_run(out, outcome: str, run_id: str = "42-1", verdict_run_id: str | None = None) -> None:
    from gate.io.documents import digest_of

    out.mkdir(exist_ok=True)
    results = json.dumps({"run_id": run_id, "fingerprint": {"config": "c0ffee", "suite": {"fingerprint": "5eed"}}})
    (out / "results.json").write_text(results)
    (out / "checks.json").write_text("{}")
    (out / "verdict.json").write_text(json.dumps({
        "outcome": outcome, "exit_code": 0 if outcome in ("pass", "neutral") else 1,
        "run": {"id": verdict_run_id or run_id, "config": "c0ffee", "suite": "5eed"},
        "results_digest": digest_of(results.encode()), "checks_digest": digest_of(b"{}")}))


def test_exit_0_without_a_passing_verdict_file_is_an_error_not_a_pass(tmp_path):
    """A plug-in's os._exit(0) ends the gate with 0 and no verdict: that is no pass; nor is a stale verdict of
    an earlier run, nor one of another run id."""
    assert _run_step(tmp_path, 0) == "error"
    write_run(tmp_path / "o", "pass", run_id="41-1")
    assert _run_step(tmp_path, 0) == "error"
    write_run(tmp_path / "o", "pass", verdict_run_id="7-1")
    assert _run_step(tmp_path, 0) == "error"
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    last = action["runs"]["steps"][-1]
    proc = subprocess.run(["bash", "-c", last["run"]], env={"PATH": "/usr/bin:/bin", "CODE": "0",
                                                            "REFUSED": "false", "VERDICT": "error"})
    assert proc.returncode == 1


def test_exit_1_is_a_fail_only_with_a_failing_verdict_of_this_run(tmp_path):
    """Bug: any exit 1 was reported as `fail`, a traceback included (a crash of the gate, not a finding);
    nor does a passing verdict beside exit 1 make it a fail or a pass."""
    assert _run_step(tmp_path, 1) == "error"
    write_run(tmp_path / "o", "pass")
    assert _run_step(tmp_path, 1) == "error"
    write_run(tmp_path / "o", "fail", verdict_run_id="7-1")
    assert _run_step(tmp_path, 1) == "error"
    write_run(tmp_path / "o", "fail")
    assert _run_step(tmp_path, 1) == "fail"


def test_a_refresh_passes_only_with_the_baseline_it_wrote(tmp_path):
    """Bug: in refresh mode exit 0 was a pass with no proof; the proof is the baseline file the gate wrote and
    read back (its path is the gate step's `baseline-path` output)."""
    assert _run_step(tmp_path, 0, mode="refresh") == "error"
    assert _run_step(tmp_path, 0, mode="refresh", baseline=str(tmp_path / "gone.json")) == "error"
    (tmp_path / "b.json").write_text("{}")
    assert _run_step(tmp_path, 0, mode="refresh", baseline=str(tmp_path / "b.json")) == "pass"
    assert _run_step(tmp_path, 2, mode="refresh", baseline=str(tmp_path / "b.json")) == "error"


def test_a_neutral_gate_is_reported_as_neutral(tmp_path):
    write_run(tmp_path / "o", "neutral")
    assert _run_step(tmp_path, 0) == "neutral"


# --- adoption details (issue 18) ------------------------------------------------------------------------------


def _workflow(name: str) -> dict:
    doc = yaml.safe_load((ROOT / "action" / "workflows" / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


@pytest.mark.parametrize("name", ["specguard.yml", "specguard-sharded.yml"])
def test_the_pr_workflows_serve_a_merge_queue_and_name_their_required_check(name):
    wf = _workflow(name)
    assert "merge_group" in wf["on"], "a merge queue waits for the required check on its own commits"
    assert wf["jobs"]["verdict"]["name"] == "verdict" and wf["jobs"]["verdict"]["if"] == "always()"
    assert "changed" in wf["jobs"] and wf["jobs"]["changed"]["runs-on"] == "ubuntu-latest"
    gpu_jobs = [j for j in wf["jobs"].values() if "self-hosted" in str(j["runs-on"])]
    assert gpu_jobs and all("changed" in str(j["needs"]) for j in gpu_jobs), "no GPU job before `changed` decides"
    for job in gpu_jobs:
        checkout = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout")
                        and "repository" not in s.get("with", {}))
        assert checkout["with"]["lfs"] is True, "LFS weights must not arrive as pointer files"


@pytest.mark.parametrize("name", ["specguard.yml", "specguard-sharded.yml"])
def test_the_pr_workflows_refuse_forks_in_the_hosted_job_before_any_gpu_job(name):
    """Issue 30 item 13: the main workflow refused a fork only on the GPU runner, after an LFS checkout of its
    code.  The hosted `changed` job's action refuses it (changed mode refuses whatever the runner), every GPU job
    needs that job, and two workflows (two configs) never share a concurrency group."""
    wf = _workflow(name)
    step = next(s for s in wf["jobs"]["changed"]["steps"] if s.get("with", {}).get("mode") == "changed")
    assert step["with"]["allow-fork-prs"] == "${{ vars.SPECGUARD_ALLOW_FORK_PRS || 'false' }}"
    assert all("changed" in str(j["needs"]) for j in wf["jobs"].values() if "self-hosted" in str(j["runs-on"]))
    assert "${{ github.workflow }}" in wf["concurrency"]["group"]


def _step(step_id: str, env: dict, tmp_path) -> dict[str, str]:
    """Run one of the action's steps by its id; its outputs."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    step = next(s for s in action["runs"]["steps"] if s.get("id") == step_id)
    out = tmp_path / f"{step_id}.txt"
    out.write_text("")
    subprocess.run(["bash", "-e", "-c", step["run"]], env={"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(out), **env},
                   check=True, capture_output=True)
    return dict(line.split("=", 1) for line in out.read_text().splitlines())


@pytest.mark.parametrize("mode,runner,refused", [("changed", "github-hosted", "false"),
                                                 ("check", "github-hosted", "false"),
                                                 ("check", "self-hosted", "true"), ("changed", "self-hosted", "true")])
def test_a_forks_pr_is_refused_at_once_on_a_self_hosted_runner_and_after_changed_on_a_hosted_one(
        tmp_path, mode, runner, refused):
    """Issue 40 item 8: every fork PR failed the required check, a README fix too, because changed mode refused a
    fork before computing `changed`.  On a hosted runner `changed` runs first (no fork code: its files are read
    as data); on a self-hosted one nothing of the fork is read."""
    env = {"HEAD_REPO": "someone/fork", "BASE_REPO": "acme/models", "ALLOW": "false", "MODE": mode,
           "RUNNER_ENVIRONMENT": runner}
    assert _step("fork", env, tmp_path) == {"fork": "true", "refused": refused}
    assert _step("fork", {**env, "ALLOW": "true"}, tmp_path) == {"fork": "false", "refused": "false"}
    assert _step("fork", {**env, "HEAD_REPO": "acme/models"}, tmp_path)["fork"] == "false"


@pytest.mark.parametrize("changed,refused,verdict", [("false", "false", "skipped"), ("true", "false", None),
                                                     ("true", "true", "fail"), ("", "true", "fail")])
def test_changed_mode_sets_the_verdict_output_skipped_when_the_gate_need_not_run(tmp_path, changed, refused,
                                                                                verdict):
    """The `verdict` output documented `skipped` and never set it: changed mode's outcome step does."""
    if changed:
        gated = _step("fork-gated", {"HEAD_REPO": "someone/fork", "CHANGED": changed}, tmp_path)
        assert gated == {"refused": "true" if changed == "true" else "false"}
    assert _step("decided", {"CHANGED": changed, "REFUSED": refused}, tmp_path).get("verdict") == verdict
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert "steps.decided.outputs.verdict" in action["outputs"]["verdict"]["value"]


def test_every_step_runs_specguard_by_path_never_as_python_m_gate():
    """Issue 30 item 5: `python -m gate` from the workspace ran a model repository's own gate.py or gate/."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    runs = [s.get("run", "") for s in action["runs"]["steps"]]
    for path in (ROOT / "action" / "workflows").glob("*.yml"):
        runs += [s.get("run", "") for j in _workflow(path.name)["jobs"].values() for s in j.get("steps", [])]
    assert [r for r in runs if "specguard.py" in r] and not [r for r in runs if "-m gate" in r]
    for step in action["runs"]["steps"]:
        if "specguard.py" in step.get("run", ""):
            assert step["env"]["ACTION_PATH"] == "${{ github.action_path }}", step["name"]


def test_artifacts_are_named_per_config_and_paired_mode_prunes_stale_worktrees():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    upload = next(s for s in action["runs"]["steps"] if "upload-artifact" in str(s.get("uses", "")))
    assert upload["with"]["name"] == "${{ steps.setup.outputs.artifact }}"
    gate = next(s for s in action["runs"]["steps"] if s.get("id") == "gate")
    assert "git worktree prune" in gate["run"] and "worktree add -f" in gate["run"]
    comment = next(s for s in action["runs"]["steps"] if s.get("id") == "comment")
    assert comment["if"].startswith("!cancelled()") and "interrupted" in comment["if"]
    assert "github.action_path" in comment["env"]["PYTHONPATH"], "the comment step works when setup failed"


def test_the_refresh_workflow_takes_a_runner_label_a_reason_and_force():
    wf = _workflow("specguard-refresh.yml")
    inputs = wf["on"]["workflow_dispatch"]["inputs"]
    assert {"runner", "reason", "force", "hardware-key"} <= set(inputs)
    assert "inputs.runner" in str(wf["jobs"]["refresh"]["runs-on"])


@pytest.mark.parametrize("check,compare,word,code", [
    (0, 0, "pass", 0), (1, 1, "fail", 1), (0, 0, "error", 2),  # exit 0 with no verdict of this run: no pass
    (2, 0, "pass", 2), (130, 1, "fail", 130),  # check's own error is not hidden by compare's code
])
def test_the_sharded_merge_job_needs_this_runs_verdict_and_keeps_checks_errors(tmp_path, check, compare, word, code):
    """Bug: the sharded workflow ignored `check`'s exit code and never read the verdict file back."""
    wf = _workflow("specguard-sharded.yml")
    step = next(s for s in wf["jobs"]["merge"]["steps"] if s.get("name", "").startswith("Merge"))
    fake = tmp_path / "python"
    fake.write_text('#!/bin/bash\ncase "$2" in check) exit "$CHECK" ;; compare) exit "$COMPARE" ;;\n'
                    '  verdictfile) echo "$WORD"; exit 0 ;; *) exit 0 ;; esac\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "PR": "", "GITHUB_STEP_SUMMARY": str(tmp_path / "s"),
           "CHECK": str(check), "COMPARE": str(compare), "WORD": word}
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr


def test_the_tiered_workflow_runs_a_budgeted_pr_tier_and_a_full_tier_on_a_label_or_a_schedule():
    """Issue 53 item 3: a per-PR tier within a budget, a full tier on a label or a schedule, both against the same
    baseline (the full tier's scheduled refresh writes it and its history); one required check; least privilege."""
    wf = _workflow("specguard-tiered.yml")
    jobs = wf["jobs"]
    assert {"pull_request", "merge_group", "schedule", "workflow_dispatch"} <= set(wf["on"])
    assert "labeled" not in wf["on"]["pull_request"]["types"], "another label would re-post the required check"
    assert wf["permissions"] == {} and all("permissions" in j for j in jobs.values())

    def action_step(job: str) -> dict:
        return next(s for s in jobs[job]["steps"] if str(s.get("uses", "")).startswith("specguard/specguard@"))

    pr, full, refresh = action_step("pr-tier")["with"], action_step("full-tier")["with"], action_step("refresh")["with"]
    assert pr["mode"] == "check" and pr["budget-minutes"] == "${{ vars.SPECGUARD_PR_BUDGET_MINUTES || '20' }}"
    assert full["mode"] == "check" and "budget-minutes" not in full
    assert refresh["mode"] == "refresh" and "budget-minutes" not in refresh, "a budgeted run never writes a baseline"
    assert pr["config"] == full["config"] == refresh["config"], "one config: one baseline and its history"
    assert "!contains(github.event.pull_request.labels.*.name, 'specguard-full')" in jobs["pr-tier"]["if"]
    assert "contains(github.event.pull_request.labels.*.name, 'specguard-full')" in jobs["full-tier"]["if"]
    assert "schedule" in jobs["refresh"]["if"] and jobs["refresh"]["permissions"]["contents"] == "write"
    assert all(j["permissions"].get("contents") in (None, "read") for name, j in jobs.items() if name != "refresh")
    assert jobs["pr-tier"]["timeout-minutes"] > 20, "the timeout sits above the budget"
    assert jobs["verdict"]["name"] == "verdict" and set(jobs["verdict"]["needs"]) == {"changed", "pr-tier",
                                                                                       "full-tier"}
    for job in ("pr-tier", "full-tier"):
        assert "changed" in str(jobs[job]["needs"]), "no GPU job before `changed` decides"


def test_the_action_passes_budget_minutes_to_plan_and_gate_through_env():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert "budget-minutes" in action["inputs"]
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "gate")
    assert step["env"]["BUDGET_MINUTES"] == "${{ inputs.budget-minutes }}"
    assert 'args+=(--budget-minutes "$BUDGET_MINUTES")' in step["run"]
    # the plan is the gate's own (--plan-to), so it is planned with the same arguments
    assert 'args+=(--plan-to "$GITHUB_STEP_SUMMARY")' in step["run"] and " plan " not in step["run"]
