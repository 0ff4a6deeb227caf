"""k and the draft are given twice for a launched server (the config and its launch line): a mismatch is refused."""

from __future__ import annotations

import json

import pytest

from gate.cli import main
from gate.inputs.launch import mismatches, read_launch

CONFIG = """\
version: 1
models:
  target: {{path: "specguard:demo/target"}}
  draft: {{path: {draft}}}
speculation: {{num_draft_tokens: 4}}
engines:
  - type: http
    name: stack
    http:
      preset: {preset}
      server: {{url: "http://127.0.0.1:8000", launch: {server}}}
      reference: {{url: "http://127.0.0.1:8001", launch: {reference}}}
"""


def validate(tmp_path, capsys, preset, server, reference=("serve", "org/target"), draft='"specguard:demo/draft"'):
    path = tmp_path / "specguard.yaml"
    path.write_text(CONFIG.format(preset=preset, server=json.dumps(list(server)),
                                  reference=json.dumps(list(reference)), draft=draft))
    code = main(["validate", str(path)])
    return code, capsys.readouterr().err


VLLM_SPEC = '{"model": "org/draft", "num_speculative_tokens": %d}'


@pytest.mark.parametrize(("preset", "server"), [
    ("vllm", ["vllm", "serve", "org/target", "--speculative-config", VLLM_SPEC % 7]),
    ("vllm", ["vllm", "serve", "org/target", f"--speculative-config={VLLM_SPEC % 7}"]),
    ("vllm", ["vllm", "serve", "org/target", "--speculative-model", "org/draft", "--num-speculative-tokens", "7"]),
    ("sglang", ["python", "-m", "sglang.launch_server", "--speculative-algorithm", "STANDALONE",
                "--speculative-num-steps", "7"]),
    ("sglang", ["python", "-m", "sglang.launch_server", "--speculative-num-draft-tokens", "8"]),
    ("llamacpp", ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--spec-draft-n-max", "7"]),
    ("llamacpp", ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--draft-max", "7"]),
    ("tgi", ["text-generation-launcher", "--speculate", "7"]),
])
def test_a_launch_line_whose_k_differs_from_the_config_is_refused(tmp_path, capsys, preset, server):
    code, err = validate(tmp_path, capsys, preset, server)
    assert code == 2
    assert "engines[0].http.server.launch" in err and "k differs" in err
    assert "gives 7" in err and "speculation.num_draft_tokens gives 4" in err


@pytest.mark.parametrize(("preset", "server"), [
    ("vllm", ["vllm", "serve", "org/target", "--speculative-config", VLLM_SPEC % 4]),
    ("sglang", ["python", "-m", "sglang.launch_server", "--speculative-num-steps", "4",
                "--speculative-num-draft-tokens", "5"]),
    ("sglang", ["python", "-m", "sglang.launch_server", "--speculative-num-draft-tokens", "5"]),
    ("llamacpp", ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--spec-draft-n-max", "4", "--metrics"]),
    ("llamacpp", ["llama-server", "-m", "t.gguf", "-md", "d.gguf"]),  # k not given: the stack's default, unread
    ("tgi", ["text-generation-launcher", "--speculate", "4"]),
])
def test_a_launch_line_that_agrees_or_says_nothing_is_accepted(tmp_path, capsys, preset, server):
    code, err = validate(tmp_path, capsys, preset, server)
    assert code == 0, err


def test_sglang_tree_drafts_do_not_give_k_from_the_draft_token_count():
    spec = read_launch("sglang", ["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16"])
    assert spec.k is None
    assert read_launch("sglang", ["--speculative-num-draft-tokens", "5"]).k == 4


def test_a_draft_named_differently_on_the_hub_is_refused_and_unlike_names_are_not_compared(tmp_path, capsys):
    server = ["vllm", "serve", "org/target", "--speculative-config", VLLM_SPEC % 4]
    code, err = validate(tmp_path, capsys, "vllm", server, draft='"org/other-draft"')
    assert code == 2 and "the draft differs" in err and "'org/draft'" in err and "'org/other-draft'" in err
    assert mismatches("vllm", server, 4, "ORG/Draft", "server") == []  # hub ids: case-insensitive
    # a local folder in the config, a GGUF file or server-side path on the line: not comparable by name
    assert mismatches("llamacpp", ["-md", "/models/draft.gguf"], 4, "./draft", "server") == []
    assert mismatches("vllm", ["--speculative-model", "/mnt/draft"], 4, "org/draft", "server") == []


def test_a_reference_that_speculates_is_refused(tmp_path, capsys):
    server = ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--spec-draft-n-max", "4"]
    code, err = validate(tmp_path, capsys, "llamacpp", server, reference=["llama-server", "-m", "t.gguf", "-md",
                                                                         "d.gguf"])
    assert code == 2 and "engines[0].http.reference.launch" in err and "speculation off" in err


@pytest.mark.parametrize(("value", "says"), [("{not json", "not JSON"), ("[4]", "expected a JSON object"),
                                             ('{"num_speculative_tokens": "many"}', "expected a whole number")])
def test_a_malformed_speculative_config_is_a_clear_error(tmp_path, capsys, value, says):
    code, err = validate(tmp_path, capsys, "vllm", ["vllm", "serve", "org/t", "--speculative-config", value])
    assert code == 2 and says in err and "engines[0].http.server.launch" in err


# --- every form of a vLLM launch line (issue 48, item 4) -------------------------------------------


@pytest.mark.parametrize("form", [
    ["--speculative-config.num_speculative_tokens", "6", "--speculative-config.model", "org/draft"],
    ["--speculative-config.num_speculative_tokens=6"],
    ["--speculative_config.num_speculative_tokens", "6"],
    ["--speculative-config", VLLM_SPEC % 4, "--speculative-config.num_speculative_tokens", "6"],  # dotted wins
])
def test_k_given_in_vllms_dotted_form_is_read_and_a_mismatch_refused(tmp_path, capsys, form):
    code, err = validate(tmp_path, capsys, "vllm", ["vllm", "serve", "org/target", *form])
    assert code == 2 and "k differs" in err and "gives 6" in err and "speculation.num_draft_tokens gives 4" in err


def test_dotted_method_and_a_dotted_reference_are_read():
    spec = read_launch("vllm", ["--speculative-config.method", "ngram", "--speculative-config.prompt_lookup_max",
                                "5", "--speculative-config.num_speculative_tokens", "4"])
    assert (spec.method, spec.k, spec.lookup) == ("ngram", 4, (None, 5))
    said = mismatches("vllm", ["vllm", "serve", "t", "--speculative-config.method=ngram"], 4, "org/draft", "server")
    assert any("the method differs" in m and "drop models.draft" in m for m in said), said
    assert "speculation off" in mismatches("vllm", ["--speculative-config.num_speculative_tokens", "4"], 4, None,
                                           "reference")[0]


def test_a_vllm_config_file_is_read_and_the_command_line_wins_over_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the gate launches the server in its own working directory: the file is read there
    (tmp_path / "serve.yaml").write_text("model: org/target\nspeculative_config:\n  model: org/draft\n"
                                         "  num_speculative_tokens: 6\n")
    spec = read_launch("vllm", ["vllm", "serve", "--config", "serve.yaml"])
    assert (spec.k, spec.draft) == (6, "org/draft") and "serve.yaml" in spec.k_flag
    assert read_launch("vllm", ["--config", "serve.yaml", "--speculative-config", VLLM_SPEC % 4]).k == 4
    assert read_launch("vllm", ["--config", "serve.yaml", "--speculative-config.num_speculative_tokens", "3"]).k == 3
    (tmp_path / "old.yaml").write_text("num-speculative-tokens: 5\n")
    assert read_launch("vllm", ["--config", "old.yaml"]).k == 5
    code, err = validate(tmp_path, capsys, "vllm", ["vllm", "serve", "--config", "serve.yaml"])
    assert code == 2 and "k differs" in err and "gives 6" in err


def test_a_speculation_flag_the_gate_cannot_read_is_a_warning_naming_it(tmp_path, capsys):
    from gate.inputs.launch import unread

    assert unread("vllm", ["vllm", "serve", "t", "--speculative-config", "{}", "--speculative-config.method", "x",
                           "--num-speculative-tokens", "4"]) == []
    said = unread("vllm", ["vllm", "serve", "t", "--speculative-draft-tensor-parallel-size=1", "--config",
                           "gone.yaml"])
    assert said[0].startswith("--speculative-draft-tensor-parallel-size is about speculation and the gate does not "
                              "read")
    assert said[1].startswith("--config gone.yaml: cannot read it")
    assert unread("llamacpp", ["llama-server", "-md", "d.gguf", "--spec-type", "draft-simple", "--spec-replace",
                               "a", "b"]) == [unread("llamacpp", ["--spec-replace"])[0]]
    assert unread("sglang", ["--speculative-algorithm", "EAGLE", "--speculative-foo", "1"])[0].startswith(
        "--speculative-foo")
    assert unread("tgi", ["--speculate", "7"]) == []  # TGI's k, read
    assert unread("openai", ["--speculative-x", "7"]) == []  # a preset whose flags the gate does not read at all

    path = tmp_path / "specguard.yaml"
    path.write_text(CONFIG.format(preset="vllm", draft='"specguard:demo/draft"', reference=json.dumps(["serve", "t"]),
                                  server=json.dumps(["vllm", "serve", "org/target", "--speculative-config",
                                                     VLLM_SPEC % 4, "--speculative-draft-tensor-parallel-size",
                                                     "1"])))
    code = main(["validate", str(path)])
    said = capsys.readouterr()
    assert code == 0, said.err  # a warning, not a refusal
    assert "engines[0].http.server.launch: --speculative-draft-tensor-parallel-size is about speculation" in \
        said.out + said.err


# --- chunked prefill (issue 48, item 3) ------------------------------------------------------------


def test_the_prefill_chunk_is_read_per_stack():
    from gate.inputs.launch import prefill_chunk

    assert prefill_chunk("vllm", ["vllm", "serve", "m", "--max-num-batched-tokens", "128"]) == \
        (128, "--max-num-batched-tokens")
    assert prefill_chunk("vllm", ["vllm", "serve", "m"]) == (None, None)  # vLLM picks by version and hardware
    assert prefill_chunk("sglang", ["--chunked-prefill-size=4096"]) == (4096, "--chunked-prefill-size")
    assert prefill_chunk("llamacpp", ["llama-server", "-m", "t.gguf"]) == (512, "default")
    assert prefill_chunk("llamacpp", ["llama-server", "-ub", "64"]) == (64, "-ub")
    assert prefill_chunk("tgi", ["--max-batch-prefill-tokens", "9"]) == (None, None)


@pytest.mark.parametrize(("chunk", "says"), [
    (', "--max-num-batched-tokens", "64"',
     "prefill chunk --max-num-batched-tokens 64 tokens per scheduler step, shared by the requests of a wave (a batch "
     "sent together): bs 1: 1 of 1 waves exceed it: chunked prefill is exercised"),
    (', "--max-num-batched-tokens", "100000"', "no wave exceeds it (the largest is"),
    ("", "the line sets no prefill chunk"),
])
def test_plan_names_per_server_whether_a_prompt_is_prefilled_in_chunks(tmp_path, chunk, says):
    from gate.run.estimate import plan_config

    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "long-0", "slice": "long", "prompt": "word " * 120}) + "\n")
    path = tmp_path / "specguard.yaml"
    path.write_text(f"""\
version: 1
models: {{target: {{path: "specguard:demo/target"}}, local_weights: false}}
speculation: {{num_draft_tokens: 4, method: ngram}}
batching: {{batch_sizes: [1]}}
suite: {{path: suite.jsonl}}
engines:
  - type: http
    http:
      preset: vllm
      server: {{url: "http://127.0.0.1:9", launch: ["vllm", "serve", "m", "--speculative-config",
                '{{"method": "ngram", "num_speculative_tokens": 4}}'{chunk}]}}
      reference: {{url: "http://127.0.0.1:10", launch: ["vllm", "serve", "m"{chunk}]}}
""")
    report = plan_config(str(path))
    assert [line.split(":")[0] for line in report.prefill] == ["engines[0].http.server", "engines[0].http.reference"]
    assert all(says in line for line in report.prefill), report.prefill
    assert f"prefill: {report.prefill[0]}" in report.lines()


