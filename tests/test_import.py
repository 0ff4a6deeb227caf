"""``specguard suite import``: a suite from a sample of real requests, and a clear exit 2 on hostile input."""

from __future__ import annotations

import json

import pytest

from gate.cli import main
from gate.inputs import importer
from gate.inputs.suite import load_suite


def sample(tmp_path, rows, name="requests.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def run(tmp_path, capsys, path, *more):
    out = tmp_path / "suite.jsonl"
    code = main(["suite", "import", str(path), "--out", str(out), *more])
    std = capsys.readouterr()
    return code, std.out, std.err, out


def test_requests_of_every_shape_become_a_valid_suite_with_duplicates_dropped(tmp_path, capsys):
    rows = [
        {"prompt": "Explain the while statement.", "slice": "docs", "model": "x", "temperature": 0.7},
        {"prompt": "Explain the while statement.", "slice": "docs"},  # a duplicate
        {"prompt": ["Explain the for statement."], "slice": "docs"},  # the completions API's list of one
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a module?"}],
         "slice": "chat"},
        {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {  # OpenAI batch-file line
            "model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello "},
                                                                    {"type": "text", "text": "there"}]}]}},
        {"messages": [{"role": "user", "content": "What is a module?"}, ], "slice": "chat"},
    ]
    code, out, err, suite = run(tmp_path, capsys, sample(tmp_path, rows))
    assert code == 0, err
    assert "read 6 requests" in out and "1 duplicates dropped" in out and "wrote 5 prompts in 3 slices" in out
    s = load_suite(suite)
    assert {p.slice for p in s.prompts} == {"docs", "chat", "default"}
    by_slice = {p.slice: p for p in s.prompts}
    assert by_slice["default"].messages == (("user", "Hello there"),)
    assert sorted(p.text for p in s.prompts if p.slice == "docs") == ["Explain the for statement.",
                                                                     "Explain the while statement."]


def test_a_slice_is_sampled_across_its_lengths_and_the_caps_hold(tmp_path):
    rows = [{"prompt": "x" * n, "tag": "long-tail"} for n in range(1, 101)]
    rows += [{"prompt": f"short {n}", "tag": "other"} for n in range(50)]
    path = sample(tmp_path, rows)
    report = importer.import_suite(path, tmp_path / "a.jsonl", slice_field="tag", per_slice=8, max_rows=12)
    assert sum(report.kept.values()) == 12 and report.available == {"long-tail": 100, "other": 50}
    lengths = sorted(len(p.text) for p in load_suite(tmp_path / "a.jsonl").prompts if p.slice == "long-tail")
    assert len(lengths) == 6  # the cap shared evenly over the two slices
    # one or two from each quarter of the lengths, short to long
    assert [sum(lo < n <= lo + 25 for n in lengths) for lo in (0, 25, 50, 75)] in ([2, 2, 1, 1], [1, 1, 2, 2],
                                                                                   [2, 1, 2, 1], [1, 2, 1, 2],
                                                                                   [2, 1, 1, 2], [1, 2, 2, 1])
    again = importer.import_suite(path, tmp_path / "b.jsonl", slice_field="tag", per_slice=8, max_rows=12)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text() and again.kept == report.kept


def test_hostile_tags_become_slice_names_and_are_reported(tmp_path, capsys):
    path = sample(tmp_path, [{"prompt": "a", "slice": "prod/chat v2"}, {"prompt": "b", "slice": "$(rm -rf /)"},
                             {"prompt": "c", "slice": "***"}])
    code, out, err, suite = run(tmp_path, capsys, path)
    assert code == 0, err
    assert {p.slice for p in load_suite(suite).prompts} == {"prod-chat-v2", "rm--rf", "default"}
    assert "tag 'prod/chat v2' is slice 'prod-chat-v2'" in out


