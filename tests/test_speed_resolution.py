"""Issue 55, item 1: speed states its resolution, and says "not judged" where the run cannot see.

Rows built from quiet and noisy synthetic samples (no model weights): a load level whose own timing spread cannot
resolve ``baseline.speedup_drop`` is ⚪ not judged, never ✅, the job neutral (failed under
``checks.speedup.required``), and a refresh does not store it; a quiet one is judged with its resolution stated.
The runner's load is recorded (``results.json``'s ``runner_load``) and named as the likely cause."""

from __future__ import annotations

import math
import random

import pytest
import synthetic as syn

from gate.checks import resolution
from gate.report.render import build_page, render_comment
from gate.run import load
from gate.run.records import Phase


def timed(sd: dict[int, float], seed: int = 0, shift: float = 0.0):
    """A synthetic run whose speculative timings carry log-normal noise of ``sd[batch size]`` (0: the quiet +-2%
    of ``syn.run``)."""
    rng = random.Random(seed)
    results = syn.run(repeats=6)
    execs = []
    for ex in results.executions:
        if ex.phase == Phase.TIMING and ex.engine == "speculative":
            ex = ex.model_copy(update={"wall_s": ex.wall_s * math.exp(rng.gauss(shift, sd.get(ex.batch_size, 0.0)))})
        execs.append(ex)
    return results.model_copy(update={"executions": execs})


def judged(head, cfg=None, busy=None):
    cfg = cfg or syn.config()
    base = syn.run()
    baseline = syn.baseline_of(base, syn.checks_for(base), cfg)
    if busy is not None:
        head = head.model_copy(update={"runner_load": busy})
    checks = syn.checks_for(head)
    verdict = syn.judge(head, checks, cfg, baseline)
    return verdict, render_comment(build_page(head, checks, verdict, baseline, "demo"))


def required(cfg):
    speedup = cfg.checks.speedup.model_copy(update={"required": True})
    return cfg.model_copy(update={"checks": cfg.checks.model_copy(update={"speedup": speedup})})


def speed_rows(comment: str) -> list[str]:
    return [line for line in comment.splitlines() if line.startswith("| speculative |") and "x |" in line]


def test_the_resolution_is_the_formula_over_the_runs_own_spread():
    """checks.json carries, per load level and for the run, 1 - exp(-(t.975 + t.80) se), se the standard error of
    the mean log speedup from the pooled repeat-to-repeat spread."""
    from scipy import stats

    head = timed({1: 0.1, 4: 0.1}, seed=3)
    e = syn.checks_for(head).speedup.engines["speculative"]
    for bs, row in e.load_curve.items():
        logs = [[math.log(p.ratio) for p in head.timing_pairs() if p.batch_size == int(bs) and p.slice == s]
                for s in syn.SLICES]
        sd, df = resolution.spread(logs)
        se = sd * math.sqrt(sum(1 / len(g) for g in logs) / len(logs) ** 2)  # one batch per cell here
        z = stats.t(df).ppf(0.975) + stats.t(df).ppf(0.80)
        assert row.resolution.df == df == 10
        assert row.resolution.drop == pytest.approx(1 - math.exp(-z * se), rel=1e-9)
    assert e.resolution is not None and e.resolution.df == 20
    assert e.resolution.drop < max(r.resolution.drop for r in e.load_curve.values())  # every cell alike: tighter


def test_a_quiet_run_is_judged_and_states_its_resolution():
    verdict, comment = judged(timed({}))
    assert verdict.outcome == "pass", verdict.headline
    for level in verdict.speedup_levels:
        assert level.status == "pass" and level.resolution.judged
        assert level.resolution.own < 0.05  # the run's own +-2% resolves a few percent
        assert level.resolution.drop > level.resolution.own  # the stated one holds the between-run spread too
    assert "this run resolves drops of 19% or more at bs 1, 19% at bs 4" in comment
    assert "not judged" not in comment and "⚪" not in "\n".join(speed_rows(comment))
    assert "speed not judged" not in verdict.headline


