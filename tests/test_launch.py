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
