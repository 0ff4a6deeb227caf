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
batching: {batch_sizes: [4]}  # per-cell batches of 4 (filled with copies); alone at bs 1 nothing mixes
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


def test_the_speed_selftest_report_counts_flagged_and_failed_cells_per_mode_and_slowdown():
    """The speed self-test's table from its trials (the runs themselves assert on timings, so they are a benchmark:
    benchmarks/selftests_small.py runs a small one with the checks this test made before, and the full table, 10
    runs per row, is measured by `specguard selftest --speed` and kept in docs/checks.md)."""
    from gate.selftest.speed import Slowed, SpeedReport, SpeedTrial

    report = SpeedReport(tolerance=0.10, repeats=4, seconds=12.0)
    report.trials += [SpeedTrial("paired", 0.0, 1, 6, 1, 0, [1.0, 0.98, 1.02, 1.01, 0.99, 1.0]),
                      SpeedTrial("paired", 0.5, 1, 6, 5, 4, [0.66, 0.7, 0.65, 0.68, 0.9, 0.67], marked=True),
                      SpeedTrial("paired", 0.5, 2, 6, 6, 6, [0.6] * 6, marked=True),
                      SpeedTrial("stored", 0.5, 1, 6, 0, 0, [0.95] * 6)]
    rows = {(r["mode"], r["slowdown"]): r for r in report.rows()}
    assert list(rows) == [("paired", 0.0), ("paired", 0.5), ("stored", 0.5)], "paired first, slowdowns in order"
    base, slow = rows["paired", 0.0], rows["paired", 0.5]
    assert (base["runs"], base["cells"], base["flagged"], base["failed"], base["runs_failed"]) == (1, 6, 1, 0, 0)
    assert (slow["runs"], slow["cells"], slow["flagged"], slow["failed"], slow["runs_failed"]) == (2, 12, 11, 10, 2)
    assert slow["runs_marked"] == 2 and slow["median_ratio"] == 0.65, slow  # the upper middle of the 12 sorted ratios
    lines = report.lines()
    assert lines[0] == "speed self-test: 4 repeats per cell, tolerance 10%, 12 s"
    assert lines[2].startswith("| mode | planted slowdown |")
    assert "| paired | 50% | 2 | 2 | 12 | 11 (92%) | 10 (83%) | 2 | 0.650 |" in lines
    assert report.to_json()["rows"] == report.rows() and len(report.to_json()["trials"]) == 4
    assert Slowed.__mro__[1].__name__ == "SpeculativeEngine"  # the correct engine's algorithm, only slower


def test_the_null_selftest_report_fails_on_any_failing_check_and_states_each_rate_with_its_interval():
    """The null self-test's table from its runs (the runs judge speed on timings: benchmarks/selftests_small.py runs
    a small one, `specguard selftest --null` the table in docs/checks.md)."""
    from gate.selftest.null import NullReport, NullRun, clopper_pearson

    seen = ["acceptance", "distribution", "equivalence", "reproducibility", "speedup"]
    quiet = NullRun("stored", 1, [], ["speedup"], seen, cells=6, marked=1, second_passes=1)
    report = NullReport([quiet, NullRun("stored", 2, [], [], seen, cells=6, marked=0)], between_sd=0.031,
                        between_df=5, seconds=40.0)
    assert report.passed and report.to_json()["passed"] is True
    rows = {r["check"]: r for r in report.rows()}
    assert set(rows) == {*seen, "speedup cells and load levels"}
    assert rows["distribution"]["failed"] == 0 and rows["distribution"]["failed_ci"] == clopper_pearson(0, 2)
    assert rows["speedup"]["warned"] == 1 and rows["speedup cells and load levels"]["marked"] == 1
    text = "\n".join(report.lines())
    assert "| stored | distribution | 2 | 0 (0%–84%) | 0 (0%–84%) |" in text, text
    assert "| stored | speedup cells and load levels | 2 | – | 1 of 12 (8.3%, 0.2%–38.5%) |" in text, text
    assert "sampled again before they could fail" in text and "3.1% (5 df" in text
    lo, hi = clopper_pearson(1, 20)
    assert 0.001 < lo < 0.002 and 0.24 < hi < 0.25, (lo, hi)  # the exact interval, as scipy computes it
    report.runs.append(NullRun("paired", 3, ["distribution"], [], seen, cells=6, marked=0))
    assert not report.passed, "a failing check on the unchanged engine is a false alarm"


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


