"""Verdicts against a baseline, the cause split of a speedup change, and the rendered PR comment (golden files).

Golden files live in tests/golden/; regenerate them after an intended change with
``SPECGUARD_UPDATE_GOLDEN=1 pytest tests/test_compare.py`` and review the diff.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
import synthetic as syn
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.report.page import COMMENT_LIMIT
from gate.report.render import build_page, marker, render_comment
from gate.verdict.explain import Cost, explain

GOLDEN = Path(__file__).parent / "golden"


def verdict_and_comment(head, head_checks, baseline=None, same_hardware=True, name="demo"):
    cfg = syn.config()
    v = syn.judge(head, head_checks, cfg, baseline=baseline, baseline_path="baselines/demo/x.json",
                same_hardware=same_hardware)
    return v, render_comment(build_page(head, head_checks, v, baseline, name))


def base_of(results, checks=None):
    doc = syn.baseline_of(results, checks or syn.checks_for(results), syn.config())
    return doc.model_copy(update={"created_utc": "2026-11-01T00:00:00Z", "source": {}})


def golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.md"
    if os.environ.get("SPECGUARD_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path}; run with SPECGUARD_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8"), f"{name}: rendered comment differs from {path}"


@pytest.fixture(scope="module")
def base_run():
    return syn.run()


def test_pass_against_its_own_baseline(base_run):
    v, text = verdict_and_comment(base_run, syn.checks_for(base_run), base_of(base_run))
    assert v.outcome == "pass" and v.exit_code == 0
    assert v.headline == "Merging keeps outputs equivalent at bs 1/4"  # speed is named only when it moved
    golden("pass", text)


def test_fail_on_equivalence(base_run):
    examples = [{"prompt_id": "code-1", "position": 3, "kind": "confident", "gap": 4.2, "tolerance": 1e-5,
                 "before": "def f(", "got": "))))", "reference": "x):"}]
    checks = syn.checks_for(base_run, exact={4: 0.5}, confident={4: 2}, examples=examples)
    v, text = verdict_and_comment(base_run, checks, base_of(base_run))
    assert v.outcome == "fail" and v.exit_code == 1
    assert v.headline.startswith("Merging breaks output equivalence at bs 4")
    assert any(c.check == "equivalence" and c.status == "fail" and "exact match fell from 100% to 50%" in c.why
               for c in v.checks)
    golden("fail-equivalence", text)


def test_fail_on_acceptance(base_run):
    head = syn.run(accepted={("code", 4): 1})
    v, text = verdict_and_comment(head, syn.checks_for(head), base_of(base_run))
    assert v.outcome == "fail"
    bad = [c for c in v.acceptance if c.status == "fail"]
    assert {(c.slice, c.batch_size) for c in bad} == {("code", 4), ("*", 4)}
    code = next(c for c in bad if c.slice == "code")
    assert (code.base, code.head) == (3.0, 2.0) and code.relative == pytest.approx(-1 / 3)
    assert "acceptance drops 33% on code at bs 4" in v.headline
    golden("fail-acceptance", text)


def test_fail_on_speedup_with_its_cause(base_run):
    head = syn.run(accepted={("code", 4): 1}, speedup={("code", 4): 1.1})
    v, text = verdict_and_comment(head, syn.checks_for(head), base_of(base_run))
    drop = next(c for c in v.speedup if c.status == "fail")
    assert (drop.slice, drop.batch_size) == ("code", 4) and drop.significant
    assert drop.ratio.estimate == pytest.approx(1.1 / 1.5, rel=0.02) and drop.ratio.high < 0.9
    e = drop.explanation
    assert e.acceptance == pytest.approx(e.change * math.log(2 / 3) / math.log(drop.ratio.estimate))
    assert e.draft_cost == pytest.approx(0) and e.verify_cost == pytest.approx(0)
    assert e.acceptance + e.unexplained == pytest.approx(e.change)
    assert "speedup drops 27% on code at bs 4 (acceptance)" in v.headline
    golden("fail-speedup", text)


def test_no_baseline_is_neutral_and_says_how_to_make_one(base_run):
    v, text = verdict_and_comment(base_run, syn.checks_for(base_run), None)
    assert v.outcome == "neutral" and v.exit_code == 0 and v.mode == "none"
    assert any(c.check == "baseline" and "baseline refresh" in c.why for c in v.checks)
    golden("no-baseline", text)


def test_other_hardware_compares_outputs_but_not_timing(base_run):
    head = syn.run(hardware=syn.HW_B, speedup={("code", 4): 0.5})
    v, text = verdict_and_comment(head, syn.checks_for(head), base_of(base_run), same_hardware=False)
    assert v.outcome == "pass" and not v.speedup
    assert any(c.check == "speedup" and c.status == "warn" and c.why.startswith("not comparable") for c in v.checks)
    assert any(c.check == "acceptance" and c.status == "pass" for c in v.checks)
    golden("hardware-mismatch", text)


def test_a_huge_divergence_list_is_cut_to_the_comment_limit(base_run):
    examples = [{"prompt_id": f"code-{i}", "position": i, "kind": "confident", "gap": 3.0, "tolerance": 1e-5,
                 "before": "x" * 70, "got": "y" * 70, "reference": "z" * 70} for i in range(3000)]
    checks = syn.checks_for(base_run, confident={1: 3000, 4: 3000}, examples=examples)
    cfg = syn.config()
    v = syn.judge(base_run, checks, cfg, baseline=base_of(base_run), baseline_path="b.json")
    text = render_comment(build_page(base_run, checks, v, None, "demo", examples_limit=3000))
    assert len(text) <= COMMENT_LIMIT
    assert "Cut to fit 65,536 characters: verdicts, examples left out" in text
    assert text.rstrip().endswith(marker("demo")) and "specguard: FAIL" in text


def test_hostile_text_is_inert(base_run):
    examples = [{"prompt_id": syn.HOSTILE, "position": 1, "kind": "confident", "gap": 3.0, "tolerance": 1e-5,
                 "before": syn.HOSTILE, "got": syn.HOSTILE, "reference": "ok"}]
    head = syn.run(prompt_ids=("code-0", syn.HOSTILE, "prose-0", "prose-1"))
    checks = syn.checks_for(head, confident={4: 1}, examples=examples)
    _, text = verdict_and_comment(head, checks, None)
    assert "</details><img" not in text and "<img" not in text
    assert not re.search(r"@\w", text), "no @-mention"
    assert not re.search(r"(?<!&)#\d", text), "no issue reference (HTML entities like &#124; aside)"
    assert "`rm" not in text and "](http://evil)" not in text
    assert text.count("<details>") == text.count("</details>")
    golden("hostile", text)


# --- the cause split ---------------------------------------------------------------------------------


def tpf(alpha: float, k: int) -> float:
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@pytest.mark.parametrize("a0,a1,c0,c1,v0,v1", [(0.6, 0.5, 0.1, 0.1, 1.0, 1.0), (0.6, 0.6, 0.05, 0.2, 1.0, 1.0),
                                               (0.6, 0.6, 0.1, 0.1, 1.0, 1.5), (0.7, 0.4, 0.05, 0.1, 1.1, 1.3)])
@pytest.mark.parametrize("measured", [None, 0.83, 1.0, 1.21])
def test_the_causes_add_up_to_the_change(a0, a1, c0, c1, v0, v1, measured):
    """Issue 32: the parts (acceptance, draft cost, verify cost, unexplained) sum to the measured change in
    percent, keep their log-scale shares, and the printed sentence adds up too."""
    k = 4
    base, head = Cost(tpf(a0, k), k, c0, v0), Cost(tpf(a1, k), k, c1, v1)
    e = explain(base, head, measured)
    model = math.log(tpf(a1, k) / (v1 + c1 * k)) - math.log(tpf(a0, k) / (v0 + c0 * k))  # log S_head - log S_base
    assert e.model == pytest.approx(100 * math.expm1(model))
    assert e.alpha_base == pytest.approx(a0, abs=1e-6) and e.alpha_head == pytest.approx(a1, abs=1e-6)
    parts = e.acceptance + e.draft_cost + e.verify_cost
    if measured is None:  # the model's prediction: nothing measured, nothing unexplained
        assert e.change is None and e.unexplained is None
        assert parts == pytest.approx(e.model)
    else:
        assert e.change == pytest.approx(100 * (measured - 1))
        assert parts + e.unexplained == pytest.approx(e.change, abs=1e-9)
        if measured != 1.0:  # each part keeps its share of the exact log split
            scale = e.change / math.log(measured)
            assert e.acceptance == pytest.approx(scale * math.log(tpf(a1, k) / tpf(a0, k)))
        numbers = [int(x) for x in re.findall(r"[+-]\d+(?= points|,| \()", e.sentence.split("=", 1)[1])]
        assert sum(numbers) == int(re.match(r"([+-]\d+)%", e.sentence).group(1)), e.sentence
    if a0 == a1:
        assert e.acceptance == pytest.approx(0)
    if c0 == c1:
        assert e.draft_cost == pytest.approx(0)
    if v0 == v1:
        assert e.verify_cost == pytest.approx(0)


# --- properties of the rules -------------------------------------------------------------------------


cells = st.dictionaries(st.tuples(st.sampled_from(syn.SLICES), st.sampled_from(syn.SIZES)),
                        st.floats(0.6, 3.0), max_size=4)
accepts = st.dictionaries(st.tuples(st.sampled_from(syn.SLICES), st.sampled_from(syn.SIZES)),
                          st.integers(0, 4), max_size=4)


@settings(max_examples=25, deadline=None)
@given(cells, accepts)
def test_a_run_compared_with_its_own_baseline_passes(speedup, accepted):
    run = syn.run(accepted=accepted, speedup=speedup)
    checks = syn.checks_for(run)
    v = syn.judge(run, checks, syn.config(), baseline=base_of(run, checks), baseline_path="b.json")
    assert v.outcome == "pass", [c.why for c in v.checks if c.status == "fail"]


@settings(max_examples=25, deadline=None)
@given(cells, accepts, st.floats(1.0, 2.0))
def test_a_strict_improvement_never_fails(speedup, accepted, gain):
    base = syn.run(accepted=accepted, speedup=speedup)
    better = syn.run(accepted={k: min(4, a + 1) for k, a in accepted.items()},
                     speedup={k: s * gain for k, s in speedup.items()})
    v = syn.judge(better, syn.checks_for(better), syn.config(), baseline=base_of(base), baseline_path="b.json")
    assert v.outcome == "pass", [c.why for c in v.checks if c.status == "fail"]


@settings(max_examples=15, deadline=None)
@given(st.floats(0.2, 5.0))
def test_scaling_every_timing_leaves_equivalence_alone(factor):
    run = syn.run()
    scaled = run.model_copy(deep=True)
    for ex in scaled.executions:
        ex.wall_s *= factor
    a = syn.judge(run, syn.checks_for(run, exact={4: 0.5}), syn.config(), baseline=base_of(run), baseline_path="b")
    b = syn.judge(scaled, syn.checks_for(scaled, exact={4: 0.5}), syn.config(), baseline=base_of(run),
                baseline_path="b")
    eq = [(c.check, c.status, c.why) for c in a.checks if c.check == "equivalence"]
    assert eq == [(c.check, c.status, c.why) for c in b.checks if c.check == "equivalence"]


def test_speedup_png_is_drawn_with_the_plot_extra_and_skipped_with_a_note_without(base_run, tmp_path, monkeypatch):
    import sys

    from gate.report.render import write_png

    checks = syn.checks_for(base_run)
    assert write_png(checks, tmp_path / "speedup.png") is None
    assert (tmp_path / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # the extra is not installed
    note = write_png(checks, tmp_path / "again.png")
    assert "pip install 'specguard[plot]'" in note and not (tmp_path / "again.png").exists()


def test_an_untimed_run_draws_no_chart_and_imports_no_matplotlib(base_run, tmp_path, monkeypatch):
    """Nothing to draw is known before matplotlib's import (most of a second of every untimed gate's CPU)."""
    import sys

    from gate.report.render import write_png

    untimed = syn.checks_for(base_run).model_copy(update={"speedup": None, "traffic": None})
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import would fail: the note says it never came
    assert write_png(untimed, tmp_path / "speedup.png") == "speedup.png skipped: the run has no timing"
    assert not (tmp_path / "speedup.png").exists()


def test_terminal_report_is_plain_text_when_not_a_terminal(base_run):
    import io

    from rich.console import Console

    from gate.report.render import print_terminal

    v = syn.judge(base_run, syn.checks_for(base_run), syn.config(), baseline=base_of(base_run), baseline_path="b")
    buf = io.StringIO()
    print_terminal(v, Console(file=buf, width=120))
    text = buf.getvalue()
    assert text.startswith("specguard: PASS — Merging keeps outputs equivalent at bs 1/4")
    assert "\x1b[" not in text, "no colour codes in CI logs"
    # Issue 30 item 15: rich box tables wrapped at 80 columns in CI logs; one unwrapped line per verdict instead
    assert not set("│┃┏┗━─") & set(text), text
    lines = text.splitlines()
    assert len(lines) == 1 + len(v.checks) + len(v.speedup) and all(len(line) > 20 for line in lines)
    assert any(line.startswith("pass    acceptance") for line in lines), lines


# --- a PR that changes k or the suite is gated, not refused (issue 18) ------------------------------------


def _with(results, k=None, suite_fp=None, prompt_ids=None):
    doc = results.model_dump(mode="json", by_alias=True)
    if k is not None:
        doc["settings"]["num_draft_tokens"] = k
    if suite_fp is not None:
        doc["fingerprint"]["suite"]["fingerprint"] = suite_fp
    for p in doc["prompts"]:
        if prompt_ids and p["id"] in prompt_ids:
            p["prompt_ids"] = prompt_ids[p["id"]]
    return type(results).model_validate(doc)


def test_a_k_change_compares_speedup_and_reports_acceptance_against_the_leviathan_expectation(base_run):
    head = _with(syn.run(accepted={("code", 4): 1, ("prose", 4): 1}, speedup={("code", 4): 1.1}), k=3)
    v, text = verdict_and_comment(head, syn.checks_for(head), base_of(base_run))
    assert v.outcome == "fail"  # the speedup drop on code at bs 4 is still judged, whatever k is
    assert any(c.status == "fail" and c.check == "speedup" and c.slice == "code" for c in v.checks)
    acc = [c for c in v.acceptance if c.slice == "*" and c.batch_size == 4]
    assert acc and all(c.status == "neutral" and c.expected is not None for c in acc)
    # base: 2 of 4 accepted per step -> 3 per step at k=4; alpha solves (1 - a^5)/(1 - a) = 3; at k=3 it is lower
    assert 2.0 < acc[0].expected < 3.0
    assert not any(c.check == "acceptance" and c.status == "fail" for c in v.checks)
    notes = [c.why for c in v.checks if c.check == "baseline"]
    assert any("k changed 4 → 3" in n and "not judged" in n for n in notes), notes
    assert "Leviathan expects" in text


def test_a_k_change_with_unchanged_speed_passes(base_run):
    head = _with(syn.run(accepted={("code", 1): 1, ("code", 4): 1, ("prose", 1): 1, ("prose", 4): 1}), k=3)
    v, _ = verdict_and_comment(head, syn.checks_for(head), base_of(base_run))
    assert v.outcome == "pass", [c.why for c in v.failed()]


def test_a_changed_suite_compares_only_the_slices_both_runs_share(base_run):
    # the prose slice's prompts changed; code is the same: a code drop is judged, a prose drop is not
    head = _with(syn.run(accepted={("prose", 4): 0}, speedup={("prose", 4): 0.5}), suite_fp="0ther",
                 prompt_ids={"prose-0": [9, 9, 9]})
    v, _ = verdict_and_comment(head, syn.checks_for(head), base_of(base_run))
    assert v.outcome == "pass", [c.why for c in v.failed()]
    assert not v.equivalence, "exact match over another suite is not compared"
    assert {c.slice for c in v.speedup} == {"code"} and {c.slice for c in v.acceptance} == {"code"}
    note = next(c.why for c in v.checks if c.check == "baseline" and "suite changed" in c.why)
    assert "share unchanged (code)" in note and "changed prompts, not compared: prose" in note
    worse = _with(syn.run(speedup={("code", 4): 0.5}), suite_fp="0ther", prompt_ids={"prose-0": [9, 9, 9]})
    assert verdict_and_comment(worse, syn.checks_for(worse), base_of(base_run))[0].outcome == "fail"


def test_no_baseline_for_this_hardware_names_the_others_and_can_fail(base_run):
    v = syn.judge(base_run, syn.checks_for(base_run), syn.config(), baseline=None, baseline_path="b/x.json",
                others=["cuda-nvidia-a100", "cuda-nvidia-h100"])
    why = next(c.why for c in v.checks if c.check == "baseline")
    assert v.outcome == "neutral" and "cuda-nvidia-a100, cuda-nvidia-h100" in why and "hardware-key" in why
    for rule in ("fail", "stop"):  # stop: the gate stops before its run; a run compared without one fails
        v = syn.judge(base_run, syn.checks_for(base_run), syn.config(on_missing=rule), baseline=None,
                    baseline_path="b/x.json")
        assert v.outcome == "fail" and v.exit_code == 1
        assert any(c.check == "baseline" and c.status == "fail" and f"on_missing: {rule}" in c.why for c in v.checks)


def test_the_step_summary_is_bounded_as_a_whole_page_in_bytes():
    """Issue 21: the details were appended after the cut, so summary.md could pass GitHub's 1 MiB step-summary
    limit (and the Action then cut it blindly mid-table).  One routine bounds the whole page; the details go
    first; the limit is in UTF-8 bytes, never cut mid-character."""
    from gate.report.page import Page, Section, utf8_size
    from gate.report.render import render_summary

    page = Page([Section("headline", "## ✅ specguard: PASS\n", 100), Section("speedup", "speedup ✓\n" * 50, 75),
                 Section("footer", "\n<!-- specguard:demo -->\n", 100)])
    whole = render_summary(page, details="détail ✓\n" * 10, limit=100_000)
    assert "## Details" in whole and whole.rstrip().endswith("<!-- specguard:demo -->")
    limit = utf8_size(whole) - 1  # one byte too many: the details go, the rest stays, and the page says so
    cut = render_summary(page, details="détail ✓\n" * 10, limit=limit)
    assert utf8_size(cut) <= limit and "## Details" not in cut and "speedup ✓" in cut
    assert "details left out" in cut and cut.rstrip().endswith("<!-- specguard:demo -->")
    tiny = render_summary(page, details="x", limit=25)  # nothing left to drop: cut, on a character boundary
    assert utf8_size(tiny) <= 25 and "\ufffd" not in tiny
    alone = Page([Section("headline", "## ✅ ✅ specguard: PASS\n", 100)])
    full = render_summary(alone, details="", limit=100_000)
    for limit in range(1, utf8_size(full)):  # wherever the limit falls, inside a 3-byte ✅ too: whole characters
        cut = render_summary(alone, details="", limit=limit)
        assert utf8_size(cut) <= limit and full.startswith(cut), (limit, cut)


# --- issue 32: a speed section a reviewer can trust ------------------------------------------------------------


def test_a_drop_inside_the_spread_between_runs_is_not_named_and_one_beyond_it_warns(base_run):
    """Issue 46: an unchanged demo headlined "speedup 16% lower … within the tolerance" and warned on 6 of 18 cells.
    A drop inside the spread between runs (baseline.between_run_sd, 5% here) is a pass and no headline news; one
    beyond baseline.min_effect that stays significant over the run's cells and load levels warns, within the 10%
    tolerance, and the headline names it."""
    head = syn.run(speedup={("code", 4): 1.5 * 0.95})  # -5%: real in this run, inside the spread between runs
    v, text = verdict_and_comment(head, syn.checks_for(head), base_of(base_run))
    cell = next(c for c in v.speedup if (c.slice, c.batch_size) == ("code", 4))
    assert cell.status == "pass" and cell.ratio.low < 0.9 < 1.0 < cell.ratio.high
    assert v.outcome == "pass" and v.headline == "Merging keeps outputs equivalent at bs 1/4"
    assert "per cell: baseline.between_run_sd; the baseline has one timing pass" in text

    quiet = syn.config().baseline.model_copy(update={"between_run_sd": 0.01})  # a runner measured to move 1%
    head = syn.run(speedup={("code", 4): 1.5 * 0.92})
    v = syn.judge(head, syn.checks_for(head), syn.config(), baseline=base_of(base_run), rules=quiet)
    cell = next(c for c in v.speedup if (c.slice, c.batch_size) == ("code", 4))
    assert cell.status == "warn" and not cell.significant and 0.9 < cell.ratio.high < 1 and cell.p_adjusted < 0.05
    assert "speedup 8% lower on code at bs 4 (significant, within the tolerance)" in v.headline
    assert any(c.check == "speedup" and c.status == "warn" and "within the 10% tolerance" in c.why
               and "Holm" in c.why for c in v.checks)
    text = render_comment(build_page(head, syn.checks_for(head), v, base_of(base_run), "demo"))
    row = next(line for line in text.splitlines() if line.startswith("| speculative | code | 4 "))
    assert "⚠️ -8%" in row and "✅" not in row
    assert "⚠️ marks a drop beyond 5% (`baseline.min_effect`)" in text
    head = syn.run(speedup={("code", 4): 1.5 * 0.97})  # -3%: significant here, but below the minimum effect
    v = syn.judge(head, syn.checks_for(head), syn.config(), baseline=base_of(base_run), rules=quiet)
    assert all(c.status == "pass" for c in v.speedup + v.speedup_levels) and "speedup" not in v.headline


def test_a_small_drop_in_every_slice_is_carried_by_its_load_level_in_paired_mode(base_run):
    """No single cell of a small consistent drop is significant after the correction; the load level, the mean over
    its slices, is (paired mode: the shared noise of stored mode cannot hide it)."""
    from gate.verdict.speed import paired_changes
    from gate.verdict.summary import PairedCell, PairedSummary

    rng = __import__("random").Random(0)
    cells = {f"{s}|{bs}|0-127": PairedCell(slice=s, batch_size=bs, bucket="0-127",
                                           ratios=[0.94 * math.exp(rng.gauss(0, 0.06)) for _ in range(6)],
                                           batches=[0, 0, 0, 1, 1, 1])
             for s in ("code", "prose", "questions", "grammar") for bs in (1, 4)}
    paired = PairedSummary(engine="base-speculative", head_engine="speculative", num_draft_tokens=4, cells=cells)
    changes, levels, noise = paired_changes(base_run_measured(base_run), paired, syn.config().baseline)
    assert noise.between_sd == 0 and "one process" in noise.between_source
    assert {c.status for c in levels} == {"warn"} and sum(c.status == "warn" for c in changes) < len(changes)


def base_run_measured(run):
    from gate.verdict.baseline import measure

    return measure(run, syn.checks_for(run), syn.config())


def test_runner_drift_is_named_when_every_cell_moves_alike_and_the_step_costs_moved(base_run):
    """Every cell 30% slower, acceptance unchanged, the verification cost moved: the runner, not the PR."""
    head = syn.run(speedup={cell: 1.5 * 0.7 for cell in [(s, b) for s in syn.SLICES for b in syn.SIZES]},
                   verify_ratio=1.45)
    v, text = verdict_and_comment(head, syn.checks_for(head), base_of(base_run))
    drift = [c for c in v.checks if c.check == "runner"]
    assert len(drift) == 1 and drift[0].status == "warn" and "4 of 4 cells moved the same way" in drift[0].why
    assert "the runner changed" in v.headline
    assert all(c.status == "fail" for c in v.speedup)  # the cells' own verdicts stand
    golden("runner-drift", text)
    # the same drop with the step costs unchanged is not blamed on the runner: it may be the engine
    same_costs = syn.run(speedup={cell: 1.5 * 0.7 for cell in [(s, b) for s in syn.SLICES for b in syn.SIZES]})
    v2, _ = verdict_and_comment(same_costs, syn.checks_for(same_costs), base_of(base_run))
    assert not [c for c in v2.checks if c.check == "runner"]
    # nor is a drop in one slice only
    one = syn.run(speedup={("code", 1): 1.2, ("code", 4): 1.2}, verify_ratio=1.45)
    v3, _ = verdict_and_comment(one, syn.checks_for(one), base_of(base_run))
    assert not [c for c in v3.checks if c.check == "runner"]


def test_the_comment_links_the_run_the_artifact_and_the_baseline_from_the_job_environment(base_run):
    from gate.ci.github import run_links
    from gate.report.render import build_page

    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "org/models", "GITHUB_RUN_ID": "42",
           "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567"}
    links = run_links("baselines/demo/cpu.json", "89abcdef0123", env)
    assert links == {"run": "https://github.com/org/models/actions/runs/42",
                     "artifact": "https://github.com/org/models/actions/runs/42#artifacts",
                     "baseline": "https://github.com/org/models/blob/0123456789abcdef0123456789abcdef01234567/"
                                 "baselines/demo/cpu.json",
                     "baseline_commit": "https://github.com/org/models/commit/89abcdef0123"}
    checks = syn.checks_for(base_run)
    v = syn.judge(base_run, checks, syn.config(), baseline=base_of(base_run))
    text = render_comment(build_page(base_run, checks, v, None, "demo", links=links))
    assert "[workflow run](https://github.com/org/models/actions/runs/42) · [artifact](" in text
    assert "[baseline's commit](https://github.com/org/models/commit/89abcdef0123)" in text
    # hostile parts are left out, never rendered
    bad = {**env, "GITHUB_REPOSITORY": "org/models)[x](http://evil", "GITHUB_RUN_ID": "42"}
    assert run_links("baselines/x.json", "not-a-sha) [x](http://evil)", bad) == {}
    assert "baseline_commit" not in run_links("b.json", "zz) [x](http://evil)", env)
    assert "baseline" not in run_links("../../etc/passwd", None, env)
    assert run_links(None, None, {}) == {}


def test_a_run_without_a_draft_model_renders_its_footer(base_run):
    """An n-gram, EAGLE or MTP run has no draft model: the footer names the models the run has (the report crashed
    on `models["draft"]` after a whole vLLM n-gram gate)."""
    run = base_run.model_copy(deep=True)
    del run.fingerprint.models["draft"]
    checks = syn.checks_for(run)
    v = syn.judge(run, checks, syn.config(), baseline=None, baseline_path="b.json")
    text = render_comment(build_page(run, checks, v, None, "demo"))
    assert f"target {run.fingerprint.models['target'].fingerprint}</sub>" in text and " · draft " not in text
