"""`specguard changed` follows what the launch lines and the config load (issue 54, item 3): a vLLM `--config` file,
the chat template, the head, the draft, the suite, a plug-in module; each change said at field level, in a scratch
git repository (base committed, edited, head committed); an unrelated file stays "unchanged"."""

from __future__ import annotations

import json

import pytest

from gate.cli import main
from gate.inputs.launch_diff import LINE_CAP, file_changes, flag_changes, inert, loaded_files
from tests.test_changed import git, write

SPEC = json.dumps({"method": "eagle3", "model": "./heads/eagle", "num_speculative_tokens": 4})
SERVED = f"""\
version: 1
models: {{target: {{path: "meta-llama/Llama-3.1-8B-Instruct"}}, local_weights: false}}
speculation: {{num_draft_tokens: 4, method: eagle3, head: "acme/eagle3-llama8b"}}
batching: {{batch_sizes: [1, 8]}}
suite: {{path: suites/prompts.jsonl}}
engines:
  - type: http
    http:
      preset: vllm
      server:
        url: "http://127.0.0.1:8000"
        launch: ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--config", "serving/vllm.yaml",
                 "--chat-template", "serving/chat.jinja", "--max-num-batched-tokens", "2048",
                 "--speculative-config", '{SPEC}']
      reference:
        url: "http://127.0.0.1:8001"
        launch: ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--config", "serving/vllm.yaml",
                 "--chat-template", "serving/chat.jinja", "--max-num-batched-tokens", "2048"]
"""
VLLM_YAML = "# the stack's settings, read by `vllm serve --config`\nmax-num-batched-tokens: 2048\nmax_num_seqs: 64\n"
FILES = {"specguard.yaml": SERVED, "serving/vllm.yaml": VLLM_YAML, "serving/chat.jinja": "{{ messages }}",
         "heads/eagle/config.json": json.dumps({"num_hidden_layers": 1}), "suites/prompts.jsonl": "{}\n",
         "README.md": "x"}


@pytest.fixture()
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    return root


def changed(root, base, capsys, monkeypatch, tmp_path) -> tuple[bool, list[str]]:
    """(changed, the reasons printed) of `specguard changed` from ``base`` to the checkout's HEAD."""
    out = tmp_path / "github_output"
    out.write_text("")
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert main(["changed", "--repo", str(root), "--base", base]) == 0
    lines = capsys.readouterr().out.splitlines()
    flag = out.read_text().strip()
    assert flag in ("changed=true", "changed=false")
    return flag == "changed=true", [ln.removeprefix("  - ") for ln in lines[1:]]


def edit(root, files, capsys, monkeypatch, tmp_path, base_files=None) -> tuple[bool, list[str]]:
    base = write(root, base_files or FILES)
    write(root, files)
    return changed(root, base, capsys, monkeypatch, tmp_path)


def test_a_batching_change_in_the_vllm_config_file_is_said_by_key(repo, capsys, monkeypatch, tmp_path):
    """The bug: `--config FILE`'s max-num-batched-tokens moved and `changed` said "unchanged"."""
    yes, reasons = edit(repo, {"serving/vllm.yaml": VLLM_YAML.replace("2048", "4096")}, capsys, monkeypatch,
                        tmp_path)
    assert yes and reasons == ["serving/vllm.yaml: max-num-batched-tokens 2048 → 4096 "
                               "(engines[0].http.server.launch --config)"], reasons


def test_the_vllm_config_file_is_compared_as_vllm_reads_it(repo, capsys, monkeypatch, tmp_path):
    """A comment, the order of keys, and max_num_seqs against max-num-seqs (vLLM reads both) are no change; a key
    added is `unset → value`."""
    same = "max_num_seqs: 64   # the same\nmax-num-batched-tokens: 2048\n"
    yes, reasons = edit(repo, {"serving/vllm.yaml": same}, capsys, monkeypatch, tmp_path)
    assert not yes, reasons
    write(repo, {"serving/vllm.yaml": same + "enable-chunked-prefill: true\n"})
    yes, reasons = changed(repo, git(repo, "rev-parse", "HEAD~2"), capsys, monkeypatch, tmp_path)
    assert yes and reasons == ["serving/vllm.yaml: enable-chunked-prefill unset → true "
                               "(engines[0].http.server.launch --config)"], reasons


def test_a_chat_template_a_launch_line_loads_is_a_change(repo, capsys, monkeypatch, tmp_path):
    yes, reasons = edit(repo, {"serving/chat.jinja": "{{ messages }}{% if add_generation_prompt %}A:{% endif %}"},
                        capsys, monkeypatch, tmp_path)
    assert yes and reasons == ["serving/chat.jinja changed (engines[0].http.server.launch --chat-template)"], reasons


