"""The distribution check's confirmation (gate/checks/confirmation.py): a group whose p-value lands between the floor
and alpha is sampled again before it fails; the rule's size, its power, its decisions and what they say."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import THREADS

from gate.checks import distribution as dist
from gate.checks.confirmation import Rule, adjusted, decision, fails, size
from gate.checks.doc import Distribution
from gate.checks.sampling_verdicts import verdicts_for
from gate.cli import main
from gate.inputs.checks_config import DistributionCheck
from gate.inputs.config import REFERENCE


def test_the_rule_fails_at_once_below_the_floor_confirms_between_and_passes_above():
    rule = Rule(alpha=0.01, floor=0.0001)
    assert rule.first(0.00005) == "failed at once"
    assert rule.first(0.005) == "unconfirmed" and fails("unconfirmed")  # check without the second pass: fails
    assert rule.first(0.01) == "passed" and rule.first(None) == "passed"  # one pass fails below alpha, as before
    assert rule.decide(0.005, 0.009) == "confirmed" and fails("confirmed")
    assert rule.decide(0.005, 0.2) == "not confirmed" and not fails("not confirmed")
    assert rule.decide(0.00005, 0.9) == "failed at once"  # a second pass cannot undo a failure below the floor
    assert Rule(0.01, 0.0001, enabled=False).first(0.005) == "failed at once"
    assert adjusted({"a": 0.001, "b": 0.5, "c": 0.2, "d": 0.9}) == pytest.approx(0.004)
    assert adjusted({"a": 0.6, "b": 0.5}) == 1.0 and adjusted({}) is None
    assert size(0.01, 0.0001) == pytest.approx(0.0001 + 0.0099 * 0.01)
    assert rule.size() < 0.01 / 40 and Rule(0.01, 0.0001, enabled=False).size() == 0.01


def test_the_floor_must_be_below_alpha_and_the_defaults_keep_the_config_digest():
    with pytest.raises(ValueError, match="confirm_floor"):
        DistributionCheck(alpha=0.01, confirm_floor=0.01)
    assert DistributionCheck().model_dump(mode="json") == DistributionCheck(confirm=True).model_dump(mode="json")
    assert "confirm" not in DistributionCheck().model_dump(mode="json")
    assert DistributionCheck(confirm=False, confirm_floor=0.001).model_dump(mode="json")["confirm_floor"] == 0.001
    assert Rule.of(DistributionCheck(alpha=0.02)).floor == pytest.approx(0.0002)


def _synthetic(n=300, v=40, seed=0):
    rng = np.random.default_rng(seed)
    p = torch.from_numpy(rng.dirichlet(np.full(v, 0.3), n))
    q = torch.from_numpy(rng.dirichlet(np.full(v, 0.3), n)) * 0.5 + p * 0.5
    return p, q


def _p(chunk, moments, dist_p, rng) -> float:
    """One pass's adjusted p-value: tokens drawn from ``dist_p`` at the chunk's positions, the four tests."""
    y = dist.sample_from(dist_p, rng)
    return adjusted(dist.pvalues(chunk.stats(y), moments, rng.random(dist_p.shape[0])))


def test_two_passes_hold_the_derived_size_and_keep_the_power_against_a_plain_bias():
    """Simulated (draws from the target itself): at a large alpha, so that a few hundred replicates resolve it, one
    pass rejects about alpha of the time and the confirmed rule at most floor + (alpha - floor) alpha; against a
    plain distortion both reject nearly always."""
    p, q = _synthetic()
    chunk = dist._Chunk(p.double(), q.double())
    m = chunk.moments()
    rule, rng, trials = Rule(alpha=0.2, floor=0.02), np.random.default_rng(7), 400
    once = twice = 0
    for _ in range(trials):
        p1 = _p(chunk, m, p, rng)
        once += p1 < rule.alpha
        decided = rule.first(p1)
        if decided == "unconfirmed":
            decided = rule.decide(p1, _p(chunk, m, p, rng))
        twice += fails(decided)
    se = (rule.size() * (1 - rule.size()) / trials) ** 0.5
    assert once / trials <= rule.alpha + 3 * (0.2 * 0.8 / trials) ** 0.5
    assert twice / trials <= rule.size() + 3 * se, (once, twice)
    assert twice < once / 2
    bent = dist.planted(p, q, "toward_draft", 0.5)
    caught = sum(fails(rule.decide(p1, _p(chunk, m, bent, rng) if rule.first(p1) == "unconfirmed" else None))
                 for p1 in (_p(chunk, m, bent, rng) for _ in range(50)))
    assert caught == 50


def test_the_power_simulation_reports_the_confirmed_rule_beside_one_pass():
    p, q = _synthetic(n=1000)
    a = dist.analyze_distributions(p, q, dist.sample_from(p, np.random.default_rng(0)), power_trials=30)
    rule = Rule(alpha=0.01, floor=0.0001)
    pw = dist.power(a, 0.01, 30, rule=rule)
    for row in pw["families"]["toward_draft"]["curve"]:
        assert row["confirmed"] <= row["combined"] + 1e-12
        assert row["confirmed"] >= row["combined"] ** 2 - 1e-12
    once, confirmed = dist.null_rate(a, 0.01, 30, rule=rule)
    assert confirmed <= once


def _verdict(engine, pv, confirm, rule, failed):
    dcfg = DistributionCheck(num_samples=100)
    return verdicts_for(engine, 8, 100, pv, failed, dcfg, confirm=confirm, rule=rule)


def test_each_decision_says_what_the_passes_gave():
    rule = Rule(alpha=0.01, floor=0.0001)
    near = {"pit_ks": 0.5, "draft_top": 0.5, "draft_logprob": 0.002, "draft_ratio": 0.5}  # adjusted 0.008
    plain = {"pit_ks": 1e-9, "draft_top": 0.5, "draft_logprob": 0.5, "draft_ratio": 0.5}
    calm = {k: 0.6 for k in near}

    decided, confirm = decision(rule, near, 0, None)
    assert decided == "unconfirmed" and confirm == {"p1": pytest.approx(0.008), "decision": "unconfirmed"}
    [line] = _verdict("speculative", near, confirm, rule, fails(decided))
    assert line.status == "fail" and "unconfirmed" in line.why and "specguard gate" in line.why
    [line] = _verdict(REFERENCE, near, confirm, rule, fails(decided))
    assert line.status == "warn"  # the control's failure warns, confirmed or not

    decided, confirm = decision(rule, near, 0, lambda: (100, calm, 0))
    assert decided == "not confirmed" and confirm["p2"] == pytest.approx(1.0) and confirm["n2"] == 100
    [line] = _verdict("speculative", near, confirm, rule, fails(decided))
    assert line.status == "pass" and "not confirmed" in line.why and "second pass" in line.why

    decided, confirm = decision(rule, near, 0, lambda: (100, near, 0))
    assert decided == "confirmed"
    [line] = _verdict("speculative", near, confirm, rule, fails(decided))
    assert line.status == "fail" and "confirmed: first pass adjusted p=0.008" in line.why

    decided, confirm = decision(rule, near, 0, lambda: (100, calm, 3))  # outside the truncation: fails
    assert decided == "confirmed" and confirm["outside2"] == 3

    asked = []
    decided, confirm = decision(rule, plain, 0, lambda: asked.append(1))
    assert decided == "failed at once" and not asked  # below the floor: no second pass is read
    [line] = _verdict("speculative", plain, confirm, rule, True)
    assert "below the confirmation floor" in line.why

    assert decision(rule, calm, 4, None) == ("failed at once", None)  # tokens outside the truncation
    assert decision(rule, calm, 0, None) == ("passed", None)


def test_the_groups_awaiting_a_second_pass_are_read_from_checks_json():
    row = {"n": 100, "pvalues": {"pit_ks": 0.5}, "rejected": True, "control": False}
    doc = Distribution.model_validate({
        "alpha": 0.01, "num_samples": 100, "temperature": 1.0, "tests": ["pit_ks"],
        "engines": {"speculative": {"4": {**row, "confirmation": {"p1": 0.004, "decision": "unconfirmed"}},
                                    "8": {**row, "confirmation": {"p1": 0.004, "p2": 0.3, "n2": 100,
                                                                  "decision": "not confirmed"}}},
                    REFERENCE: {"4": {**row, "rejected": False}}}})
    from gate.checks.doc import ChecksDoc

    assert ChecksDoc.unconfirmed(type("Doc", (), {"distribution": doc})()) == [("speculative", 4)]


CONFIRMED = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
  draft: {path: "specguard:demo/draft"}
  device: cpu
batching: {batch_sizes: [2]}
generation:
  max_new_tokens: 8
  greedy: false
  sampling: {temperature: 1.0, seed: 1}
suite: {max_prompts_per_slice: 1, slices: [prose, code, questions, adversarial]}
engines:
  - type: speculative
checks:
  # alpha 0.4 so that the correct engine's first pass lands between the floor and alpha (seed 1 does)
  distribution: {num_samples: 100, power_trials: 0, alpha: 0.4, null_trials: 200, confirm_floor: 0.000001}
  speedup: {enabled: false}
output: {dir: out, cache_dir: null}
"""


