"""Issue 53, item 3: ``checks.budget_minutes``, the run fitted to a budget, what buys most first.

The fitting logic on its own (priority order, what is dropped, the pace it estimates at), the runner under a budget
on a fake clock with scripted engines (no weights, no real time), the config and the flag, ``checks.json`` and the
comment saying what was left out (never a pass of it), a refresh refused from a cut run, and ``plan`` showing what a
budget keeps and drops.
"""

from __future__ import annotations

import json

import pytest
import synthetic as syn
from helpers import FakeEngine

from gate.cli import main
from gate.inputs.config import DEMO_CONFIG, parse_config
from gate.run.budget import MIN_SAMPLES, Budget, Deadline, Pace, Unit, fit, split_sampling, units
from gate.run.plan import PlannedBatch, PromptInfo, TimingCell, plan
from gate.run.results import BudgetLeftOut, BudgetRecord, BudgetSampling, Skip
from gate.run.schedule import TimingScheduler

CONFIG = """\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cpu}
batching: {batch_sizes: [1, 2, 4]}
suite: {max_prompts_per_slice: 1}
output: {cache_dir: null}
generation: {max_new_tokens: 8, sampling: {temperature: 1.0, batch_sizes: [4]}}
checks:
  distribution: {num_samples: 100}
  speedup: {min_repeats: 2, max_repeats: 4, time_budget_s: 1000, max_batches_per_cell: 1, ci_half_width: 0.001}
%(budget)s
"""


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def spend(self, seconds: float) -> float:
        self.t += seconds
        return seconds


def prompts(n: int = 6) -> list[PromptInfo]:
    return [PromptInfo(i, f"p{i}", f"s{i % 3}", "0-127", (1, 2, 3, 4 + i), 8) for i in range(n)]


def config(budget: str = ""):
    return parse_config(CONFIG % {"budget": budget}, DEMO_CONFIG.parent / "budget.yaml")


# --- the pace and the budget's admission ----------------------------------------------------------------------------


def test_the_pace_is_the_runs_own_rate_once_measured_else_the_last_runs_scaled_by_how_slow_this_run_is():
    prior = {("outputs", "reference", 4): 0.01, ("outputs", "reference", 1): 0.04, ("timing", "reference", 1): 0.05}
    pace = Pace(lambda phase, engine, bs: prior.get((phase, engine, bs), 0.1))
    assert pace.per_token("outputs", "reference", 1) == pytest.approx(0.04)  # nothing measured: the prior
    pace.record("outputs", "reference", 4, 100, 2.0)  # 0.02 s a token: twice the last run's pace
    assert pace.slowdown == pytest.approx(2.0)
    assert pace.per_token("outputs", "reference", 4) == pytest.approx(0.02)  # measured: its own
    assert pace.per_token("timing", "reference", 1) == pytest.approx(0.10)  # the prior, twice as slow
    assert pace.seconds({("outputs", "reference", 4): 50, ("timing", "reference", 1): 10}) == pytest.approx(2.0)


def test_without_a_last_run_a_smaller_batch_is_priced_as_if_a_step_cost_the_same_a_bound_from_above():
    pace = Pace()
    assert pace.per_token("outputs", "reference", 4) is None and pace.seconds({("outputs", "reference", 4): 1}) is None
    pace.record("outputs", "reference", 8, 80, 0.8)  # 0.01 s a token at bs 8
    assert pace.per_token("sampling", "reference", 8) == pytest.approx(0.01)  # the engine's rate at that size
    assert pace.per_token("outputs", "reference", 2) == pytest.approx(0.04)  # 8 / 2 times dearer per token
    assert pace.per_token("outputs", "speculative", 1) == pytest.approx(0.08)  # another engine: any engine's rate


