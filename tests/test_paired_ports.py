"""Paired mode with one config file (issue 40, item 3): the Action's paired mode checks the base commit out beside
the head and passes the same config path twice, so both sides name the same server url.  The base's launched
server moves to a free port (its url, and ``--port`` or ``{port}`` in its launch line); a server the gate does not
launch cannot be moved, and ``plan --against`` refuses it exactly as ``gate --against`` does."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import sys

import pytest

from gate.cli import main
from gate.engines.paired import base_side
from gate.errors import SpecguardError
from gate.inputs.config import parse_config
from gate.inputs.launch import fill_port, moved_launch, url_port, with_port

SERVE = "import http.server, sys; http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), " \
        "http.server.SimpleHTTPRequestHandler).serve_forever()"


def config(server: str, reference: str = "") -> str:
    return f"""\
version: 1
models:
  target: {{path: "specguard:demo/target"}}
  draft: {{path: "specguard:demo/draft"}}
  device: cpu
  local_weights: false
generation: {{max_new_tokens: 4}}
suite: {{max_prompts_per_slice: 1, slices: [prose]}}
output: {{cache_dir: null}}
engines:
  - type: http
    name: served
    http:
      preset: vllm
      server: {server}
      reference: {reference or "{url: 'http://127.0.0.1:8001'}"}
"""


def test_a_launch_lines_port_moves_in_every_spelling_and_a_line_without_one_cannot_move():
    assert moved_launch(["serve", "--port", "8000"], 8000, 9) == ["serve", "--port", "9"]
    assert moved_launch(["serve", "--port=8000", "-x"], 8000, 9) == ["serve", "--port=9", "-x"]
    assert moved_launch(["llama-server", "-p", "8000"], 8000, 9) == ["llama-server", "-p", "9"]
    assert moved_launch(["serve", "--port", "{port}"], 8000, 9) == ["serve", "--port", "{port}"], "follows the url"
    assert moved_launch(["serve", "--port", "7000"], 8000, 9) is None, "another port: not the url's"
    assert moved_launch(["serve"], 8000, 9) is None
    assert with_port("http://127.0.0.1:8000/v1", 9) == "http://127.0.0.1:9/v1"
    assert with_port("http://[::1]:8000", 9) == "http://[::1]:9" and url_port("https://h") == 443
    assert fill_port(["serve", "--port={port}"], "http://127.0.0.1:8123") == ["serve", "--port=8123"]


def _loaded(tmp_path, text: str, name: str = "specguard.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return parse_config(text, path)


def test_the_same_config_twice_gets_the_bases_launched_server_a_port_of_its_own(tmp_path):
    text = config(f"{{url: 'http://127.0.0.1:8000', launch: [{json.dumps(sys.executable)}, -c, x, --port, '8000']}}")
    head = _loaded(tmp_path, text)
    side = base_side(str(tmp_path / "specguard.yaml"), head)
    moved = side.loaded.config.engines[0].http.server
    port = url_port(moved.url)
    assert port not in (8000, 8001) and moved.launch[-2:] == ["--port", str(port)]
    assert side.changes == (f"base-served server: http://127.0.0.1:8000 is the head's, moved to {moved.url}",)
    assert head.config.engines[0].http.server.url == "http://127.0.0.1:8000", "the head is left as it is"
    assert side.loaded.config.engines[0].http.reference.url == "http://127.0.0.1:8001", "the reference is the head's"
    other = _loaded(tmp_path, text.replace("8000", "8002"), "base.yaml")  # its own port already: left alone
    assert base_side(str(other.source), head).changes == ()


@pytest.mark.parametrize("server,said", [
    ("{url: 'http://127.0.0.1:8000'}", "the gate does not launch it"),
    ("{url: 'http://127.0.0.1:8000', launch: [serve, --port, '7000']}", "names no port the gate can move"),
    ("{url: 'http://localhost:8001', launch: [serve]}", "names no port the gate can move"),  # the head's reference
])
def test_a_base_server_that_cannot_move_is_refused_by_gate_and_plan_alike(tmp_path, server, said):
    text = config(server)
    head = _loaded(tmp_path, text)
    with pytest.raises(SpecguardError) as raised:
        base_side(str(head.source), head)
    assert "the base's server is the head's" in str(raised.value) and said in str(raised.value)
    for command in ("plan", "gate"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([command, str(head.source), "--against", str(head.source)])
        assert code == 2 and said in err.getvalue(), (command, err.getvalue())


def test_plan_against_the_same_config_shows_both_sides_servers_and_the_move(tmp_path):
    text = config("{url: 'http://127.0.0.1:8000', launch: [serve, --port, '{port}']}")
    head = _loaded(tmp_path, text)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", str(head.source), "--against", str(head.source)]) == 0
    lines = [line for line in out.getvalue().splitlines() if line.startswith("server: ")]
    assert lines[:2] == [
        "server: served server at http://127.0.0.1:8000, launched by the gate",
        "server: served reference at http://127.0.0.1:8001, already running (not launched by the gate)"]
    assert lines[2].startswith("server: base-served server at http://127.0.0.1:") and ":8000," not in lines[2]
    assert "8000 is the head's, moved to http://127.0.0.1:" in lines[3] and "picks one again" in lines[3], lines


def test_both_sides_launch_side_by_side_on_different_ports_from_one_config(tmp_path):
    """What the Action's paired mode runs (tests/test_action.py runs it under act with stand-in servers): the head's
    and the base's server from the same file, launched together, each answering on its own port."""
    from gate.run.servers import serving

    port = _free()
    launch = json.dumps([sys.executable, "-c", SERVE, "{port}"])
    text = config(f"{{url: 'http://127.0.0.1:{port}', launch: {launch}, startup_timeout_s: 20}}")
    head = _loaded(tmp_path, text)
    side = base_side(str(head.source), head)
    said = []
    with serving(said.append, head, tmp_path / "out", side.loaded) as servers:
        for server in servers:
            server.wait_ready()
        ports = {url_port(s.url) for s in servers}
        assert len(servers) == 2 and port in ports and len(ports) == 2, said
        for p in ports:
            with socket.create_connection(("127.0.0.1", p), timeout=5):
                pass
    assert any(line.startswith("starting base-served server: ") and str(port) not in line for line in said), said


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_paired_mode_is_refused_where_the_config_turns_timing_off(tmp_path):
    """checks.speedup.enabled: false and --against: paired mode is timing, so `plan` and `gate` refuse it (exit 2)
    before any weight loads, naming the field."""
    text = ('version: 1\nmodels: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}}\n'
            "checks: {speedup: {enabled: false}}\n")
    head = _loaded(tmp_path, text)
    for command in ("plan", "gate"):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([command, str(head.source), "--against", str(head.source)])
        assert code == 2 and "checks.speedup.enabled" in err.getvalue(), (command, err.getvalue())
        assert "this config turns timing off" in err.getvalue()
