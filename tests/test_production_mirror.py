"""Issue 53 item 6: the production mirror (examples/production_mirror/: a 70B at tensor parallel 4 with EAGLE-3 on 8
GPUs, sampled as served on the chat route) validates and plans on a machine with no GPU and no weights, and its
plan is the GPU bill docs/performance.md shows."""

from __future__ import annotations

import json
from pathlib import Path

from gate.cli import main
from gate.run.weights import parameters

MIRROR = Path(__file__).resolve().parents[1] / "examples" / "production_mirror"


def test_the_header_only_checkpoint_holds_a_70b_and_no_weights():
    counted = parameters(MIRROR / "llama70b")
    assert counted is not None and round(counted[0] / 1e9, 2) == 70.55 and set(counted[1]) == {"BF16"}
    assert (MIRROR / "llama70b" / "model.safetensors").stat().st_size < 200_000


def test_the_mirror_validates_and_plans_its_gpu_bill(monkeypatch, capsys):
    monkeypatch.chdir(MIRROR)  # the launch lines name the model as the servers would see it, from here
    assert main(["validate", "specguard.yaml"]) == 0
    capsys.readouterr()
    assert main(["plan", "specguard.yaml", "--json", "--tokens-per-s", "1:900,8:4000,32:9000,64:12000",
                 "--gpu-memory", "80", "--timeout-minutes", "120"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["devices"]["held"]) == 8 and plan["device_minutes"][0] > 0
    assert all("weights plus the KV cache fit at bs 1/8/32/64" in m for m in plan["memory"]), plan["memory"]
    assert "tempered and truncated here" in plan["scoring"]
    assert any("chunked prefill is exercised" in p for p in plan["prefill"])
