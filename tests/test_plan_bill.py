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

from gate.cli import main
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


def plan_json(capsys, *argv: str) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# --- a. rates per batch size and engine ----------------------------------------------------------------------


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


def test_plan_estimates_each_phase_per_engine_and_batch_size_at_rates_per_batch_size(tmp_path, capsys, monkeypatch):
    """The demo at 100 tokens/s at bs 1 and 400 at bs 8 (the reference at a flat 50): each cell's seconds are its
    tokens at its engine's rate at its batch size, bs 4 read off the log-log line, and the assumption printed."""
    monkeypatch.chdir(tmp_path)
    doc = plan_json(capsys, str(DEMO_CONFIG), "--tokens-per-s", "1:100,8:400", "--tokens-per-s", "reference=50")
    tokens = {(w["phase"], w["engine"], w["batch_size"]): w["tokens"] for w in doc["work"]}
    cells = {(p["phase"], c["engine"], c["batch_size"]): c["seconds"] for p in doc["phases"] for c in p["cells"]}
    at4 = 100 * 4 ** (2 / 3)
    assert cells[("equivalence outputs", "speculative", 4)] == pytest.approx(
        [tokens[("equivalence outputs", "speculative", 4)] / at4] * 2)
    assert cells[("equivalence outputs", "speculative", 8)][0] == pytest.approx(
        tokens[("equivalence outputs", "speculative", 8)] / 400)
    assert cells[("equivalence outputs", "reference", 4)][0] == pytest.approx(
        tokens[("equivalence outputs", "reference", 4)] / 50)
    assert sum(p["seconds"][0] for p in doc["phases"]) == pytest.approx(doc["estimate_s"][0])
    assert sum(p["seconds"][1] for p in doc["phases"]) == pytest.approx(doc["estimate_s"][1])
    said = doc["estimate_from"]
    assert said.startswith("assumed: tokens per second stated: reference 50 at every batch size; every other "
                           "engine 100 at bs 1, 400 at bs 8") and f"speculative bs 4: {at4:.0f} (log-log" in said
    assert main(["plan", str(DEMO_CONFIG), "--tokens-per-s", "1:100,8:400"]) == 0
    text = capsys.readouterr().out
    assert "\n  equivalence outputs: " in text and "(reference: bs 1 " in text and "\n  timing: " in text


@pytest.mark.parametrize(("value", "says"), [
    ("1:fast", "argument --tokens-per-s: expected a rate above 0 tokens per second (N), or one per batch size"),
    ("nope=5", "--tokens-per-s: no engine named 'nope' in this plan; its engines are reference, speculative"),
])
def test_a_bad_tokens_per_s_is_exit_2_naming_the_flag(tmp_path, capsys, monkeypatch, value, says):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["plan", str(DEMO_CONFIG), "--tokens-per-s", value])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err, err


# --- b. the devices each phase holds, and device-minutes -----------------------------------------------------


def test_the_bill_names_each_servers_gpus_and_counts_device_minutes_per_phase(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = seventy_b(tmp_path)
    doc = plan_json(capsys, str(cfg), "--tokens-per-s", "1:900,8:4000,32:9000", "--timeout-minutes", "120")
    holders = {h["name"]: h for h in doc["devices"]["holders"]}
    assert holders["engines[0].http.server"]["devices"] == ["0", "1", "2", "3"]
    assert holders["engines[0].http.reference"]["devices"] == ["4", "5", "6", "7"]
    assert "tensor parallel 4" in holders["engines[0].http.server"]["how"]
    assert holders["the gate's own models"]["devices"] == [] and doc["devices"]["held"] == [str(i) for i in range(8)]
    lo, hi = doc["estimate_s"]
    assert doc["device_minutes"] == pytest.approx([lo * 8 / 60, hi * 8 / 60])
    for p in doc["phases"]:
        assert p["device_minutes"] == pytest.approx([s * 8 / 60 for s in p["seconds"]])
    assert main(["plan", str(cfg), "--tokens-per-s", "1:900,8:4000,32:9000"]) == 0
    text = capsys.readouterr().out
    assert "devices: 8 GPUs held through every phase" in text and "engines[0].http.server: 4 GPUs 0,1,2,3" in text
    assert "GPU-min (wall minutes x 8 GPUs held); model load, server start-up and calibration not counted" in text


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


# --- c. the job's timeout --------------------------------------------------------------------------------------


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


def test_plan_warns_where_the_estimate_exceeds_the_timeout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = seventy_b(tmp_path)
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "gate.yml").write_text("""\
jobs:
  gate:
    runs-on: [self-hosted, gpu]
    timeout-minutes: 1
    steps:
      - uses: specguard/specguard@0000000000000000000000000000000000000000
        with: {config: specguard.yaml}
""")
    doc = plan_json(capsys, str(cfg), "--tokens-per-s", "50")
    assert doc["limits"] == [{"name": "timeout", "minutes": 1,
                              "from": "jobs.gate.timeout-minutes in .github/workflows/gate.yml"}]
    said = [w for w in doc["warnings"] if "exceeds the timeout" in w]
    assert len(said) == 1 and "even its lower end" in said[0] and "will be cancelled" in said[0], said
    assert "before model load and server start-up" in said[0]
    doc = plan_json(capsys, str(cfg), "--tokens-per-s", "50", "--timeout-minutes", "100000")
    assert doc["limits"][0]["from"] == "--timeout-minutes" and not [w for w in doc["warnings"] if "exceeds" in w]


