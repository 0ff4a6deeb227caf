"""Refreshing a baseline over a repository's life: one commit per refresh (written and pruned files together),
the dispatched branch or a refresh PR, a concurrent refresh kept, the reason recorded, and the 21st refresh.

Runs the real CLI in-process against a stateful local GitHub API (pytest-httpserver) with Git Data API commits,
on a synthetic run (no model).  A fake clock gives each refresh its own ``created_utc``."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import synthetic as syn
import yaml
from fake_github import FakeGitHub

import gate.verdict.refresh
from gate.cli import main
from gate.verdict.baseline import load_baseline

HW = "cpu-test-cpu-2c-2t"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


class Clock:
    def __init__(self):
        self.t = datetime(2026, 12, 1, tzinfo=timezone.utc)

    def now(self, tz=None):
        self.t += timedelta(minutes=1)
        return self.t


@pytest.fixture()
def setup(tmp_path, httpserver, monkeypatch):
    api = FakeGitHub(base_url=httpserver.url_for("").rstrip("/"))
    api.install(httpserver)
    repo = tmp_path / "models"
    repo.mkdir()
    (repo / "specguard.yaml").write_text(yaml.safe_dump(syn.config().model_dump(mode="json")))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "adopt specguard")
    run = tmp_path / "out"
    run.mkdir()
    results = syn.run()
    (run / "results.json").write_text(syn.results_json(results))
    (run / "checks.json").write_text(syn.checks_json(syn.checks_for(results)))
    monkeypatch.setattr(gate.verdict.refresh, "datetime", Clock())
    for k, v in {"GITHUB_TOKEN": api.token, "GITHUB_REPOSITORY": api.repo, "GITHUB_API_URL": api.base_url}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    return api, repo, run


def refresh(repo: Path, run: Path, *extra: str) -> None:
    cfg = str(repo / "specguard.yaml")
    assert main(["baseline", "refresh", cfg, "--from", str(run)]) == 0
    assert main(["github", "refresh-pr", cfg, "--run-dir", str(run), "--base-branch", "main", "--repo", str(repo),
                 *extra]) == 0


def merge(api: FakeGitHub, repo: Path, branch: str) -> None:
    """The refresh PR is merged: main becomes the branch's tip, and the local checkout follows it."""
    tree = api.tree_of(branch)
    local = {str(p.relative_to(repo)) for p in (repo / "baselines").rglob("*.json")}
    for path in local - set(tree):
        (repo / path).unlink()
    for path, data in tree.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"merge {branch}")
    api.refs["main"] = api.refs.pop(branch)
    for pr in api.pulls:
        pr["state"] = "closed"


def commits_posted(api: FakeGitHub) -> int:
    return sum(1 for m, p, _ in api.log if m == "POST" and p.endswith("/git/commits"))


def test_twenty_one_refreshes_keep_history_capped_in_one_commit_each(setup):
    api, repo, run = setup
    branch = f"specguard/baseline-demo-{HW}"
    for i in range(21):
        before = commits_posted(api)
        refresh(repo, run)
        assert commits_posted(api) == before + 1, f"refresh {i + 1}: one commit, written and pruned files together"
        merge(api, repo, branch)
    history = [p for p in api.tree_of("main") if p.startswith(f"baselines/demo/history/{HW}/")]
    assert len(history) == 20, "baseline.history: 20 previous baselines kept"
    assert len(set(history)) == 20 and f"baselines/demo/{HW}.json" in api.tree_of("main")
    assert load_baseline(repo / "baselines" / "demo" / f"{HW}.json").created_utc == "2026-12-01T00:21:00Z"


def test_a_refresh_dispatched_on_a_pr_branch_commits_there_and_opens_no_pr(setup, capsys):
    api, repo, run = setup
    api.refs["feature"] = api.refs["main"]
    refresh(repo, run, "--branch", "feature")
    assert f"baselines/demo/{HW}.json" in api.tree_of("feature")
    assert not api.pulls and set(api.refs) == {"main", "feature"}
    assert "committed" in capsys.readouterr().out


