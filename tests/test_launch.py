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
    ("tgi", ["text-generation-launcher", "--speculate", "7"]),  # a preset whose flags are not read
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
    assert unread("tgi", ["--speculate", "7"]) == []  # a preset whose flags the gate does not read at all

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
     "prefill chunk --max-num-batched-tokens 64: 1 of 1 prompts are longer"),
    (', "--max-num-batched-tokens", "100000"', "no prompt is longer (the longest is"),
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