# --- a remote server's hardware key (issue 48, item 7) ----------------------------------------------

REMOTE = """\
version: 1
models: {target: {path: "specguard:demo/target"}, local_weights: false}
speculation: {num_draft_tokens: 4, method: ngram}
baseline: {%s}
engines:
  - type: http
    http:
      preset: vllm
      server: {url: "%s"}
      reference: {url: "http://127.0.0.1:8001"}
"""


def test_a_server_on_another_machine_needs_its_hardware_named(tmp_path, capsys):
    from gate.inputs.config import parse_config
    from gate.inputs.launch import remote_servers

    def servers(url: str, launch: str = "") -> list:
        text = REMOTE % ("", url)
        if launch:
            text = text.replace(f'{{url: "{url}"}}', f'{{url: "{url}", launch: {launch}}}')
        return remote_servers(parse_config(text, tmp_path / "c.yaml").config.engines)

    assert servers("http://gpu-box.internal:8000") == [("engines[0].http.server", "http://gpu-box.internal:8000")]
    assert servers("http://10.0.0.5:8000") and not servers("http://localhost:8000")
    assert not servers("http://127.0.0.1:8000") and not servers("http://[::1]:8000")
    assert not servers("http://10.0.0.5:8000", '["vllm", "serve", "m"]')  # launched here: the runner's hardware

    path = tmp_path / "specguard.yaml"
    path.write_text(REMOTE % ("", "http://10.0.0.5:8000"))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "baseline.hardware_key" in err and "engines[0].http.server (http://10.0.0.5:8000) runs on another" in err
    assert "--hardware-key" in err and not (tmp_path / "out").exists()  # refused before anything ran
    assert main(["validate", str(path)]) == 0
    said = capsys.readouterr()
    assert "runs on another machine: `gate` and `run` refuse it" in said.out + said.err
    path.write_text(REMOTE % ("hardware_key: h100-80gb-tp4", "http://10.0.0.5:8000"))
    assert main(["validate", str(path)]) == 0
    said = capsys.readouterr()
    assert "another machine" not in said.out + said.err