def test_the_budget_admits_what_fits_never_leaves_out_tier_1_and_says_what_it_left_out():
    clock = Clock()
    pace = Pace()
    pace.record("outputs", "reference", 4, 100, 1.0)  # 0.01 s a token
    budget = Budget(1.0, "checks.budget_minutes", Deadline(60.0, 0.0, 10.0, clock), pace)
    clock.spend(30.0)  # 20 s left for the run (10 s kept for the checks)
    key = ("outputs", "reference", 4)
    assert budget.admit(Unit(1, "equivalence", "equivalence at batch size 4", {key: 100_000}))  # tier 1: always
    assert budget.admit(Unit(4, "equivalence", "equivalence at batch size 2", {key: 1500}))  # 15 s of 20
    small = Unit(4, "timing", "timing at batch size 2, cell a", {key: 1500})
    assert not budget.admit(small, queued=[Unit(4, "timing", "x", {key: 600})])  # 15 s, and 6 s queued before it
    assert budget.admit(small)
    big = Unit(4, "equivalence", "equivalence at batch size 1", {key: 2100}, 1)
    assert not budget.admit(big)
    assert [x.unit for x in budget.left_out] == [small, big]  # each refusal is recorded
    left = budget.left_out[-1]
    assert left.unit is big and left.estimate_s == pytest.approx(21.0) and left.left_s == pytest.approx(20.0)
    assert left.reason("checks.budget_minutes") == ("left out by the budget (checks.budget_minutes): an estimated "
                                                    "21 s did not fit the 20 s left")


def test_a_run_slower_than_the_last_keeps_back_more_for_its_checks():
    clock = Clock()
    pace = Pace(lambda phase, engine, bs: 0.01)
    budget = Budget(1.0, "checks.budget_minutes", Deadline(60.0, 0.0, 10.0, clock), pace)
    assert budget.deadline.left() == pytest.approx(50.0)
    pace.record("outputs", "reference", 4, 100, 3.0)  # three times the last run's pace
    clock.spend(3.0)
    assert budget.deadline.left() == pytest.approx(60.0 - 30.0 - 3.0)  # the 10 s kept for the checks, times 3
    pace.record("outputs", "reference", 4, 1000, 1.0)  # faster now: never less than the last run spent
    assert budget.deadline.left() == pytest.approx(60.0 - 10.0 - 3.0)


def test_the_deadline_counts_from_the_processs_start_imports_included():
    import time

    from gate.run.budget import process_started

    now = time.perf_counter()
    assert now - 3600 < process_started() <= now  # this test process started before now, within the hour


def test_sampling_groups_share_what_is_left_and_are_left_out_below_the_minimum():
    assert split_sampling(600, 1.0) == 600 and split_sampling(600, 0.5) == 300
    assert split_sampling(600, (MIN_SAMPLES - 1) / 600) == 0


# --- the priority order ---------------------------------------------------------------------------------------------


def test_units_go_largest_batch_size_first_then_sampling_then_its_timing_then_the_other_sizes():
    cfg = config().config
    p = plan(cfg, prompts(), [syn_engine()])
    queue = units(p, prompts(), cfg.batching.batch_sizes, 2, 1)
    order = [(u.tier, u.what, u.batch_size) for u in queue]
    assert order[0] == (1, "equivalence", 4)
    assert [o for o in order if o[1] == "sampling"] == [(2, "sampling", 4), (2, "sampling", 4)]  # control, engine
    first_timing = order.index((3, "timing", 4))
    assert order.index((2, "sampling", 4)) < first_timing
    rest = [o for o in order if o[0] == 4]
    assert rest[0] == (4, "equivalence", 2) and rest.index((4, "equivalence", 1)) > rest.index((4, "timing", 2))
    # the canonical reference (the reference alone at batch size 1) is part of tier 1: equivalence is judged against it
    first = queue[0].work
    assert {(j.engine, j.batch.batch_size) for j in first} == {("reference", 4), ("speculative", 4), ("reference", 1)}
    assert not any(j.engine == "reference" for j in queue[[u.label for u in queue].index(
        "equivalence at batch size 1")].work)


def syn_engine():
    from gate.engines.base import Capabilities
    from gate.run.plan import EngineInfo

    return EngineInfo("speculative", Capabilities())


def test_the_plans_fit_keeps_in_priority_order_cuts_sampling_to_a_share_and_drops_the_rest():
    units_ = [Unit(1, "equivalence", "equivalence at batch size 8"), Unit(2, "sampling", "sampling a"),
              Unit(2, "sampling", "sampling b"), Unit(3, "timing", "timing at batch size 8, cell x", cell="x"),
              Unit(4, "equivalence", "equivalence at batch size 1")]
    cost = {"equivalence at batch size 8": 50.0, "sampling a": 20.0, "sampling b": 20.0,
            "timing at batch size 8, cell x": 5.0, "equivalence at batch size 1": 30.0}
    got = fit(units_, 80.0, lambda u: cost[u.label], num_samples=600)
    assert [u.label for u, _ in got.kept] == ["equivalence at batch size 8", "sampling a", "sampling b"]
    assert got.sampling_need == 450 and [s for _, s in got.kept][1:] == [15.0, 15.0]  # 30 s of the 40 s asked
    assert {u.label for u, _ in got.dropped} == {"timing at batch size 8, cell x", "equivalence at batch size 1"}
    assert any("cuts the sampling test to 450 tokens" in line for line in got.lines())
    roomy = fit(units_, 1000.0, lambda u: cost[u.label], num_samples=600)
    assert not roomy.dropped and roomy.sampling_need is None


