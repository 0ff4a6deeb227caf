"""The runner: plan, incremental results, interruption and resume, adaptive repeats, reference cache."""

from __future__ import annotations

import copy
import json

import pytest
from helpers import FakeEngine, constant, demo_config, noisy

from gate.checks.speedup import analyze_speedup
from gate.errors import ResultsError, ResumeError, RunInterrupted
from gate.inputs import fingerprint as fp
from gate.inputs.suite import Suite, load_suite, parse_suite
from gate.run import runner as runner_mod
from gate.run.cache import ReferenceCache
from gate.run.plan import PromptInfo, bucket_name, plan_batches_per_cell
from gate.run.results import load_results, read_records
from gate.run.runner import Runner

SUITE = parse_suite("".join(
    json.dumps({"id": f"{s}-{i}", "slice": s, "prompt": f"The {s} prompt number {i} says"}) + "\n"
    for s in ("a", "b") for i in range(3)), "mini.jsonl")

CFG = """\
batching: {batch_sizes: [1, 2]}
generation: {max_new_tokens: 4, sampling: {temperature: 1.0, seed: 3}}
checks:
  distribution: {num_samples: 100}
  speedup: {min_repeats: 2, max_repeats: %(max)d, ci_half_width: %(ci)s, time_budget_s: %(budget)s, warmup: 0}
"""


def tiny():
    return demo_config(extra="batching: {batch_sizes: [1]}\ngeneration: {max_new_tokens: 2}\n")


def config(max_repeats=4, ci=0.03, budget=60):
    return demo_config(extra=CFG % {"max": max_repeats, "ci": ci, "budget": budget})


def make(demo_pair, tmp_path, suite=SUITE, cfg=None, spec=None, ref=None, **kw):
    cfg = cfg or config()
    ref = ref or FakeEngine("reference", False, constant(1.0))
    spec = spec or FakeEngine("speculative", True, constant(0.5))
    return Runner(cfg, demo_pair, suite, ref, [spec], tmp_path / "out", log=lambda m: None, **kw)


def test_bucket_names():
    assert [bucket_name(n, [128, 512]) for n in (0, 127, 128, 511, 512, 9000)] == \
        ["0-127", "0-127", "128-511", "128-511", "512+", "512+"]


def test_plan_fills_batches_to_the_load_level():
    prompts = [PromptInfo(i, f"p{i}", "s" if i < 3 else "t", "0-127", (1,), 4) for i in range(5)]
    batches = plan_batches_per_cell(prompts, 4)
    assert [(b.slice, b.members, b.n_real) for b in batches] == [("s", (0, 1, 2, 0), 3), ("t", (3, 4, 3, 4), 2)]


@pytest.mark.slow
def test_complete_run_writes_versioned_results(demo_pair, tmp_path):
    doc = make(demo_pair, tmp_path).run()
    assert doc.status == "complete" and doc.stopped_at is None
    on_disk = load_results(tmp_path / "out")
    assert on_disk.schema_id == "specguard.results/4"
    assert {(e.phase.value, e.mode) for e in on_disk.executions} == {
        ("outputs", "greedy"), ("timing", "greedy"), ("sampling", "sampling")}
    fpr = on_disk.fingerprint
    assert fpr.models["target"].fingerprint and fpr.libraries["torch"] and fpr.hardware["cpu_count"]
    header, records = read_records(tmp_path / "out" / "records.jsonl")
    assert header.schema_id == "specguard.results/4" and len(records) == len(on_disk.executions)
    assert not on_disk.calibration, "fake engines cannot be stepped: no calibration of the real pair"