def test_a_chat_template_named_inside_the_config_file_is_followed(repo, capsys, monkeypatch, tmp_path):
    files = {**FILES, "specguard.yaml": SERVED.replace('"--chat-template", "serving/chat.jinja", ', ""),
             "serving/vllm.yaml": VLLM_YAML + "chat-template: serving/other.jinja\n", "serving/other.jinja": "A"}
    yes, reasons = edit(repo, {"serving/other.jinja": "B"}, capsys, monkeypatch, tmp_path, files)
    assert yes and reasons == ["serving/other.jinja changed (engines[0].http.server.launch --config "
                               "serving/vllm.yaml chat-template)"], reasons


def test_a_head_the_launch_line_serves_from_the_repository_is_a_change(repo, capsys, monkeypatch, tmp_path):
    yes, reasons = edit(repo, {"heads/eagle/config.json": json.dumps({"num_hidden_layers": 2}),
                               "heads/eagle/model.safetensors": "new weights"}, capsys, monkeypatch, tmp_path)
    why = "(engines[0].http.server.launch --speculative-config model, the head: heads/eagle)"
    assert yes and reasons == [f"heads/eagle/config.json: num_hidden_layers 1 → 2 {why}",
                               f"heads/eagle/model.safetensors changed {why}"], reasons


def test_a_head_the_config_names_is_a_change(repo, capsys, monkeypatch, tmp_path):
    files = {**FILES, "specguard.yaml": SERVED.replace('head: "acme/eagle3-llama8b"', "head: heads/eagle")}
    yes, reasons = edit(repo, {"heads/eagle/config.json": json.dumps({"num_hidden_layers": 2})}, capsys,
                        monkeypatch, tmp_path, files)
    assert yes and reasons == ["heads/eagle/config.json: num_hidden_layers 1 → 2 (speculation.head: heads/eagle)"]


def test_a_draft_model_the_launch_line_serves_is_a_change(repo, capsys, monkeypatch, tmp_path):
    spec = json.dumps({"model": "./drafts/small", "num_speculative_tokens": 4})
    cfg = SERVED.replace(SPEC, spec).replace('method: eagle3, head: "acme/eagle3-llama8b"', "method: draft_model")
    cfg = cfg.replace('local_weights: false}', 'local_weights: false, draft: {path: "acme/small"}}')
    files = {**FILES, "specguard.yaml": cfg, "drafts/small/config.json": '{"vocab_size": 100}'}
    yes, reasons = edit(repo, {"drafts/small/tokenizer.json": "{}"}, capsys, monkeypatch, tmp_path, files)
    assert yes and reasons == ["drafts/small/tokenizer.json changed (engines[0].http.server.launch "
                               "--speculative-config model, the draft: drafts/small)"], reasons


def test_a_suite_change_is_a_change(repo, capsys, monkeypatch, tmp_path):
    yes, reasons = edit(repo, {"suites/prompts.jsonl": "{}\n{}\n"}, capsys, monkeypatch, tmp_path)
    assert yes and reasons == ["suites/prompts.jsonl changed (suite.path)"], reasons


def test_a_plugin_module_change_is_a_change(repo, capsys, monkeypatch, tmp_path):
    cfg = SERVED[:SERVED.index("engines:")].replace(', local_weights: false', '') + \
        'engines:\n  - {type: plugin, name: inhouse, callable: "serving.spec:run"}\n'
    files = {**FILES, "specguard.yaml": cfg, "serving/spec.py": "from serving import kernels\n",
             "serving/kernels.py": "K = 1\n"}
    yes, reasons = edit(repo, {"serving/kernels.py": "K = 2\n"}, capsys, monkeypatch, tmp_path, files)
    assert yes and reasons == ["serving/kernels.py changed (run by a plug-in engine)"], reasons


def test_a_launch_flag_change_is_said_flag_by_flag_never_as_a_list(repo, capsys, monkeypatch, tmp_path):
    """The bug: the reason printed was the whole `engines` list as a Python repr."""
    cfg = SERVED.replace('"--max-num-batched-tokens", "2048"', '"--max-num-batched-tokens=4096", "--enforce-eager"')
    cfg = cfg.replace('"num_speculative_tokens": 4', '"num_speculative_tokens": 5').replace("num_draft_tokens: 4",
                                                                                              "num_draft_tokens: 5")
    yes, reasons = edit(repo, {"specguard.yaml": cfg}, capsys, monkeypatch, tmp_path)
    assert yes and reasons == [
        "speculation.num_draft_tokens: 4 → 5",
        "engines[0].http.server.launch: --max-num-batched-tokens 2048 → 4096",
        "engines[0].http.server.launch: --enforce-eager unset → set",
        "engines[0].http.server.launch: --speculative-config num_speculative_tokens 4 → 5",
        "engines[0].http.reference.launch: --max-num-batched-tokens 2048 → 4096",
        "engines[0].http.reference.launch: --enforce-eager unset → set"], reasons
    assert not any("[{" in r or "{'" in r for r in reasons)


def test_an_unrelated_file_is_still_unchanged(repo, capsys, monkeypatch, tmp_path):
    yes, reasons = edit(repo, {"README.md": "docs only", "serving/notes.txt": "not loaded"}, capsys, monkeypatch,
                        tmp_path)
    assert not yes and reasons == [], reasons


