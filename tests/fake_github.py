"""A small stateful stand-in for the GitHub REST API, served by pytest-httpserver (a real HTTP server).

It implements just what the Action uses, with GitHub's paths, status codes and pagination: issue comments
(list with Link pagination, create, edit, delete), git refs, repository contents and pull requests.  Every
request is recorded, so tests can assert on exactly what was sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field

from werkzeug import Request, Response

BOT = {"login": "github-actions[bot]", "type": "Bot"}


@dataclass
class FakeGitHub:
    base_url: str
    repo: str = "acme/models"
    token: str = "ghs_TESTTOKEN"
    page_size: int = 2
    comments: dict[int, list[dict]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=lambda: {"main": "a" * 40})
    # Git objects: commit sha -> {"tree": tree sha, "parents": [...], "message": ...}; tree sha -> {path: blob sha}
    commits: dict[str, dict] = field(default_factory=lambda: {"a" * 40: {"tree": "t0", "parents": [],
                                                                          "message": "initial"}})
    trees: dict[str, dict[str, str]] = field(default_factory=lambda: {"t0": {}})
    blobs: dict[str, bytes] = field(default_factory=dict)
    pulls: list[dict] = field(default_factory=list)
    race: list[str] = field(default_factory=list)  # branches another writer moves just before our next ref update
    log: list[tuple[str, str, object]] = field(default_factory=list)
    next_id: int = 100
    read_only: bool = False

    def install(self, httpserver) -> None:
        httpserver.expect_request(re.compile(r"/repos/.*")).respond_with_handler(self.handle)

    def _json(self, obj, status: int = 200, headers: dict | None = None) -> Response:
        return Response(json.dumps(obj), status=status, headers=headers or {}, content_type="application/json")

    def handle(self, request: Request) -> Response:
        body = request.get_json(silent=True)
        self.log.append((request.method, request.path, body))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self._json({"message": "Bad credentials"}, 401)
        prefix = f"/repos/{self.repo}"
        path = request.path
        if not path.startswith(prefix):
            return self._json({"message": "Not Found"}, 404)
        path = path[len(prefix):]
        if self.read_only and request.method != "GET":
            return self._json({"message": "Resource not accessible by integration"}, 403)
        m = re.fullmatch(r"/issues/(\d+)/comments", path)
        if m:
            number = int(m.group(1))
            items = self.comments.setdefault(number, [])
            if request.method == "GET":
                page = int(request.args.get("page", "1"))
                chunk = items[(page - 1) * self.page_size: page * self.page_size]
                headers = {}
                if page * self.page_size < len(items):
                    headers["Link"] = f'<{self.base_url}{request.path}?per_page=100&page={page + 1}>; rel="next"'
                return self._json(chunk, headers=headers)
            c = {"id": self.next_id, "body": body["body"], "user": BOT,
                 "created_at": f"2026-11-30T00:00:{self.next_id % 60:02d}Z",
                 "html_url": f"https://github.test/{self.repo}/pull/{number}#issuecomment-{self.next_id}"}
            self.next_id += 1
            items.append(c)
            return self._json(c, 201)
        m = re.fullmatch(r"/issues/comments/(\d+)", path)
        if m:
            cid = int(m.group(1))
            for items in self.comments.values():
                for c in items:
                    if c["id"] == cid:
                        if request.method == "DELETE":
                            items.remove(c)
                            return Response(status=204)
                        c["body"] = body["body"]
                        return self._json(c)
            return self._json({"message": "Not Found"}, 404)
        m = re.fullmatch(r"/git/ref/heads/(.+)", path)
        if m and request.method == "GET":
            sha = self.refs.get(m.group(1))
            return self._json({"object": {"sha": sha}}) if sha else self._json({"message": "Not Found"}, 404)
        if path == "/git/refs" and request.method == "POST":
            branch = body["ref"].removeprefix("refs/heads/")
            if branch in self.refs:
                return self._json({"message": "Reference already exists"}, 422)
            self.refs[branch] = body["sha"]
            return self._json({"ref": body["ref"], "object": {"sha": body["sha"]}}, 201)
        m = re.fullmatch(r"/git/refs/heads/(.+)", path)
        if m and request.method == "PATCH":
            branch = m.group(1)
            if branch in self.race:  # another refresh lands first
                self.race.remove(branch)
                self.commit_on(branch, {f"other/{len(self.commits)}.json": b"{}"}, "a concurrent refresh")
            if not body.get("force") and not self._descends(body["sha"], self.refs.get(branch, "")):
                return self._json({"message": "Update is not a fast forward"}, 422)
            self.refs[branch] = body["sha"]
            return self._json({"object": {"sha": body["sha"]}})
        m = re.fullmatch(r"/git/commits/([0-9a-z]+)", path)
        if m and request.method == "GET":
            c = self.commits.get(m.group(1))
            if c is None:
                return self._json({"message": "Not Found"}, 404)
            return self._json({"sha": m.group(1), "tree": {"sha": c["tree"]}, "message": c["message"],
                               "parents": [{"sha": p} for p in c["parents"]]})
        m = re.fullmatch(r"/git/trees/([0-9a-z]+)", path)
        if m and request.method == "GET":
            tree = self.trees.get(m.group(1))
            if tree is None:
                return self._json({"message": "Not Found"}, 404)
            return self._json({"sha": m.group(1), "tree": [{"path": p, "type": "blob", "sha": b}
                                                           for p, b in sorted(tree.items())], "truncated": False})
        if path == "/git/blobs" and request.method == "POST":
            data = base64.b64decode(body["content"]) if body.get("encoding") == "base64" else body["content"].encode()
            sha = hashlib.sha1(data).hexdigest()
            self.blobs[sha] = data
            return self._json({"sha": sha}, 201)
        if path == "/git/trees" and request.method == "POST":
            tree = dict(self.trees[body["base_tree"]]) if body.get("base_tree") else {}
            for e in body["tree"]:
                if e.get("sha") is None and "content" not in e:
                    if e["path"] not in tree:  # GitHub refuses to delete what is not there
                        return self._json({"message": "GitRPC::BadObjectState"}, 422)
                    del tree[e["path"]]
                else:
                    if "content" in e:
                        data = e["content"].encode()
                        e = {**e, "sha": hashlib.sha1(data).hexdigest()}
                        self.blobs[e["sha"]] = data
                    tree[e["path"]] = e["sha"]
            return self._json({"sha": self._store_tree(tree)}, 201)
        if path == "/git/commits" and request.method == "POST":
            sha = hashlib.sha1(json.dumps([body, len(self.commits)]).encode()).hexdigest()
            self.commits[sha] = {"tree": body["tree"], "parents": body["parents"], "message": body["message"]}
            return self._json({"sha": sha}, 201)
        if path == "/pulls":
            if request.method == "GET":
                head = request.args.get("head", "").split(":", 1)[-1]
                return self._json([p for p in self.pulls if p["head"] == head and p["state"] == "open"])
            pr = {"number": 1000 + len(self.pulls), "head": body["head"], "base": body["base"], "state": "open",
                  "title": body["title"], "body": body["body"],
                  "html_url": f"https://github.test/{self.repo}/pull/{1000 + len(self.pulls)}"}
            self.pulls.append(pr)
            return self._json(pr, 201)
        m = re.fullmatch(r"/pulls/(\d+)", path)
        if m and request.method == "PATCH":
            for p in self.pulls:
                if p["number"] == int(m.group(1)):
                    p.update({k: v for k, v in body.items() if k in ("title", "body")})
                    return self._json(p)
        return self._json({"message": f"Not Found ({request.method} {path})"}, 404)

    def _store_tree(self, tree: dict[str, str]) -> str:
        sha = hashlib.sha1(json.dumps(sorted(tree.items())).encode()).hexdigest()
        self.trees[sha] = tree
        return sha

    def _descends(self, sha: str, ancestor: str) -> bool:
        todo = [sha]
        while todo:
            s = todo.pop()
            if s == ancestor:
                return True
            todo += self.commits.get(s, {}).get("parents", [])
        return False

    def tree_of(self, branch: str) -> dict[str, bytes]:
        """The files at a branch's tip."""
        tree = self.trees[self.commits[self.refs[branch]]["tree"]]
        return {p: self.blobs[b] for p, b in tree.items()}

    def commit_on(self, branch: str, files: dict[str, bytes], message: str = "seed",
                  deleted: tuple[str, ...] = ()) -> str:
        """A commit made outside the gate (a merge on main, another refresh): the test's own write."""
        parent = self.refs[branch]
        tree = {**self.trees[self.commits[parent]["tree"]]}
        for p in deleted:
            tree.pop(p, None)
        for p, data in files.items():
            sha = hashlib.sha1(data).hexdigest()
            self.blobs[sha] = data
            tree[p] = sha
        sha = hashlib.sha1(f"{parent}{message}{len(self.commits)}".encode()).hexdigest()
        self.commits[sha] = {"tree": self._store_tree(tree), "parents": [parent], "message": message}
        self.refs[branch] = sha
        return sha

    def history_of(self, branch: str) -> list[str]:
        """Commit messages from the tip back (first parents)."""
        out, sha = [], self.refs.get(branch)
        while sha in self.commits:
            out.append(self.commits[sha]["message"])
            sha = (self.commits[sha]["parents"] or [None])[0]
        return out

    @property
    def files(self) -> dict[tuple[str, str], bytes]:
        """(branch, path) -> content, over every branch."""
        return {(b, p): data for b in self.refs for p, data in self.tree_of(b).items()}

    def calls(self, method: str | None = None) -> list[tuple[str, str, object]]:
        return [c for c in self.log if method is None or c[0] == method]
