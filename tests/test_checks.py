"""The checks tell bugs from float noise, in both directions, on the real demo pair."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import demo_config

from gate.checks import distribution as dist
from gate.checks import run_checks
from gate.checks.equivalence import Scored, analyze_sequence, find_loop, first_divergence
from gate.checks.tolerance import Tolerance, tolerance_for
from gate.engines.base import GenerationSettings, Request
from gate.engines.reference import ReferenceEngine
from gate.engines.speculative import SpeculativeEngine
from gate.models import load_pair
from gate.suite import load_suite

CPU = torch.device("cpu")
FP32_TOL = tolerance_for(torch.float32, 1e-5)


def doc_for(pair, prompts: list[tuple], outputs: dict, max_new: int, eos=()) -> dict:
    """A minimal results document: {(engine, batch_size): [token lists]} as greedy outputs."""
    doc = {"prompts": [{"id": f"p{i}", "slice": "s" if i % 2 else "t", "prompt_ids": list(p),
                        "max_new_tokens": max_new, "bucket": "0-127"} for i, p in enumerate(prompts)],
           "settings": {"eos_token_ids": list(eos), "num_draft_tokens": 4}, "status": "complete",
           "executions": []}
    for (engine, bs), outs in outputs.items():
        doc["executions"].append({"engine": engine, "mode": "greedy", "phase": "outputs", "batch_size": bs,
                                  "repeat": 0, "batch": 0, "sequences": [
                                      {"prompt_id": f"p{i}", "token_ids": o, "stop_reason": "max_tokens",
                                       "filler": False} for i, o in enumerate(outs)]})
    return doc


def generate(engine, prompts, bs, max_new=24, settings=None):
    settings = settings or GenerationSettings(0.0, 4)
    out = []
    for i in range(0, len(prompts), bs):
        out += [s.token_ids for s in engine.generate([Request(p, max_new) for p in prompts[i:i + bs]],
                                                     settings).sequences]
    return out


# --- pure functions ----------------------------------------------------------------------


def test_ulp_tolerance_is_dtype_aware():
    bf16 = tolerance_for(torch.bfloat16, None)
    assert bf16.at(10.0) == pytest.approx(2 * 0.0625)  # bf16 ULP at 8..16 is 2^-4
    assert tolerance_for(torch.float32, None).at(10.0) == pytest.approx(2 * 2 ** -20)
    assert tolerance_for(torch.float32, 1e-4).at(10.0) == pytest.approx(4e-4)  # measured noise dominates
    assert Tolerance("float32", 1e-7, None, fixed=0.5).at(100.0) == 0.5


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 9, 3], [1, 2, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_loop_detection():
    assert find_loop([5, 6, 7] * 6) == (5, 6, 7)
    assert find_loop([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]) is None
    assert find_loop([9] * 12) == (9,)
    assert find_loop([7, 8, 5, 6, 7] + [5, 6, 7] * 4) == (5, 6, 7)


def _scored(out, gaps, probs=None):
    best = [10.0] * len(out)
    return Scored([b - g for b, g in zip(best, gaps)], best, [0] * len(out), probs or [0.5] * len(out))


def test_signatures_each_named():
    tol = FP32_TOL
    ref = list(range(10, 40))
    names = lambda v: {s["name"] for s in v.signatures}  # noqa: E731
    v = analyze_sequence("p", "s", [], ref, None, tol, {2}, 30, "max_tokens")
    assert "empty" in names(v)
    v = analyze_sequence("p", "s", ref + [1], ref, None, tol, {2}, 30, "max_tokens")
    assert "overlength" in names(v)
    v = analyze_sequence("p", "s", ref[:5] + [2] + ref[6:], ref, None, tol, {2}, 30, "eos")
    assert "eos_ignored" in names(v)
    v = analyze_sequence("p", "s", ref[:7], ref, None, tol, {2}, 30, "max_tokens")
    assert "truncation" in names(v)
    looped = ref[:6] + [3, 4] * 12
    v = analyze_sequence("p", "s", looped, ref, None, tol, {2}, 30, "max_tokens")
    assert "repetition" in names(v)
    assert "repetition" not in names(analyze_sequence("p", "s", looped, looped, None, tol, {2}, 30, "x"))
    bad = ref[:10] + [0, 0, 0] + ref[13:]
    gaps = [0.0] * 10 + [5.0, 5.0, 5.0] + [0.0] * 17
    probs = [0.5] * 10 + [0.001] * 3 + [0.5] * 17
    v = analyze_sequence("p", "s", bad, ref, _scored(bad, gaps, probs), tol, {2}, 30, "max_tokens")
    assert "gibberish" in names(v) and len(v.inconsistent) == 3


# --- on the real demo pair -------------------------------------------------------------------


@pytest.fixture(scope="module")
def prompts(demo_pair):
    suite = load_suite("gate/suites/default.jsonl").select(max_per_slice=4)
    return [tuple(demo_pair.encode(p.text)) for p in suite.prompts if p.slice != "long-context"]


def test_planted_logit_errors_are_labelled_confident(demo_pair, prompts):
    ref = ReferenceEngine(demo_pair.target.model, CPU)
    canonical = generate(ref, prompts, 1)
    planted = [list(o) for o in canonical]
    scorer_model = demo_pair.target.model
    for i in (0, 3, 7):
        j = 5
        ids = torch.tensor([list(prompts[i]) + planted[i][:j]])
        with torch.inference_mode():
            logits = scorer_model(input_ids=ids).logits[0, -1]
        planted[i][j] = int(logits.argmin())  # the target's least likely token: a bug, never noise
    doc = doc_for(demo_pair, prompts, {("reference", 1): canonical, ("speculative", 4): planted}, 24)
    checks = run_checks(doc, demo_pair, demo_config().config)
    eq = checks["equivalence"]["speculative"]["4"]
    assert eq["divergences"]["confident"] == 3 and eq["divergences"]["near_tie"] == 0
    assert eq["confident_inconsistencies"] >= 3
    assert [e["kind"] for e in eq["examples"]] == ["confident"] * 3
    fails = {v["check"] for v in checks["verdicts"] if v["status"] == "fail"}
    assert "equivalence" in fails


def test_correct_engine_is_clean_in_fp32(demo_pair, prompts):
    ref = ReferenceEngine(demo_pair.target.model, CPU)
    spec = SpeculativeEngine(demo_pair.target.model, demo_pair.draft.model, CPU)
    doc = doc_for(demo_pair, prompts, {("reference", 1): generate(ref, prompts, 1),
                                       ("reference", 8): generate(ref, prompts, 8),
                                       ("speculative", 8): generate(spec, prompts, 8)}, 24)
    checks = run_checks(doc, demo_pair, demo_config().config)
    assert not [v for v in checks["verdicts"] if v["status"] == "fail"]
    assert checks["equivalence"]["speculative"]["8"]["exact_match"] == 1.0
    assert checks["tolerance"]["measured_noise"] < 1e-3


@pytest.fixture(scope="module")
def bf16_pair():
    return load_pair(demo_config("bfloat16"))


def test_bf16_batch_size_changes_are_labelled_near_ties(bf16_pair):
    """Genuine near-ties: bf16 plain decoding changes with batch size on CPU, and only at near-ties."""
    suite = load_suite("gate/suites/default.jsonl")
    prompts = [tuple(bf16_pair.encode(p.text)) for p in suite.prompts if p.slice != "long-context"]
    ref = ReferenceEngine(bf16_pair.target.model, CPU)
    spec = SpeculativeEngine(bf16_pair.target.model, bf16_pair.draft.model, CPU)
    outs = {("reference", 1): generate(ref, prompts, 1, 32), ("reference", 8): generate(ref, prompts, 8, 32),
            ("speculative", 8): generate(spec, prompts, 8, 32)}
    doc = doc_for(bf16_pair, prompts, outs, 32)
    checks = run_checks(doc, bf16_pair, demo_config("bfloat16").config)
    floor = checks["noise_floor"]["8"]
    spec8 = checks["equivalence"]["speculative"]["8"]
    differing = floor["divergences"]["near_tie"] + spec8["divergences"]["near_tie"]
    assert differing > 0, "bf16 on CPU is expected to flip some near-ties"
    assert floor["divergences"]["confident"] == 0 and spec8["divergences"]["confident"] == 0
    assert spec8["confident_inconsistencies"] == 0 and floor["confident_inconsistencies"] == 0
    assert checks["tolerance"]["dtype"] == "bfloat16"


# --- distribution tests on synthetic distributions ---------------------------------------------


def _positions(n=2000, v=40, seed=0):
    rng = np.random.default_rng(seed)
    p = torch.from_numpy(rng.dirichlet(np.full(v, 0.3), n))
    q = torch.from_numpy(rng.dirichlet(np.full(v, 0.3), n)) * 0.5 + p * 0.5  # a draft that half-agrees
    return dist.Positions(p, q, torch.zeros(n, dtype=torch.long))


def test_distribution_tests_hold_their_size_and_catch_a_draft_bias():
    pos = _positions()
    assert dist.null_rate(pos, alpha=0.05, trials=60) <= 0.12
    rng = np.random.default_rng(5)
    biased = dist._sample(dist.planted(pos, "toward_draft", 0.2).cumsum(1), rng)
    assert dist.rejects(dist.statistics(pos.p, pos.q, biased, rng), 0.01)


def test_power_curve_is_monotone_and_reports_resolution():
    pos = _positions(n=1000)
    pw = dist.power(pos, alpha=0.01, trials=20)
    curve = [r["combined"] for r in pw["families"]["toward_draft"]["curve"]]
    assert curve[-1] == 1.0 and curve[0] <= curve[-1]
    assert pw["families"]["toward_draft"]["min_detectable_epsilon"] is not None
