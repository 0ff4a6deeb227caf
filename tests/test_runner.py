"""The runner: incremental results, interruption and resume, adaptive repeats, reference cache."""

from __future__ import annotations

import copy
import json

import pytest
from helpers import FakeEngine, constant, demo_config, noisy

from gate import runner as runner_mod
from gate.cache import ReferenceCache
from gate.checks.speedup import analyze_speedup
from gate.results import ResultsError, load_results, read_records
from gate.runner import Runner, bucket_name, plan_batches
from gate.suite import Suite, load_suite, parse_suite

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
    from gate.runner import PromptInfo

    prompts = [PromptInfo(i, f"p{i}", "s" if i < 3 else "t", "0-127", (1,), 4) for i in range(5)]
    batches = plan_batches(prompts, 4)
    assert [(b.slice, b.members, b.n_real) for b in batches] == [("s", (0, 1, 2, 0), 3), ("t", (3, 4, 3, 4), 2)]


def test_complete_run_writes_versioned_results(demo_pair, tmp_path):
    doc = make(demo_pair, tmp_path).run()
    assert doc["status"] == "complete" and doc["stopped_at"] is None
    on_disk = load_results(tmp_path / "out")
    assert on_disk["schema"] == "specguard.results/1"
    assert {(e["phase"], e["mode"]) for e in on_disk["executions"]} == {
        ("outputs", "greedy"), ("timing", "greedy"), ("sampling", "sampling")}
    fp = on_disk["fingerprint"]
    assert fp["models"]["target"]["fingerprint"] and fp["libraries"]["torch"] and fp["hardware"]["cpu_count"]
    header, records = read_records(tmp_path / "out" / "records.jsonl")
    assert header["schema"] == "specguard.results/1" and len(records) == len(on_disk["executions"])


def test_interrupted_run_keeps_finished_work_and_says_where(demo_pair, tmp_path):
    spec = FakeEngine("speculative", True, constant(0.5), fail_after=3)
    doc = make(demo_pair, tmp_path, spec=spec).run()
    assert doc["status"] == "interrupted"
    assert doc["stopped_at"]["engine"] == "speculative" and doc["stopped_at"]["phase"] == "outputs"
    assert doc["stopped_at"]["batch"] == 3
    kept = load_results(tmp_path / "out")["executions"]
    assert len(kept) == 7  # 4 reference + 3 speculative executions finished before the interrupt
    _, records = read_records(tmp_path / "out" / "records.jsonl")
    assert len(records) == 7

    # Resume: finished executions are reused, not regenerated.
    spec2 = FakeEngine("speculative", True, constant(0.5))
    ref2 = FakeEngine("reference", False, constant(1.0))
    doc2 = make(demo_pair, tmp_path, spec=spec2, ref=ref2).run(resume=True)
    assert doc2["status"] == "complete"
    fresh = make(demo_pair, tmp_path / "fresh").run()
    assert len(doc2["executions"]) == len(fresh["executions"])
    assert ref2.calls == len([e for e in fresh["executions"] if e["engine"] == "reference"]) - 4


def test_crash_writes_results_and_reraises(demo_pair, tmp_path):
    spec = FakeEngine("speculative", True, constant(0.5), fail_after=1, exc=RuntimeError)
    with pytest.raises(RuntimeError):
        make(demo_pair, tmp_path, spec=spec).run()
    doc = load_results(tmp_path / "out")
    assert doc["status"] == "failed" and "RuntimeError" in doc["stopped_at"]["reason"]
    assert len(doc["executions"]) == 3  # reference, speculative, reference; the 2nd speculative call crashed


