"""gate.ci.github against a real HTTP server on localhost: exact requests, retries, errors, token hygiene."""

from __future__ import annotations

import base64
import logging
import socket

import pytest

from gate.ci.github import GitHub, prepare_body
from gate.errors import GitHubError, NotFound, RateLimited, ReadOnlyToken
from gate.report.page import COMMENT_LIMIT as MAX_COMMENT_CHARS

TOKEN = "ghs_SECRET123"
MARKER = "<!-- specguard:demo -->"
COMMENTS = "/repos/o/r/issues/7/comments"
EPOCH = 1_700_000_000.0


class FakeTime:
    """A clock that only moves when the client sleeps, so tests never wait."""

    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now

    def wall(self) -> float:
        return EPOCH + self.now


@pytest.fixture
def fake_time():
    return FakeTime()


@pytest.fixture
def gh(httpserver, fake_time):
    return GitHub(TOKEN, "o/r", httpserver.url_for("/"), sleep=fake_time.sleep, clock=fake_time.clock,
                  wall=fake_time.wall, timeout_s=5)


def sent(httpserver) -> list[tuple[str, str, dict[str, str], object]]:
    """(method, path, query, JSON body) of every request the server saw, in order."""
    out = []
    for request, _ in httpserver.log:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        assert request.headers["Accept"] == "application/vnd.github+json"
        assert request.headers["X-GitHub-Api-Version"] == "2022-11-28"
        body = request.get_json() if request.data else None
        out.append((request.method, request.path, dict(request.args), body))
    return out


BOT = {"login": "github-actions[bot]", "type": "Bot"}


def comment(id_: int, body: str, created_at: str = "2024-01-01T00:00:00Z", user: dict | None = None) -> dict:
    return {"id": id_, "body": body, "created_at": created_at, "html_url": f"https://github.test/c/{id_}",
            "user": user or BOT}


def test_pagination_follows_link_and_patches_marker_on_last_page(httpserver, gh):
    base = httpserver.url_for(COMMENTS)
    link = '<{base}?per_page=100&page={n}>; rel="next", <{base}?per_page=100&page=3>; rel="last"'
    httpserver.expect_request(COMMENTS, "GET", query_string={"per_page": "100"}).respond_with_json(
        [comment(1, "hello")], headers={"Link": link.format(base=base, n=2)})
    httpserver.expect_request(COMMENTS, "GET", query_string={"per_page": "100", "page": "2"}).respond_with_json(
        [comment(2, "lgtm")], headers={"Link": link.format(base=base, n=3)})
    httpserver.expect_request(COMMENTS, "GET", query_string={"per_page": "100", "page": "3"}).respond_with_json(
        [comment(303, f"old report\n{MARKER}")])
    httpserver.expect_request("/repos/o/r/issues/comments/303", "PATCH").respond_with_json(
        comment(303, "new"))

    result = gh.upsert_comment(7, f"new report\n{MARKER}", MARKER)

    assert (result.id, result.action, result.deleted) == (303, "updated", [])
    assert result.url == "https://github.test/c/303"
    assert sent(httpserver) == [
        ("GET", COMMENTS, {"per_page": "100"}, None),
        ("GET", COMMENTS, {"per_page": "100", "page": "2"}, None),
        ("GET", COMMENTS, {"per_page": "100", "page": "3"}, None),
        ("PATCH", "/repos/o/r/issues/comments/303", {}, {"body": f"new report\n{MARKER}"}),
    ]


def test_no_marker_creates_one_comment_with_marker_appended(httpserver, gh):
    httpserver.expect_request(COMMENTS, "GET").respond_with_json([comment(1, "someone else")])
    httpserver.expect_request(COMMENTS, "POST").respond_with_json(comment(99, "x"), status=201)

    result = gh.upsert_comment(7, "report", MARKER)

    assert (result.id, result.action, result.url) == (99, "created", "https://github.test/c/99")
    calls = sent(httpserver)
    assert [(m, p) for m, p, _, _ in calls] == [("GET", COMMENTS), ("POST", COMMENTS)]
    assert calls[1][3] == {"body": f"report\n\n{MARKER}\n"}


