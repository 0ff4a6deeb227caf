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