# --- the scheduler's guard ------------------------------------------------------------------------------------------


def test_the_guard_leaves_a_cell_out_and_stops_adaptive_repeats_with_deadline():
    from gate.inputs.checks_config import SpeedupCheck

    clock = Clock()
    cells = [TimingCell(1, s, "0-127", (PlannedBatch(1, i, (i,), 1, "cell", 0, s, "0-127"),))
             for i, s in enumerate(("a", "b"))]

    class Guard:
        def cell(self, cell):
            return cell.slice == "a"

        def more(self, cell, seconds):
            return clock.t + seconds <= 10

    noisy = iter([2.0, 1.0, 1.2, 0.9] * 10)

    def run(pb, repeat, order):
        return {"reference": clock.spend(1.0), "speculative": clock.spend(next(noisy))}

    policy = SpeedupCheck(min_repeats=2, max_repeats=30, ci_half_width=0.001, bootstrap_resamples=200)
    out = TimingScheduler(policy, clock).run_level(cells, "reference", ["speculative"], 1e9, run, Guard())
    assert set(out) == {"a|0-127"} and out["a|0-127"]["stopped_by"] == "deadline"
    assert clock.t <= 10 and out["a|0-127"]["repeats"] >= 2


# --- the runner under a budget, on a fake clock ---------------------------------------------------------------------


def budgeted_run(tmp_path, configs_only, budget_s: float, reserve_s: float = 0.0):
    from gate.inputs.suite import suite_for
    from gate.run.runner import Runner

    clock = Clock()
    loaded = config()
    budget = Budget(budget_s / 60, "checks.budget_minutes", Deadline(budget_s, 0.0, reserve_s, clock), Pace())
    ref = FakeEngine("reference", False, wall=lambda n: clock.spend(1.0))
    spec = FakeEngine("speculative", True, wall=lambda n: clock.spend(0.5))
    runner = Runner(loaded, configs_only, suite_for(loaded), ref, [spec], tmp_path / "out", log=lambda m: None,
                    budget=budget)
    return runner, runner.run(), clock


def test_a_budgeted_run_goes_in_priority_order_and_records_what_it_left_out(tmp_path, configs_only):
    _, results, clock = budgeted_run(tmp_path, configs_only, budget_s=60.0)
    done = [(ex.phase.value, ex.batch_size) for ex in results.executions]
    first_other = next(i for i, (ph, bs) in enumerate(done) if not (ph == "outputs" and bs in (4, 1)))
    assert {bs for ph, bs in done[:first_other]} == {4, 1} and done[first_other][0] == "sampling"
    b = results.budget
    assert b is not None and b.minutes == 1.0 and b.source == "checks.budget_minutes" and b.left_out
    assert clock.t <= 60.0 + 2.0, "at most one batch pair past the deadline"
    left = {(x.what, x.batch_size) for x in b.left_out}
    assert ("equivalence", 1) in left  # the smallest batch size went first
    spec_greedy = {ex.batch_size for ex in results.executions if ex.engine == "speculative" and ex.mode == "greedy"
                   and ex.phase.value == "outputs"}
    assert 4 in spec_greedy and not any(bs in spec_greedy for w, bs in left if w == "equivalence")
    skips = [s for s in results.skipped if "left out by the budget" in s.reason]
    assert {(s.engine, s.batch_size) for s in skips} >= {("speculative", 1)}
    on_disk = json.loads((tmp_path / "out" / "results.json").read_text())
    assert on_disk["budget"]["left_out"] and on_disk["status"] == "complete"


def test_a_roomy_budget_runs_everything_and_a_budget_too_small_for_tier_1_is_refused(tmp_path, configs_only):
    from gate.errors import SpecguardError

    _, results, _ = budgeted_run(tmp_path / "a", configs_only, budget_s=100_000.0)
    assert results.budget is not None and not results.budget.cut
    runner, _, _ = budgeted_run(tmp_path / "b", configs_only, budget_s=100_000.0)
    runner.budget.pace.record("outputs", "reference", 4, 8, 1000.0)  # now known to be slow
    runner.budget.deadline.budget_s = 10.0
    with pytest.raises(SpecguardError) as err:
        runner.run()
    said = str(err.value.problems[0])
    assert "checks.budget_minutes" in said and "too small for even equivalence at batch size 4" in said