def test_torn_last_record_is_dropped(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"kind": "header", "schema": "x"}\n{"kind": "execution", "a": 1}\n{"kind": "exec')
    header, records = read_records(path)
    assert header["schema"] == "x" and records == [{"kind": "execution", "a": 1}]


def test_corrupt_results_name_the_file(tmp_path):
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ResultsError, match=r"results.json:1: not valid JSON"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text('{"schema": "other/9"}')
    with pytest.raises(ResultsError, match=r"schema: expected schema 'specguard.results/1', got 'other/9'"):
        load_results(tmp_path)


def test_adaptive_repeats_stop_on_precision(demo_pair, tmp_path):
    doc = make(demo_pair, tmp_path, cfg=config(max_repeats=10, ci=0.03)).run()
    stops = {v["stopped_by"] for bs in doc["timing"].values() for v in bs.values()}
    repeats = {v["repeats"] for bs in doc["timing"].values() for v in bs.values()}
    assert stops == {"precision"} and repeats == {2}


def test_adaptive_repeats_stop_on_budget(demo_pair, tmp_path):
    spec = FakeEngine("speculative", True, noisy(2.0, 0.9, seed=1))
    doc = make(demo_pair, tmp_path, spec=spec, cfg=config(max_repeats=1000, ci=0.0001, budget=0.01)).run()
    stops = {v["stopped_by"] for bs in doc["timing"].values() for v in bs.values()}
    assert stops == {"budget"}


def test_timing_covers_a_spread_subset_of_each_cell(demo_pair, tmp_path):
    suite = parse_suite("".join(json.dumps({"id": f"a-{i}", "slice": "a", "prompt": f"Prompt {i} says"}) + "\n"
                                for i in range(9)), "nine.jsonl")
    cfg = demo_config(extra="batching: {batch_sizes: [1]}\ngeneration: {max_new_tokens: 2}\n"
                            "checks: {speedup: {min_repeats: 2, max_repeats: 2, warmup: 0, max_batches_per_cell: 3}}\n")
    doc = make(demo_pair, tmp_path, suite=suite, cfg=cfg).run()
    timed = sorted({e["batch"] for e in doc["executions"] if e["phase"] == "timing"})
    assert timed == [0, 4, 8]
    assert len({e["batch"] for e in doc["executions"] if e["phase"] == "outputs"}) == 9


def test_adaptive_repeats_stop_at_max_repeats(demo_pair, tmp_path):
    spec = FakeEngine("speculative", True, noisy(2.0, 0.9, seed=2))
    doc = make(demo_pair, tmp_path, spec=spec, cfg=config(max_repeats=5, ci=0.0001, budget=600)).run()
    assert {v["repeats"] for bs in doc["timing"].values() for v in bs.values()} == {5}
    assert {v["stopped_by"] for bs in doc["timing"].values() for v in bs.values()} == {"max_repeats"}


def test_interleaving_alternates_order(demo_pair, tmp_path):
    doc = make(demo_pair, tmp_path).run()
    timing = [e for e in doc["executions"] if e["phase"] == "timing" and e["batch_size"] == 1 and e["batch"] == 0]
    assert [(e["engine"], e["repeat"]) for e in timing] == [("reference", 0), ("speculative", 0),
                                                            ("speculative", 1), ("reference", 1)]


def _reused(demo_pair, tmp_path, name, pair=None, suite=SUITE, cfg=None):
    cache = ReferenceCache(tmp_path / "cache")
    r = make(pair or demo_pair, tmp_path / name, suite=suite, cfg=cfg, cache=cache, timed=False)
    return len(r.run()["cache"]["reused"])


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


def test_corrupt_cache_entry_is_a_miss(tmp_path):
    cache = ReferenceCache(tmp_path)
    cache.dir.mkdir(parents=True)
    (cache.dir / "abc.json").write_text("{broken")
    assert cache.get("abc") is None and cache.misses == 1


def test_long_context_and_adversarial_slices_get_their_own_rows(demo_pair, tmp_path):
    suite = load_suite("gate/suites/default.jsonl").select(["long-context", "adversarial", "prose"], 2)
    cfg = demo_config(extra="batching: {batch_sizes: [1, 2]}\ngeneration: {max_new_tokens: 3}\n"
                            "checks: {speedup: {min_repeats: 2, max_repeats: 2, warmup: 0}}\n")
    doc = make(demo_pair, tmp_path, suite=suite, cfg=cfg).run()
    sp = analyze_speedup(doc)["engines"]["speculative"]
    cells = sp["cells"]
    assert {"long-context|1|512+", "long-context|2|512+", "adversarial|1|0-127", "prose|2|0-127"} <= set(cells)
    assert set(sp["by_bucket"]) == {"0-127", "512+"}
    assert set(sp["by_slice"]) == {"long-context", "adversarial", "prose"}
    assert sp["cells"]["long-context|2|512+"]["speedup"]["estimate"] == pytest.approx(2.0)
