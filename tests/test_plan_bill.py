"""`specguard plan`'s GPU bill (issue 53, item 3): rates per batch size and engine, the devices each phase holds and
their device-minutes, the job's timeout, weights plus KV cache against each server's share, and chunked prefill
named by the wave.  No weights: the 70B-shaped target below is a config, the demo's tokenizer and a safetensors
header with no tensor behind it (the plan reads parameter counts from headers alone)."""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from pathlib import Path

import pytest

from gate.inputs.config import DEMO_CONFIG, parse_config
from gate.run.rates import Rates, at, parse

DEMO_TARGET = DEMO_CONFIG.parent / "target"
LINE = ('[vllm, serve, llama70b, --tensor-parallel-size, "4", --max-num-batched-tokens, "2048", '
        '--gpu-memory-utilization, "%(share)s"%(more)s]')
CONFIG = """\
version: 1
models: {target: {path: llama70b}, local_weights: false}
speculation: {num_draft_tokens: 4, method: ngram}
batching: {batch_sizes: [1, 8, 32]}
generation: {max_new_tokens: 256}
suite: {path: suite.jsonl}
engines:
  - type: http
    name: stack
    http:
      preset: vllm
      server: {url: "http://127.0.0.1:8000", env: {CUDA_VISIBLE_DEVICES: "%(server)s"}, launch: %(server_line)s}
      reference: {url: "http://127.0.0.1:8001", env: {CUDA_VISIBLE_DEVICES: "%(reference)s"}, launch: %(line)s}
"""


def seventy_b(tmp_path: Path, share: str = "0.9", server: str = "0,1,2,3", reference: str = "4,5,6,7") -> Path:
    """The platform engineer's setup: a 70B (Llama-3-70B's shape) at tensor parallel 4 on 8 GPUs, a 2,048-token
    prefill budget, batch sizes 1/8/32, four prompts of about 1,300 tokens."""
    model = tmp_path / "llama70b"
    model.mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEMO_TARGET / f, model / f)
    cfg = json.loads((DEMO_TARGET / "config.json").read_text())
    cfg.update(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, head_dim=128, num_hidden_layers=80,
               vocab_size=128256)
    (model / "config.json").write_text(json.dumps(cfg))
    header = json.dumps({"w": {"dtype": "BF16", "shape": [70_553_706_496], "data_offsets": [0, 0]}}).encode()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"]
    (tmp_path / "suite.jsonl").write_text("".join(
        json.dumps({"id": f"long-{i}", "slice": "long",
                    "prompt": " ".join(words[(i + j) % len(words)] for j in range(560))}) + "\n" for i in range(4)))
    line = LINE % {"share": share, "more": ""}
    path = tmp_path / "specguard.yaml"
    path.write_text(CONFIG % {"server": server, "reference": reference, "line": line, "server_line": LINE % {
        "share": share, "more": ', --speculative-config, \'{"method": "ngram", "num_speculative_tokens": 4}\''}})
    return path


def test_a_rate_per_batch_size_is_interpolated_log_log_and_held_or_scaled_beyond_the_stated_sizes():
    stated = parse("1:900,8:4000,32:9000")
    assert stated.points == ((1, 900.0), (8, 4000.0), (32, 9000.0)) and stated.engine is None
    assert at(stated.points, 8) == (4000.0, "")
    rate, how = at(stated.points, 4)  # a power law through (1, 900) and (8, 4000)
    assert rate == pytest.approx(900 * (4000 / 900) ** (math.log(4) / math.log(8))) and "log-log" in how
    assert at(stated.points, 64) == (9000.0, "held at bs 32's, the largest stated"), "no gain past the largest"
    assert at(parse("8:4000").points, 2) == (1000.0, "bs 8's rate per row"), "below the smallest: per row"
    assert at(parse("250").points, 17) == (250.0, "")
    assert parse("reference=1:600, 8:3000").engine == "reference"
    for bad in ("", "fast", "0", "1:0", "1:9,1:8", "0:5", "1:", "1:2,", "x=", "=5", "-3", "1:2:3"):
        assert parse(bad) is None, bad