def test_a_noisy_run_is_not_judged_never_passed_and_the_job_is_neutral():
    verdict, comment = judged(timed({1: 0.6, 4: 0.6}, seed=1))
    assert verdict.outcome == "neutral" and verdict.exit_code == 0
    assert not verdict.failed()
    for change in verdict.speedup + verdict.speedup_levels:
        assert change.status == "neutral" and change.mark() == "neutral", change
        assert change.p_adjusted is None  # outside the Holm family
    for level in verdict.speedup_levels:
        assert not level.resolution.judged and level.resolution.own > 0.10
    rows = speed_rows(comment)
    assert rows and all("⚪" in r and "✅" not in r for r in rows), rows
    lines = [v for v in verdict.checks if v.check == "speedup"]
    assert {v.status for v in lines} == {"neutral"}, lines  # no pass line: nothing was judged
    why = next(v.why for v in lines if v.batch_size == 1)
    assert "not judged: this run's timing spread" in why and "per sample, cannot resolve a 10% drop" in why
    assert "speed not judged at bs 1/4" in verdict.headline
    assert "⚪ **speed at batch size 1 not judged" in comment


def test_only_the_noisy_load_level_is_not_judged():
    verdict, _ = judged(timed({4: 0.6}, seed=2))
    status = {c.batch_size: c.status for c in verdict.speedup_levels}
    assert status == {1: "pass", 4: "neutral"}
    assert {c.status for c in verdict.speedup if c.batch_size == 1} == {"pass"}
    assert {c.status for c in verdict.speedup if c.batch_size == 4} == {"neutral"}
    assert verdict.outcome == "neutral"
    assert "speed not judged at bs 4 " in verdict.headline


def test_required_speed_fails_closed_where_it_is_not_judged():
    verdict, _ = judged(timed({1: 0.6, 4: 0.6}, seed=1), cfg=required(syn.config()))
    assert verdict.outcome == "fail" and verdict.exit_code == 1
    failed = [v for v in verdict.failed() if v.check == "speedup"]
    assert len(failed) == 2
    assert all(v.why.startswith("required (checks.speedup.required), and speed at") for v in failed)
    quiet, _ = judged(timed({}), cfg=required(syn.config()))
    assert quiet.outcome == "pass"  # required speed that was judged passes as before


def test_a_refresh_does_not_store_levels_the_run_cannot_resolve():
    cfg = syn.config()
    head = timed({4: 0.6}, seed=2)
    baseline = syn.baseline_of(head, syn.checks_for(head), cfg)
    assert {c.batch_size for c in baseline.speedup["speculative"].values()} == {1}
    assert "unresolved" not in baseline.model_dump(by_alias=True)  # read from the run, never written
    wide = syn.config(speedup_drop=0.6)  # a fail rule the same spread resolves: stored
    kept = syn.baseline_of(head, syn.checks_for(head), wide)
    assert {c.batch_size for c in kept.speedup["speculative"].values()} == {1, 4}


def test_the_not_judged_reason_names_the_runners_load():
    busy = load.RunnerLoad(seconds=120.0, cores=2, load_average=[3.9, 4.2], other_cpu_cores=1.8, own_cpu_cores=1.1,
                           steal=0.0, cpu_mhz=[2600, 2600])
    verdict, _ = judged(timed({1: 0.6, 4: 0.6}, seed=1), busy=busy)
    why = next(v.why for v in verdict.checks if v.check == "speedup" and v.batch_size == 1)
    assert "likely cause: other processes used 1.8 of 2 cores while the gate timed; load average 4.2 on 2 cores" in why
    quiet = load.RunnerLoad(seconds=120.0, cores=2, load_average=[0.9, 1.0], other_cpu_cores=0.05, steal=0.0)
    assert load.likely_cause(quiet) is None