# --- the reference's line against the server's, the head, every speculation key (issue 54, items 1 and 2) ---------

PAIR = """\
version: 1
models: {{target: {{path: "specguard:demo/target"}}, local_weights: false}}
speculation: {speculation}
batching: {{batch_sizes: [1, 4, 8]}}
engines:
  - type: http
    http:
      preset: {preset}
      server: {{url: "http://127.0.0.1:8000", launch: {server}}}
      reference: {{url: "http://127.0.0.1:8001", launch: {reference}}}{allow}
"""
NGRAM = "{num_draft_tokens: 4, method: ngram}"
START = {"vllm": ["vllm", "serve", "org/target"], "sglang": ["python", "-m", "sglang.launch_server"],
         "llamacpp": ["llama-server", "-m", "t.gguf"], "tgi": ["text-generation-launcher", "--model-id", "org/t"]}
SPEC = {"vllm": ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'],
        "sglang": ["--speculative-algorithm", "NGRAM", "--speculative-num-steps", "4"],
        "llamacpp": [], "tgi": []}


def pair(tmp_path, capsys, preset, server, reference, allow=None, speculation=NGRAM, command="validate"):
    """``command`` on a config whose two launch lines are ``preset``'s start, the server's speculation and the extra
    flags given: (exit code, all it printed)."""
    path = tmp_path / "specguard.yaml"
    path.write_text(PAIR.format(
        preset=preset, speculation=speculation,
        server=json.dumps(START[preset] + SPEC[preset] + list(server)),
        reference=json.dumps(START[preset] + list(reference)),
        allow=f"\n      allow_differences: {json.dumps(allow)}" if allow is not None else ""))
    code = main([command, str(path)])
    said = capsys.readouterr()
    return code, said.out + said.err


