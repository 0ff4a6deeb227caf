"""Fuzzing: whatever the config, the suite or a plug-in's return value, no traceback and a known exit code.

Configs are random YAML trees built from the real schema's keys plus junk; suites are random JSONL lines
and raw bytes; plug-in return values are random shapes and types.  The CLI must exit 0, 1 or 2, never
raise, and finish within a bound.  Example counts and run time: docs/reliability.md.
"""

from __future__ import annotations

import time

import pytest
import torch
import yaml
from helpers import NO_SHRINK, sigint_raises
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gate.cli import main
from gate.engines.base import EngineFailure, GenerationSettings, Request
from gate.engines.plugin import PluginEngine, PluginSettings
from gate.inputs.config import Config

BOUND_S = 5.0


def _keys(model, out: set) -> set:
    for name, f in model.model_fields.items():
        out.add(name)
        ann = f.annotation
        for arg in getattr(ann, "__args__", ()) + (ann,):
            if isinstance(arg, type) and hasattr(arg, "model_fields"):
                _keys(arg, out)
    return out


SCHEMA_KEYS = sorted(_keys(Config, set()) - {"callable"})  # no random imports: plug-in modules are code
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**9), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["specguard:demo/target", "specguard:demo/draft", "auto",
                                                           "bfloat16", "speculative", "plugin", "cuda:7", "0.5"]))
keys = st.one_of(st.sampled_from(SCHEMA_KEYS), st.text(min_size=1, max_size=12))
trees = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(keys, inner, max_size=5)), max_leaves=25)
GOOD_MODELS = {"target": {"path": "specguard:demo/target"}, "draft": {"path": "specguard:demo/draft"}}


def run_cli(args) -> int:
    t0 = time.monotonic()
    code = main(args)
    assert time.monotonic() - t0 < BOUND_S
    return code


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trees, st.booleans())
def test_random_configs_exit_0_or_2(tmp_path, tree, with_models):
    doc = {"models": GOOD_MODELS, **tree} if with_models and isinstance(tree, dict) else tree
    path = tmp_path / "specguard.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    assert run_cli(["validate", str(path)]) in (0, 2)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_random_config_bytes_exit_0_or_2(tmp_path, data):
    path = tmp_path / "specguard.yaml"
    path.write_bytes(data)
    assert run_cli(["validate", str(path)]) in (0, 2)


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.text(max_size=30)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=10)
lines = st.one_of(
    st.fixed_dictionaries({"id": st.text(max_size=10), "slice": st.text(max_size=10), "prompt": st.text(max_size=40)},
                          optional={"max_new_tokens": json_values, "extra": json_values}),
    json_values)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(lines.map(lambda v: __import__("json").dumps(v)), st.text(max_size=40)), max_size=8),
       st.binary(max_size=60))
def test_random_suites_exit_0_or_2(tmp_path, rows, junk):
    suite = tmp_path / "suite.jsonl"
    suite.write_bytes(("\n".join(rows)).encode("utf-8", "surrogatepass") + b"\n" + junk)
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(yaml.safe_dump({"models": GOOD_MODELS, "suite": {"path": str(suite)}}))
    assert run_cli(["validate", str(cfg)]) in (0, 2)


returns = st.one_of(
    json_values,
    st.lists(st.one_of(json_values, st.fixed_dictionaries(
        {"token_ids": st.one_of(st.lists(st.one_of(st.integers(-3, 60), st.booleans(), st.floats()), max_size=6),
                                json_values)},
        optional={"stop_reason": json_values, "wall_s": st.one_of(st.floats(), json_values),
                  "counters": st.one_of(json_values, st.dictionaries(
                      st.sampled_from(["num_drafts", "num_draft_tokens", "num_accepted_tokens", "bogus",
                                       "num_accepted_tokens_per_pos"]), json_values, max_size=3))})),
             min_size=0, max_size=4))


@settings(max_examples=150, deadline=None)
@given(returns)
def test_random_plugin_returns_are_a_result_or_a_recorded_contract_failure(value):
    engine = PluginEngine("fuzzed", lambda ids, bs, s: value, torch.device("cpu"),
                          PluginSettings([], [], 0.0, 4, [], "t", "d", "float32", "cpu"), vocab_size=50)
    requests = [Request((1, 2), 3), Request((3,), 3)]
    try:
        result = engine.generate(requests, GenerationSettings())
    except EngineFailure as exc:
        assert exc.kind == "contract" and exc.message.startswith("engine 'fuzzed'")
        return
    assert len(result.sequences) == 2
    for s in result.sequences:
        assert all(isinstance(t, int) and 0 <= t < 50 for t in s.token_ids)


