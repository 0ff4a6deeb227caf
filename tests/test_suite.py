"""Prompt suites: malformed lines fail with file:line and the reason; the default suite has what it promises."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pytest

from gate.errors import SuiteError
from gate.inputs.suite import load_suite, parse_suite

DEFAULT = "gate/suites/default.jsonl"


def bad(text: str):
    with pytest.raises(SuiteError) as info:
        parse_suite(text, "suite.jsonl")
    return info.value.problems


def test_parse_ok():
    s = parse_suite('{"id": "a", "slice": "x", "prompt": "hi", "max_new_tokens": 3}\n\n'
                    '{"id": "b", "slice": "y", "prompt": "yo"}\n', "s.jsonl")
    assert [p.id for p in s.prompts] == ["a", "b"] and s.prompts[0].max_new_tokens == 3
    assert s.slices == ["x", "y"]


def test_bad_json_names_line():
    [p] = bad('{"id": "a", "slice": "x", "prompt": "hi"}\n{"id": "b", slice}\n')
    assert (p.source, p.line) == ("suite.jsonl", 2) and "not valid JSON" in p.message


def test_every_bad_line_reported():
    found = bad('{"id": "a", "slice": "x"}\n[1, 2]\n{"id": "c", "slice": "x", "prompt": "  "}\n'
                '{"id": "d", "slice": "x", "prompt": "p", "max_new_tokens": 0}\n'
                '{"id": "e", "slice": "x", "prompt": "p", "promt": "typo"}\n')
    got = [(p.line, p.field) for p in found]
    assert got == [(1, "prompt"), (2, None), (3, "prompt"), (4, "max_new_tokens"), (5, "promt")]
    assert "expected a non-empty prompt" in found[2].message
    assert found[4].hint == "did you mean 'prompt'?"


def test_duplicate_ids():
    [p] = bad('{"id": "a", "slice": "x", "prompt": "1"}\n{"id": "a", "slice": "x", "prompt": "2"}\n')
    assert p.line == 2 and "duplicate id 'a' (first on line 1)" in p.message


def test_empty_suite():
    [p] = bad("\n\n")
    assert "no prompts" in p.message


def test_missing_file(tmp_path):
    with pytest.raises(SuiteError, match="suite file not found"):
        load_suite(tmp_path / "none.jsonl")


def test_select_unknown_slice():
    s = parse_suite('{"id": "a", "slice": "x", "prompt": "hi"}\n', "s.jsonl")
    with pytest.raises(SuiteError, match=r"unknown slice\(s\) \['z'\]"):
        s.select(["z"])


def test_default_suite_shape():
    suite = load_suite(DEFAULT)
    counts = {s: sum(p.slice == s for p in suite.prompts) for s in suite.slices}
    assert len(counts) >= 6 and min(counts.values()) >= 8, counts
    assert {"long-context", "adversarial"} <= set(counts)


def test_default_suite_is_generated_from_script():
    import subprocess
    import sys

    assert subprocess.run([sys.executable, "scripts/make_default_suite.py", "--check"]).returncode == 0


def test_long_context_prompts_are_long_in_demo_tokens():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained("gate/demo/target")
    for line in Path(DEFAULT).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["slice"] == "long-context":
            assert len(tok(row["prompt"])["input_ids"]) >= 512, row["id"]


# --- chat rows: `messages` instead of `prompt` ------------------------------------------------------------------


def chat(*messages, **more) -> str:
    return json.dumps({"id": "c", "slice": "chat", "messages": [{"role": r, "content": c} for r, c in messages],
                       **more})


def test_a_chat_row_parses_into_messages():
    s = parse_suite(chat(("system", "Be brief."), ("user", "What is a module?")) + "\n", "s.jsonl")
    [p] = s.prompts
    assert p.messages == (("system", "Be brief."), ("user", "What is a module?")) and p.text == "" and s.chat
    assert p.as_messages() == [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "What is a module?"}]


@pytest.mark.parametrize(("line", "says"), [
    (json.dumps({"id": "c", "slice": "x"}), "prompt: required field is missing (or give 'messages'"),
    (json.dumps({"id": "c", "slice": "x", "prompt": "hi", "messages": [{"role": "user", "content": "hi"}]}),
     "not both"),
    (json.dumps({"id": "c", "slice": "x", "messages": []}), "at least 1 item"),
    (json.dumps({"id": "c", "slice": "x", "messages": [{"role": "wizard", "content": "hi"}]}), "messages[0].role"),
    (json.dumps({"id": "c", "slice": "x", "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
     "content parts"),
    (json.dumps({"id": "c", "slice": "x", "messages": [{"role": "user"}]}), "messages[0].content"),
    (json.dumps({"id": "c", "slice": "x", "messages": [{"role": "user", "content": "  "}]}), "with text"),
    (json.dumps({"id": "c", "slice": "x", "messages": "hello"}), "messages"),
    (json.dumps({"id": "c", "slice": "x", "messages": [{"role": "user", "content": "hi", "name": "x"}]}),
     "unknown key"),
])
def test_a_malformed_chat_row_names_its_line_and_field(line, says):
    [p] = bad('{"id": "a", "slice": "x", "prompt": "hi"}\n' + line + "\n")
    assert p.line == 2 and says in str(p), str(p)


def test_a_raw_prompt_suite_keeps_its_fingerprint_and_a_chat_suite_follows_its_template():
    # the committed demo baselines were made before chat rows existed: their suite digest must still match
    demo = json.loads(Path("baselines/demo/cpu-amd-epyc-2c-2t.json").read_text())["fingerprint"]["suite"]
    assert load_suite(DEFAULT).select(None, 3).fingerprint() == demo["fingerprint"]
    s = load_suite("gate/suites/chat.jsonl")
    assert s.chat and s.fingerprint() != dataclasses.replace(s, chat_template="{{ messages }}").fingerprint()


def test_the_chat_suite_renders_through_the_demo_template_and_a_missing_template_is_a_clear_error():
    from transformers import AutoTokenizer

    from gate.errors import SuiteError
    from gate.inputs.models import ModelPair
    from gate.run.runner import prompt_infos

    tok = AutoTokenizer.from_pretrained("gate/demo/target")
    target = types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=4096))
    pair = ModelPair(target=target, draft=None, tokenizer=tok, device=None)  # tokenizing needs no weights
    template = Path("gate/demo/chat_template.jinja").read_text()
    suite = dataclasses.replace(load_suite("gate/suites/chat.jsonl"), chat_template=template)
    text = tok.decode(pair.encode_chat(suite.prompts[1].as_messages(), template))
    assert text == ("System: You answer questions about the Python language.\n"
                    "User: What is the difference between \"is\" and \"==\"?\nAnswer:")
    with pytest.raises(SuiteError, match="have chat messages, and rendering them failed: the target tokenizer has "
                                         "no chat template") as info:
        prompt_infos(dataclasses.replace(suite, chat_template=None), pair, 8, [1024])
    chats = sum(p.messages is not None for p in suite.prompts)
    assert len(info.value.problems) == 1 and f"{chats} prompts ('chat-" in str(info.value.problems[0]), \
        "one problem for every row that fails alike, not one per row"
    assert info.value.problems[0].hint.startswith("set suite.chat_template")
    broken = dataclasses.replace(suite, chat_template="{{ raise_exception('no system role here') }}")
    with pytest.raises(SuiteError, match="no system role here"):
        prompt_infos(broken, pair, 8, [1024])