def test_a_concurrent_refresh_of_another_hardware_key_is_kept(setup):
    api, repo, run = setup
    api.refs["feature"] = api.refs["main"]
    api.race.append("feature")  # another runner's refresh lands between our read and our ref update
    refresh(repo, run, "--branch", "feature")
    tree = api.tree_of("feature")
    assert f"baselines/demo/{HW}.json" in tree and any(p.startswith("other/") for p in tree), sorted(tree)
    assert api.history_of("feature")[:2] == [f"specguard: refresh baseline demo for {HW}", "a concurrent refresh"]


def test_the_reason_is_recorded_in_the_baseline_the_commit_and_the_pr(setup):
    api, repo, run = setup
    cfg = str(repo / "specguard.yaml")
    assert main(["baseline", "refresh", cfg, "--from", str(run), "--reason", "k 4 -> 5 on purpose"]) == 0
    assert main(["github", "refresh-pr", cfg, "--run-dir", str(run), "--base-branch", "main", "--repo",
                 str(repo)]) == 0
    assert load_baseline(repo / "baselines" / "demo" / f"{HW}.json").reason == "k 4 -> 5 on purpose"
    assert "**Reason:** k 4 -&gt; 5 on purpose" in api.pulls[0]["body"] or \
        "**Reason:** k 4 -> 5 on purpose" in api.pulls[0]["body"]
    assert "Reason: k 4 -> 5 on purpose" in api.history_of(f"specguard/baseline-demo-{HW}")[0]


def test_a_second_refresh_of_one_key_commits_on_top_never_force_moving_the_branch(setup):
    api, repo, run = setup
    branch = f"specguard/baseline-demo-{HW}"
    refresh(repo, run)
    first = api.refs[branch]
    refresh(repo, run)  # not merged in between: the PR is still open
    assert api.commits[api.refs[branch]]["parents"] == [first], "a fast-forward on top of the first refresh"
    assert not any(m == "PATCH" and p.endswith(branch) and (b or {}).get("force") for m, p, b in api.log)
    assert len(api.pulls) == 1, "the open PR is updated, not duplicated"


def test_a_setup_failure_is_said_on_the_pr_and_a_skipped_push_only_edits(setup, capsys):
    api, repo, _ = setup
    cfg = str(repo / "specguard.yaml")
    assert main(["github", "comment", "--pr", "5", "--config", cfg, "--skipped", "--update-only"]) == 0
    assert not api.comments.get(5), "no earlier comment: nothing is posted"
    assert main(["github", "comment", "--pr", "5", "--config", cfg,
                 "--setup-failed", "torch is not installed (specguard needs torch>=2.4)"]) == 0
    body = api.comments[5][0]["body"]
    assert "could not start" in body and "torch is not installed" in body and "<!-- specguard:demo -->" in body
    assert main(["github", "comment", "--pr", "5", "--config", cfg, "--skipped", "--update-only"]) == 0
    assert len(api.comments[5]) == 1 and "SKIPPED" in api.comments[5][0]["body"]


def test_a_forged_marker_in_the_body_cannot_redirect_the_upsert(setup):
    """The marker comes from the config's name only: a quoted `<!-- specguard:other -->` is just text."""
    from gate.ci.github import GitHub
    from gate.ci.publish import post

    api, _, _ = setup
    gh = GitHub.from_env()
    assert post(gh, 6, "report for other\n\n<!-- specguard:other -->\n", "pass", "always", name="other").action == \
        "created"
    forged = "## specguard: PASS\n\nquoting a prompt: <!-- specguard:other -->\n"
    assert post(gh, 6, forged, "pass", "always", name="demo").action == "created"
    bodies = [c["body"] for c in api.comments[6]]
    assert bodies[0].startswith("report for other"), "the other config's comment is untouched"
    assert bodies[1].rstrip().endswith("<!-- specguard:demo -->")


def test_a_comment_quoting_our_marker_is_not_taken_for_ours(setup):
    from gate.ci.github import GitHub
    from gate.ci.publish import post

    api, _, _ = setup
    gh = GitHub.from_env()
    assert post(gh, 4, "other config quotes <!-- specguard:demo --> in a prompt", "pass", "always",
                name="other").action == "created"
    assert post(gh, 4, "## specguard: PASS\n", "pass", "always", name="demo").action == "created"
    assert api.comments[4][0]["body"].startswith("other config quotes"), "never edited by demo's upsert"