def test_a_reordered_launch_line_is_no_change(repo, capsys, monkeypatch, tmp_path):
    cfg = SERVED.replace('"--config", "serving/vllm.yaml",\n                 "--chat-template", "serving/chat.jinja", '
                         '"--max-num-batched-tokens", "2048"]',
                         '"--max-num-batched-tokens=2048", "--chat-template", "serving/chat.jinja",\n'
                         '                 "--config", "serving/vllm.yaml"]')
    assert cfg != SERVED
    yes, reasons = edit(repo, {"specguard.yaml": cfg}, capsys, monkeypatch, tmp_path)
    assert not yes, reasons


def test_what_a_pull_request_writes_is_printed_inert(repo, capsys, monkeypatch, tmp_path):
    """A change's text comes from the PR: no control character, no second line (a `::` workflow command), each
    line bounded."""
    evil = "x\x1b[31m\n::error::pwned\u202e" + "y" * 2000
    yes, reasons = edit(repo, {"serving/vllm.yaml": VLLM_YAML + f"served-model-name: {json.dumps(evil)}\n"},
                        capsys, monkeypatch, tmp_path)
    assert yes and len(reasons) == 1, reasons
    (line,) = reasons
    assert line.startswith("serving/vllm.yaml: served-model-name unset → ") and len(line) <= LINE_CAP
    assert all(ch.isprintable() for ch in line) and "\x1b" not in line and "\u202e" not in line


# --- the pieces --------------------------------------------------------------------------------------------------


def test_flag_changes_read_a_line_as_its_flags():
    assert flag_changes(["vllm", "serve", "m", "--max-num-batched-tokens", "2048"],
                        ["vllm", "serve", "m", "--max-num-batched-tokens=2048"]) == []
    assert flag_changes(["vllm", "serve", "a"], ["vllm", "serve", "b", "-tp", "2"]) == [
        ("argument 3", "a", "b"), ("-tp", "unset", "2")]
    assert flag_changes(["bash", "-c", "vllm serve m --num-speculative-tokens 4"],
                        ["bash", "-c", "vllm serve m --num-speculative-tokens 5"]) == [
        ("-c --num-speculative-tokens", "4", "5")]
    assert flag_changes(None, ["vllm", "serve", "m"]) == [("arguments", "unset", "vllm serve m")]


def test_file_changes_compare_documents_not_bytes():
    assert file_changes("a.yaml", "a: 1\n# note\n", "{a: 1}") == []
    assert [m.line() for m in file_changes("a.json", '{"a": {"b": [1]}}', '{"a": {"b": [1, 2]}, "c": null}')] == [
        "a.json: a.b [1] → [1, 2]"]
    assert file_changes("a.yaml", "a: &x [1]\nb: *x\n", "a: 1") is None  # an alias: not parsed, "it changed"
    assert file_changes("chat.jinja", "a", "b") is None


def test_inert_keeps_one_bounded_line():
    assert inert("a\nb\tc\x1b[0m\u200bd") == "a b c[0md"
    assert len(inert("z" * 5000)) == LINE_CAP


def test_loaded_files_reads_the_config_file_through_read():
    files = {"v.yaml": "chat-template: t.jinja\nspeculative-config: {model: heads/h, method: eagle, "
                       "num_speculative_tokens: 3}\n"}
    found = loaded_files("vllm", ["vllm", "serve", "models/t", "--config", "v.yaml"], files.get)
    assert [(x.path, x.what, x.config_file) for x in found] == [
        ("v.yaml", "--config", True), ("t.jinja", "--config v.yaml chat-template", False),
        ("heads/h", "--config v.yaml speculative-config model, the head", False),
        ("models/t", "vllm serve, the served model", False)]
    assert loaded_files("llamacpp", ["bash", "-c", "llama-server -m t.gguf --chat-template-file c.jinja"])[0].path \
        == "c.jinja"


def test_each_commits_config_is_validated_against_that_commits_config_file(repo, capsys, monkeypatch, tmp_path):
    """k moved in the config and in the vLLM `--config` file together: the base's config is read beside the base's
    file, not the checkout's (the Action runs `changed` in the head's checkout)."""
    monkeypatch.chdir(repo)
    cfg = SERVED.replace(SPEC, json.dumps({"method": "eagle3", "model": "./heads/eagle"}))
    server, reference = cfg.split("reference:")
    cfg = server + "reference:" + reference.replace('"--config", "serving/vllm.yaml",', "")  # k is the server's
    files = {**FILES, "specguard.yaml": cfg, "serving/vllm.yaml": "num-speculative-tokens: 4\n"}
    yes, reasons = edit(repo, {"specguard.yaml": cfg.replace("num_draft_tokens: 4", "num_draft_tokens: 5"),
                               "serving/vllm.yaml": "num-speculative-tokens: 5\n"},
                        capsys, monkeypatch, tmp_path, files)
    assert yes and reasons == ["speculation.num_draft_tokens: 4 → 5", "serving/vllm.yaml: num-speculative-tokens "
                               "4 → 5 (engines[0].http.server.launch --config)"], reasons