@pytest.mark.parametrize("mode", ["", "--null", "--speed"])
def test_every_selftest_runs_the_demo_pair_on_the_device_and_dtype_it_is_given(monkeypatch, mode):
    """`--device` and `--dtype` reach each self-test's own config (scripts/gpu_evidence.py runs them on cuda in
    bfloat16); a device the gate does not know is refused by the parser, and cpu stays the default."""
    import gate.selftest
    import gate.selftest.null
    import gate.selftest.speed
    from gate import cli
    from gate.errors import ModelError, Problem

    seen = []

    def load_pair(loaded, device=None):
        seen.append((loaded.config.models.device, loaded.config.models.target.dtype, loaded.config.models.draft.dtype))
        raise ModelError(Problem("config", "stop here", field="models.device"))

    for module in (gate.selftest, gate.selftest.null, gate.selftest.speed):
        monkeypatch.setattr(module, "load_pair", load_pair)
    argv = ["selftest", *([mode] if mode else []), "-q"]
    assert cli.main([*argv, "--device", "cuda:1", "--dtype", "bfloat16"]) == 2
    assert cli.main(argv) == 2
    assert seen == [("cuda:1", "bfloat16", "bfloat16"), ("cpu", "float32", "float32")]
    with pytest.raises(SystemExit):
        cli.main([*argv, "--device", "gpu"])


def test_a_mutants_stages_together_run_what_every_check_runs_and_each_parses():
    """A mutant stops at the first stage that catches it; run to the end, its stages cover every batch size, greedy
    and sampled, that ``--every-check`` (and the correct engine) runs."""
    from gate.selftest import FULL, LOOKUP_CONFIG, LOOKUP_FULL, LOOKUP_STAGES, SELFTEST_CONFIG, STAGES, stage_config

    for template, full, stages in ((SELFTEST_CONFIG, FULL, STAGES), (LOOKUP_CONFIG, LOOKUP_FULL, LOOKUP_STAGES)):
        greedy = {b for sizes, g, _ in stages if g for b in sizes}
        sampled = {b for _, _, s in stages for b in s}
        assert greedy == set(full[0]) and sampled == set(full[2]), (stages, full)
        assert stages[0][1] and stages[0][0] == (max(full[0]),), "the cheapest catch first: greedy, fewest batches"
        for stage in (full, *stages):
            gen = stage_config(template, stage, 3, 100, "float32", "cpu").config.generation
            assert gen.greedy == stage[1] and (gen.sampling is None) == (not stage[2]), stage
            assert gen.sampling is None or (gen.sampling.seed, tuple(gen.sampling.batch_sizes)) == (3, stage[2])


def test_a_sampling_only_mutant_overrides_only_hooks_greedy_decoding_never_calls_and_starts_sampled():
    """The ``sampling-*`` mutants skip the greedy stage at batch size 4 (their greedy output is the correct
    engine's): each overrides only a hook that the greedy path of the speculative engine never reaches, and their
    stage order is the same stages, the sampled one first."""
    import inspect

    from gate.engines.speculative import SpeculativeEngine
    from gate.selftest import SAMPLING_FIRST, STAGES

    sampling_hooks = {"draft_token", "accept_test", "residual"}
    source = inspect.getsource(SpeculativeEngine)
    greedy_path = source[source.index("        if settings.greedy:"):source.index("        else:")]
    assert not any(h in greedy_path for h in sampling_hooks), "the greedy branch calls none of them"
    only = {name for name, cls in MUTANTS.items() if getattr(cls, "sampling_only", False)}
    assert only == {m for m in MUTANTS if m.startswith("sampling-")}
    for name in only:
        own = {k for k, v in vars(MUTANTS[name]).items() if callable(v)}
        assert own and own <= sampling_hooks, (name, own)
    assert sorted(SAMPLING_FIRST) == sorted(STAGES) and not SAMPLING_FIRST[0][1], "sampled first, nothing dropped"
