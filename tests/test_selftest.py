"""Batch composition matters: the length-mix bug escapes the per-cell planner the gate used before (the
self-test's traffic-like batches catch it: tests/test_cli.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gate.checks.analysis import run_checks
from gate.engines.mutants import MUTANTS
from gate.engines.reference import ReferenceEngine
from gate.inputs.config import PACKAGE_DIR, REFERENCE, parse_config
from gate.run.plan import Job, plan_batches_per_cell
from gate.run.records import Phase
from gate.run.runner import Runner
from gate.selftest import EOS_TEXT, selftest_suite

GREEDY_ONLY = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "specguard:demo/draft"}
  device: cpu
batching: {batch_sizes: [1, 4]}
generation: {max_new_tokens: 24}
output: {cache_dir: null}
"""


def per_cell_outputs(runner: Runner) -> None:
    """Plan the outputs phase with the per-cell planner (one slice x bucket per batch, filled with copies)."""
    jobs, batches = [], []
    for b in runner.cfg.batching.batch_sizes:
        for pb in plan_batches_per_cell(runner.prompts, b):
            batches.append(pb)
            jobs.append(Job(Phase.OUTPUTS, REFERENCE, "greedy", pb, 0, cacheable=True))
            jobs += [Job(Phase.OUTPUTS, e.name, "greedy", pb, 0) for e in runner.engines]
    runner.plan.outputs, runner.plan.batches = jobs, batches


@pytest.fixture(scope="module")
def eos_pair(demo_pair):
    return dataclasses.replace(demo_pair, eos_override=tuple(demo_pair.encode(EOS_TEXT)))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """The reference's generations, shared by this module's runs as the self-test shares them across mutants."""
    from gate.run.cache import ReferenceCache

    return ReferenceCache(tmp_path_factory.mktemp("reference-cache"))


def alarms(pair, name: str, tmp_path, cache, planner=None) -> list[str]:
    cfg = parse_config(GREEDY_ONLY, PACKAGE_DIR / "t.yaml")
    engine = MUTANTS[name](pair.target.model, pair.draft.model, torch.device("cpu"))
    engine.name = name
    runner = Runner(cfg, pair, selftest_suite(), ReferenceEngine(pair.target.model, torch.device("cpu")), [engine],
                    tmp_path / f"{name}-{bool(planner)}", log=lambda m: None, cache=cache, timed=False,
                    repeat_runs=False)
    if planner:
        planner(runner)
    checks = run_checks(runner.run(), pair, cfg.config)
    return sorted({v.check for v in checks.failing() if v.engine == name})


@pytest.mark.slow
def test_length_mix_bug_escapes_per_cell_batches(eos_pair, tmp_path, cache):
    """The other half, that the self-test's mixed batches catch it (and the stale row map) by equivalence, is
    asserted by the self-test's own test (tests/test_cli.py), which runs every mutant that way."""
    assert alarms(eos_pair, "length-mix-buffer", tmp_path, cache, planner=per_cell_outputs) == [], \
        "per-cell batches never put a long prompt beside a short one: the bug must not show there"


@pytest.mark.slow
def test_the_speed_selftest_flags_a_planted_slowdown_and_not_the_base_against_itself():
    """Issue 32, on a small budget: paired only, one run each of the base against itself and of a 50% planted
    slowdown (speedup -33%: far beyond what contention between interleaved engines can hide). The full table,
    with 10 runs per row, is measured by `specguard selftest --speed` and kept in docs/checks.md."""
    from gate.selftest.speed import Slowed, speed_selftest

    report = speed_selftest(runs=1, slowdowns=(0.0, 0.5), repeats=4, modes=("paired",))
    rows = {r["slowdown"]: r for r in report.rows()}
    assert set(rows) == {0.0, 0.5} and all(r["mode"] == "paired" and r["cells"] == 6 for r in rows.values())
    assert rows[0.0]["failed"] == 0, "the base against itself never fails beyond the 10% tolerance"
    assert rows[0.5]["median_ratio"] < 0.85 and rows[0.5]["flagged"] >= rows[0.5]["cells"] // 2, rows[0.5]
    assert report.lines()[2].startswith("| mode | planted slowdown |")
    assert Slowed.__mro__[1].__name__ == "SpeculativeEngine"  # the correct engine's algorithm, only slower


@pytest.mark.slow
def test_the_null_selftest_counts_what_every_check_says_of_the_unchanged_engine():
    """Issue 46, item 6, on a small budget: stored mode only (a baseline of two passes, one run against it). The
    table over 10 runs per mode is measured by `specguard selftest --null` and kept in docs/checks.md."""
    from gate.selftest.null import null_selftest

    report = null_selftest(runs=1, repeats=2, samples=100, modes=("stored",))
    assert report.passed, report.lines()  # the unchanged engine fails no check
    checks = {r["check"] for r in report.rows()}
    assert {"equivalence", "distribution", "acceptance", "speedup", "reproducibility"} <= checks, checks
    cells = next(r for r in report.rows() if r["check"] == "speedup cells and load levels")
    assert cells["cells"] >= 6 and cells["marked_ci"][1] <= 1.0
    text = "\n".join(report.lines())
    assert "| stored | distribution | 1 | 0 (0%–" in text and report.to_json()["passed"] is True
    assert report.groups()["groups"] == 2  # the reference and the speculative engine at the sampled batch size


def test_the_null_selftest_counts_distribution_groups_failed_by_one_pass_and_after_confirmation():
    """Issue 55, item 4: the null self-test reports, over every run, how many distribution groups one pass at alpha
    would have failed and how many still fail after the confirmation, each with its interval."""
    from gate.selftest.null import NullReport, NullRun

    report = NullReport(runs=[NullRun("stored", 1, [], [], ["distribution"], 6, 0, 1, 2, 1, 0),
                              NullRun("paired", 2, [], [], ["distribution"], 6, 0, 0, 2, 0, 0)])
    g = report.groups()
    assert g["groups"] == 4 and g["one_pass"]["failed"] == 1 and g["confirmed"]["failed"] == 0
    assert g["confirmed"]["ci"][0] == 0.0 and 0.5 < g["confirmed"]["ci"][1] < 0.7  # Clopper-Pearson, 0 of 4
    text = "\n".join(report.lines())
    assert "distribution groups (engine x batch size) failed: one pass at alpha 1 of 4" in text
    assert "after confirmation 0 of 4 (0.0%–60.2%)" in text
    assert report.to_json()["distribution_groups"] == g
    assert NullReport().group_lines() == []