def test_likely_cause_reads_steal_clocks_and_gpus():
    slow = load.RunnerLoad(seconds=60.0, cores=8, steal=0.12, cpu_mhz=[3000, 2200], gpus=[
        load.GpuLoad(index=0, sm_clock_mhz=[1980, 1400], other_processes=2)])
    cause = load.likely_cause(slow)
    assert "the hypervisor took 12% of the CPU time (steal)" in cause
    assert "the CPU clock fell 3000 → 2200 MHz" in cause
    assert "2 other processes on GPU 0" in cause and "GPU 0's SM clock fell 1980 → 1400 MHz" in cause


def test_runner_load_is_read_here_and_tolerates_a_machine_without_proc(monkeypatch, tmp_path):
    start = load.snapshot()
    spent = 0
    for i in range(300_000):  # some CPU time of our own
        spent += i
    got = load.record(start)
    assert got is not None and got.seconds > 0 and got.cores
    assert got.own_cpu_cores is None or got.own_cpu_cores >= 0
    assert got.other_cpu_cores is None or got.other_cpu_cores >= 0
    monkeypatch.setattr(load, "PROC", tmp_path / "no-proc")
    monkeypatch.setattr(load.shutil, "which", lambda name: None)  # no nvidia-smi
    bare = load.record(load.snapshot())
    assert bare is not None and bare.other_cpu_cores is None and bare.steal is None and not bare.gpus


def test_runner_load_is_part_of_results_json_and_its_schema():
    from gate.run.results import Results
    from gate.schemas import load as schema

    run = syn.run().model_copy(update={"runner_load": load.RunnerLoad(seconds=10.0, cores=2, other_cpu_cores=0.1)})
    text = syn.results_json(run)
    assert '"runner_load"' in text
    assert Results.model_validate_json(text).runner_load.other_cpu_cores == 0.1
    assert "runner_load" in schema("results")["properties"]
    assert "resolution" in schema("checks")["$defs"]["LoadStats"]["properties"]


def test_paired_speed_is_judged_on_the_paired_ratios_own_spread():
    """Paired mode: the judged spread is the run's own (head and base interleaved), so the stated resolution and the
    one that decides are the same: quiet paired ratios are judged, noisy ones are not."""
    from gate.verdict.baseline import measure
    from gate.verdict.speed import paired_changes
    from gate.verdict.summary import PairedCell, PairedSummary

    head = timed({})
    measured = measure(head, syn.checks_for(head), syn.config())
    for sd, judged_ in ((0.02, True), (0.6, False)):
        rng = random.Random(7)
        cells = {key: PairedCell(slice=c.slice, batch_size=c.batch_size, bucket=c.bucket,
                                 ratios=[math.exp(rng.gauss(0, sd)) for _ in c.samples], batches=c.batches)
                 for key, c in measured.speedup["speculative"].items()}
        paired = PairedSummary(engine="base-speculative", head_engine="speculative", num_draft_tokens=4, cells=cells)
        cells_, levels, _ = paired_changes(measured, paired, syn.config().baseline)
        for level in levels:
            assert level.resolution.judged is judged_
            assert level.resolution.own == level.resolution.drop
            assert level.status == ("pass" if judged_ else "neutral")
        assert all((c.status == "neutral") is not judged_ for c in cells_)


def test_gpu_readings_parse_nvidia_smi(monkeypatch, tmp_path):
    """No GPU here: a stand-in ``nvidia-smi`` on PATH answers the two queries as the real one does (CSV, no header,
    no units); a process that is not this run's counts as another process on its device."""
    import os

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   'case "$1" in\n'
                   '  --query-gpu=*) echo "0, GPU-aaa, 1980, 1980, 97"; echo "1, GPU-bbb, 1400, 1980, 3" ;;\n'
                   f'  --query-compute-apps=*) echo "GPU-aaa, {os.getpid()}"; echo "GPU-aaa, 999999999" ;;\n'
                   "esac\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    got = load.record(load.snapshot())
    assert [g.index for g in got.gpus] == [0, 1]
    assert got.gpus[0].other_processes == 1 and got.gpus[1].other_processes == 0
    assert got.gpus[0].sm_clock_mhz == [1980.0, 1980.0] and got.gpus[1].max_sm_clock_mhz == 1980.0
    assert "1 other process on GPU 0" in load.likely_cause(got)
