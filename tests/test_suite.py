"""Prompt suites: malformed lines fail with file:line and the reason; the default suite has what it promises."""

from __future__ import annotations

import json
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