@pytest.mark.slow
def test_the_hardware_key_comes_from_the_flag_then_the_config_then_the_hardware(demo_pair, tmp_path):
    """Issue 18: two identical GPU boxes behind an http engine read different CPUs; the key is the user's."""
    from gate.inputs import fingerprint

    named = demo_config(extra="batching: {batch_sizes: [1]}\ngeneration: {max_new_tokens: 2}\n"
                              "baseline: {hardware_key: h200-pool}\n")
    assert make(demo_pair, tmp_path / "cfg", cfg=named).run().fingerprint.hardware_key == "h200-pool"
    flagged = make(demo_pair, tmp_path / "flag", cfg=named, hardware_key="runner-7").run()
    assert flagged.fingerprint.hardware_key == "runner-7"
    auto = make(demo_pair, tmp_path / "auto", cfg=tiny()).run()
    assert auto.fingerprint.hardware_key == fingerprint.hardware_key(auto.fingerprint.hardware)


@pytest.mark.slow
def test_interrupted_run_keeps_finished_work_and_says_where(demo_pair, tmp_path):
    spec = FakeEngine("speculative", True, constant(0.5), fail_after=3)
    with pytest.raises(RunInterrupted) as stop:
        make(demo_pair, tmp_path, spec=spec).run()
    doc = stop.value.results
    assert doc.status == "interrupted"
    assert doc.stopped_at.engine == "speculative" and doc.stopped_at.phase == "outputs"
    assert doc.stopped_at.batch == 3
    kept = load_results(tmp_path / "out").executions
    assert len(kept) == 7  # 4 reference + 3 speculative executions finished before the interrupt
    _, records = read_records(tmp_path / "out" / "records.jsonl")
    assert len(records) == 7

    # Resume: finished executions are reused, not regenerated.
    spec2 = FakeEngine("speculative", True, constant(0.5))
    ref2 = FakeEngine("reference", False, constant(1.0))
    doc2 = make(demo_pair, tmp_path, spec=spec2, ref=ref2).run(resume=True)
    assert doc2.status == "complete"
    fresh = make(demo_pair, tmp_path / "fresh").run()
    assert len(doc2.executions) == len(fresh.executions)
    assert ref2.calls == len([e for e in fresh.executions if e.engine == "reference"]) - 4


def _interrupted(demo_pair, tmp_path, suite=SUITE):
    spec = FakeEngine("speculative", True, constant(0.5), fail_after=3)
    with pytest.raises(RunInterrupted):
        make(demo_pair, tmp_path, spec=spec, suite=suite).run()


@pytest.mark.slow
def test_resume_refuses_a_changed_suite(demo_pair, tmp_path):
    """Bug: resume compared only the config digest and models, then reused records by batch index."""
    _interrupted(demo_pair, tmp_path)
    edited = Suite("mini.jsonl", tuple(p.__class__(p.id, p.slice, p.text + " edited", None) for p in SUITE.prompts))
    with pytest.raises(ResumeError, match=r"cannot resume.*suite: mini.jsonl \(\w+\) -> mini.jsonl \(\w+\)"):
        make(demo_pair, tmp_path, suite=edited).run(resume=True)
    _, records = read_records(tmp_path / "out" / "records.jsonl")
    assert len(records) == 7, "a refused resume leaves the interrupted run's records alone"


@pytest.mark.parametrize("what,patch,message", [
    ("libraries", lambda mp: mp.setattr(fp, "libraries", lambda: {**ORIGINAL_LIBS(), "transformers": "9.9.9"}),
     r"transformers: [\w.]+ -> 9\.9\.9"),
    ("hardware", lambda mp: mp.setattr(fp, "hardware_key", lambda hw: "another-machine"),
     r"hardware: [\w-]+ -> another-machine"),
])
@pytest.mark.slow
def test_resume_refuses_other_libraries_or_hardware(demo_pair, tmp_path, monkeypatch, what, patch, message):
    _interrupted(demo_pair, tmp_path)
    patch(monkeypatch)
    with pytest.raises(ResumeError, match=message):
        make(demo_pair, tmp_path).run(resume=True)


ORIGINAL_LIBS = fp.libraries


