"""Deliver the report to GitHub: one upserted PR comment per config, and the baseline-refresh pull request.

Posting is best effort by design: a failure to comment never changes the
verdict or the exit code.  A fork PR's read-only token (403 "Resource not
accessible by integration") sends the report to the step summary with a warning
annotation instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gate.github import GitHub, GitHubError, ReadOnlyToken
from gate.github import comment_marker as marker_for
from gate.report import inline
from gate.report.numbers import num, pct, times

if TYPE_CHECKING:  # the comment path runs in the hosted `changed` job too: no torch, numpy or baseline models
    from gate.baseline import Baseline

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


def _slice_rows(old: Baseline | None, new: Baseline) -> list[str]:
    rows = []
    for engine, per_bs in sorted(new.acceptance.items()):
        for bs, per_slice in sorted(per_bs.items(), key=lambda kv: int(kv[0])):
            for slc, fig in sorted(per_slice.items()):
                if slc == "*":
                    continue
                before = old.acceptance.get(engine, {}).get(bs, {}).get(slc) if old else None
                sp_new = _pooled(new, engine, slc, int(bs))
                sp_old = _pooled(old, engine, slc, int(bs)) if old else None
                mal_old = before.mean_accepted_length if before else None
                rows.append(f"| {inline(engine)} | {inline(slc)} | {bs} | {num(mal_old)} → "
                            f"{num(fig.mean_accepted_length)} | {times(sp_old)} → {times(sp_new)} |")
    return rows


def _pooled(b: Baseline | None, engine: str, slc: str, bs: int) -> float | None:
    import statistics

    if b is None:
        return None
    samples = [x for c in b.speedup.get(engine, {}).values() if c.slice == slc and c.batch_size == bs
               for x in c.samples]
    return statistics.median(samples) if samples else None


def refresh_body(old: Baseline | None, new: Baseline, history: str) -> str:
    lines = [f"Refreshes baseline `{inline(new.name)}` for `{inline(new.hardware_key)}` from workflow run "
             f"{inline(new.source.get('run_id') or 'local')} (commit {inline(new.source.get('commit') or '?')}).", ""]
    if new.forced:
        lines += [f"**Forced:** {inline(new.forced.reason)} (failing: {inline(', '.join(new.forced.failing))})", ""]
    elif new.reason:
        lines += [f"**Reason:** {inline(new.reason)}", ""]
    if old is None:
        lines += ["There was no baseline for this hardware before.", ""]
    lines += ["| engine | slice | batch size | mean acceptance length, old → new | speedup, old → new |",
              "|---|---|---|---|---|", *_slice_rows(old, new), ""]
    eq = []
    for e, rows in sorted(new.equivalence.items()):
        for bs, fig in rows.items():
            before = old.equivalence.get(e, {}).get(bs) if old else None
            eq.append(f"| {inline(e)} | {bs} | {pct(before.exact_match if before else None)} → "
                      f"{pct(fig.exact_match)} |")
    if eq:
        lines += ["| engine | batch size | identical to the reference, old → new |", "|---|---|---|", *eq, ""]
    lines += ["<details><summary>History</summary>", "", "```", history.replace("```", "ʼʼʼ"), "```", "",
              "</details>", "", "A PR opened with the workflow's `GITHUB_TOKEN` does not trigger workflows: close "
              "and reopen it, or use a GitHub App token or a fine-grained PAT (see the Action's README), so the "
              "gate runs on it.", ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Refreshed:
    branch: str
    commit: str
    pr_url: str = ""  # empty when committed to the dispatched branch, or with open_pr=False


def refresh_branch(name: str, hardware_key: str) -> str:
    return f"specguard/baseline-{name}-{hardware_key}"[:200]


def open_refresh_pr(gh: GitHub, repo: Path, baseline_path: Path, written: list[str], deleted: list[str],
                    default_branch: str, branch: str | None = None, open_pr: bool = True) -> Refreshed:
    """Publish a refreshed baseline as one commit (files written and history pruned together).

    Dispatched on a branch other than the default one (``branch``), the commit lands on that branch: the PR
    that needs the new baseline carries it, and its own gate then passes against it.  From the default
    branch, the commit goes to ``specguard/baseline-<name>-<hardware key>`` (one per key, so refreshes of two
    runners never touch one branch; a later refresh of the same key commits on top, never force-moves it)
    and a PR into the default branch is opened or updated.
    """
    from gate.baseline import Baseline as Model
    from gate.baseline import BaselineStore, load_baseline
    from gate.history import render_history

    new = load_baseline(baseline_path)
    rel = os.path.relpath(baseline_path, repo)
    old_text = _git(repo, "show", f"HEAD:{rel}")
    old = None
    if old_text:
        try:
            old = Model.model_validate(json.loads(old_text))
        except ValueError:
            old = None
    message = f"specguard: refresh baseline {new.name} for {new.hardware_key}"
    if new.reason or new.forced:
        message += f"\n\nReason: {' '.join((new.forced.reason if new.forced else new.reason).split())}"
    files = {path: (repo / path).read_bytes() for path in written}
    if branch and branch != default_branch:
        return Refreshed(branch, gh.commit_files(branch, files, deleted, message))
    target = refresh_branch(new.name, new.hardware_key)
    commit = gh.commit_files(target, files, deleted, message, start_from=default_branch)
    if not open_pr:
        return Refreshed(target, commit)
    store = BaselineStore(baseline_path.parent.parent, new.name)
    history = render_history(store.history(new.hardware_key))
    url = gh.open_pull_request(target, default_branch, message.split("\n", 1)[0], refresh_body(old, new, history))
    return Refreshed(target, commit, url)