# --- config, flag ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-3", "0", "fast", "20000"])
def test_a_bad_budget_is_exit_2_naming_the_field(tmp_path, capsys, value):
    path = tmp_path / "specguard.yaml"
    path.write_text(CONFIG % {"budget": f"  budget_minutes: {value}"})
    assert main(["validate", str(path)]) == 2
    assert "checks.budget_minutes" in capsys.readouterr().err


def test_the_budget_is_not_in_the_configs_digest_and_the_flag_takes_only_positive_minutes(capsys):
    assert config().config.digest() == config("  budget_minutes: 5").config.digest()
    for bad in ("-1", "0", "x"):
        with pytest.raises(SystemExit) as err:
            main(["gate", str(DEMO_CONFIG), "--budget-minutes", bad])
        assert err.value.code == 2
    assert "--budget-minutes" in capsys.readouterr().err


# --- checks.json and the comment ------------------------------------------------------------------------------------


def budgeted(results):
    rec = BudgetRecord(minutes=2.0, source="--budget-minutes", reserve_s=20.0, estimates="stated", run_s=100.0,
                       left_out=[BudgetLeftOut(what="equivalence", batch_size=4, left_s=3.0, estimate_s=9.0,
                                               reason="left out by the budget (--budget-minutes): an estimated 9 s "
                                                      "did not fit the 3 s left")],
                       sampling=[BudgetSampling(engine="speculative", batch_size=1, tokens=300, need=600)],
                       repeats_cut=[1])
    return results.model_copy(update={"budget": rec, "skipped": [
        Skip(engine="speculative", batch_size=4, mode="greedy", reason=rec.left_out[0].reason)]})


def test_checks_and_the_comment_say_what_the_budget_left_out_never_a_pass_of_it(configs_only):
    from gate.checks.budget import section
    from gate.report.render import build_page, render_comment

    results = budgeted(syn.run())
    checks = syn.checks_for(results)
    doc, said = section(results, None, checks.speedup)
    checks = checks.model_copy(update={"budget": doc, "verdicts": [*checks.verdicts, *said]})
    assert doc.left_out[0].what == "equivalence" and doc.left_out[0].batch_size == 4
    assert doc.sampling[0].tokens == 300 and doc.sampling[0].need == 600
    assert all(v.status == "info" for v in said)
    assert any(v.why.startswith("not run, not judged: equivalence at batch size 4 left out by the budget")
               for v in said)
    syn.checks_json(checks)  # validates against gate/schemas/checks.schema.json
    # as the run left it: no equivalence at batch size 4, so the headline never says it was kept
    checks = checks.model_copy(update={"verdicts": [v for v in checks.verdicts
                                                    if not (v.check == "equivalence" and v.batch_size == 4)]})
    verdict = syn.judge(results, checks, syn.config())
    assert "equivalent at bs 1 (bs 4 not run)" in verdict.headline, verdict.headline
    comment = render_comment(build_page(results, checks, verdict, None, "demo"))
    assert "Fitted to a budget of 2 min" in comment and "not run and is not judged" in comment
    assert "not run, not judged: equivalence at batch size 4" in comment
    assert "300 of 600 tokens" in comment
    assert comment.index("Fitted to a budget") < comment.index("<sub>")


def test_the_power_that_remained_says_where_it_was_simulated_at_more_tokens_than_the_cut_group_had():
    from gate.checks.budget import section
    from gate.checks.doc import Distribution

    results = budgeted(syn.run())
    dist = Distribution.model_validate({
        "alpha": 0.01, "num_samples": 600, "temperature": 1.0, "tests": ["ks"], "engines": {},
        "power": {"trials": 20, "n": 600, "families": {"toward_draft": {"curve": [], "min_detectable_epsilon": 0.2}}}})
    doc, said = section(results, dist, None)
    assert doc.sampling[0].power_n == 600 and doc.sampling[0].min_detectable_epsilon == {"toward_draft": 0.2}
    line = next(v.why for v in said if v.why.startswith("the sampling test ran on 300 of 600"))
    assert "toward_draft 0.2 (simulated at 600 tokens, the first group analysed: at 300 the power is lower)" in line