@pytest.mark.parametrize(("preset", "server", "reference", "says"), [
    ("vllm", ["--tensor-parallel-size", "4"], ["-tp", "2"],
     "tensor_parallel differs: the reference's -tp 2, the server's --tensor-parallel-size 4"),
    ("vllm", ["--dtype", "bfloat16"], ["--dtype", "float16"], "dtype differs: the reference's --dtype float16, the "
                                                             "server's --dtype bfloat16"),
    ("vllm", [], ["--dtype", "float16"], "the server's default auto (its line sets no --dtype)"),
    ("vllm", ["--max-num-batched-tokens", "512"], ["--max-num-batched-tokens=4096"],
     "batch_budget differs: the reference's --max-num-batched-tokens 4096, the server's --max-num-batched-tokens 512"),
    ("vllm", ["--no-enable-prefix-caching"], [], "prefix_caching differs"),
    ("vllm", ["--enforce-eager"], [], "eager differs: the reference's default false (its line sets no "
                                      "--enforce-eager), the server's --enforce-eager"),
    ("sglang", ["--tp-size", "4"], ["--tp", "2"], "tensor_parallel differs: the reference's --tp 2"),
    ("sglang", ["--disable-cuda-graph"], [], "eager differs"),
    ("llamacpp", ["-ngl", "99"], [], "gpu_layers differs: the reference's -ngl left to the stack"),
    ("llamacpp", ["-ub", "64"], [], "chunked_prefill differs: the reference's default 512 (its line sets no -ub), "
                                    "the server's -ub 64"),
    ("tgi", ["--num-shard", "4"], ["--num-shard", "2"], "tensor_parallel differs"),
    ("tgi", ["--quantize", "fp8"], [], "quantization differs"),
])
def test_a_reference_launched_on_another_stack_setting_is_refused_naming_both_flags(tmp_path, capsys, preset, server,
                                                                                    reference, says):
    code, said = pair(tmp_path, capsys, preset, server, reference)
    assert code == 2 and "engines[0].http.reference.launch" in said and says in said, said
    assert "the speedup" in said or "the noise floor" in said
    assert "http.allow_differences: [" in said  # the way to allow it on purpose


