"""A small GitHub REST client: post the gate's report on a pull request, open a baseline-refresh PR.

Built on ``requests`` only (no torch, no transformers) so the GitHub Action step imports fast.

Guarantees:

* every request is authenticated with the token, and the token never appears in an exception's
  text or repr, nor in a log line;
* 5xx answers and connection errors are retried with exponential backoff (1 s, 2 s, 4 s ...),
  rate limits (429, or 403 from the secondary rate limit) after the wait GitHub asks for; all
  waiting for one call together stays within ``max_total_wait_s``;
* other 4xx answers are never retried: they raise at once, naming the method, path, status and
  GitHub's own message, with a hint saying what to do.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import requests

from gate.errors import GitHubError, NotFound, Problem, RateLimited, ReadOnlyToken

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
# GitHub's advice for a secondary rate limit without Retry-After: wait at least a minute.
SECONDARY_RATE_LIMIT_WAIT_S = 60.0
READ_ONLY_MESSAGE = "Resource not accessible by integration"
_TRANSIENT = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


@dataclass(frozen=True)
class CommentResult:
    """The comment that now holds the report, and the stale duplicates that were removed."""

    id: int
    url: str  # html_url
    action: Literal["created", "updated"]
    deleted: list[int] = field(default_factory=list)


class GitHub:
    """A GitHub REST client for one repository, authenticated with one token."""

    def __init__(
        self,
        token: str,
        repository: str,
        api_url: str | None = None,
        *,
        session: requests.Session | None = None,
        max_total_wait_s: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        timeout_s: float = 30.0,
    ):
        if not token:
            raise GitHubError(Problem("github", "no token given", hint="set GITHUB_TOKEN"))
        owner, _, name = repository.partition("/")
        if not owner or not name or "/" in name:
            raise GitHubError(Problem("github", f"repository {repository!r} is not 'owner/name'",
                                      hint="set GITHUB_REPOSITORY to e.g. 'octo-org/octo-repo'"))
        self.owner, self.name = owner, name
        self.repository = repository
        self.api_url = (api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
        self._token = token
        self._session = session or requests.Session()
        self.max_total_wait_s = max_total_wait_s
        self._sleep, self._clock, self._wall = sleep, clock, wall
        self.timeout_s = timeout_s
        # Passed per request rather than set on the session, so a caller's shared session is left alone.
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "specguard",
        }

    @classmethod
    def from_env(cls, **kwargs: Any) -> GitHub:
        """A client from GITHUB_TOKEN, GITHUB_REPOSITORY and (optionally) GITHUB_API_URL, as Actions sets them."""
        hints = {
            "GITHUB_TOKEN": "pass it to the step: `env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}`",
            "GITHUB_REPOSITORY": "GitHub Actions sets it; elsewhere set it to 'owner/name'",
        }
        env = {name: os.environ.get(name, "") for name in hints}
        for name, value in env.items():
            if not value:
                raise GitHubError(Problem("environment", f"{name} is not set", hint=hints[name]))
        return cls(env["GITHUB_TOKEN"], env["GITHUB_REPOSITORY"], os.environ.get("GITHUB_API_URL") or None, **kwargs)

    def __repr__(self) -> str:
        return f"GitHub(repository={self.repository!r}, api_url={self.api_url!r})"

    # -- pull request comments -------------------------------------------------------------------

    def find_comments(self, number: int, marker: str, author: str | None = None) -> list[dict[str, Any]]:
        """Our marked comments on PR/issue ``number``, newest first.

        Only a bot's comments count (or ``author``'s, for a personal token): anyone can paste the
        marker into a comment, and the gate must not edit or delete theirs.
        """
        comments = self._paginate(f"{self._repo_path}/issues/{int(number)}/comments", {"per_page": "100"})
        # The marker is the body's last line (the publisher puts it there): a marker quoted inside another
        # comment's text (a prompt, model output) must not make that comment ours.
        ours = [c for c in comments if (c.get("body") or "").rstrip().endswith(marker) and _by(c, author)]
        ours.sort(key=lambda c: (c.get("created_at") or "", int(c["id"])), reverse=True)
        return ours

    def upsert_comment(self, number: int, body: str, marker: str, author: str | None = None) -> CommentResult:
        """Make ``body`` the one comment on PR/issue ``number`` that carries ``marker``.

        The newest marked comment is edited (or one is created when there is none); any older marked
        comments, left by concurrent runs, are deleted. The posted body always contains the marker and
        is at most 65,536 characters.
        """
        if not marker:
            raise ValueError("marker must not be empty")
        text = prepare_body(body, marker)
        ours = self.find_comments(number, marker, author)
        if not ours:
            created = self._json("POST", f"{self._repo_path}/issues/{int(number)}/comments", body={"body": text})
            return CommentResult(int(created["id"]), created.get("html_url", ""), "created", [])
        newest, older = ours[0], ours[1:]
        try:
            kept = self._json("PATCH", f"{self._repo_path}/issues/comments/{int(newest['id'])}", body={"body": text})
            action: Literal["created", "updated"] = "updated"
        except NotFound:
            # A concurrent run deleted it between our listing and our edit.
            kept = self._json("POST", f"{self._repo_path}/issues/{int(number)}/comments", body={"body": text})
            action = "created"
        deleted = []
        for comment in older:
            # NotFound: already removed by a concurrent run, so the goal is met.
            with contextlib.suppress(NotFound):
                self._request("DELETE", f"{self._repo_path}/issues/comments/{int(comment['id'])}")
            deleted.append(int(comment["id"]))
        return CommentResult(int(kept["id"]), kept.get("html_url", ""), action, deleted)

    # -- baseline refresh through the REST API ------------------------------------------------------

    def get_branch_sha(self, branch: str) -> str:
        """The commit sha at the tip of ``branch``; NotFound if there is no such branch."""
        ref = self._json("GET", f"{self._repo_path}/git/ref/heads/{_quote(branch)}")
        return str(ref["object"]["sha"])

    def create_branch(self, branch: str, sha: str) -> Literal["created", "updated"]:
        """Point ``branch`` at ``sha``: create it, or force-move it if it already exists."""
        try:
            self._json("POST", f"{self._repo_path}/git/refs", body={"ref": f"refs/heads/{branch}", "sha": sha})
            return "created"
        except GitHubError as exc:
            if exc.status != 422 or "already exists" not in (exc.github_message or "").lower():
                raise
        self._json("PATCH", f"{self._repo_path}/git/refs/heads/{_quote(branch)}", body={"sha": sha, "force": True})
        return "updated"

    def put_file(self, path: str, content: bytes, message: str, branch: str) -> str:
        """Commit ``content`` as ``path`` on ``branch`` (creating or replacing the file); the new commit's sha."""
        url = f"{self._repo_path}/contents/{_quote(path.lstrip('/'))}"
        try:
            existing = self._json("GET", url, params={"ref": branch})
        except NotFound:
            existing = None
        if isinstance(existing, list):
            raise GitHubError(Problem("github", f"{path} on branch {branch} is a directory, not a file",
                                      hint="choose a file path for the baseline"))
        body = {"message": message, "content": base64.b64encode(content).decode("ascii"), "branch": branch}
        if existing is not None:
            body["sha"] = existing["sha"]
        return str(self._json("PUT", url, body=body)["commit"]["sha"])

    def commit_files(self, branch: str, files: dict[str, bytes], deletions: list[str], message: str, *,
                     start_from: str | None = None, attempts: int = 4) -> str:
        """One commit on ``branch`` that writes ``files`` and deletes ``deletions`` (Git Data API); its sha.

        The branch moves by fast-forward only: when another run moved it between our read and our update
        (a concurrent refresh of another hardware key), the commit is rebuilt on the new tip, so neither
        refresh is lost.  A branch that does not exist is created at ``start_from``'s tip (a branch name).
        Paths to delete that the tree no longer has are skipped, not an error.
        """
        for attempt in range(attempts):
            try:
                parent, created = self.get_branch_sha(branch), False
            except NotFound:
                if start_from is None:
                    raise
                parent, created = self.get_branch_sha(start_from), True
            base_tree = str(self._json("GET", f"{self._repo_path}/git/commits/{_quote(parent)}")["tree"]["sha"])
            present = self._tree_paths(base_tree) if deletions else set()
            entries: list[dict[str, Any]] = [
                {"path": path, "mode": "100644", "type": "blob",
                 "sha": self._json("POST", f"{self._repo_path}/git/blobs",
                                   body={"content": base64.b64encode(data).decode("ascii"),
                                         "encoding": "base64"})["sha"]}
                for path, data in sorted(files.items())]
            entries += [{"path": path, "mode": "100644", "type": "blob", "sha": None}
                        for path in sorted(deletions) if path in present]
            tree = self._json("POST", f"{self._repo_path}/git/trees", body={"base_tree": base_tree, "tree": entries})
            commit = str(self._json("POST", f"{self._repo_path}/git/commits",
                                    body={"message": message, "tree": tree["sha"], "parents": [parent]})["sha"])
            try:
                if created:
                    self._json("POST", f"{self._repo_path}/git/refs",
                               body={"ref": f"refs/heads/{branch}", "sha": commit})
                else:
                    self._json("PATCH", f"{self._repo_path}/git/refs/heads/{_quote(branch)}",
                               body={"sha": commit, "force": False})
                return commit
            except GitHubError as exc:
                # 422: the branch moved (not a fast-forward any more) or was created meanwhile: rebuild on it.
                if exc.status != 422 or attempt == attempts - 1:
                    raise
                log.warning("branch %s moved while committing; rebuilding the commit on its new tip", branch)
        raise AssertionError("unreachable")

    def _tree_paths(self, tree_sha: str) -> set[str]:
        tree = self._json("GET", f"{self._repo_path}/git/trees/{_quote(tree_sha)}", params={"recursive": "1"})
        return {str(e["path"]) for e in tree.get("tree", []) if e.get("type") == "blob"}

    def open_pull_request(self, head: str, base: str, title: str, body: str) -> str:
        """The html_url of the open PR from ``head`` (in this repository) into ``base``, with this title and body.

        An open PR from ``head`` is edited rather than duplicated.
        """
        existing = self._open_pull_for(head)
        if existing is None:
            try:
                created = self._json("POST", f"{self._repo_path}/pulls",
                                     body={"title": title, "head": head, "base": base, "body": body})
                return str(created["html_url"])
            except GitHubError as exc:
                # A retried POST, or a concurrent run, may have created it after all.
                if exc.status != 422 or "already exists" not in (exc.github_message or "").lower():
                    raise
                existing = self._open_pull_for(head)
                if existing is None:
                    raise
        updated = self._json("PATCH", f"{self._repo_path}/pulls/{int(existing['number'])}",
                             body={"title": title, "body": body})
        return str(updated.get("html_url") or existing["html_url"])

    def _open_pull_for(self, head: str) -> dict[str, Any] | None:
        pulls = self._json("GET", f"{self._repo_path}/pulls", params={"state": "open", "head": f"{self.owner}:{head}"})
        return pulls[0] if pulls else None

    # -- transport -------------------------------------------------------------------------------

    @property
    def _repo_path(self) -> str:
        return f"/repos/{_quote(self.owner)}/{_quote(self.name)}"

    def _json(self, method: str, path: str, *, params: dict[str, str] | None = None, body: Any = None) -> Any:
        return self._decode(method, self._request(method, path, params=params, body=body))

    def _decode(self, method: str, response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise self._error(GitHubError, method, response.url, f"HTTP {response.status_code}: answer is not JSON",
                              "check GITHUB_API_URL points at the REST API (GHES: https://HOST/api/v3)",
                              status=response.status_code) from None

    def _paginate(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        """Every item of a list endpoint, following the Link header's rel="next" until there is none."""
        items: list[dict[str, Any]] = []
        url: str | None = path
        seen: set[str] = set()
        while url is not None:
            response = self._request("GET", url, params=params if url == path else None)
            page = self._decode("GET", response)
            if not isinstance(page, list):
                raise self._error(GitHubError, "GET", response.url, "expected a JSON list", None,
                                  status=response.status_code)
            items.extend(page)
            seen.add(response.url)
            url = response.links.get("next", {}).get("url")
            if url is not None:
                # The token goes with every request: never follow a link off the API host.
                if not _same_origin(url, self.api_url):
                    raise self._error(GitHubError, "GET", response.url, f"next page is on another host ({url})",
                                      "check GITHUB_API_URL")
                if url in seen:
                    url = None  # a server that links a page to itself must not loop us forever
        return items

    def _request(self, method: str, path_or_url: str, *, params: dict[str, str] | None = None,
                 body: Any = None) -> requests.Response:
        """A 2xx response, after retrying 5xx, connection errors and rate limits within the wait budget."""
        url = path_or_url if "://" in path_or_url else f"{self.api_url}{path_or_url}"
        start = self._clock()
        slept = 0.0
        attempts = 0
        transient_failures = 0  # 5xx and connection errors: backoff 1, 2, 4 ... s
        secondary_waits = 0  # secondary rate limits without Retry-After: 60, 120, 240 ... s
        while True:
            attempts += 1
            response = None
            try:
                response = self._session.request(method, url, params=params, json=body, headers=self._headers,
                                                 timeout=self.timeout_s)
            except _TRANSIENT as exc:
                reason = f"connection failed ({type(exc).__name__}: {exc})"
                wait, kind = 2.0**transient_failures, GitHubError
                transient_failures += 1
            else:
                status = response.status_code
                if status < 400:
                    return response
                message = _github_message(response)
                rate_wait = self._rate_limit_wait(response, message, secondary_waits)
                if rate_wait is not None:
                    reason = f"rate limited (HTTP {status}{': ' + message if message else ''})"
                    wait, kind = rate_wait, RateLimited
                    if not _has_retry_after(response) and response.headers.get("x-ratelimit-remaining") != "0":
                        secondary_waits += 1
                elif status >= 500:
                    reason = f"HTTP {status}{': ' + message if message else ''}"
                    wait, kind = 2.0**transient_failures, GitHubError
                    transient_failures += 1
                else:
                    raise self._client_error(method, url, response, message)
            # Spent time counts both the clock and our own sleeps, so the bound holds even if only one is faked.
            spent = max(self._clock() - start, slept)
            remaining = self.max_total_wait_s - spent
            if wait > remaining:
                status_code = response.status_code if response is not None else None
                raise self._error(
                    kind, method, url,
                    f"{reason}; gave up after {attempts} attempt{'s' if attempts != 1 else ''} and "
                    f"{slept:.0f} s of waiting (the next wait, {wait:.0f} s, would pass the "
                    f"{self.max_total_wait_s:.0f} s budget)",
                    "wait for GitHub's limit to reset and re-run the job, or raise max_total_wait_s"
                    if kind is RateLimited else "GitHub or the network is failing; re-run the job later",
                    status=status_code, github_message=_github_message(response) if response is not None else None)
            log.warning("%s", self._scrub(f"GitHub {method} {_path_of(url)}: {reason}; retrying in {wait:.0f} s"))
            self._sleep(wait)
            slept += wait

    def _rate_limit_wait(self, response: requests.Response, message: str | None, secondary_waits: int) -> float | None:
        """How long GitHub asks us to wait, or None if this answer is not a rate limit."""
        status = response.status_code
        remaining = response.headers.get("x-ratelimit-remaining")
        is_limit = status == 429 or (status == 403 and ("rate limit" in (message or "").lower() or remaining == "0"))
        if not is_limit:
            return None
        # At least a second, so "Retry-After: 0" or a reset in the past (clock skew) cannot spin.
        retry_after = _retry_after_s(response.headers.get("retry-after"), self._wall)
        if retry_after is not None:
            return max(retry_after, 1.0)
        if remaining == "0":
            try:
                reset = float(response.headers["x-ratelimit-reset"])
            except (KeyError, ValueError):
                pass
            else:
                return max(reset - self._wall(), 1.0)
        return SECONDARY_RATE_LIMIT_WAIT_S * 2.0**secondary_waits

    def _client_error(self, method: str, url: str, response: requests.Response, message: str | None) -> GitHubError:
        status = response.status_code
        detail = f"HTTP {status}{': ' + message if message else ''}"
        if status == 403 and READ_ONLY_MESSAGE.lower() in (message or "").lower():
            return self._error(
                ReadOnlyToken, method, url, detail,
                "the token may not write here: a pull request from a fork gets a read-only GITHUB_TOKEN; give the job "
                "`permissions: pull-requests: write` (comments) or `contents: write` (refresh), or post from a "
                "`workflow_run` job", status=status, github_message=message)
        if status == 404:
            return self._error(
                NotFound, method, url, detail,
                f"check the repository {self.repository!r}, the PR number, branch or path, and that the token can see "
                "it (GitHub answers 404 when the token lacks access)", status=status, github_message=message)
        hints = {
            401: "the token is invalid or expired; check GITHUB_TOKEN",
            403: "the token lacks a permission this call needs; check the job's `permissions:`",
            422: "GitHub rejected the request's content; see its message",
        }
        return self._error(GitHubError, method, url, detail, hints.get(status), status=status, github_message=message)

    def _error(self, kind: type[GitHubError], method: str, url: str, message: str, hint: str | None, *,
               status: int | None = None, github_message: str | None = None) -> GitHubError:
        text = self._scrub(f"{method} {_path_of(url)}: {message}")
        return kind(Problem(f"GitHub API ({self.repository})", text, hint=self._scrub(hint) if hint else None),
                    status=status, github_message=self._scrub(github_message) if github_message else None)

    def _scrub(self, text: str) -> str:
        # Defensive: no text we build should contain the token, but library messages are not ours to trust.
        return text.replace(self._token, "***")


def _by(comment: dict[str, Any], author: str | None) -> bool:
    user = comment.get("user") or {}
    if author:
        return user.get("login") == author
    return user.get("type") == "Bot"


def prepare_body(body: str, marker: str) -> str:
    """``body`` with ``marker`` at its end, bounded to GitHub's comment limit by the report's one routine
    (:func:`gate.report.page.fit`): cut with a note, the marker kept."""
    from gate.report.page import COMMENT_LIMIT, KEEP, Section, fit

    if not body.rstrip().endswith(marker):
        body = f"{body.rstrip()}\n\n{marker}\n"
    text, _, trailing = body.rpartition(marker)
    return fit([Section("comment", text, KEEP), Section("footer", marker + trailing, KEEP)], COMMENT_LIMIT)


def _github_message(response: requests.Response) -> str | None:
    """GitHub's ``message`` (and any ``errors[].message``) from a JSON error body, kept short."""
    try:
        data = response.json()
    except ValueError:
        return None
    if not isinstance(data, dict) or not data.get("message"):
        return None
    text = str(data["message"])
    errors = data.get("errors")
    if isinstance(errors, list):
        details = [str(e.get("message") or e.get("code")) for e in errors if isinstance(e, dict)]
        details = [d for d in details if d and d != "None"]
        if details:
            text += f" ({'; '.join(details)})"
    return text[:500]


def _retry_after_s(value: str | None, wall: Callable[[], float]) -> float | None:
    """Retry-After as seconds from now: GitHub sends seconds, HTTP also allows a date."""
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - wall(), 0.0)


def _has_retry_after(response: requests.Response) -> bool:
    return bool(response.headers.get("retry-after"))


def _quote(part: str) -> str:
    # Branch names and file paths keep their slashes: GitHub's ref and contents endpoints expect them raw.
    return urllib.parse.quote(part, safe="/")


def _path_of(url: str) -> str:
    return urllib.parse.urlsplit(url).path or "/"


def _same_origin(url: str, base: str) -> bool:
    a, b = urllib.parse.urlsplit(url), urllib.parse.urlsplit(base)
    return (a.scheme, a.netloc.lower()) == (b.scheme, b.netloc.lower())


def step_outputs(**values: str) -> None:
    """Step outputs for GitHub Actions ($GITHUB_OUTPUT), when running there: one line each, never two."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        for k, v in values.items():
            fh.write(f"{k}={' '.join(str(v).split())}\n")


_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_SHA = re.compile(r"[0-9a-f]{7,40}")
_PATH = re.compile(r"[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]+)*")


def run_links(baseline_path: str | None = None, baseline_commit: str | None = None,
              env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Links a reviewer follows from the comment: the workflow run, its artifact, the baseline file (at this
    commit) and the commit the baseline was measured at.  Read off the job's ``GITHUB_*`` environment; every
    part is checked against what GitHub itself produces, and a part that is not is left out (none outside CI)."""
    env = os.environ if env is None else env
    server = (env.get("GITHUB_SERVER_URL") or "").rstrip("/")
    repo, run, sha = env.get("GITHUB_REPOSITORY", ""), env.get("GITHUB_RUN_ID", ""), env.get("GITHUB_SHA", "")
    if not re.fullmatch(r"https://[A-Za-z0-9.-]+(:\d+)?", server) or not _REPO.fullmatch(repo):
        return {}
    links = {}
    if run.isdigit():
        links["run"] = f"{server}/{repo}/actions/runs/{run}"
        links["artifact"] = f"{server}/{repo}/actions/runs/{run}#artifacts"
    if baseline_path and _PATH.fullmatch(baseline_path) and ".." not in baseline_path and _SHA.fullmatch(sha):
        links["baseline"] = f"{server}/{repo}/blob/{sha}/{baseline_path}"
    if baseline_commit and _SHA.fullmatch(baseline_commit):
        links["baseline_commit"] = f"{server}/{repo}/commit/{baseline_commit}"
    return links
