"""Issue 38: another stack's own numerical noise, measured on its own plain decoding, not assumed from the gate's.

OpenVINO's plain pipeline (no draft) computes in bf16 on a CPU with AVX512-BF16 while the config says float32; the
gate's fp32 tolerance (about 1e-5 nats) called its 0.002-0.004-nat near-tie flips "a bug".  These are the rules
that replace that, function by function (fast tier); tests/test_stack_noise_gate.py runs them through the whole gate
on a plug-in that computes in bf16 under a float32 config.
"""

from __future__ import annotations

import pytest
import torch
from helpers import demo_config

from gate.checks import stack_noise as stack
from gate.checks.doc import EquivalenceSummary
from gate.checks.equivalence import Scored, _verdicts, analyze_sequence, summarize
from gate.engines.base import eps_of, precision_name
from gate.engines.tolerance import BAND_ULPS, band, tolerance_for

FP32 = tolerance_for(torch.float32, 1e-6)  # the demo pair's rule: 4 x 1e-6, or 2 fp32 ULPs of the max logit
EQ = demo_config().config.checks.equivalence


def scored(out: list[int], gaps: list[float], other_gap: float | None = None, at: int = 0) -> Scored:
    """Re-scoring where the emitted token sits ``gaps[t]`` below the argmax (logit 10); the reference's token at the
    first divergence ``at`` is ``other_gap`` above the emitted one."""
    best = [10.0] * len(out)
    s = Scored([b - g for b, g in zip(best, gaps)], best, [7] * len(out), [0.5] * len(out))
    if other_gap is not None:
        s.other = s.chosen[at] + other_gap
    return s


def summary(verdicts) -> EquivalenceSummary:
    return EquivalenceSummary.model_validate({**summarize(verdicts), "by_slice": {}})


def test_precision_names_and_their_scales():
    assert precision_name("bf16") == precision_name("BFloat16") == "bfloat16"
    assert precision_name("f32") == "float32" and precision_name("fp16") == "float16" and precision_name("tf32")
    assert precision_name("int4") is None and precision_name(3) is None
    assert eps_of("bf16") == 2.0 ** -7 and eps_of("float32") == 2.0 ** -23
    # a reported precision sets the ULP term as the config's dtype would
    assert tolerance_for("bf16", None).at(10.0) == tolerance_for(torch.bfloat16, None).at(10.0) == 0.125


def test_the_fp32_rule_is_unchanged_and_the_band_only_applies_where_asked():
    assert FP32.at(10.0) == pytest.approx(max(4e-6, 2 * 2 ** -20))
    assert FP32.classify(0.004, 10.0) == "confident", "the gate's own engines: no band"
    unmeasured = stack.engine_tolerance(FP32, None)
    assert unmeasured.at(10.0) == FP32.at(10.0), "no measurement widens nothing"
    assert unmeasured.classify(0.004, 10.0) == "band" and unmeasured.classify(0.9, 10.0) == "confident"
    assert band(10.0) == BAND_ULPS * 2 ** -7 * 8 == 0.25, "4 bf16 ULPs at a logit of 10"
    fixed = stack.engine_tolerance(tolerance_for(torch.float32, None, fixed=0.5), None)
    assert fixed.classify(0.6, 10.0) == "confident" and fixed.at(10.0) == 0.5, "a fixed tolerance stays fixed"


def test_a_stacks_tolerance_is_four_times_its_plain_decodings_largest_departure():
    found = stack.Departures()
    # OpenVINO's plain pipeline in bf16: flips at 2.2e-3 .. 4.3e-3 nats, and tokens within the gate's own tolerance
    found.add(scored([1, 2, 3, 4], [0.0, 0.0022, 1e-6, 0.0043]), FP32)
    assert (found.tokens, found.within_band, found.beyond_band) == (4, 2, 0)
    assert found.largest == pytest.approx(0.0043)
    tol = stack.engine_tolerance(FP32, found)
    assert tol.at(10.0) == pytest.approx(4 * 0.0043) and tol.classify(0.0148, 10.0) == "near_tie"
    assert tol.classify(0.91, 10.0) == "confident", "the split-prefill bug's smallest gap still fails"
    clean = stack.Departures()
    clean.add(scored([1, 2], [0.0, 1e-6]), FP32)
    assert stack.engine_tolerance(FP32, clean).at(10.0) == FP32.at(10.0), "an fp32 stack keeps the fp32 rule"
    broken = stack.Departures()
    broken.add(scored([1, 2], [0.003, 2.5]), FP32)
    assert broken.beyond_band == 1 and broken.largest == pytest.approx(0.003), "a bug is no noise measurement"


def test_the_report_says_what_was_measured_in_words():
    found = stack.Departures()
    found.add(scored([1, 2, 3], [0.0, 0.0043, 0.0]), FP32)
    tol = stack.engine_tolerance(FP32, found)
    s = stack.describe("openvino", "openvino.reference", found, tol, "float32", False, "float32")
    text = stack.sentence("openvino", s)
    assert s.mode == "measured" and s.noise == pytest.approx(0.0043)
    assert ("openvino's plain decoding (openvino.reference) differs from the float32 target at near-ties up to "
            "0.0043 nats (1 of 3 tokens): it computes at lower precision than the config says") in text
    assert "tolerance for openvino: 0.017 at a logit of 10" in text
    bf16 = tolerance_for("bfloat16", None)
    said = stack.sentence("openvino", stack.describe("openvino", "openvino.reference", found,
                                                     stack.engine_tolerance(bf16, found), "bfloat16", True, "float32"))
    assert "it reports computing in bfloat16" in said and "tolerance for openvino: 0.12" in said
    unmeasured = stack.describe("vllm", None, None, stack.engine_tolerance(FP32, None), "float32", False, "float32")
    assert unmeasured.mode == "unmeasured" and unmeasured.noise is None
    assert "cross-stack noise not measured for vllm" in stack.sentence("vllm", unmeasured)