@pytest.mark.parametrize(("lines", "says", "line"), [
    (['{"prompt": "ok"}', '{"prompt": "unterminated'], "not valid JSON", 2),
    (['{"prompt": "ok"}', '[1, 2]'], "expected a JSON object", 2),
    (['{"model": "m", "temperature": 0}'], "got neither", 1),
    (['{"prompt": "a", "messages": []}'], "got both", 1),
    (['{"prompt": "   "}'], "non-empty string", 1),
    (['{"prompt": 42}'], "non-empty string", 1),
    (['{"messages": "hello"}'], "non-empty list", 1),
    (['{"messages": [{"role": "wizard", "content": "hi"}]}'], "expected a role", 1),
    (['{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}'],
     "other than text", 1),
    (['{"messages": [{"role": "user", "content": null}]}'], "content as a string", 1),
    (['{"messages": [{"role": "user", "content": "  "}]}'], "with text", 1),
    (["[" * 100_000 + "]" * 100_000], "not valid JSON", 1),
])
def test_a_malformed_request_is_exit_2_naming_the_file_and_line_and_nothing_is_written(tmp_path, capsys, lines,
                                                                                      says, line):
    code, _, err, suite = run(tmp_path, capsys, sample(tmp_path, lines))
    assert code == 2 and says in err and f"requests.jsonl:{line}" in err, err
    assert not suite.exists()


def test_a_line_nested_to_the_recursion_limit_runs_no_finalizer_without_stack(tmp_path, capsys, monkeypatch):
    """Garbage waiting for the collector when a hostile line is decoded: its finalizer must not run at the depth
    where the decoder gives up (there it fails as an 'Exception ignored', which once failed this module's
    malformed-line case under xdist when the collection happened to fall inside the decode)."""
    import gc
    import sys

    unraised: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraised.append(repr(u.exc_value)))

    class Finalized:
        def __del__(self):
            def down(n):
                return down(n - 1) if n else 0
            down(sys.getrecursionlimit() // 3)

    path = sample(tmp_path, ["[" * 100_000 + "]" * 100_000])
    for _ in range(5):
        gc.collect()
        gc.disable()  # cycles that only the collector frees, left for its next pass
        for _ in range(5):
            held = Finalized()
            held.me = held
        del held
        gc.enable()
        code, _, err, _ = run(tmp_path, capsys, path)
        assert code == 2 and "nested too deeply" in err, err
        gc.collect()  # the finalizers run here, with the stack they need
    assert unraised == [], unraised[:2]


def test_bytes_that_are_not_utf8_and_an_empty_file_are_clear_errors(tmp_path, capsys):
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b'{"prompt": "caf\xe9"}\n')
    code, _, err, _ = run(tmp_path, capsys, path)
    assert code == 2 and "not UTF-8" in err and "requests.jsonl:1" in err
    path.write_text("\n\n")
    code, _, err, _ = run(tmp_path, capsys, path)
    assert code == 2 and "holds no requests" in err


def test_a_huge_file_or_line_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    path = sample(tmp_path, [{"prompt": "p" * 1000} for _ in range(20)])
    code, _, err, suite = run(tmp_path, capsys, path, "--max-bytes", "4096")
    assert code == 2 and "over the import's limit of 4096" in err and "--max-bytes" in err and not suite.exists()
    monkeypatch.setattr(importer, "MAX_LINE_BYTES", 500)
    code, _, err, _ = run(tmp_path, capsys, path)
    assert code == 2 and "over 500" in err


def test_many_bad_lines_are_listed_up_to_a_limit_then_counted(tmp_path, capsys):
    code, _, err, _ = run(tmp_path, capsys, sample(tmp_path, ["nope"] * 50))
    assert code == 2 and err.count("not valid JSON") == importer.MAX_REPORTED and "and 30 more problem(s)" in err


def test_the_sample_is_never_overwritten_and_a_missing_file_is_named(tmp_path, capsys):
    path = sample(tmp_path, [{"prompt": "a"}])
    before = path.read_text()
    assert main(["suite", "import", str(path), "--out", str(path)]) == 2
    assert "overwrite" in capsys.readouterr().err and path.read_text() == before
    code, _, err, _ = run(tmp_path, capsys, tmp_path / "nope.jsonl")
    assert code == 2 and "nope.jsonl" in err and "cannot read" in err

