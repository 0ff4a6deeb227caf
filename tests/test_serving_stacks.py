"""Issue 54, item 4: a serving stack is one module (gate/stacks/).  Nothing outside the package compares a preset's
name; every stack gives what the gate asks of one; a toy stack planted from tests/ validates, plans and is followed
by `changed` with no other file touched; TensorRT-LLM's `trtllm-serve` is one module, read from its options file and
run against the stand-in server in its own dialect."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import toy_stack  # noqa: F401  (registers `preset: toy`)

from gate import stacks
from gate.cli import main
from gate.inputs.launch import read_launch
from gate.inputs.methods import METHODS
from gate.stacks.base import SETTINGS

ROOT = Path(__file__).resolve().parents[1]


# --- the house ---------------------------------------------------------------------------------------


def _compared_names(path: Path, names: set[str]) -> list[str]:
    """Each place in ``path`` that compares with a preset's name, looks one up in a literal table, or keys a table
    by one: a branch on a stack that belongs in the stack's own module."""
    def named(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(named(e) for e in node.elts)

    found = []
    where = path.relative_to(ROOT) if ROOT in path.parents else path.name  # once a file, not once a node
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        hits = []
        if isinstance(node, ast.Compare):
            hits = [n for n in (node.left, *node.comparators) if named(n)]
        elif isinstance(node, ast.Dict):
            hits = [k for k in node.keys if k is not None and named(k)]
        elif isinstance(node, ast.Subscript):
            hits = [node.slice] if named(node.slice) else []
        elif isinstance(node, ast.MatchValue):
            hits = [node.value] if named(node.value) else []
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "get", "startswith", "endswith"):
            hits = [a for a in node.args[:1] if named(a)]
        found += [f"{where}:{node.lineno}: {ast.unparse(node)[:80]}" for _ in hits[:1]]
    return found


def test_no_code_outside_gate_stacks_compares_a_presets_name():
    """gate/testing/ is left out: its stand-in server imitates each stack's dialect from the stack's own documents
    (what a real server sends), never from what gate/stacks/ asks, so that a stack module that asks wrongly fails."""
    names = set(stacks.names()) - {"toy"}
    found = [hit for path in sorted((ROOT / "gate").rglob("*.py"))
             if not {"stacks", "testing"} & set(path.relative_to(ROOT).parts[1:2])
             for hit in _compared_names(path, names)]
    assert not found, found


