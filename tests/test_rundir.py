"""The run directory and the one reader of versioned JSON (issue 21, item 2): no stage rewrites another stage's
file, and results, checks and baselines are refused the same way, each with its own error and exit code."""

from __future__ import annotations

import json

import pytest
import synthetic as syn
from test_baseline import write_run

from gate.checks.doc import CHECKS_DOC
from gate.cli import main
from gate.errors import BaselineError, ResultsError
from gate.io.rundir import RunDir, load_document
from gate.run.results import RESULTS_DOC
from gate.verdict.baseline import BASELINE_DOC


def test_compare_writes_only_its_own_files(tmp_path):
    """`compare` used to rewrite results.json to add where the time went; a stage's file is its own."""
    run = write_run(tmp_path / "out")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert main(["compare", str(run), "--baselines-dir", str(tmp_path / "baselines"), "-q"]) == 0
    after = {p.name: p.read_bytes() for p in run.iterdir()}
    assert {n: after[n] for n in before} == before  # results.json and checks.json untouched
    assert set(after) - set(before) <= {"verdict.json", "comment.md", "summary.md", "speedup.png"}
    assert "phases.json" not in after  # only a command that times itself writes it (`run`, `gate`)


@pytest.mark.parametrize("kind,error,code", [(RESULTS_DOC, ResultsError, 2), (CHECKS_DOC, None, 2),
                                             (BASELINE_DOC, BaselineError, 3)])
@pytest.mark.parametrize("text,says", [
    ("[1, 2]", "expected a JSON object, got list"),
    ("{", "not valid JSON"),
    ('{"schema": "specguard.other/9"}', "specguard.other/9"),
    ('{"a": NaN}', "NaN is not a number JSON allows"),
    ("", "not valid JSON"),
])
def test_every_document_kind_is_refused_the_same_way_naming_the_file(tmp_path, kind, error, code, text, says):
    path = tmp_path / "doc.json"
    path.write_text(text)
    if kind is CHECKS_DOC and "NaN" in text:  # checks.json records an estimate it could not make as NaN
        says = "schema"
    with pytest.raises(error or Exception) as caught:
        load_document(path, kind)
    assert caught.value.exit_code == code
    problem = caught.value.problems[0]
    assert problem.source == str(path) and says in str(problem) and problem.hint


def test_a_missing_document_says_what_writes_it(tmp_path):
    for kind, writer in ((RESULTS_DOC, "specguard run"), (CHECKS_DOC, "specguard check"),
                         (BASELINE_DOC, "baseline refresh")):
        with pytest.raises(Exception) as caught:
            load_document(tmp_path / "absent.json", kind)
        assert "not found" in str(caught.value) and writer in str(caught.value)


def test_an_older_results_schema_is_migrated_by_the_one_reader(tmp_path):
    doc = json.loads(syn.run().model_dump_json(by_alias=True))
    doc["schema"] = "specguard.results/2"
    del doc["anchor"]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    assert load_document(path, RESULTS_DOC).anchor is None


def test_a_directory_where_an_output_goes_is_an_error_naming_it(tmp_path):
    (tmp_path / "verdict.json").mkdir()
    with pytest.raises(Exception, match="a directory sits where the gate writes an output file") as caught:
        RunDir(tmp_path).clear()
    assert str(tmp_path / "verdict.json") in str(caught.value)


def test_phases_json_is_a_versioned_document_with_a_schema(tmp_path):
    import jsonschema

    from gate import schemas
    from gate.io.documents import PhasesDoc
    from gate.io.rundir import PHASES
    from gate.run.phases import Phases

    phases = Phases(started=0.0)
    phases.add("model load", 1.5)
    out = RunDir(tmp_path)
    doc = json.loads(out.write_json(PHASES, PhasesDoc.model_validate(phases.to_dict())).read_text())
    assert doc["schema"] == "specguard.phases/1" and doc["seconds"] == {"model load": 1.5}
    jsonschema.validate(doc, schemas.load("phases"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "seconds": {"model load": -1.0}}, schemas.load("phases"))