@pytest.mark.slow
def test_an_engine_crash_is_a_failed_execution_and_the_run_goes_on(demo_pair, tmp_path):
    """A crash of the engine under test is a finding about it, not an internal error of the gate."""
    spec = FakeEngine("speculative", True, constant(0.5), fail_after=1, exc=RuntimeError)
    doc = make(demo_pair, tmp_path, spec=spec).run()
    assert doc.status == "complete"
    failed = doc.failures()
    assert failed and {ex.engine for ex in failed} == {"speculative"}
    assert failed[0].failure.kind == "crash" and failed[0].failure.type == "RuntimeError"
    assert failed[0].prompts and not failed[0].sequences
    assert any(ex.engine == "reference" and ex.failure is None for ex in doc.executions), "the others went on"
    on_disk = load_results(tmp_path / "out")
    assert len(on_disk.failures()) == len(failed)


@pytest.mark.slow
def test_torn_last_record_is_dropped(demo_pair, tmp_path):
    make(demo_pair, tmp_path, cfg=tiny(), timed=False).run()
    path = tmp_path / "out" / "records.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines) + "\n" + lines[-1][: len(lines[-1]) // 2])
    header, records = read_records(path)
    assert header is not None and len(records) == len(lines) - 1


def test_corrupt_results_name_the_file(tmp_path):
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ResultsError, match=r"results.json:1: not valid JSON"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text('{"schema": "other/9"}')
    with pytest.raises(ResultsError, match=r"schema: expected schema 'specguard.results/4', got 'other/9'"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text('{"schema": "specguard.results/4", "status": "complete"}')
    with pytest.raises(ResultsError, match=r"results.json: fingerprint: required field is missing"):
        load_results(tmp_path)


@pytest.mark.slow
def test_artifacts_respect_the_umask(demo_pair, tmp_path):
    """Bug: the atomic writer created results.json -rw------- while summary.md was -rw-r--r--."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        make(demo_pair, tmp_path, cfg=tiny(), timed=False).run()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out" / "results.json").stat().st_mode) == 0o644


@pytest.mark.slow
def test_adaptive_repeats_stop_on_precision(demo_pair, tmp_path):
    doc = make(demo_pair, tmp_path, cfg=config(max_repeats=10, ci=0.03)).run()
    stops = {v["stopped_by"] for bs in doc.timing.values() for v in bs.values()}
    repeats = {v["repeats"] for bs in doc.timing.values() for v in bs.values()}
    assert stops == {"precision"} and repeats == {2}


@pytest.mark.slow
def test_adaptive_repeats_stop_on_budget(demo_pair, tmp_path):
    spec = FakeEngine("speculative", True, noisy(2.0, 0.9, seed=1))
    doc = make(demo_pair, tmp_path, spec=spec, cfg=config(max_repeats=1000, ci=0.0001, budget=0.01)).run()
    stops = {v["stopped_by"] for bs in doc.timing.values() for v in bs.values()}
    assert stops == {"budget"}


@pytest.mark.slow
def test_timing_covers_a_spread_subset_of_each_cell(demo_pair, tmp_path):
    suite = parse_suite("".join(json.dumps({"id": f"a-{i}", "slice": "a", "prompt": f"Prompt {i} says"}) + "\n"
                                for i in range(9)), "nine.jsonl")
    cfg = demo_config(extra="batching: {batch_sizes: [1]}\ngeneration: {max_new_tokens: 2}\n"
                            "checks: {speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 3}}\n")
    doc = make(demo_pair, tmp_path, suite=suite, cfg=cfg).run()
    timed = sorted({e.batch for e in doc.executions if e.phase == "timing"})
    assert timed == [0, 4, 8]
    assert len({e.batch for e in doc.executions if e.phase == "outputs"}) == 9


@pytest.mark.slow
def test_adaptive_repeats_stop_at_max_repeats(demo_pair, tmp_path):
    spec = FakeEngine("speculative", True, noisy(2.0, 0.9, seed=2))
    doc = make(demo_pair, tmp_path, spec=spec, cfg=config(max_repeats=5, ci=0.0001, budget=600)).run()
    assert {v["repeats"] for bs in doc.timing.values() for v in bs.values()} == {5}
    assert {v["stopped_by"] for bs in doc.timing.values() for v in bs.values()} == {"max_repeats"}


@pytest.mark.slow
def test_interleaving_alternates_order(demo_pair, tmp_path):
    doc = make(demo_pair, tmp_path).run()
    timing = [e for e in doc.executions if e.phase == "timing" and e.batch_size == 1 and e.batch == 0]
    assert [(e.engine, e.repeat) for e in timing] == [("reference", 0), ("speculative", 0),
                                                      ("speculative", 1), ("reference", 1)]


def _reused(demo_pair, tmp_path, name, pair=None, suite=SUITE, cfg=None):
    cache = ReferenceCache(tmp_path / "cache")
    r = make(pair or demo_pair, tmp_path / name, suite=suite, cfg=cfg, cache=cache, timed=False)
    return len(r.run().cache["reused"])


@pytest.mark.slow
def test_reference_cache_reused_when_only_the_draft_changes(demo_pair, tmp_path, monkeypatch):
    assert _reused(demo_pair, tmp_path, "first") == 0
    draft_changed = copy.copy(demo_pair)
    draft_changed.draft = copy.copy(demo_pair.draft)
    draft_changed.draft.fingerprint = "another-draft"
    assert _reused(demo_pair, tmp_path, "draft", pair=draft_changed) > 0

    target_changed = copy.copy(demo_pair)
    target_changed.target = copy.copy(demo_pair.target)
    target_changed.target.fingerprint = "retrained-target"
    assert _reused(demo_pair, tmp_path, "target", pair=target_changed) == 0

    other_prompts = Suite("mini", tuple(p.__class__(p.id, p.slice, p.text + " more", None) for p in SUITE.prompts))
    assert _reused(demo_pair, tmp_path, "prompts", suite=other_prompts) == 0

    longer = demo_config(extra=(CFG % {"max": 4, "ci": 0.03, "budget": 60}).replace("max_new_tokens: 4",
                                                                                  "max_new_tokens: 5"))
    assert _reused(demo_pair, tmp_path, "settings", cfg=longer) == 0

    monkeypatch.setattr(runner_mod, "ENGINE_VERSION", "999")
    assert _reused(demo_pair, tmp_path, "version") == 0


@pytest.mark.slow
def test_reference_cache_misses_after_a_library_upgrade(demo_pair, tmp_path, monkeypatch):
    """Bug: the cache key left out library versions, so an upgrade served stale references."""
    assert _reused(demo_pair, tmp_path, "first") == 0
    assert _reused(demo_pair, tmp_path, "same") > 0
    monkeypatch.setattr(fp, "libraries", lambda: {**ORIGINAL_LIBS(), "torch": "99.0.0"})
    assert _reused(demo_pair, tmp_path, "torch-upgrade") == 0
    monkeypatch.setattr(fp, "libraries", lambda: {**ORIGINAL_LIBS(), "transformers": "99.0.0"})
    assert _reused(demo_pair, tmp_path, "transformers-upgrade") == 0


def test_corrupt_cache_entry_is_a_miss(tmp_path):
    cache = ReferenceCache(tmp_path)
    cache.dir.mkdir(parents=True)
    (cache.dir / "abc.json").write_text("{broken")
    assert cache.get("abc") is None and cache.misses == 1


@pytest.mark.slow
def test_long_context_and_adversarial_slices_get_their_own_rows(demo_pair, tmp_path):
    suite = load_suite("gate/suites/default.jsonl").select(["long-context", "adversarial", "prose"], 2)
    cfg = demo_config(extra="batching: {batch_sizes: [1, 2]}\ngeneration: {max_new_tokens: 3}\n"
                            "checks: {speedup: {min_repeats: 2, max_repeats: 2, warmup: 0}}\n")
    doc = make(demo_pair, tmp_path, suite=suite, cfg=cfg).run()
    sp = analyze_speedup(doc).engines["speculative"]
    assert sp.expected_note, "a fake engine cannot be stepped: its expectation is not measured"
    assert all(row.expected is None for row in sp.load_curve.values())
    cells = sp.cells
    assert {"long-context|1|512+", "long-context|2|512+", "adversarial|1|0-127", "prose|2|0-127"} <= set(cells)
    assert set(sp.by_bucket) == {"0-127", "512+"}
    assert set(sp.by_slice) == {"long-context", "adversarial", "prose"}
    assert sp.cells["long-context|2|512+"].speedup.estimate == pytest.approx(2.0)


def test_results_of_schema_1_load_through_the_migration(tmp_path):
    old = {
        "schema": "specguard.results/1", "status": "complete", "stopped_at": None,
        "fingerprint": {"hardware": {"cpu": "x"}, "hardware_key": "h", "libraries": {"torch": "2"},
                        "models": {"target": {"location": "/m", "fingerprint": "f", "dtype": "float32",
                                              "revision": None}},
                        "config": "c", "suite": {"name": "s", "fingerprint": "f", "prompts": 1, "slices": ["a"]}},
        "settings": {"num_draft_tokens": 4, "batch_sizes": [1], "max_new_tokens": 2, "eos_token_ids": [],
                     "greedy": True, "sampling": None, "engines": ["speculative"], "engine_version": "1"},
        "prompts": [{"id": "a-0", "slice": "a", "bucket": "0-127", "n_prompt_tokens": 1, "max_new_tokens": 2,
                     "prompt_ids": [5]}],
        "calibration": {"1": {"cost_ratio": 0.1}},
        "executions": [{"kind": "execution", "phase": "outputs", "engine": "speculative", "mode": "greedy",
                        "batch_size": 1, "batch": 0, "repeat": 0, "slice": "a", "bucket": "0-127",
                        "temperature": 0.0, "prompts": ["a-0"], "n_real": 1, "wall_s": 1.0, "realign_s": 0.0,
                        "num_target_forwards": 1, "num_draft_forwards": 4, "peak_memory_bytes": None,
                        "sequences": [{"prompt_id": "a-0", "filler": False, "seed": 0, "text": "x",
                                       "token_ids": [1, 2], "stop_reason": "max_tokens", "wall_s": 1.0,
                                       "ttft_s": 0.1, "per_token_s": 0.1,
                                       "counters": {"num_drafts": 1, "num_draft_tokens": 4,
                                                    "num_accepted_tokens": 1, "mean_accepted_length": 2.0,
                                                    "acceptance_rate": 0.25}}]}],
        "skipped": [], "cache": {"reused": []}}
    (tmp_path / "results.json").write_text(json.dumps(old))
    doc = load_results(tmp_path)
    assert doc.schema_id == "specguard.results/4"
    ex = doc.executions[0]
    assert ex.composition == 0 and ex.sequences[0].counters.num_accepted_tokens == 1
    assert doc.calibrated_engines == ["speculative"]
    assert doc.greedy_outputs("speculative", 1)["a-0"].token_ids == [1, 2]
    assert doc.anchor is None  # made before the anchor existed: not anchored

    # A schema-2 document (before the anchor) loads too, not anchored.
    two = doc.model_dump(mode="json", by_alias=True, exclude={"anchor"}) | {"schema": "specguard.results/2"}
    (tmp_path / "results.json").write_text(json.dumps(two))
    doc = load_results(tmp_path)
    assert doc.schema_id == "specguard.results/4" and doc.anchor is None


@pytest.mark.slow
def test_calibration_never_speaks_for_a_plugin(demo_pair, tmp_path):
    """Bug: a plug-in's Leviathan columns showed the in-process pair's calibration as if it were its own."""
    import torch

    from gate.engines.plugin import PluginEngine, PluginSettings
    from gate.engines.speculative import SpeculativeEngine

    def inhouse(prompt_ids, batch_size, settings):
        return [{"token_ids": [7] * n, "counters": {"num_drafts": 1, "num_draft_tokens": 4,
                                                     "num_accepted_tokens": 2, "num_target_forwards": 1,
                                                     "num_emitted_tokens": n}}
                for n in settings.max_new_tokens]

    plugin = PluginEngine("inhouse", inhouse, torch.device("cpu"),
                          PluginSettings([], [], 0.0, 4, [], "t", "d", "float32", "cpu"))
    spec = SpeculativeEngine(demo_pair.target.model, demo_pair.draft.model, torch.device("cpu"))
    cfg = demo_config(extra="batching: {batch_sizes: [1]}\ngeneration: {max_new_tokens: 3}\n"
                            "checks: {speedup: {min_repeats: 2, max_repeats: 2, warmup: 0}}\n")
    r = Runner(cfg, demo_pair, SUITE, FakeEngine("reference", False), [spec, plugin], tmp_path / "out",
               log=lambda m: None)
    doc = r.run()
    assert doc.calibration and doc.calibrated_engines == ["speculative"]
    sp = analyze_speedup(doc).engines
    assert sp["speculative"].load_curve["1"].expected is not None and sp["speculative"].expected_note is None
    assert sp["inhouse"].load_curve["1"].expected is None and "not measured" in sp["inhouse"].expected_note


def test_a_renamed_prompt_reuses_the_cache_under_its_new_name_and_a_misfit_entry_is_a_miss(tmp_path):
    """Issue 30 item 2: a suite whose prompt id was renamed (same text) with a warm cache crashed with a KeyError:
    the cached rows kept the old names.  The cache is keyed by content; a hit takes this run's names, and an
    entry that does not fit the batch is a miss, never a crash."""
    from gate.engines.base import GenerationSettings
    from gate.run.execute import Executor
    from gate.run.plan import Job, PlannedBatch
    from gate.run.records import Phase, RecordLog

    def executor(names, log):
        prompts = [PromptInfo(i, name, "s", "0-127", (5 + i, 6, 7), 3) for i, name in enumerate(names)]
        return Executor(prompts, lambda ids: " ".join(map(str, ids)), RecordLog(tmp_path / log), cache=cache)

    cache = ReferenceCache(tmp_path / "cache")
    job = Job(Phase.OUTPUTS, "reference", "greedy", PlannedBatch(2, 0, (0, 1), 2), cacheable=True)
    settings = GenerationSettings(0.0, 4)
    engine = FakeEngine("reference", False)
    first = executor(["a", "b"], "1.jsonl")
    first.log.start(_header())
    assert [s.prompt_id for s in first.run(engine, job, settings).sequences] == ["a", "b"] and engine.calls == 1
    again = executor(["a-renamed", "b"], "2.jsonl")
    again.log.start(_header())
    rec = again.run(engine, job, settings)
    assert engine.calls == 1 and rec.cached, "the same content: reused"
    assert rec.prompts == ["a-renamed", "b"] and [s.prompt_id for s in rec.sequences] == ["a-renamed", "b"]
    key = again.cache_key(job.batch, 0, settings)
    broken = rec.model_copy(update={"sequences": rec.sequences[:1]})  # one row for a batch of two
    cache.put(key, broken)
    third = executor(["a", "b"], "3.jsonl")
    third.log.start(_header())
    assert not third.run(engine, job, settings).cached and engine.calls == 2, "a misfit entry is a miss"


def _header():
    from gate.run.results import RunHeader

    return RunHeader.model_validate({
        "fingerprint": {"hardware": {}, "hardware_key": "h", "libraries": {}, "models": {}, "config": "c",
                        "suite": {"name": "s", "fingerprint": "f", "prompts": 2, "slices": ["s"]}},
        "settings": {"num_draft_tokens": 4, "batch_sizes": [2], "max_new_tokens": 3, "eos_token_ids": [],
                     "greedy": True, "engines": [], "engine_version": "t"}, "prompts": []})
