"""A small stateful stand-in for the GitHub REST API, served by pytest-httpserver (a real HTTP server).

It implements just what the Action uses, with GitHub's paths, status codes and pagination: issue comments
(list with Link pagination, create, edit, delete), git refs, repository contents and pull requests.  Every
request is recorded, so tests can assert on exactly what was sent.
"""

from __future__ import annotations

import base64
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
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (branch, path) -> content
    pulls: list[dict] = field(default_factory=list)
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
            self.refs[m.group(1)] = body["sha"]
            return self._json({"object": {"sha": body["sha"]}})
        m = re.fullmatch(r"/contents/(.+)", path)
        if m:
            file_path = m.group(1)
            branch = request.args.get("ref") or (body or {}).get("branch") or "main"
            if request.method == "GET":
                if (branch, file_path) not in self.files:
                    return self._json({"message": "Not Found"}, 404)
                return self._json({"sha": f"blob-{abs(hash(self.files[(branch, file_path)])) % 10**8}",
                                   "path": file_path})
            self.files[(branch, file_path)] = base64.b64decode(body["content"])
            return self._json({"commit": {"sha": f"commit-{len(self.files)}"}}, 201)
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

    def calls(self, method: str | None = None) -> list[tuple[str, str, object]]:
        return [c for c in self.log if method is None or c[0] == method]