def test_a_divergence_its_own_plain_decoding_shares_is_the_stacks_not_speculations():
    ref = list(range(10, 30))
    flipped = ref[:5] + [99] + ref[6:]  # a flip at position 5, as the stack's plain decoding made it too
    tol = stack.engine_tolerance(FP32, None)
    wide = scored(flipped, [0.0] * 5 + [0.3] + [0.0] * 14, 0.3, at=5)  # beyond the band: a bug if speculation's
    own = analyze_sequence("p", "s", flipped, ref, wide, tol, set(), 20, "max_tokens", plain=[flipped])
    assert own.divergence.kind == "plain" and not own.inconsistent and own.plain_inconsistent == 1
    alone = analyze_sequence("p", "s", flipped, ref, wide, tol, set(), 20, "max_tokens", plain=[ref])
    assert alone.divergence.kind == "confident" and len(alone.inconsistent) == 1, "plain decoding did not flip"
    lines = _verdicts("openvino", 1, summary([own]), EQ, plain="openvino.reference")
    assert [v.status for v in lines] == ["pass"]
    assert "its own plain decoding (openvino.reference) shares: the stack's, not speculation's" in lines[0].why
    assert [v.status for v in _verdicts("openvino", 1, summary([alone]), EQ, plain="openvino.reference")] == ["fail"]


def test_unmeasured_departures_within_the_band_warn_and_beyond_it_fail():
    ref = list(range(10, 30))
    out = ref[:3] + [99] + ref[4:]
    tol = stack.engine_tolerance(FP32, None)
    small = analyze_sequence("p", "s", out, ref, scored(out, [0.0] * 3 + [0.004] + [0.0] * 16, 0.004, at=3), tol,
                             set(), 20, "max_tokens", plain=None)
    assert small.divergence.kind == "band" and len(small.band_inconsistent) == 1 and not small.inconsistent
    lines = _verdicts("vllm", 1, summary([small]), EQ, plain=None)
    assert [v.status for v in lines] == ["warn"] and "cannot be told from noise" in lines[0].why
    big = analyze_sequence("p", "s", out, ref, scored(out, [0.0] * 3 + [0.9] + [0.0] * 16, 0.9, at=3), tol, set(),
                           20, "max_tokens", plain=None)
    assert big.divergence.kind == "confident"
    assert [v.status for v in _verdicts("vllm", 1, summary([big]), EQ, plain=None)] == ["fail"]
    # the gate's own engine under the same numbers: no band, a bug
    own = analyze_sequence("p", "s", out, ref, scored(out, [0.0] * 3 + [0.004] + [0.0] * 16, 0.004, at=3), FP32,
                           set(), 20, "max_tokens")
    assert own.divergence.kind == "confident"


def test_a_loop_after_a_stacks_near_tie_is_the_targets_own_path_not_a_signature():
    """The OpenVINO plain pipeline: a bf16 flip, then the target's own greedy continuation loops."""
    ref = list(range(10, 40))
    looped = ref[:9] + [3, 4, 5] * 7
    tol = stack.plain_tolerance(FP32)
    v = analyze_sequence("p", "s", looped, ref, scored(looped, [0.0] * 30, 0.004, at=9), tol, set(), 30, "max_tokens")
    assert v.divergence.kind == "band" and not v.signatures and v.target_loop is not None
    plain_loop = analyze_sequence("p", "s", looped, ref, scored(looped, [0.0] * 9 + [0.9] + [0.0] * 20, 0.9, at=9),
                                  tol, set(), 30, "max_tokens")
    assert "repetition" in {s["name"] for s in plain_loop.signatures}, "after a confident divergence it still counts"
    # an engine whose loop its own plain decoding has too: the stack's loop
    shared = analyze_sequence("p", "s", looped, ref, scored(looped, [0.0] * 30, 0.9, at=9), FP32, set(), 30,
                              "max_tokens", plain=[ref[:8] + [3, 4, 5] * 7 + [3]])
    assert not any(s["name"] == "repetition" for s in shared.signatures)


def test_a_plugin_reports_its_precision_or_gets_a_named_error():
    from gate.engines.contract import PluginSettings
    from gate.engines.plugin import _as_result
    from gate.errors import EngineError

    settings = PluginSettings(max_new_tokens=[4], seeds=[0], temperature=0.0, num_draft_tokens=4,
                              eos_token_ids=[], target="t", draft="d", dtype="float32", draft_dtype="float32",
                              device="cpu", extra={})
    seq = _as_result({"token_ids": [1, 2], "precision": "bf16"}, 0, "openvino", settings, 100)
    assert seq.precision == "bfloat16"
    assert _as_result({"token_ids": [1, 2]}, 0, "openvino", settings, 100).precision is None
    with pytest.raises(EngineError) as e:
        _as_result({"token_ids": [1, 2], "precision": "fp8-ish"}, 0, "openvino", settings, 100)
    assert "result[0].precision" in str(e.value) and "bf16" in str(e.value)