# --- results and baselines with hostile values -------------------------------------------------------------

HOSTILE_VALUES = st.one_of(st.sampled_from([float("nan"), float("inf"), float("-inf"), -1, -1.0, 10**30, 2**63,
                                            True, "4", None, [], {}, "x" * 300]),
                           st.integers(), st.floats(), st.text(max_size=10))


def _leaves(doc, path=()):
    """Every (path, value) of a JSON document whose value is a number."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, doc


def _set(doc, path, value):
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


def _mutated(doc: dict, data) -> tuple[dict, tuple]:
    import copy

    doc = copy.deepcopy(doc)
    leaves = list(_leaves(doc))
    path = data.draw(st.sampled_from([p for p, _ in leaves]))
    _set(doc, path, data.draw(HOSTILE_VALUES))
    return doc, path


_RUN = None


def _syn_run():
    global _RUN
    if _RUN is None:
        import synthetic as syn

        r = syn.run().model_copy(update={"run_id": "r1"})
        _RUN = (r.model_dump(mode="json", by_alias=True), syn.checks_for(r))
    return _RUN


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=NO_SHRINK)
@given(st.data())
def test_results_with_hostile_numbers_are_read_or_refused_with_exit_2(tmp_path, data):
    import json

    import synthetic as syn

    doc, _ = _mutated(_syn_run()[0], data)
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc))
    (out / "checks.json").write_text(syn.checks_json(_syn_run()[1]))
    assert run_cli(["compare", str(out), "--baselines-dir", str(tmp_path / "b"), "-q"]) in (0, 1, 2)
    from gate.run.results import load_results

    try:
        r = load_results(out)
    except Exception as exc:  # only the gate's own error is allowed
        assert type(exc).__name__ == "ResultsError", exc
        return
    for ex in r.executions:  # what is accepted is a measurement: finite, and never negative
        assert ex.wall_s >= 0 and ex.wall_s == ex.wall_s and ex.wall_s != float("inf")
        assert all(s.wall_s >= 0 for s in ex.sequences)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=NO_SHRINK)
@given(st.data())
def test_baselines_with_hostile_values_are_used_or_refused_with_exit_3(tmp_path, data):
    import json

    import synthetic as syn


    results_doc, checks = _syn_run()
    from gate.run.results import Results

    r = Results.model_validate(results_doc)
    base = syn.baseline_of(r, checks, syn.config()).model_dump(mode="json", by_alias=True)
    doc, _ = _mutated(base, data)
    out = tmp_path / "run"
    out.mkdir(exist_ok=True)
    (out / "results.json").write_text(json.dumps(results_doc, indent=1) + "\n")  # as the gate writes it
    (out / "checks.json").write_text(syn.checks_json(checks))
    (tmp_path / "base.json").write_text(json.dumps(doc))
    assert run_cli(["compare", str(out), "--baseline", str(tmp_path / "base.json"), "-q"]) in (0, 1, 3)


# --- special files as inputs -------------------------------------------------------------------------------


def _special(tmp_path, kind: str):
    import os

    path = tmp_path / f"special-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    return path


SPECIAL = st.sampled_from(["fifo", "dir", "device", "dangling"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(SPECIAL, st.sampled_from(["config", "suite", "results", "checks", "baseline"]))
def test_special_files_as_inputs_are_refused_at_once(tmp_path, kind, role):
    import json
    import shutil

    import synthetic as syn

    for p in tmp_path.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    special = _special(tmp_path, kind)
    if role == "config":
        assert run_cli(["validate", str(special)]) == 2
        return
    if role == "suite":
        cfg = tmp_path / "c.yaml"
        cfg.write_text(yaml.safe_dump({"models": GOOD_MODELS, "suite": {"path": str(special)}}))
        assert run_cli(["validate", str(cfg)]) == 2
        return
    results_doc, checks = _syn_run()
    out = tmp_path / "run"
    out.mkdir()
    for name, text in (("results", json.dumps(results_doc, indent=1) + "\n"), ("checks", syn.checks_json(checks))):
        if role == name:
            (out / f"{name}.json").symlink_to(special)
        else:
            (out / f"{name}.json").write_text(text)
    args = ["compare", str(out), "-q"] + (["--baseline", str(special)] if role == "baseline" else [])
    assert run_cli(args) == (3 if role == "baseline" else 2)


# --- signals during plug-in calls --------------------------------------------------------------------------

SLOW_PLUGIN = '''\
import time


def slow(prompt_ids, batch_size, settings):
    time.sleep(settings.extra.get("sleep", 0.2))
    return [{"token_ids": [5] * n} for n in settings.max_new_tokens]
'''


@pytest.mark.slow
@pytest.mark.usefixtures("sigint_ignored_from_start")  # as a background job starts the suite (test_reliability.py)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=NO_SHRINK)
@given(st.floats(0.0, 0.4))
def test_a_signal_during_a_plugin_call_interrupts_and_the_next_call_is_clean(tmp_path, monkeypatch, delay):
    """SIGINT at any moment of a call in the worker process: KeyboardInterrupt in the gate (exit 130 there), the
    worker ended, and the next call gets its own answer, not the interrupted one's."""
    import os
    import signal
    import threading

    from gate.engines.plugin import ProcessCallable

    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    base = PluginSettings(max_new_tokens=[], seeds=[], temperature=0.0, num_draft_tokens=4, eos_token_ids=[],
                          target="t", draft="d", dtype="float32", device="cpu", extra={"sleep": 0.3})
    fn = ProcessCallable("slow_plugin:slow", "c.yaml", "slow", log_path=tmp_path / "slow.log")
    engine = PluginEngine("slow", fn, torch.device("cpu"), base, vocab_size=50, timeout_s=30)
    fn.start()
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    try:
        with sigint_raises():  # however the suite was started (helpers.py)
            try:
                timer.start()  # at delay 0 the signal may land while the timer starts
                engine.generate([Request((1, 2), 3)], GenerationSettings(0.0, 4, ()))
                timer.join()  # the signal landed after the call: it interrupts this wait instead, at once
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    time.sleep(0.01)
                raise AssertionError("SIGINT was sent but never interrupted the gate")
            except KeyboardInterrupt:
                pass
        assert [len(s.token_ids) for s in engine.generate([Request((1, 2), 2), Request((3,), 1)],
                                                          GenerationSettings(0.0, 4, ())).sequences] == [2, 1]
    finally:
        timer.cancel()
        fn.stop()


