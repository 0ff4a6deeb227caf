"""Deliver the report to GitHub: one upserted PR comment per config, and the baseline-refresh pull request.

Posting is best effort by design: a failure to comment never changes the
verdict or the exit code.  A fork PR's read-only token (403 "Resource not
accessible by integration") sends the report to the step summary with a warning
annotation instead.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gate.ci.github import GitHub
from gate.errors import GitHubError, ReadOnlyToken
from gate.report.inert import markdown as inline
from gate.report.page import comment_marker as marker_for

When = Literal["always", "on-change", "on-failure", "never"]


@dataclass(frozen=True)
class Posted:
    action: Literal["created", "updated", "skipped", "failed"]
    url: str = ""
    reason: str = ""


def _headline(body: str) -> str:
    m = re.search(r"^\*\*(.+)\*\*$", body, re.M)
    return m.group(1) if m else ""


def post(gh: GitHub, pr: int, body: str, outcome: str, when: When, name: str = "specguard",
         author: str | None = None, warn=print, update_only: bool = False) -> Posted:
    """Upsert the comment when the policy says so; never raise for a GitHub failure.  ``update_only``: edit
    this config's comment if there is one, post none."""
    if when == "never":
        return Posted("skipped", reason="comment: never")
    # From the config's name only, never read from the body: a body quotes untrusted text (prompt ids, model
    # output), and a forged marker there must not redirect the upsert to another config's comment.
    marker = marker_for(name)
    try:
        existing = gh.find_comments(pr, marker, author)
        if update_only and not existing:
            return Posted("skipped", reason="no earlier comment to update")
        if when == "on-failure" and outcome != "fail" and not existing:
            return Posted("skipped", reason="comment: on-failure, and the gate did not fail")
        if when == "on-change":
            if existing and _headline(existing[0].get("body") or "") == _headline(body) \
                    and f"specguard: {outcome.upper()}" in (existing[0].get("body") or ""):
                return Posted("skipped", existing[0].get("html_url", ""), "comment: on-change, and nothing changed")
            if not existing and outcome == "pass":
                return Posted("skipped", reason="comment: on-change, and the first verdict is a pass")
        result = gh.upsert_comment(pr, body, marker, author)
        return Posted(result.action, result.url)
    except ReadOnlyToken:
        warn("::warning title=specguard::This workflow's token cannot comment (a fork PR's token is read-only); "
             "the report is in the job summary.")
        return Posted("failed", reason="read-only token")
    except GitHubError as exc:
        text = "; ".join(str(p) for p in exc.problems)
        warn(f"::warning title=specguard::Could not post the PR comment: {_annotation(text)}")
        return Posted("failed", reason=text)


def _annotation(text: str) -> str:
    """Workflow commands end at a newline and treat % specially: keep a message one inert line."""
    return text.replace("%", "%25").replace("\r", " ").replace("\n", " ")


def notice(name: str, outcome: str, title: str, text: str) -> str:
    """A short comment for a run that did not gate: refused (fork) or skipped (nothing relevant changed)."""
    icon = {"fail": "❌", "pass": "✅", "skipped": "⏭️"}.get(outcome, "⚪")
    return (f"## {icon} specguard: {outcome.upper()}\n\n**{inline(title)}**\n\n{inline(text)}\n\n"
            f"{marker_for(name)}\n")


FORK_REFUSAL = (
    "This pull request comes from a fork, and the gate runs on a self-hosted GPU runner: running it would "
    "execute the fork's code (its config, plug-in engines and models) on your machine, next to your secrets. "
    "A maintainer who has reviewed the change can run it with `allow-fork-prs: true` (for example from a "
    "branch of this repository)."
)


# --- the baseline-refresh pull request -----------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else ""


def changed_files(repo: Path, under: Path) -> tuple[list[str], list[str]]:
    """(written, deleted): repository-relative paths under ``under`` that are new or modified, and that were
    deleted (history pruned past ``baseline.history``), in the working tree."""
    rel = os.path.relpath(under, repo)
    written, deleted = [], []
    for line in _git(repo, "status", "--porcelain", "--untracked-files=all", "--no-renames", "--", rel).splitlines():
        code, path = line[:2], line[3:].strip().strip('"')
        (deleted if "D" in code else written).append(path)
    return sorted(written), sorted(deleted)


