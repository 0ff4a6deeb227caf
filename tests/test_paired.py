"""Paired mode on the demo pair: the base's speculative configuration timed beside the head's, in one job."""

from __future__ import annotations

import json

import pytest
from helpers import THREADS

from gate.cli import main

pytestmark = pytest.mark.slow  # gate runs on the demo pair

CONFIG = """\
version: 1
models:
  target: {{path: "specguard:demo/target"}}
  draft: {{path: "{draft}"}}
  device: cpu
batching: {{batch_sizes: [1, 2], compositions: 1}}
generation: {{max_new_tokens: 8}}
suite: {{max_prompts_per_slice: 1, slices: [prose, code]}}
checks:
  speedup: {{min_repeats: 2, max_repeats: 2, warmup: 0, context_buckets: [1024], calibration_trials: 3}}
output: {{dir: out, cache_dir: null}}
"""


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    root = tmp_path_factory.mktemp("paired")
    base = root / "base.yaml"
    base.write_text(CONFIG.format(draft="specguard:demo/draft"))
    return root, base


def verdict(root, name):
    return json.loads((root / name / "verdict.json").read_text())


@pytest.fixture(scope="module")
def same(configs):
    """The base gated against itself, in paired mode: its exit code (the run is in ``root / "same"``)."""
    root, base = configs
    return main(["gate", str(base), "--against", str(base), "--out", str(root / "same"), "--threads", THREADS, "-q"])


def test_head_equal_to_base_is_timed_beside_it_and_raises_no_alarm(configs, same):
    """Where the paired ratio of a head equal to its base lands, and whether a worse draft's drop reaches
    significance, are measurements on real timings (benchmarks/paired_vs_stored.py, benchmarks/paired_worse_draft.py);
    here, the paired run's mechanics: the base timed beside the head on the same batches, its cells judged paired,
    nothing failing."""
    root, code = configs[0], same
    v = verdict(root, "same")
    assert v["mode"] == "paired" and code == 0, [c["why"] for c in v["checks"] if c["status"] == "fail"]
    results = json.loads((root / "same" / "results.json").read_text())
    assert results["paired"]["engine"] == "base-speculative" and results["paired"]["head_engine"] == "speculative"
    assert {ex["engine"] for ex in results["executions"] if ex["phase"] == "timing"} == \
        {"reference", "speculative", "base-speculative"}
    # each cell judged against the base, or named as not judged (a spread too wide, or interference): on a busy
    # runner, all of them
    assert [c for c in v["checks"] if c["check"] == "speedup"], v["checks"]
    pooled = [c for c in v["speedup"] if c["ratio"]["low"] is not None]
    assert all(c["status"] != "fail" for c in v["speedup"])
    assert all(c["ratio"]["low"] <= c["ratio"]["estimate"] <= c["ratio"]["high"] for c in pooled), pooled


def test_a_k_change_under_paired_mode_is_judged_by_the_base_in_this_job(configs, same):
    """A PR that tunes k is what the gate is for: the stored baseline (another k) is used only where it compares,
    the base timed beside the head judges speedup; never exit 3."""
    root, base = configs
    baselines = root / "k-baselines"
    # the stored baseline, of k 4: refreshed from the base's run against itself (a run of the base config)
    assert main(["baseline", "refresh", str(base), "--from", str(root / "same"), "--dir", str(baselines)]) == 0
    head = root / "k3.yaml"
    head.write_text(base.read_text().replace("version: 1\n", "version: 1\nspeculation: {num_draft_tokens: 3}\n"
                                                              "baseline: {name: base}\n"))
    code = main(["gate", str(head), "--against", str(base), "--out", str(root / "k3"), "--threads", THREADS, "-q",
                 "--baselines-dir", str(baselines)])
    v = verdict(root, "k3")
    assert code in (0, 1) and v["mode"] == "paired" and v["baseline"] is not None
    assert not any(c["status"] == "fail" and c["check"] == "acceptance" for c in v["checks"])
    assert any(c["check"] == "baseline" and "k changed 4 → 3" in c["why"] for c in v["checks"])
    assert v["speedup"] and any(ch["what"] == "speculation.num_draft_tokens" for ch in v["changed"])
    # k 4 -> 3 may really be slower on a slice (T falls with k at equal acceptance): that is a verdict, and it is
    # the base timed beside the head in this job that gives it, never the stored baseline from k 4
    failed = [c for c in v["checks"] if c["status"] == "fail"]
    assert (code == 1) == bool(failed)
    assert all(c["check"] == "speedup" and "paired with the base in this job" in c["why"] for c in failed), failed