def test_documents_mixed_from_two_runs_never_pass(tmp_path):
    """Issue 30 item 1: a failing run's results.json beside another run's passing checks.json turned `fail` into
    `pass` in `compare`, and `verdictfile` agreed.  Every mix of results, checks and verdict from a passing run A
    and a failing run B (with distinct run ids, and with the same id, where only the documents' digests tell them
    apart): `verdictfile` passes only A's own three, and `compare` passes only A's results with A's checks,
    refusing (exit 2) a checks.json made from other results."""
    import itertools
    import shutil

    import synthetic as syn

    from gate.verdict import file as verdictfile

    def make(name: str, run_id: str, failing: bool):
        results = syn.run(speedup={("code", 4): 0.6} if failing else None).model_copy(update={"run_id": run_id})
        out = tmp_path / name
        out.mkdir()
        (out / "results.json").write_text(syn.results_json(results))
        (out / "checks.json").write_text(syn.checks_json(syn.checks_for(results, confident={4: 2} if failing
                                                                        else None)))
        code = run_cli(["compare", str(out), "--baselines-dir", str(tmp_path / "none"), "-q"])
        assert code == (1 if failing else 0) and (out / "verdict.json").is_file()
        return out

    files = ("results.json", "checks.json", "verdict.json")
    for shared in (False, True):
        runs = {"A": make(f"A{shared}", "same" if shared else "run-a", False),
                "B": make(f"B{shared}", "same" if shared else "run-b", True)}
        for mix in itertools.product("AB", repeat=3):
            mixed = tmp_path / f"mix-{shared}-{''.join(mix)}"
            mixed.mkdir()
            for name, who in zip(files, mix):
                shutil.copy(runs[who] / name, mixed / name)
            got = verdictfile.check(mixed)
            assert got.passed == (mix == ("A", "A", "A")), (shared, mix, got)
            code = run_cli(["compare", str(mixed), "--baselines-dir", str(tmp_path / "none"), "-q"])
            assert code == {("A", "A"): 0, ("B", "B"): 1}.get(mix[:2], 2), (shared, mix, code)
            assert verdictfile.check(mixed).passed == (mix[:2] == ("A", "A")), (shared, mix)