def test_a_reference_serving_another_model_is_refused_and_so_is_a_model_other_than_the_targets(tmp_path, capsys):
    from gate.inputs.launch_checks import pair_differences

    server = ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"]
    reference = ["vllm", "serve", "meta-llama/Llama-3.3-70B-Instruct"]
    found = pair_differences("vllm", server, reference, "meta-llama/Llama-3.1-70B-Instruct")
    assert [(d.setting, d.refused, d.role) for d in found] == [("model", True, "reference"), ("model", True,
                                                                                                "reference")]
    assert "models.target.path is 'meta-llama/Llama-3.1-70B-Instruct'" in found[0].message
    assert "'meta-llama/Llama-3.3-70B-Instruct'" in found[0].message
    assert "model differs: the reference's vllm serve meta-llama/Llama-3.3-70B-Instruct" in found[1].message
    assert pair_differences("vllm", server, ["vllm", "serve", "META-LLAMA/Llama-3.1-70B-Instruct"], None) == []
    assert pair_differences("vllm", ["vllm", "serve", "./models/m/"], ["vllm", "serve", "models/m"], None) == []
    # a hub id beside a path: compared by the last part, and a warning where it differs (one model in two forms?)
    assert pair_differences("vllm", server, ["vllm", "serve", "/models/Llama-3.1-70B-Instruct"], None) == []
    [maybe] = pair_differences("vllm", server, ["vllm", "serve", "/models/llama70b"], None)
    assert not maybe.refused and "check by hand" in maybe.message

    code, said = pair(tmp_path, capsys, "vllm", [], [])  # START's org/target on both: agrees
    assert code == 0, said
    path = tmp_path / "specguard.yaml"
    path.write_text(path.read_text().replace('"serve", "org/target"]}', '"serve", "org/other"]}', 1))
    assert main(["validate", str(path)]) == 2
    assert "model differs: the reference's vllm serve org/other, the server's vllm serve org/target" in \
        capsys.readouterr().err