def test_two_markers_newest_patched_others_deleted(httpserver, gh):
    httpserver.expect_request(COMMENTS, "GET").respond_with_json([
        comment(20, MARKER, "2024-01-01T00:00:00Z"),
        comment(10, MARKER, "2024-01-02T00:00:00Z"),  # newest by created_at, despite the lower id
        comment(5, MARKER, "2024-01-02T00:00:00Z"),  # same time as 10: the higher id wins
    ])
    httpserver.expect_request("/repos/o/r/issues/comments/10", "PATCH").respond_with_json(comment(10, MARKER))
    httpserver.expect_request("/repos/o/r/issues/comments/20", "DELETE").respond_with_data("", status=204)
    # Already deleted by a concurrent run: not an error.
    httpserver.expect_request("/repos/o/r/issues/comments/5", "DELETE").respond_with_json(
        {"message": "Not Found"}, status=404)

    result = gh.upsert_comment(7, f"report {MARKER}", MARKER)

    assert (result.id, result.action, sorted(result.deleted)) == (10, "updated", [5, 20])
    assert [(m, p) for m, p, _, _ in sent(httpserver)] == [
        ("GET", COMMENTS),
        ("PATCH", "/repos/o/r/issues/comments/10"),
        ("DELETE", "/repos/o/r/issues/comments/5"),
        ("DELETE", "/repos/o/r/issues/comments/20"),
    ]


def test_long_body_is_cut_with_note_and_keeps_marker(httpserver, gh):
    httpserver.expect_request(COMMENTS, "GET").respond_with_json([])
    httpserver.expect_request(COMMENTS, "POST").respond_with_json(comment(1, "x"), status=201)

    gh.upsert_comment(7, f"{MARKER}\n" + "x" * 100_000, MARKER)

    posted = sent(httpserver)[1][3]["body"]
    assert len(posted) <= MAX_COMMENT_CHARS
    assert posted.startswith(f"{MARKER}\nxxx")
    assert "Cut to fit 65,536 characters: the rest of the page left out" in posted
    assert posted.rstrip().endswith(MARKER)


def test_prepare_body_closes_cut_code_fence_and_open_html_comment():
    fenced = prepare_body("```\n" + "line\n" * 20_000, MARKER)
    assert len(fenced) <= MAX_COMMENT_CHARS
    assert fenced.count("```") % 2 == 0
    assert fenced.rstrip().endswith(MARKER)

    # The cut lands inside an HTML comment: it is dropped rather than left open to hide the note.
    body = "a" * (MAX_COMMENT_CHARS - 300) + "<!-- " + "b" * 1000 + " -->"
    cut = prepare_body(body, MARKER)
    assert len(cut) <= MAX_COMMENT_CHARS
    assert cut.count("<!--") == cut.count("-->") == 1

    short = prepare_body("ok", MARKER)
    assert short == f"ok\n\n{MARKER}\n"


def test_server_error_is_retried_with_backoff(httpserver, gh, fake_time):
    httpserver.expect_ordered_request(COMMENTS, "GET").respond_with_json({"message": "boom"}, status=500)
    httpserver.expect_ordered_request(COMMENTS, "GET").respond_with_data("bad gateway", status=502)
    httpserver.expect_ordered_request(COMMENTS, "GET").respond_with_json([])
    httpserver.expect_ordered_request(COMMENTS, "POST").respond_with_json(comment(1, "x"), status=201)

    gh.upsert_comment(7, "r", MARKER)

    assert fake_time.sleeps == [1.0, 2.0]
    assert [m for m, *_ in sent(httpserver)] == ["GET", "GET", "GET", "POST"]


def test_one_server_error_then_success_sleeps_one_second(httpserver, gh, fake_time):
    httpserver.expect_oneshot_request(COMMENTS, "GET").respond_with_json({"message": "boom"}, status=500)
    httpserver.expect_request(COMMENTS, "GET").respond_with_json([])
    httpserver.expect_request(COMMENTS, "POST").respond_with_json(comment(1, "x"), status=201)

    gh.upsert_comment(7, "r", MARKER)

    assert fake_time.sleeps == [1.0]
    assert [m for m, *_ in sent(httpserver)] == ["GET", "GET", "POST"]