def test_a_refresh_from_a_run_the_budget_cut_is_refused_unless_forced(tmp_path):
    from gate.errors import SpecguardError
    from gate.io.rundir import RunDir
    from gate.verdict.refresh import write_baseline

    results = budgeted(syn.run())
    checks = syn.checks_for(results)
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(syn.results_json(results))
    (run / "checks.json").write_text(syn.checks_json(checks.model_copy(update={"results_digest": results.digest})))
    loaded = parse_config(syn.config().model_dump_json(exclude_none=True), tmp_path / "specguard.yaml")
    with pytest.raises(SpecguardError) as err:
        write_baseline(loaded, RunDir(run), tmp_path / "baselines", False, None)
    said = str(err.value.problems[0])
    assert "fitted to a budget of 2 min" in said and "equivalence" in said and "full tier" in said


# --- plan -----------------------------------------------------------------------------------------------------------


def test_plan_shows_what_a_budget_keeps_and_drops_and_warns_where_tier_1_cannot_fit(capsys):
    args = ["plan", str(DEMO_CONFIG), "--tokens-per-s", "1:40,8:200", "--json"]
    assert main([*args, "--budget-minutes", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    b = report["budget"]
    assert b["minutes"] == 1 and b["source"] == "--budget-minutes"
    assert b["keeps"][0]["label"] == "equivalence at batch size 8"
    assert [d for d in b["drops"] if d["label"] == "equivalence at batch size 1"]
    assert {"name": "budget", "minutes": 1.0, "from": "--budget-minutes"} in report["limits"]
    assert any("exceeds the budget of 1 min" in w for w in report["warnings"])
    assert main(["plan", str(DEMO_CONFIG), "--tokens-per-s", "1:40,8:200", "--budget-minutes", "1"]) == 0
    text = capsys.readouterr().out
    assert "budget: 1 min (--budget-minutes)" in text and "keeps equivalence at batch size 8" in text
    assert "budget: it drops " in text and "equivalence at batch size 1" in text.split("budget: it drops ")[1]
    assert main([*args, "--budget-minutes", "0.05"]) == 0
    warned = json.loads(capsys.readouterr().out)["warnings"]
    assert any(w.startswith("--budget-minutes: 0.05 min is too small for even equivalence at batch size 8")
               for w in warned)


# --- the real gate, a tiny budget (slow) ----------------------------------------------------------------------------

REAL = """\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cpu}
batching: {batch_sizes: [1, 2]}
generation: {max_new_tokens: 8, sampling: {temperature: 1.0, seed: 1}}
suite: {max_prompts_per_slice: 1, slices: [prose, code, questions, adversarial]}
engines:
  - type: speculative
checks:
  distribution: {num_samples: 100, power_trials: 0, null_trials: 0}
  speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 1, calibration_trials: 3}
  repro: {budget_s: 0}
output: {dir: out, cache_dir: null}
"""


@pytest.mark.slow
def test_the_real_gate_under_a_tiny_budget_runs_tier_1_and_says_what_it_left_out(tmp_path):
    """A 3-second budget is spent before the run starts (model load, the anchor): the equivalence outputs at the
    largest batch size run all the same, everything else is left out, said in checks.json and the comment, and
    nothing left out is judged or passed."""
    import os
    import subprocess
    import sys

    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(REAL)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "gate", "gate", str(cfg), "--threads", "1", "--budget-minutes",
                           "0.05", "--baselines-dir", str(tmp_path / "baselines")], env=env, capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]  # no baseline yet: neutral
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text())
    checks = json.loads((out / "checks.json").read_text())
    left = {(x["what"], x["batch_size"]) for x in results["budget"]["left_out"]}
    assert ("equivalence", 1) in left and ("sampling", 2) in left and ("timing", 2) in left
    done = {(ex["engine"], ex["phase"], ex["batch_size"]) for ex in results["executions"]}
    assert ("speculative", "outputs", 2) in done and ("reference", "outputs", 1) in done  # tier 1 and its canonical
    assert not any(e == "speculative" and bs == 1 for e, _, bs in done)
    assert "1" not in checks["equivalence"].get("speculative", {}), "left out: never judged"
    assert checks["budget"]["left_out"] and "distribution" not in checks and "speedup" not in checks
    comment = (out / "comment.md").read_text()
    assert "Fitted to a budget of 0.05 min" in comment and "not run and is not judged" in comment