@pytest.mark.parametrize(("preset", "server", "reference"), [
    ("vllm", ["--tensor-parallel-size", "1"], []),  # the documented default
    ("vllm", ["-tp", "2", "--dtype", "half"], ["--tensor-parallel-size=2", "--dtype", "float16"]),  # aliases
    ("vllm", ["--max-num-batched-tokens", "4096", "--port", "8000"], ["--max_num_batched_tokens=4096"]),
    ("llamacpp", ["-ub", "512", "-fa", "on"], ["--ubatch-size", "512", "--flash-attn", "on"]),
    ("sglang", ["--mem-fraction-static", "0.4"], ["--mem-fraction-static", "0.4"]),
])
def test_lines_that_agree_under_aliases_and_defaults_pass(tmp_path, capsys, preset, server, reference):
    code, said = pair(tmp_path, capsys, preset, server, reference)
    assert code == 0, said
    assert "differs" not in said


def test_a_deliberate_difference_allowed_by_name_passes_and_still_says_what_it_distorts(tmp_path, capsys):
    server, reference = ["--max-num-batched-tokens", "512", "--dtype", "float16"], \
        ["--max-num-batched-tokens", "4096", "--dtype", "bfloat16"]
    code, said = pair(tmp_path, capsys, "vllm", server, reference, allow=["batch_budget"])
    assert code == 2 and "dtype differs" in said and "batch_budget differs" not in said, said
    for command in ("validate", "plan"):
        code, said = pair(tmp_path, capsys, "vllm", server, reference, allow=["batch_budget", "dtype"],
                          command=command)
        assert code == 0, said
        assert "engines[0].http.reference.launch: batch_budget differs: the reference's --max-num-batched-tokens " \
               "4096, the server's --max-num-batched-tokens 512" in said
        assert "(allowed by http.allow_differences)" in said and "the speedup would compare two schedulers" in said


@pytest.mark.parametrize(("allow", "server", "says"), [
    (["dtyp"], ["--dtype", "float16"], "allow_differences"),  # not a setting: pydantic names the valid ones
    (["dtype", "dtype"], ["--dtype", "float16"], "dtype named more than once"),
    (["dtype", "eager"], ["--dtype", "float16"], "eager: the launch lines do not differ there, so the allowance "
                                                  "allows nothing"),
])
def test_allow_differences_is_validated_strictly(tmp_path, capsys, allow, server, says):
    code, said = pair(tmp_path, capsys, "vllm", server, [], allow=allow)
    assert code == 2 and says in said and "http.allow_differences" in said, said
    if allow == ["dtyp"]:
        assert "'tensor_parallel'" in said and "'batch_budget'" in said


def test_an_allowance_without_two_readable_lines_is_refused(tmp_path, capsys):
    path = tmp_path / "specguard.yaml"
    path.write_text(PAIR.format(preset="vllm", speculation=NGRAM, allow="\n      allow_differences: [dtype]",
                                server=json.dumps(START["vllm"] + SPEC["vllm"]),
                                reference=json.dumps(["bash", "-c", "vllm serve org/target --dtype half"])))
    assert main(["validate", str(path)]) == 2
    assert "there is no pair of launch lines the gate reads" in capsys.readouterr().err


