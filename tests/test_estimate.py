"""``specguard plan``: what a run will do, from the configs and the tokenizer alone (the slow tier's
tests/test_cli.py checks a plan against the run that follows it)."""

from __future__ import annotations

import json

import pytest

from gate.cli import main
from gate.inputs.config import DEMO_CONFIG


def test_plan_of_the_demo_counts_every_phase_without_loading_weights(tmp_path, capsys, monkeypatch):
    """`specguard plan` needs no weights: it plans from the configs and the tokenizer (the demo, no earlier run)."""
    import gate.inputs.models as models

    monkeypatch.setattr(models, "_load_one", lambda *a, **k: pytest.fail("plan loaded weights"))
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(DEMO_CONFIG), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {(w["phase"], w["engine"], w["batch_size"]): w for w in doc["work"]}
    # 18 prompts: 18 batches at bs 1, two compositions of ceil(18/4) = 5 at bs 4 and of ceil(18/8) = 3 at bs 8
    assert [rows[("equivalence outputs", "speculative", b)]["batches"] for b in (1, 4, 8)] == [18, 10, 6]
    assert rows[("equivalence outputs", "reference", 8)]["rows"] == 48
    assert doc["timing_repeats"] == [2, 6] and doc["estimate_s"] is None


def test_plan_counts_the_request_rate_replays_and_their_traces_spans(tmp_path, capsys, monkeypatch):
    """checks.traffic in the plan: every replay (engines x rates x repeats x 2 sides) and the time its arrivals
    alone take, (requests - 1) / rate each, before any latency."""
    import gate.inputs.models as models

    monkeypatch.setattr(models, "_load_one", lambda *a, **k: pytest.fail("plan loaded weights"))
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "rate.yaml"
    cfg.write_text("""\
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, local_weights: false}
suite: {max_prompts_per_slice: 1}
checks: {traffic: {rates: [2, 8], requests: 17, repeats: 3}}
engines:
  - type: http
    name: stack
    http: {preset: vllm, server: {url: "http://127.0.0.1:9"}, reference: {url: "http://127.0.0.1:10"}}
""")
    assert main(["plan", str(cfg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["traffic_s"] == pytest.approx(3 * 2 * (16 / 2 + 16 / 8))  # 60 s of arrivals
    assert "12 replays whose arrivals alone span 1 min 00 s" in doc["traffic"]


def test_a_gpu_runner_before_its_first_run_gets_an_estimate_from_a_stated_rate(tmp_path, capsys, monkeypatch):
    """Issue 40 item 7: a first run's plan said "estimate: none", so nobody could say what a PR costs on a GPU
    runner before paying for one.  At a stated rate every budgeted token (work, warm-up, timing repeats) costs
    1/rate seconds, the assumption printed."""
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(DEMO_CONFIG), "--json"]) == 0
    none = json.loads(capsys.readouterr().out)
    assert none["estimate_s"] is None and "--tokens-per-s" in none["estimate_from"]
    assert main(["plan", str(DEMO_CONFIG), "--json", "--tokens-per-s", "250"]) == 0
    doc = json.loads(capsys.readouterr().out)
    work = sum(w["tokens"] - w["cached_tokens"] for w in doc["work"])
    per_repeat = sum(t["tokens"] for t in doc["timing_tokens_per_repeat"])
    lo, hi = doc["estimate_s"]
    assert lo >= (work + per_repeat * doc["timing_repeats"][0]) / 250 and lo <= hi, doc
    assert doc["estimate_from"].startswith("assumed: every engine generates 250 tokens per second")
    assert main(["plan", str(DEMO_CONFIG), "--tokens-per-s", "250"]) == 0
    text = capsys.readouterr().out
    assert "estimate: " in text and "confirmation: not planned; one more sampling pass only for a group" in text
    # the confirmation pass (gate.checks.confirmation) is possible, not planned: its tokens and time beside the estimate
    sampled = {(w["engine"], w["batch_size"]): w["tokens"] for w in doc["work"] if w["phase"] == "sampling"}
    assert {(c["engine"], c["batch_size"]): c["tokens"] for c in doc["confirmation"]} == sampled
    assert doc["confirmation_s"] == pytest.approx(sum(sampled.values()) / 250)
    with pytest.raises(SystemExit):
        main(["plan", str(DEMO_CONFIG), "--tokens-per-s", "0"])
    assert "a rate above 0 tokens per second" in capsys.readouterr().err


def test_plan_states_the_confirmation_passes_worst_case_and_how_rarely_it_runs(tmp_path, capsys, monkeypatch):
    """Issue 55, item 4: the confirmation pass (gate.checks.confirmation) is not planned, so the plan states its
    worst case beside the estimate (one more sampling pass per group: tokens and time) and when it runs (a group
    between confirm_floor and alpha: at most alpha per group on a correct engine); with `confirm: false` no line."""
    import gate.inputs.models as models

    monkeypatch.setattr(models, "_load_one", lambda *a, **k: pytest.fail("plan loaded weights"))
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(DEMO_CONFIG), "--tokens-per-s", "100"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("confirmation:"))
    assert "between confirm_floor 0.0001 and alpha 0.01" in line and "probability at most 0.01 per group" in line
    # the demo samples 768 tokens per engine at bs 8: the worst case is both groups again, 1536 tokens, 15 s at 100/s
    assert "reference bs 8: up to 768 tokens; speculative bs 8: up to 768 tokens" in line
    assert "at worst 1536 tokens, every group again, about 15 s here" in line and "(not in the estimate)" in line
    cfg = tmp_path / "no-confirm.yaml"
    text = DEMO_CONFIG.read_text().replace("alpha: 0.01, power_trials: 20",
                                           "alpha: 0.05, power_trials: 20, confirm_floor: 0.001")
    cfg.write_text(text)
    assert main(["plan", str(cfg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["confirmation_rule"] == {"alpha": 0.05, "floor": 0.001}
    cfg.write_text(text.replace("confirm_floor: 0.001", "confirm: false"))
    assert main(["plan", str(cfg)]) == 0
    assert "confirmation:" not in capsys.readouterr().out
    assert main(["plan", str(cfg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["confirmation"] == [] and doc["confirmation_s"] is None and doc["confirmation_rule"] is None


def test_plan_takes_the_last_run_of_the_hardware_key_it_is_given(tmp_path, capsys, monkeypatch):
    """A GPU runner's results.json and phases.json (its artifact), planned on another machine: refused as another
    runner's by default, used with --hardware-key naming the runner it was made on."""
    import synthetic

    from gate.io.documents import PhasesDoc

    results = synthetic.run()  # (in the repository: its suite is read to fingerprint it)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "specguard-out"
    out.mkdir()
    (out / "results.json").write_text(synthetic.results_json(results))
    (out / "phases.json").write_text(PhasesDoc(wall_s=100.0, seconds={"timing": 50.0, "server start": 31.0,
                                                                       "model load": 4.0}).model_dump_json())
    key = results.fingerprint.hardware_key
    assert main(["plan", str(DEMO_CONFIG), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["estimate_s"] is None and f"was made on {key}, not on this runner" in doc["estimate_from"]
    assert main(["plan", str(DEMO_CONFIG), "--json", "--hardware-key", key]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["estimate_s"] is not None and f"made on {key}" in doc["estimate_from"], doc["estimate_from"]
    assert "its fixed costs 50 s (server start-up 31 s, model load 4 s of them)" in doc["estimate_from"], \
        "the servers' start-up and the model load, measured on that run, are counted and named (issue 48, item 6)"
    # baseline.hardware_key is the key the gate stores the run under: the plan takes that runner's run as the
    # gate would judge it, with no flag, and names the field when the run was made under another key
    pinned = tmp_path / "pinned.yaml"
    for pin, found in ((key, True), ("gpu-runner-b", False)):
        pinned.write_text(DEMO_CONFIG.read_text().replace("  name: demo\n", f"  name: demo\n  hardware_key: {pin}\n"))
        assert main(["plan", str(pinned), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        if found:
            assert doc["estimate_s"] is not None and f"made on {key}" in doc["estimate_from"], doc["estimate_from"]
        else:
            assert doc["estimate_s"] is None, doc
            assert f"was made on {key}, not on gpu-runner-b (baseline.hardware_key)" in doc["estimate_from"]
    # --hardware-key overrides the config, as it does for the gate's baseline
    assert main(["plan", str(pinned), "--json", "--hardware-key", key]) == 0
    assert json.loads(capsys.readouterr().out)["estimate_s"] is not None


REPEATS = """\
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, local_weights: false}
batching: {batch_sizes: [1, 8]}
suite: {max_prompts_per_slice: 1}
engines:
  - type: http
    name: stack
    http:
      preset: vllm
      server: {url: "http://127.0.0.1:9", launch: [%(python)s, -c, "1"%(flag)s]}
      reference: {url: "http://127.0.0.1:10", launch: [%(python)s, -c, "1"%(flag)s]}
"""


@pytest.mark.parametrize("flag", ["", ", --no-enable-prefix-caching"])
def test_a_batch_larger_than_the_suites_distinct_prompts_warns_of_the_prefix_cache(tmp_path, capsys, flag):
    """Issue 40 item 7: 6 prompts (one per slice) at batch size 8 repeat rows within a batch; a stack with a
    prefix cache serves the repeats from it, which flatters the speedup.  The plan says so and names the flag that
    turns vLLM's cache off; launch lines that already pass it on both servers get no warning."""
    import sys

    cfg = tmp_path / "repeats.yaml"
    cfg.write_text(REPEATS % {"python": json.dumps(sys.executable), "flag": flag})
    assert main(["plan", str(cfg), "--json"]) == 0
    warned = [w for w in json.loads(capsys.readouterr().out)["warnings"] if "repeats prompts within a batch" in w]
    if flag:
        assert warned == []
    else:
        assert len(warned) == 1 and warned[0].startswith("batch size 8 repeats") and \
            "(--no-enable-prefix-caching)" in warned[0], warned


def test_gate_plan_to_appends_the_plan_before_the_run_and_a_failing_plan_never_stops_the_gate(tmp_path, capsys,
                                                                                             monkeypatch):
    """The Action's job summary gets `specguard plan`'s text from the gate itself (`gate --plan-to FILE`), before
    the run starts, planned with the gate's own arguments; a plan that fails is one line there, and the gate runs."""
    import gate.cli
    import gate.pipeline
    import gate.run.estimate

    summary = tmp_path / "summary.md"
    summary.write_text("earlier steps' text\n")
    seen = []

    def gate_stub(session, config, options):  # what the file held when the run started
        seen.append((summary.read_text(), config, options.out))
        return 0, None

    monkeypatch.setattr(gate.pipeline, "gate", gate_stub)
    monkeypatch.chdir(tmp_path)
    assert main(["gate", str(DEMO_CONFIG), "--out", "o", "--plan-to", str(summary), "--hardware-key", "k"]) == 0
    capsys.readouterr()
    assert main(["plan", str(DEMO_CONFIG), "--out", "o", "--hardware-key", "k"]) == 0
    plan_text = capsys.readouterr().out.strip()
    [(text, config, out)] = seen
    assert (config, out) == (str(DEMO_CONFIG), "o")
    assert text == f"earlier steps' text\n### specguard plan\n```text\n{plan_text.replace('`', chr(39))}\n```\n"

    class Ticks:
        def lines(self):
            return ["a `config` value with ``` in it"]

    monkeypatch.setattr(gate.run.estimate, "plan_config", lambda *a, **k: Ticks())
    assert main(["gate", str(DEMO_CONFIG), "--plan-to", str(summary)]) == 0
    assert seen[-1][0].endswith("```text\na 'config' value with ''' in it\n```\n"), "no text closes the block"

    def broken(*a, **k):
        raise RuntimeError("the tokenizer is missing")

    monkeypatch.setattr(gate.run.estimate, "plan_config", broken)
    assert main(["gate", str(DEMO_CONFIG), "--plan-to", str(summary)]) == 0
    assert seen[-1][0].endswith("```text\n(no plan: the gate's own output says why; RuntimeError)\n```\n")
    assert main(["gate", str(DEMO_CONFIG), "--plan-to", str(tmp_path / "no" / "such" / "dir")]) == 0
    assert "warning: the plan was not written to" in capsys.readouterr().err and len(seen) == 4


def test_plan_names_the_baseline_the_gate_will_be_judged_against_and_warns_when_the_verdict_is_decided(
        tmp_path, capsys, monkeypatch):
    """`plan` looks the baseline up as the gate will (the same key rule and folder): found; missing, which is
    neutral at best; missing under `baseline.on_missing: fail`, a failure whatever the run measures, warned before a
    GPU-hour is spent, naming the keys that have one; unusable, which the gate would only find after the run."""
    import shutil

    from gate.verdict.planned import planned

    monkeypatch.chdir(tmp_path)
    baselines = tmp_path / "b"
    shutil.copytree(DEMO_CONFIG.parents[2] / "baselines" / "demo", baselines / "demo")
    cfg = tmp_path / "demo.yaml"
    cfg.write_text(DEMO_CONFIG.read_text())
    theirs = "cpu-amd-epyc-2c-2t"

    def plan(*args: str) -> dict:
        assert main(["plan", str(cfg), "--json", "--baselines-dir", str(baselines), *args]) == 0
        return json.loads(capsys.readouterr().out)

    doc = plan("--hardware-key", theirs)
    assert doc["baseline"] == f"…/b/demo/{theirs}.json (hardware {theirs})" and not any(
        "baseline" in w for w in doc["warnings"]), doc
    doc = plan("--hardware-key", "gpu-runner-b")
    assert doc["baseline"].startswith("none for hardware gpu-runner-b") and theirs in doc["baseline"]
    assert "a run whose checks pass is neutral" in doc["baseline"]
    assert not any("on_missing" in w for w in doc["warnings"])
    cfg.write_text(DEMO_CONFIG.read_text().replace("baseline:\n", "baseline:\n  on_missing: fail\n"))
    assert "on_missing: fail" in cfg.read_text()
    doc = plan("--hardware-key", "gpu-runner-b")
    [warned] = [w for w in doc["warnings"] if "on_missing" in w]
    assert "will fail whatever it measures" in warned and "refresh workflow" in warned, warned
    assert main(["plan", str(cfg), "--baselines-dir", str(baselines), "--hardware-key", "gpu-runner-b"]) == 0
    text = capsys.readouterr().out
    assert "\nbaseline: none for hardware gpu-runner-b" in text and "\nwarning: no baseline 'demo'" in text
    (baselines / "demo" / f"{theirs}.json").write_text("{not json")
    doc = plan("--hardware-key", theirs)
    assert doc["baseline"].endswith("unusable")
    assert any("exit 3 after the whole run: " in w and "corrupt baseline" in w for w in doc["warnings"]), doc
    # a refresh writes it: nothing to warn of
    line, warning = planned(baselines, "demo", "gpu-runner-b", "fail", refresh=True)
    assert line.startswith("the refresh writes ") and "gpu-runner-b.json" in line and warning is None


def test_on_missing_stop_ends_the_gate_before_anything_runs_naming_the_keys_that_have_one(tmp_path, capsys,
                                                                                           monkeypatch):
    """`baseline.on_missing: stop`: a gate whose runner has no baseline could only fail, so it stops before a server
    starts or a model loads (a fast test: tests/conftest.py fails it if weights load), exit 3 with nothing written,
    naming the field and the keys that have one; `plan` warns of it. With the baseline there, or under `fail` or
    `neutral`, or for a refresh, the gate goes on to its run."""
    import shutil

    import torch

    import gate.pipeline as pipeline

    monkeypatch.chdir(tmp_path)
    baselines = tmp_path / "b"
    shutil.copytree(DEMO_CONFIG.parents[2] / "baselines" / "demo", baselines / "demo")
    theirs = "cpu-amd-epyc-2c-2t"
    cfg = tmp_path / "demo.yaml"
    ran: list[bool] = []
    monkeypatch.setattr(pipeline, "gate", lambda session, config, opts: (ran.append(opts.refresh), (0, None))[1])

    def gate(on_missing: str, key: str | None, *more: str) -> int:
        cfg.write_text(DEMO_CONFIG.read_text().replace("baseline:\n", f"baseline:\n  on_missing: {on_missing}\n"))
        keyed = ["--hardware-key", key] if key else []
        return main(["gate", str(cfg), "--baselines-dir", str(baselines), *keyed, "--out", "o", *more])

    assert gate("stop", "gpu-runner-b") == 3 and ran == []
    err = capsys.readouterr().err
    assert "baseline.on_missing: no baseline 'demo' for hardware gpu-runner-b" in err, err
    assert "the gate stopped before its run" in err and theirs in err and "refresh workflow" in err
    assert not (tmp_path / "o").exists(), "nothing was run, so nothing is written"
    assert main(["plan", str(cfg), "--json", "--baselines-dir", str(baselines), "--hardware-key", "gpu-runner-b"]) == 0
    [warned] = [w for w in json.loads(capsys.readouterr().out)["warnings"] if "on_missing" in w]
    assert "will stop before its run (exit 3)" in warned, warned
    # the runs that go on: its baseline is there; the other rules; a refresh (it makes the missing baseline)
    assert gate("stop", theirs) == 0 and gate("fail", "gpu-runner-b") == 0 and gate("neutral", "gpu-runner-b") == 0
    assert gate("stop", "gpu-runner-b", "--refresh") == 0 and ran == [False, False, False, True]
    # an unusable baseline would stop the gate after the whole run (exit 3): under stop, before it
    (baselines / "demo" / f"{theirs}.json").write_text("{not json")
    assert gate("stop", theirs) == 3 and len(ran) == 4 and "corrupt baseline" in capsys.readouterr().err
    # this machine's key counts torch threads: the stop looks up the key of the run's --threads, not of the default
    shutil.rmtree(baselines / "demo")  # no key has one now, this machine's included
    threads = torch.get_num_threads()
    try:
        for n in (2, 1):
            assert gate("stop", None, "--threads", str(n)) == 3
            err = capsys.readouterr().err
            assert f"c-{n}t (it would be" in err, err
            # and `specguard plan --threads N`, run on its own, looks it up under the same key that gate would
            other = 1 if n == 2 else 2
            torch.set_num_threads(other)  # what plan's own default would key by
            assert main(["plan", str(cfg), "--json", "--baselines-dir", str(baselines), "--threads", str(n)]) == 0
            doc = json.loads(capsys.readouterr().out)
            assert f"c-{n}t (it would be" in doc["baseline"] and f"c-{other}t" not in doc["baseline"], doc["baseline"]
    finally:
        torch.set_num_threads(threads)