@pytest.mark.slow
def test_gate_samples_a_near_miss_again_on_its_loaded_engines_and_check_alone_cannot(tmp_path, capsys):
    cfg = tmp_path / "specguard.yaml"
    cfg.write_text(CONFIRMED)
    assert main(["gate", str(cfg), "--threads", THREADS, "-q"]) == 0
    out = tmp_path / "out"
    logged = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()[1:]]
    second = [r for r in logged if r["phase"] == "confirmation"]
    assert second and {r["engine"] for r in second} == {"speculative"} and min(r["repeat"] for r in second) == 100
    results = json.loads((out / "results.json").read_text())
    assert len([e for e in results["executions"] if e["phase"] == "confirmation"]) == len(second)
    row = json.loads((out / "checks.json").read_text())["distribution"]["engines"]["speculative"]["2"]
    c = row["confirmation"]
    assert c["decision"] == "not confirmed" and 1e-6 <= c["p1"] < 0.4 <= c["p2"] and c["n2"] == 100
    assert not row["rejected"]
    assert "not confirmed" in (out / "comment.md").read_text()
    # `check` on the same run without its second pass: it cannot sample, so the group fails, unconfirmed
    results["executions"] = [e for e in results["executions"] if e["phase"] != "confirmation"]
    (out / "results.json").write_text(json.dumps(results))
    assert main(["check", str(cfg), "--threads", THREADS, "-q"]) == 1
    row = json.loads((out / "checks.json").read_text())["distribution"]["engines"]["speculative"]["2"]
    assert row["rejected"] and row["confirmation"] == {"p1": c["p1"], "decision": "unconfirmed"}
    assert "unconfirmed" in (out / "checks.md").read_text()