def test_the_check_sees_a_comparison_it_must_refuse(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('if preset == "vllm":\n    pass\nFLAGS = {"sglang": 1}\nx = y in ("tgi", "a")\n')
    assert len(_compared_names(planted, {"vllm", "sglang", "tgi"})) == 3


def test_every_stack_gives_what_the_gate_asks_of_one():
    assert set(stacks.names()) >= {"vllm", "sglang", "llamacpp", "tgi", "openai", "trtllm"}
    for s in stacks.stacks():
        assert set(s.settings) <= set(SETTINGS), s
        assert set(s.methods.values()) <= set(METHODS), s
        assert s.truncation is None or sorted(s.truncation) == ["min_p", "top_k", "top_p"], s
        assert not s.reads_launch or s.shown, f"{s}: a line that does not start it says how one does"
        assert s.no_scoring is None or s.name in s.no_scoring, s
        assert s.prefill is None or all(f in {n for fl in s.settings.values() for x in fl for n in x.names}
                                        for f in s.prefill[0]), s


def test_an_unknown_preset_names_the_registered_ones(tmp_path, capsys):
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(TOY.format(preset="tyo", server='["toy-serve", "m"]', reference='["toy-serve", "m"]',
                              extra=""))
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "engines[0].http.preset" in err and "no serving stack 'tyo'" in err
    assert all(n in err for n in ("vllm", "trtllm", "toy")), err


# --- a toy stack planted from tests/ -----------------------------------------------------------------

TOY = """\
version: 1
models:
  target: {{path: "specguard:demo/target"}}
  draft: {{path: "specguard:demo/draft"}}
  local_weights: false
speculation: {{num_draft_tokens: 4}}
batching: {{batch_sizes: [1, 8]}}
engines:
  - type: http
    name: toy
    http:
      preset: {preset}
      server: {{url: "http://127.0.0.1:8000", launch: {server}}}
      reference: {{url: "http://127.0.0.1:8001", launch: {reference}}}{extra}
"""


def _toy(tmp_path, server, reference=("toy-serve", "m"), extra="", command="validate", capsys=None):
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(TOY.format(preset="toy", server=json.dumps(list(server)), reference=json.dumps(list(reference)),
                              extra=extra))
    code = main([command, str(cfg)])
    said = capsys.readouterr()
    return code, said.out + said.err


def test_a_toy_stacks_own_flags_are_read_and_checked(tmp_path, capsys):
    line = ["toy-serve", "m", "--toy-k", "7", "--toy-draft", "specguard:demo/draft"]
    assert read_launch("toy", line).k == 7 and read_launch("toy", line).method == "draft_model"
    code, said = _toy(tmp_path, line, capsys=capsys)
    assert code == 2 and "k differs: --toy-k gives 7, speculation.num_draft_tokens gives 4" in said, said
    code, said = _toy(tmp_path, ["toy-serve", "m", "--toy-k", "4", "--toy-tp", "2"], capsys=capsys)
    assert code == 2 and "tensor_parallel differs: the reference's default 1 (its line sets no --toy-tp), the " \
        "server's --toy-tp 2" in said, said
    code, said = _toy(tmp_path, ["toy-serve", "m", "--toy-k", "4", "--toy-tp", "2"], capsys=capsys,
                      extra="\n      allow_differences: [tensor_parallel]")
    assert code == 0 and "(allowed by http.allow_differences)" in said, said
    code, said = _toy(tmp_path, ["toy-serve", "m", "--toy-k", "4", "--toy-off-at", "8", "--toy-spec-x", "1"],
                      capsys=capsys)
    assert code == 0 and "--toy-off-at 8 turns speculation off while 8 or more requests are running: batch size " \
        "8 decodes without speculation" in said, said
    assert "--toy-spec-x is about speculation and the gate does not read it" in said, said
    code, said = _toy(tmp_path, ["bash", "-c", "toy-serve m --toy-k 5"], capsys=capsys)
    assert code == 0 and "bash -c runs a shell line the gate does not read" in said and "(toy-serve MODEL …)" in said


def test_a_toy_stacks_method_names_and_truncation_order_are_its_own(tmp_path, capsys):
    line = ["toy-serve", "m", "--toy-k", "4", "--toy-spec", "LOOKUP"]
    assert stacks.get("toy").method_of("LOOKUP") == "ngram" and stacks.orders()["toy"] == ("top_k", "top_p", "min_p")
    sampled = "\ngeneration: {greedy: false, sampling: {temperature: 0.7, top_p: 0.9, truncation_order: toy}}"
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(TOY.format(preset="toy", server=json.dumps(line), reference='["toy-serve", "m"]', extra="")
                   .replace("local_weights: false", "local_weights: true") + sampled)
    assert main(["validate", str(cfg)]) == 0, capsys.readouterr().err


def test_changed_follows_the_files_a_toy_stacks_line_loads(tmp_path, capsys, monkeypatch):
    from tests.test_changed import git, write
    from tests.test_changed_launch import changed

    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    config = TOY.format(preset="toy", server=json.dumps(["toy-serve", "m", "--toy-k", "4", "--toy-template",
                                                         "serving/t.jinja"]),
                        reference='["toy-serve", "m", "--toy-template", "serving/t.jinja"]', extra="")
    base = write(root, {"specguard.yaml": config, "serving/t.jinja": "A", "README.md": "x"})
    write(root, {"README.md": "y"})
    yes, reasons = changed(root, base, capsys, monkeypatch, tmp_path)
    assert not yes, reasons
    write(root, {"serving/t.jinja": "B"})
    yes, reasons = changed(root, base, capsys, monkeypatch, tmp_path)
    assert yes and reasons == ["serving/t.jinja changed (engines[0].http.server.launch --toy-template)"], reasons


# --- TensorRT-LLM ----------------------------------------------------------------------------------------

OPTIONS = """\
speculative_config:
  decoding_type: Eagle3
  max_draft_len: {k}
  speculative_model_dir: {head}
kv_cache_config: {{free_gpu_memory_fraction: 0.85, enable_block_reuse: false}}
max_num_tokens: 8192
"""
MIRROR = """\
version: 1
models: {{target: {{path: "specguard:demo/target"}}, local_weights: false}}
speculation: {{num_draft_tokens: 3, method: eagle3, head: "acme/eagle3-llama70b-v7"}}
batching: {{batch_sizes: [1, 8, 32]}}
engines:
  - type: http
    http:
      preset: trtllm
      server: {{url: "http://127.0.0.1:8000", launch: {server}}}
      reference: {{url: "http://127.0.0.1:8001", launch: {reference}}}
"""
SERVER = ["trtllm-serve", "meta-llama/Llama-3.1-70B-Instruct", "--tp_size", "4", "--max_num_tokens", "2048",
          "--config", "serving/spec.yaml", "--port", "8000"]
REFERENCE = ["trtllm-serve", "meta-llama/Llama-3.1-70B-Instruct", "--tp_size", "4", "--config", "serving/plain.yaml",
             "--port", "8001"]
PLAIN = "kv_cache_config: {free_gpu_memory_fraction: 0.85, enable_block_reuse: false}\nmax_num_tokens: 8192\n"


def _mirror(tmp_path, monkeypatch, capsys, k=3, head="acme/eagle3-llama70b-v7", options=None, plain=PLAIN,
            server=SERVER, reference=REFERENCE, command="validate"):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serving").mkdir(exist_ok=True)
    (tmp_path / "serving" / "spec.yaml").write_text(options or OPTIONS.format(k=k, head=head))
    (tmp_path / "serving" / "plain.yaml").write_text(plain)
    (tmp_path / "specguard.yaml").write_text(MIRROR.format(server=json.dumps(server), reference=json.dumps(reference)))
    code = main([command, "specguard.yaml"])
    said = capsys.readouterr()
    return code, said.out + said.err


def test_trtllm_reads_speculation_from_its_options_file_which_wins_over_the_line(tmp_path, monkeypatch, capsys):
    code, said = _mirror(tmp_path, monkeypatch, capsys)
    assert code == 0, said
    assert "batch_budget" not in said, "the options file's max_num_tokens 8192 wins over the line's 2048 on both"
    code, said = _mirror(tmp_path, monkeypatch, capsys, k=5)
    assert code == 2 and "k differs: --config serving/spec.yaml speculative_config.max_draft_len gives 5" in said
    code, said = _mirror(tmp_path, monkeypatch, capsys, head="acme/eagle3-llama70b-v6")
    assert code == 2 and "the head differs: --config serving/spec.yaml speculative_config.speculative_model_dir " \
        "gives 'acme/eagle3-llama70b-v6'" in said, said
    code, said = _mirror(tmp_path, monkeypatch, capsys, options=OPTIONS.format(k=3, head="x").replace(
        "Eagle3", "NGram").replace("  speculative_model_dir: x\n", ""))
    assert code == 2 and "the method differs" in said and "gives other" in said, said


def test_trtllm_names_what_it_cannot_see_and_what_turns_speculation_off(tmp_path, monkeypatch, capsys):
    options = OPTIONS.format(k=3, head="acme/eagle3-llama70b-v7").replace(
        "  max_draft_len", "  max_concurrency: 8\n  eagle3_one_model: true\n  max_draft_len")
    code, said = _mirror(tmp_path, monkeypatch, capsys, options=options)
    assert code == 0, said
    assert "speculative_config.max_concurrency 8 + 1 = 9 turns speculation off while 9 or more requests are " \
        "running: batch size 32 decodes without speculation" in said, said
    assert "the gate does not read its key eagle3_one_model" in said, said
    code, said = _mirror(tmp_path, monkeypatch, capsys, options=options, command="plan")
    assert code == 0 and "max_concurrency 8 + 1 = 9 turns speculation off" in said, said
    alias = [w.replace("--config", "--extra_llm_api_options") for w in SERVER]
    code, said = _mirror(tmp_path, monkeypatch, capsys, options=OPTIONS.format(k=5, head="h"), server=alias)
    assert code == 2 and "--extra_llm_api_options serving/spec.yaml speculative_config.max_draft_len gives 5" in said
    gone = ["trtllm-serve", "meta-llama/Llama-3.1-70B-Instruct", "--tp_size", "4", "--config", "serving/missing.yaml"]
    code, said = _mirror(tmp_path, monkeypatch, capsys, server=gone, reference=gone)
    assert code == 0 and "--config serving/missing.yaml: cannot read it as YAML from here" in said, said


def test_trtllm_server_and_reference_are_compared_as_a_pair(tmp_path, monkeypatch, capsys):
    ref = [w.replace("4", "2") if w == "4" else w for w in REFERENCE]
    code, said = _mirror(tmp_path, monkeypatch, capsys, reference=ref)
    assert code == 2 and "tensor_parallel differs: the reference's --tp_size 2, the server's --tp_size 4" in said
    code, said = _mirror(tmp_path, monkeypatch, capsys, plain=PLAIN.replace("enable_block_reuse: false", "x: 1"))
    assert code == 2 and "prefix_caching differs: the reference's default true (its line sets no " \
        "--enable_block_reuse), the server's --config enable-block-reuse false" in said, said


def test_trtllm_refuses_truncated_sampling_and_says_its_reference_cannot_score(tmp_path, monkeypatch, capsys):
    code, said = _mirror(tmp_path, monkeypatch, capsys)
    assert code == 0, said
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(cfg.read_text().replace("batching:", "generation: {greedy: false, sampling: {temperature: 0.7, "
                                                        "top_p: 0.95}}\nbatching:"))
    assert main(["validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "preset trtllm truncates in an order the gate does not model (TensorRT-LLM applies top_k then top_p" in err


def test_trtllm_answers_are_read_as_its_server_writes_them():
    trt = stacks.get("trtllm")
    event = {"choices": [{"index": 0, "text": "", "token_ids": [5, 6],
                          "logprobs": {"tokens": ["a", "b"], "top_logprobs": [{"a": -0.1}, {"b": -0.2}]}}]}
    chunk = trt.parse(event)
    assert chunk.ids == [5, 6] and chunk.tops is None, "ids from token_ids; its text-keyed top-k is not read"
    assert trt.engine_request == {"detokenize": False} and trt.counters == {}


@pytest.mark.slow
def test_trtllm_gates_the_stand_in_server_in_its_dialect(tmp_path):
    """The demo pair behind two stand-in servers speaking trtllm-serve's dialect: ids only with detokenize:
    false, no prompt_logprobs, JSON /metrics; the gate reads the ids and passes a correct engine."""
    from test_http import HEAD, gate_here, serving, untimed

    from gate.testing.server import load

    pair = load()
    trt = {"shape": "trtllm"}
    with serving(pair, ("speculative", trt), ("reference", trt)) as (e, r):
        cfg = untimed(HEAD.format(local_weights="true")) + f"""\
  - type: http
    name: served
    http:
      preset: trtllm
      server: {{url: 'http://127.0.0.1:{e}'}}
      reference: {{url: 'http://127.0.0.1:{r}'}}
      request_timeout_s: 60
"""
        proc = gate_here(tmp_path, cfg, "gate")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    assert checks["equivalence"]["served"]["4"]["exact_match"] == 1.0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    seqs = [s for ex in results["executions"] for s in ex["sequences"]]
    assert seqs and not any(s["text_only"] for s in seqs), "ids on both sides, not re-tokenized text"