# --- d. weights plus the KV cache against each server's share ------------------------------------------------


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


def test_plan_says_whether_weights_plus_the_kv_cache_fit_each_servers_share(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = plan_json(capsys, str(seventy_b(tmp_path, share="0.5")), "--gpu-memory", "80")
    line = doc["memory"][0]
    assert line.startswith("engines[0].http.server.launch: 70.55 B parameters, 32.85 GiB of weights per GPU "
                           "(tensor parallel 4) against a 0.5 share of its memory (40.0 of 80 GiB, --gpu-memory)")
    # 80 KiB a token per GPU; rows of 1,308 + 256 tokens at most
    assert "KiB a token): bs 1 0.1 GiB, bs 8 1.0 GiB, bs 32 3.8 GiB: weights plus the KV cache fit" in line, line
    assert not [w for w in doc["warnings"] if "KV cache" in w]
    (tmp_path / "small").mkdir()
    monkeypatch.chdir(tmp_path / "small")  # where the launch line's relative model path is read
    doc = plan_json(capsys, str(seventy_b(tmp_path / "small", share="0.45")), "--gpu-memory", "80")
    warned = [w for w in doc["warnings"] if "weights plus the KV cache" in w]
    assert "fit at bs 1/8" in doc["memory"][0] and len(warned) == 2, (doc["memory"], warned)
    assert warned[0].startswith("engines[0].http.server.launch: at bs 32 weights plus the KV cache (bs 32: 36.7 "
                                "GiB per GPU) exceed its 0.45 share (36.0 of 80 GiB on each of 4 GPUs, 144 GiB in "
                                "all): the server keeps fewer rows running than the batch size"), warned


def test_without_the_gpus_size_the_memory_line_says_how_to_give_it(tmp_path, capsys, monkeypatch):
    import gate.run.weights as weights

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(weights, "gpu_memory_bytes", lambda: None)
    monkeypatch.setattr(weights, "nvidia_smi_bytes", lambda: None)
    doc = plan_json(capsys, str(seventy_b(tmp_path)))
    assert "the GPUs' size is not known on this machine: the share's bytes are the runner's; --gpu-memory GIB " \
           "states it)" in doc["memory"][0] and "bs 32 3.8 GiB" in doc["memory"][0]
    monkeypatch.setattr(weights, "nvidia_smi_bytes", lambda: 81559 << 20)
    (tmp_path / "smi").mkdir()
    monkeypatch.chdir(tmp_path / "smi")
    doc = plan_json(capsys, str(seventy_b(tmp_path / "smi")))
    assert "(71.7 of 80 GiB, nvidia-smi)" in doc["memory"][0], doc["memory"]


# --- e. chunked prefill, named by the wave -------------------------------------------------------------------


def test_chunked_prefill_is_named_by_the_wave_not_the_prompt(tmp_path, capsys, monkeypatch):
    """The issue's case: each ~1,300-token prompt fits the 2,048-token step budget, so the plan said "not
    exercised"; but a batch's requests share each scheduler step's budget, and at bs 8 and 32 every wave exceeds
    it."""
    monkeypatch.chdir(tmp_path)
    doc = plan_json(capsys, str(seventy_b(tmp_path)))
    line = doc["prefill"][0]
    assert line.startswith("engines[0].http.server: prefill chunk --max-num-batched-tokens 2048 tokens per scheduler "
                           "step, shared by the requests of a wave (a batch sent together): bs 1: 0 of 4 waves exceed "
                           "it; bs 8: 1 of 1 waves exceed it; bs 32: 1 of 1 waves exceed it: chunked prefill is "
                           "exercised"), line


def test_a_hub_model_gets_its_kv_cache_alone_against_the_share(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = seventy_b(tmp_path)
    cfg.write_text(cfg.read_text().replace("serve, llama70b,", "serve, org/llama-70b,"))
    doc = plan_json(capsys, str(cfg), "--gpu-memory", "80")
    assert doc["memory"][0].startswith(
        "engines[0].http.server.launch: weights not read (org/llama-70b is not a folder with safetensors here) "
        "against a 0.9 share of its memory (72.0 of 80 GiB, --gpu-memory); the KV cache per GPU"), doc["memory"]
    assert doc["memory"][0].endswith("the KV cache alone (weights not read) fit at bs 1/8/32 if the weights take "
                                     "at most 68.2 GiB per GPU"), doc["memory"]


def test_nvidia_smi_gives_the_smallest_gpus_size_where_torch_sees_none(tmp_path, monkeypatch):
    from gate.run.weights import nvidia_smi_bytes

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '81559\\n40960\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert nvidia_smi_bytes() == 40960 << 20  # MiB, the smaller GPU
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2; exit 9\n")
    assert nvidia_smi_bytes() is None
