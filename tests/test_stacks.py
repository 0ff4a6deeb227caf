"""docs/stacks.md, the public matrix (issue 47, item 5): generated from committed run summaries, and refused where a
promised row's summary is missing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests import synthetic as syn

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("stacks", ROOT / "scripts" / "stacks.py")
stacks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stacks)


def run_dir(tmp_path: Path, rejected: bool) -> Path:
    """A run directory as `specguard gate` writes it (the real schemas), with a sampled engine beside its control."""
    results = syn.run()
    broken = {"exact": {4: 0.5}, "confident": {4: 2}} if rejected else {}
    checks = json.loads(syn.checks_json(syn.checks_for(results, **broken)))
    checks["distribution"] = {"tests": ["pit_ks", "draft_top"], "engines": {
        "reference": {"4": {"n": 600, "pvalues": {"pit_ks": 0.5, "draft_top": 0.4}, "rejected": False,
                            "control": True}},
        "speculative": {"4": {"n": 600, "pvalues": {"pit_ks": 0.3, "draft_top": 1e-9 if rejected else 0.2},
                              "asymptotic": {"pit_ks": 0.3, "draft_top": 1e-12 if rejected else 0.2},
                              "rejected": rejected, "control": False}}}}
    if rejected:
        checks["verdicts"].append({"check": "distribution", "engine": "speculative", "status": "fail", "why": "x"})
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text(syn.results_json(results))
    (out / "checks.json").write_text(json.dumps(checks))
    return out


def test_a_run_is_summarized_with_its_verdicts_and_rendered_as_one_row(tmp_path):
    summary = stacks.summarize(run_dir(tmp_path, rejected=True), "Stack|X", "make thing", recount_z=7.25,
                               date="2026-12-05")
    assert summary["greedy"]["4"] == {"identical": 0.5, "confident_divergences": 2, "confident_inconsistencies": 2}
    assert list(summary["sampling"]) == ["4"]  # the control is not the engine's row
    assert summary["sampling"]["4"]["smallest_p"] == 1e-9 and summary["sampling"]["4"]["recount_z"] == 7.25
    assert summary["failed_checks"] == ["distribution", "equivalence"] and set(summary["speedup"]) == {"1", "4"}
    assert summary["method"] == "draft_model" and summary["k"] == syn.K

    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "x.json").write_text(json.dumps(summary))
    (runs / "manifest.json").write_text(json.dumps({"rows": [{"summary": "x.json", "note": "a note"}],
                                                    "not_yet": ["a stack not run"]}))
    text = stacks.render(runs)
    (line,) = [ln for ln in text.splitlines() if ln.startswith("| Stack")]
    assert "Stack&#124;X" in line and line.count(" | ") == 9  # ten cells: a | in a name does not add one
    assert "bs 4: 50% identical, 2 confident" in line and "❌ rejected (n=600, p=1e-09, asymptotic 1e-12; " \
        "independent recount z +7.2)" in line and "distribution, equivalence failed" in line and "`make thing`" in line
    assert "- a note" in text and "- a stack not run" in text


def test_a_promised_row_without_its_summary_is_an_error_naming_it(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"rows": [{"summary": "gone.json"}]}))
    with pytest.raises(SystemExit, match=r"no summary for gone\.json .*manifest\.json"):
        stacks.render(tmp_path)


def test_render_check_refuses_a_stale_page(tmp_path):
    summary = stacks.summarize(run_dir(tmp_path, rejected=False), "S", "c", date="2026-12-05")
    assert "✅ consistent" in stacks.row(summary) and "nothing failed" in stacks.row(summary)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "s.json").write_text(json.dumps(summary))
    (runs / "manifest.json").write_text(json.dumps({"rows": [{"summary": "s.json"}]}))
    page = tmp_path / "stacks.md"
    page.write_text("old\n")
    with pytest.raises(SystemExit, match="make stacks"):
        stacks.main(["render", "--runs", str(runs), "--out", str(page), "--check"])
    stacks.main(["render", "--runs", str(runs), "--out", str(page)])
    stacks.main(["render", "--runs", str(runs), "--out", str(page), "--check"])


def test_the_committed_matrix_is_what_its_summaries_give():
    assert (ROOT / "docs" / "stacks.md").read_text() == stacks.render()


def test_a_version_given_by_hand_is_marked_and_never_overrides_a_recorded_one(tmp_path):
    summary = stacks.summarize(run_dir(tmp_path, rejected=False), "Lib", "c", date="2026-12-05", version="lib 1.2")
    assert summary["version"] == "lib 1.2" and not summary["version_recorded"]
    assert "Lib (lib 1.2, named when summarized: the run does not record it)" in stacks.row(summary)


def test_every_committed_command_runs_on_a_users_machine():
    """Issue 54: the eBay/spec_dec rows began with `git --git-dir=` a folder that existed only on the machine that
    ran them.  A row's command (and the page made from them) reaches a repository by its public url and pinned
    commit, never by a local mirror."""
    runs = sorted((ROOT / "docs" / "runs").glob("*.json"))
    commands = {p.name: json.loads(p.read_text()).get("command", "") for p in runs if p.name != "manifest.json"}
    assert commands
    local = [name for name, cmd in commands.items() if "--git-dir" in cmd or "/work/" in cmd or ".mirror" in cmd]
    assert not local, local
    assert "--git-dir" not in (ROOT / "docs" / "stacks.md").read_text()
    for name, cmd in commands.items():
        if "github.com/eBay/spec_dec" in cmd:
            assert "checkout 96e1d1281c93d70faa9f7fe297d0afaa71650eb8" in cmd, name  # the commit measured


def test_a_served_only_run_says_where_the_target_was_and_what_it_could_not_judge(tmp_path):
    out = run_dir(tmp_path, rejected=True)
    results = json.loads((out / "results.json").read_text())
    results["config"].setdefault("models", {})["local_weights"] = False
    results["config"].setdefault("generation", {})["sampling"] = {"temperature": 0.7, "top_p": 0.9}
    (out / "results.json").write_text(json.dumps(results))
    checks = json.loads((out / "checks.json").read_text())
    checks["distribution"]["engines"]["speculative"]["4"].update(outside=9, not_judged=140, n=451)
    (out / "checks.json").write_text(json.dumps(checks))
    summary = stacks.summarize(out, "S", "c", date="2026-12-07")
    assert summary["local_weights"] is False
    assert summary["sampling"]["4"]["not_judged"] == 140
    cell = stacks.row(summary)
    assert "target on the servers only (local_weights: false), judged from the reference server's top 20" in cell
    assert "T=0.7, top_p 0.9:" in cell and "9 tokens outside the truncation" in cell and "; 140 not judged" in cell
