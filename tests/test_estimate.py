"""``specguard plan``: what a run will do, from the configs and the tokenizer alone (the slow tier's
tests/test_cli.py checks a plan against the run that follows it)."""

from __future__ import annotations

import json

import pytest

from gate.cli import main
from gate.pipeline import DEMO_CONFIG


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