def test_stated_rates_must_cover_every_engine_of_the_plan_once():
    rates = Rates([parse("reference=250")])
    assert rates.problems(["reference", "stack"]) == [
        "no rate for stack: give one for every engine (N, or BS:N,...), or one without ENGINE= for the rest"]
    assert "no engine named 'nope'" in Rates([parse("nope=1"), parse("5")]).problems(["reference"])[0]
    assert "given 2 rates" in Rates([parse("5"), parse("6")]).problems(["reference"])[0]


def test_servers_on_the_same_gpus_are_held_once_and_pipeline_parallel_counts(tmp_path, monkeypatch):
    from gate.run.devices import held, holders, parallel

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = seventy_b(tmp_path)
    text = cfg.read_text().replace(', env: {CUDA_VISIBLE_DEVICES: "0,1,2,3"}', "").replace(
        ', env: {CUDA_VISIBLE_DEVICES: "4,5,6,7"}', "")
    assert held(holders(parse_config(text, cfg), "cpu")) == ("0", "1", "2", "3"), "both on GPUs 0-3: four held"
    assert parallel("vllm", ["vllm", "serve", "m", "-tp", "2", "--pipeline-parallel-size", "2"]) == (2, 2)
    assert parallel("sglang", ["python", "-m", "sglang.launch_server", "--tp", "8"]) == (8, 1)
    assert parallel("vllm", ["bash", "-c", "./serve.sh"]) == (None, 1), "a script's flags are not read"
    assert parallel("llamacpp", ["llama-server", "-m", "t.gguf"])[0] is None, "llama.cpp spreads over every GPU"
    local = parse_config(DEMO_CONFIG.read_text().replace("device: auto", "device: cuda:1"), DEMO_CONFIG)
    own = holders(local, "cuda:1")
    assert [h.ids for h in own] == [("1",)] and own[0].name == "the gate's own models (target and draft)"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")
    assert holders(local, "cuda:1")[0].ids == ("7",), "cuda:1 is the runner's second visible GPU"


def test_the_timeout_is_read_from_the_workflow_that_runs_the_action_on_this_config(tmp_path):
    from gate.run.limits import workflow_timeout

    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    example = (Path(__file__).parents[1] / "action" / "workflows" / "specguard.yml").read_text()
    (repo / ".github" / "workflows" / "specguard.yml").write_text(example)
    (repo / "specguard.yaml").write_text("")
    limit, said = workflow_timeout(repo / "specguard.yaml")
    # the `changed` job (10 min) calls the action in mode changed: it runs no gate
    assert limit.minutes == 120 and limit.source == "jobs.gate.timeout-minutes in .github/workflows/specguard.yml"
    (repo / "other.yaml").write_text("")
    limit, said = workflow_timeout(repo / "other.yaml")
    assert limit is None and "runs the specguard action on other.yaml" in said
    (repo / ".github" / "workflows" / "specguard.yml").write_text(example.replace("    timeout-minutes: 120\n", ""))
    limit, _ = workflow_timeout(repo / "specguard.yaml")
    assert limit.minutes == 360 and limit.source.startswith("GitHub's default"), limit


def test_the_kv_cache_per_token_per_gpu_is_read_off_the_target_config():
    from transformers import LlamaConfig

    from gate.run.weights import KvNeed

    kv = KvNeed.of(LlamaConfig(num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                               hidden_size=8192, dtype="bfloat16"), 1556, (1, 32))
    assert kv.tokens == {1: 1556, 32: 32 * 1556}
    assert kv.bytes_per_token(4, 1, None, None) == 2 * 80 * 2 * 128 * 2  # K and V, 2 of 8 heads per rank, bf16
    assert kv.bytes_per_token(16, 1, None, None) == 2 * 80 * 1 * 128 * 2, "a rank holds at least one KV head"
    assert kv.bytes_per_token(4, 2, None, "fp8") == 2 * 40 * 2 * 128 * 1
    assert kv.bytes_per_token(4, 1, "float32", None) == 2 * 80 * 2 * 128 * 4


def test_nvidia_smi_gives_the_smallest_gpus_size_where_torch_sees_none(tmp_path, monkeypatch):
    from gate.run.weights import nvidia_smi_bytes

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '81559\\n40960\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert nvidia_smi_bytes() == 40960 << 20  # MiB, the smaller GPU
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2; exit 9\n")
    assert nvidia_smi_bytes() is None