@dataclass(frozen=True)
class Refreshed:
    branch: str
    commit: str
    pr_url: str = ""  # empty when committed to the dispatched branch, or with open_pr=False


def refresh_branch(name: str, hardware_key: str) -> str:
    return f"specguard/baseline-{name}-{hardware_key}"[:200]


def deliver_refresh(gh: GitHub, repo: Path, written: list[str], deleted: list[str], message: str,
                    default_branch: str, target: str, pr_body: str, branch: str | None = None,
                    open_pr: bool = True) -> Refreshed:
    """Publish a refreshed baseline as one commit (files written and history pruned together).

    Dispatched on a branch other than the default one (``branch``), the commit lands on that branch: the PR
    that needs the new baseline carries it, and its own gate then passes against it.  From the default
    branch, the commit goes to ``target`` (:func:`refresh_branch`: one per key, so refreshes of two runners never
    touch one branch; a later refresh of the same key commits on top, never force-moves it) and a PR into the
    default branch, with ``pr_body``, is opened or updated.
    """
    files = {path: (repo / path).read_bytes() for path in written}
    if branch and branch != default_branch:
        return Refreshed(branch, gh.commit_files(branch, files, deleted, message))
    commit = gh.commit_files(target, files, deleted, message, start_from=default_branch)
    if not open_pr:
        return Refreshed(target, commit)
    url = gh.open_pull_request(target, default_branch, message.split("\n", 1)[0], pr_body)
    return Refreshed(target, commit, url)


def committed_text(repo: Path, path: Path) -> str:
    """A file as HEAD has it (empty when HEAD has none)."""
    return _git(repo, "show", f"HEAD:{os.path.relpath(path, repo)}")


# --- which comment -------------------------------------------------------------------------------------


def comment_for(run_dir: str | None, name: str, refused: bool = False, setup_failed: str | None = None
                ) -> tuple[str, str]:
    """(body, outcome) of the one comment for this run: the run's page (``comment.md``) with its verdict when a
    verdict of this very run is there (:func:`gate.verdict.file.check`), else a notice that says why there is none;
    a fork's refusal; a set-up that failed; or, with none of these, "skipped: nothing the gate guards changed"."""
    if run_dir is not None:
        from gate.verdict.file import check

        page = Path(run_dir) / "comment.md"
        got = check(run_dir)
        if page.is_file() and got.outcome != "error":
            return page.read_text(encoding="utf-8"), got.outcome
        return notice(name, "fail", "The gate wrote no verdict", "The run stopped before its verdicts were written "
                      "(bad input, a missing or unusable baseline, or an interruption): see the job log."), "fail"
    if refused:
        return notice(name, "fail", "Refused: a fork's pull request", FORK_REFUSAL), "fail"
    if setup_failed is not None:
        return notice(name, "fail", "The gate could not start on this runner",
                      (setup_failed or "setting up specguard failed") + " (see the job log)."), "fail"
    return notice(name, "skipped", "Skipped: nothing the gate guards changed",
                  "No draft, target, speculation or batching change in this pull request."), "skipped"


def deliver_comment(pr: int, body: str, outcome: str, when: When, name: str, update_only: bool = False) -> Posted:
    """Post (or edit) the comment with the token and repository of the environment; a missing token is a warning,
    never an error (the comment is only the delivery)."""
    try:
        gh = GitHub.from_env()
    except GitHubError as exc:
        print(f"::warning title=specguard::not commenting: {exc.problems[0]}")
        return Posted("skipped", reason=str(exc.problems[0]))
    return post(gh, pr, body, outcome, when, name=name, author=os.environ.get("SPECGUARD_COMMENT_AUTHOR") or None,
                update_only=update_only)


def comment_command(pr: int, when: When, config: str | None, run_dir: str | None, refused: bool,
                    setup_failed: str | None, update_only: bool) -> str:
    """``specguard github comment``: choose the comment, post or edit it, and say what happened (one line; the
    comment's URL goes to the step's outputs)."""
    from gate.ci.github import step_outputs
    from gate.inputs.config import comment_name

    name = comment_name(config)
    body, outcome = comment_for(run_dir, name, refused, setup_failed)
    posted = deliver_comment(pr, body, outcome, when, name, update_only)
    step_outputs(**{"comment-url": posted.url})
    return (f"comment: {posted.action}" + (f" {posted.url}" if posted.url else "")
            + (f" ({posted.reason})" if posted.reason else ""))