def test_a_memory_share_or_length_difference_is_a_warning_not_a_refusal(tmp_path, capsys):
    code, said = pair(tmp_path, capsys, "vllm", ["--gpu-memory-utilization", "0.5", "--max-model-len", "4096"],
                      ["--gpu-memory-utilization", "0.4"])
    assert code == 0, said
    assert "warning: engines[0].http.reference.launch: memory differs: the reference's --gpu-memory-utilization 0.4, " \
           "the server's --gpu-memory-utilization 0.5" in said
    assert "max_model_len differs" in said and "http.allow_differences: [max_model_len]" in said


EAGLE = "{num_draft_tokens: 4, method: eagle3, head: %s}"


@pytest.mark.parametrize(("preset", "server"), [
    ("vllm", ["--speculative-config", json.dumps({"method": "eagle3", "model": "acme/eagle3-llama70b-v7",
                                                  "num_speculative_tokens": 4})]),
    ("vllm", ["--speculative-config.method", "eagle3", "--speculative-config.model", "acme/eagle3-llama70b-v7"]),
    ("sglang", ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "acme/eagle3-llama70b-v7"]),
])
def test_a_served_head_other_than_speculation_head_is_refused(tmp_path, capsys, preset, server):
    path = tmp_path / "specguard.yaml"
    for head, code in (("acme/eagle3-llama70b-v6", 2), ("ACME/eagle3-llama70b-v7", 0), ("./heads/v6", 0)):
        path.write_text(PAIR.format(preset=preset, speculation=EAGLE % head, allow="",
                                    server=json.dumps(START[preset] + server), reference=json.dumps(START[preset])))
        assert main(["validate", str(path)]) == code, head
        err = capsys.readouterr().err
        if code == 2:
            assert "engines[0].http.server.launch: the head differs:" in err
            assert "gives 'acme/eagle3-llama70b-v7', speculation.head gives 'acme/eagle3-llama70b-v6'" in err
    spec = read_launch(preset, START[preset] + server)
    assert (spec.head, spec.draft, spec.method) == ("acme/eagle3-llama70b-v7", None, "eagle3")
    assert "speculation off" in mismatches(preset, START[preset] + server, 4, None, "reference")[0]


@pytest.mark.parametrize("form", [
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, "disable_by_batch_size": 4}'],
    ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}',
     "--speculative-config.disable_by_batch_size", "4"],
    ["--speculative-config.method=ngram", "--speculative-config.disable-by-batch-size=4"],
    ["--speculative-config", '{"method": "ngram"}', "--speculative-disable-by-batch-size", "4"],  # the older flag
])
def test_disable_by_batch_size_names_the_batch_sizes_that_time_no_speculation_in_validate_and_plan(tmp_path, capsys,
                                                                                                   form):
    path = tmp_path / "specguard.yaml"
    path.write_text(PAIR.format(preset="vllm", speculation=NGRAM, allow="", reference=json.dumps(START["vllm"]),
                                server=json.dumps(START["vllm"] + form)))
    for command in ("validate", "plan"):
        assert main([command, str(path)]) == 0
        said = capsys.readouterr()
        assert "isable-by-batch-size 4 turns" in said.out + said.err or "disable_by_batch_size 4 turns" in said.out
        assert "4 turns speculation off while 4 or more requests are running: batch size 4/8 decodes without " \
               "speculation on the server" in said.out + said.err
        assert "is about speculation and the gate does not read" not in said.out + said.err


def test_disable_by_batch_size_above_every_batch_size_still_says_so_and_the_reference_gets_no_such_note():
    from gate.inputs.launch_checks import disabled_sizes, line_notes

    line = START["vllm"] + ["--speculative-config", '{"method": "ngram", "disable_by_batch_size": 64}']
    assert "every batch size here (1/4/8) is below it, but a request-rate replay" in disabled_sizes("vllm", line,
                                                                                                  [1, 4, 8])
    assert disabled_sizes("vllm", START["vllm"], [1, 4, 8]) is None
    assert line_notes("vllm", START["vllm"], [1, 4, 8], "reference") == []


