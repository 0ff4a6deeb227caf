"""Issue 40 item 9: a speedup the acceptance cannot explain is a measurement fault, not a result.

Speculation emits at most its tokens per target forward, and a verification costs at least one plain step, so no
correct measurement exceeds that many x.  A cell measured above it (its whole CI) is flagged as interference, in
checks.json, the verdict lines and the comment, and is neither judged nor stored in a baseline."""

from __future__ import annotations

import synthetic as syn

from gate.checks.speedup import analyze_speedup, beyond_acceptance, verdicts_for
from gate.report.render import build_page, render_comment
from gate.stats import Interval


def test_the_bound_is_the_tokens_per_target_forward_and_only_a_whole_ci_above_it_counts():
    assert beyond_acceptance(Interval(2.0, 1.8, 2.2, 12), 1.5) == 1.5
    assert beyond_acceptance(Interval(2.0, 1.4, 2.6, 12), 1.5) is None, "a CI reaching the bound is noise"
    assert beyond_acceptance(Interval(2.0, 1.8, 2.2, 1), 1.5) is None, "one sample has no CI"
    assert beyond_acceptance(Interval(2.0, 1.8, 2.2, 12), None) is None, "no counters, no bound"


def test_a_cell_faster_than_its_acceptance_allows_is_flagged_and_never_stored_in_a_baseline():
    # no draft accepted on code at batch size 4 (1 token per target forward) yet 1.8x: the reference was slowed
    results = syn.run(accepted={("code", 4): 0}, speedup={("code", 4): 1.8})
    speed = analyze_speedup(results, 200)
    cell = speed.engines["speculative"].cells["code|4|0-127"]
    assert cell.interference == 1.0 and cell.speedup.low > 1.0
    assert speed.engines["speculative"].cells["prose|4|0-127"].interference is None, "3 tokens per forward: 1.5x fits"
    assert not [v for v in verdicts_for(speed, None) if v.status == "warn"], "the load level pools 3x and 1x slices"
    checks = syn.checks_for(results)
    base = syn.baseline_of(results, checks, syn.config())
    assert "code|4|0-127" not in base.speedup["speculative"] and "prose|4|0-127" in base.speedup["speculative"]
    # the load level pools both slices: flagged when its CI lies above its own pooled bound
    results = syn.run(accepted={("code", 4): 0, ("prose", 4): 0}, speedup={("code", 4): 1.8, ("prose", 4): 1.8})
    speed = analyze_speedup(results, 200)
    assert speed.engines["speculative"].load_curve["4"].interference == 1.0
    warn = [v for v in verdicts_for(speed, None) if v.status == "warn"]
    assert len(warn) == 1 and warn[0].batch_size == 4 and "interference between co-located processes" in warn[0].why
    checks = syn.checks_for(results)
    comment = render_comment(build_page(results, checks, syn.judge(results, checks, syn.config()), None, "demo"))
    assert "is above the 1.00x its acceptance allows" in comment and "not stored in a baseline" in comment