def test_secondary_rate_limit_honours_retry_after(httpserver, gh, fake_time):
    httpserver.expect_oneshot_request(COMMENTS, "GET").respond_with_json(
        {"message": "You have exceeded a secondary rate limit."}, status=403, headers={"Retry-After": "7"})
    httpserver.expect_request(COMMENTS, "GET").respond_with_json([])
    httpserver.expect_request(COMMENTS, "POST").respond_with_json(comment(1, "x"), status=201)

    gh.upsert_comment(7, "r", MARKER)

    assert fake_time.sleeps == [7.0]


def test_primary_rate_limit_waits_until_reset(httpserver, gh, fake_time):
    httpserver.expect_oneshot_request(COMMENTS, "GET").respond_with_json(
        {"message": "API rate limit exceeded for installation."}, status=403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(EPOCH) + 42)})
    httpserver.expect_request(COMMENTS, "GET").respond_with_json([])
    httpserver.expect_request(COMMENTS, "POST").respond_with_json(comment(1, "x"), status=201)

    gh.upsert_comment(7, "r", MARKER)

    assert fake_time.sleeps == [42.0]


def test_rate_limit_that_never_clears_raises_within_budget(httpserver, gh, fake_time):
    # No Retry-After, no reset: GitHub's advice is at least 60 s, then exponential backoff.
    httpserver.expect_request(COMMENTS, "GET").respond_with_json(
        {"message": "You have exceeded a secondary rate limit."}, status=429)

    with pytest.raises(RateLimited) as info:
        gh.upsert_comment(7, "r", MARKER)

    assert fake_time.sleeps == [60.0, 120.0]
    assert sum(fake_time.sleeps) <= gh.max_total_wait_s
    text = str(info.value)
    assert "GET /repos/o/r/issues/7/comments" in text and "3 attempts" in text and "180 s" in text
    assert "secondary rate limit" in text
    assert info.value.status == 429
    assert len(httpserver.log) == 3


def test_server_errors_that_never_clear_raise_github_error(httpserver, gh, fake_time):
    httpserver.expect_request(COMMENTS, "GET").respond_with_json({"message": "unavailable"}, status=503)

    with pytest.raises(GitHubError) as info:
        gh.upsert_comment(7, "r", MARKER)

    assert not isinstance(info.value, RateLimited)
    assert fake_time.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]  # next, 256, would pass 300
    assert "HTTP 503: unavailable" in str(info.value)


def test_fork_read_only_token_is_not_retried(httpserver, gh, fake_time):
    httpserver.expect_request(COMMENTS, "GET").respond_with_json([])
    httpserver.expect_request(COMMENTS, "POST").respond_with_json(
        {"message": "Resource not accessible by integration"}, status=403)

    with pytest.raises(ReadOnlyToken) as info:
        gh.upsert_comment(7, "r", MARKER)

    assert fake_time.sleeps == []
    assert [m for m, *_ in sent(httpserver)] == ["GET", "POST"]
    assert "POST /repos/o/r/issues/7/comments: HTTP 403: Resource not accessible by integration" in str(info.value)
    assert "fork" in str(info.value)


def test_missing_pull_request_is_not_found_naming_the_path(httpserver, gh, fake_time):
    httpserver.expect_request(COMMENTS, "GET").respond_with_json({"message": "Not Found"}, status=404)

    with pytest.raises(NotFound) as info:
        gh.upsert_comment(7, "r", MARKER)

    assert "GET /repos/o/r/issues/7/comments: HTTP 404: Not Found" in str(info.value)
    assert info.value.status == 404 and fake_time.sleeps == []


def test_link_to_another_host_is_not_followed(httpserver, gh):
    httpserver.expect_request(COMMENTS, "GET").respond_with_json(
        [], headers={"Link": '<https://evil.example/steal?page=2>; rel="next"'})

    with pytest.raises(GitHubError, match="another host"):
        gh.upsert_comment(7, "r", MARKER)
    assert len(httpserver.log) == 1