def test_every_speculative_config_key_is_read_or_named(tmp_path, capsys):
    from gate.inputs.launch_checks import line_notes

    line = START["vllm"] + ["--speculative-config", json.dumps({
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5, "draft_tensor_parallel_size": 1}),
        "--speculative-config.acceptance_method", "typical_acceptance_sampler"]
    [note] = line_notes("vllm", line, [1])
    assert note.startswith("--speculative-config and its dotted flags: the gate does not read its keys "
                           "draft_tensor_parallel_size, acceptance_method: check by hand"), note
    (tmp_path / "serve.yaml").write_text("speculative_config: {method: ngram, disable_by_batch_size: 8, "
                                         "disable_padded_drafter_batch: true}\n")
    notes = line_notes("vllm", START["vllm"] + ["--config", str(tmp_path / "serve.yaml")], [1, 8])
    assert "speculative-config: the gate does not read its key disable_padded_drafter_batch" in notes[0], notes
    assert "disable_by_batch_size 8 turns speculation off while 8 or more requests are running: batch size 8 " \
           "decodes" in notes[1], notes
    code, said = pair(tmp_path, capsys, "vllm", ["--speculative-config.speculative_token_tree", "[[0]]"], [])
    assert code == 0 and "warning: engines[0].http.server.launch: --speculative-config and its dotted flags: the " \
                         "gate does not read its key speculative_token_tree: check by hand that it changes" in said


@pytest.mark.parametrize(("server", "says"), [
    (["bash", "-c", "vllm serve org/target --speculative-config.num_speculative_tokens 5"],
     "bash -c runs a shell line the gate does not read: k, the method, the draft or head, and the settings the "
     "reference must share with the server are not checked"),
    (["./serve.sh", "org/target"], "'./serve.sh' does not start vllm itself (expected vllm serve MODEL, or python -m "
                                   "vllm.entrypoints.openai.api_server)"),
])
def test_a_line_the_gate_cannot_read_gets_a_note_saying_what_is_unchecked(tmp_path, capsys, server, says):
    path = tmp_path / "specguard.yaml"
    path.write_text(PAIR.format(preset="vllm", speculation=NGRAM, allow="", server=json.dumps(server),
                                reference=json.dumps(START["vllm"] + ["--dtype", "half"])))
    for command in ("validate", "plan"):
        assert main([command, str(path)]) == 0  # nothing read, nothing refused: said instead
        said = capsys.readouterr()
        assert f"engines[0].http.server.launch: {says}" in said.out + said.err


def test_each_preset_reads_its_table_under_every_alias_and_vllms_config_file(tmp_path, monkeypatch):
    from gate import stacks
    from gate.inputs.launch_checks import served, starts_stack
    from gate.stacks.base import SETTINGS

    assert all(set(s.settings) <= set(SETTINGS) for s in stacks.stacks())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.yaml").write_text("tensor_parallel_size: 4\nenforce-eager: true\n")
    got = served("vllm", ["vllm", "serve", "m", "--config", "serve.yaml", "--enforce-eager=false"])
    assert got["tensor_parallel"][0][1:] == ("4", "--config tensor-parallel-size")
    assert got["eager"][0][1] == "false", "the command line wins over the file"
    assert got["model"][0][1] == "m"
    assert served("llamacpp", ["llama-server", "-fa", "--port", "8"])["attention"][0][1] == "true"  # a bare switch
    assert starts_stack("vllm", ["env", "X=1", "numactl", "-N", "0", ".venv/bin/vllm", "serve", "m"])
    assert starts_stack("vllm", ["docker", "run", "vllm/vllm-openai:v0.32.0", "--model", "m"])
    assert not starts_stack("vllm", ["bash", "-c", "vllm serve m"])
    assert not starts_stack("openai", ["vllm", "serve", "m"])