def test_token_never_appears_in_errors_or_logs(httpserver, fake_time, caplog):
    caplog.set_level(logging.DEBUG)
    gh = GitHub(TOKEN, "o/r", httpserver.url_for("/"), sleep=fake_time.sleep, clock=fake_time.clock,
                wall=fake_time.wall, max_total_wait_s=3)
    # A server that echoes the token back must not get it into our messages either.
    httpserver.expect_request("/repos/o/r/git/ref/heads/echo").respond_with_json(
        {"message": f"Bad credentials: {TOKEN}"}, status=401)
    httpserver.expect_request("/repos/o/r/git/ref/heads/down").respond_with_json(
        {"message": f"down {TOKEN}"}, status=500)
    httpserver.expect_request("/repos/o/r/git/ref/heads/gone").respond_with_json({"message": "Not Found"}, status=404)

    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    offline = GitHub(TOKEN, "o/r", f"http://127.0.0.1:{port}", sleep=fake_time.sleep, clock=fake_time.clock,
                     max_total_wait_s=3)

    errors = []
    for client, branch in [(gh, "echo"), (gh, "down"), (gh, "gone"), (offline, "main")]:
        with pytest.raises(GitHubError) as info:
            client.get_branch_sha(branch)
        errors.append(info.value)

    assert "connection failed" in str(errors[-1]) and "3 attempts and 3 s of waiting" in str(errors[-1])
    assert "Bad credentials: ***" in str(errors[0])
    for exc in errors:
        for text in (str(exc), repr(exc), repr(exc.problems), str(exc.github_message)):
            assert TOKEN not in text
    assert TOKEN not in repr(gh)
    assert caplog.records and all(TOKEN not in r.getMessage() for r in caplog.records)


def test_from_env_honours_api_url(httpserver, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
    monkeypatch.setenv("GITHUB_API_URL", httpserver.url_for("/api/v3/"))
    httpserver.expect_request("/api/v3/repos/o/r/git/ref/heads/main").respond_with_json({"object": {"sha": "abc"}})

    gh = GitHub.from_env()

    assert gh.api_url == httpserver.url_for("/api/v3")
    assert gh.get_branch_sha("main") == "abc"
    assert httpserver.log[0][0].headers["Authorization"] == f"Bearer {TOKEN}"

    monkeypatch.delenv("GITHUB_API_URL")
    assert GitHub.from_env().api_url == "https://api.github.com"
    monkeypatch.delenv("GITHUB_REPOSITORY")
    with pytest.raises(GitHubError, match="GITHUB_REPOSITORY is not set"):
        GitHub.from_env()


def test_create_branch_creates_or_force_updates(httpserver, gh):
    httpserver.expect_oneshot_request("/repos/o/r/git/refs", "POST").respond_with_json({"ref": "x"}, status=201)
    httpserver.expect_oneshot_request("/repos/o/r/git/refs", "POST").respond_with_json(
        {"message": "Reference already exists"}, status=422)
    httpserver.expect_request("/repos/o/r/git/refs/heads/specguard/refresh", "PATCH").respond_with_json({"ref": "x"})

    assert gh.create_branch("specguard/refresh", "a1") == "created"
    assert gh.create_branch("specguard/refresh", "b2") == "updated"

    assert sent(httpserver) == [
        ("POST", "/repos/o/r/git/refs", {}, {"ref": "refs/heads/specguard/refresh", "sha": "a1"}),
        ("POST", "/repos/o/r/git/refs", {}, {"ref": "refs/heads/specguard/refresh", "sha": "b2"}),
        ("PATCH", "/repos/o/r/git/refs/heads/specguard/refresh", {}, {"sha": "b2", "force": True}),
    ]


def test_create_branch_other_422_is_raised(httpserver, gh):
    httpserver.expect_request("/repos/o/r/git/refs", "POST").respond_with_json(
        {"message": "Validation Failed", "errors": [{"message": "sha is not a commit"}]}, status=422)

    with pytest.raises(GitHubError, match="sha is not a commit"):
        gh.create_branch("b", "zz")
    assert len(httpserver.log) == 1


def test_get_branch_sha(httpserver, gh):
    httpserver.expect_request("/repos/o/r/git/ref/heads/main", "GET").respond_with_json(
        {"ref": "refs/heads/main", "object": {"sha": "deadbeef", "type": "commit"}})
    assert gh.get_branch_sha("main") == "deadbeef"


def test_put_file_new_and_existing(httpserver, gh):
    path = "/repos/o/r/contents/baselines/demo.json"
    httpserver.expect_oneshot_request(path, "GET").respond_with_json({"message": "Not Found"}, status=404)
    httpserver.expect_oneshot_request(path, "GET").respond_with_json({"type": "file", "sha": "old1"})
    httpserver.expect_request(path, "PUT").respond_with_json({"commit": {"sha": "c0ffee"}})
    content = b'{"speedup": 1.8}\n\xff'

    assert gh.put_file("baselines/demo.json", content, "refresh baseline", "specguard/refresh") == "c0ffee"
    assert gh.put_file("baselines/demo.json", content, "refresh again", "specguard/refresh") == "c0ffee"

    calls = sent(httpserver)
    encoded = base64.b64encode(content).decode()
    assert calls == [
        ("GET", path, {"ref": "specguard/refresh"}, None),
        ("PUT", path, {}, {"message": "refresh baseline", "content": encoded, "branch": "specguard/refresh"}),
        ("GET", path, {"ref": "specguard/refresh"}, None),
        ("PUT", path, {}, {"message": "refresh again", "content": encoded, "branch": "specguard/refresh",
                           "sha": "old1"}),
    ]
    assert base64.b64decode(calls[1][3]["content"]) == content


def test_open_pull_request_creates_then_updates(httpserver, gh):
    query = {"state": "open", "head": "o:specguard/refresh"}
    httpserver.expect_oneshot_request("/repos/o/r/pulls", "GET", query_string=query).respond_with_json([])
    httpserver.expect_request("/repos/o/r/pulls", "POST").respond_with_json(
        {"number": 12, "html_url": "https://github.test/o/r/pull/12"}, status=201)
    httpserver.expect_request("/repos/o/r/pulls", "GET", query_string=query).respond_with_json(
        [{"number": 12, "html_url": "https://github.test/o/r/pull/12"}])
    httpserver.expect_request("/repos/o/r/pulls/12", "PATCH").respond_with_json(
        {"number": 12, "html_url": "https://github.test/o/r/pull/12"})

    assert gh.open_pull_request("specguard/refresh", "main", "Refresh", "body 1") == "https://github.test/o/r/pull/12"
    assert gh.open_pull_request("specguard/refresh", "main", "Refresh 2", "body 2") == "https://github.test/o/r/pull/12"

    assert sent(httpserver) == [
        ("GET", "/repos/o/r/pulls", query, None),
        ("POST", "/repos/o/r/pulls", {}, {"title": "Refresh", "head": "specguard/refresh", "base": "main",
                                           "body": "body 1"}),
        ("GET", "/repos/o/r/pulls", query, None),
        ("PATCH", "/repos/o/r/pulls/12", {}, {"title": "Refresh 2", "body": "body 2"}),
    ]


def test_bad_repository_is_rejected():
    with pytest.raises(GitHubError, match="not 'owner/name'"):
        GitHub(TOKEN, "just-a-name", "http://127.0.0.1:1")


def test_a_human_comment_that_quotes_the_marker_is_never_edited(httpserver, gh):
    """Anyone can paste the marker; only the bot's own comments are the report."""
    human = {"login": "mallory", "type": "User"}
    httpserver.expect_request("/repos/o/r/issues/7/comments", "GET").respond_with_json(
        [comment(1, f"gotcha {MARKER}", user=human)])
    httpserver.expect_request("/repos/o/r/issues/7/comments", "POST").respond_with_json(comment(2, MARKER), status=201)
    result = gh.upsert_comment(7, "report", MARKER)
    assert result.action == "created" and result.deleted == []
    assert [(m, p) for m, p, *_ in sent(httpserver)] == [("GET", "/repos/o/r/issues/7/comments"),
                                                         ("POST", "/repos/o/r/issues/7/comments")]
    httpserver.clear()
    httpserver.expect_request("/repos/o/r/issues/7/comments", "GET").respond_with_json(
        [comment(1, f"gotcha {MARKER}", user=human)])
    httpserver.expect_request("/repos/o/r/issues/comments/1", "PATCH").respond_with_json(comment(1, MARKER))
    assert gh.upsert_comment(7, "report", MARKER, author="mallory").action == "updated"  # a PAT's own user
