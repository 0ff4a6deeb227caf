"""Issue 53, item 2: required means required.

``checks.<check>.required: true`` (equivalence, distribution, speedup): a config that leaves the check nothing to
measure is exit 2 from `validate` and `plan`, naming the field; a run whose required check measured nothing fails with
the reason (the checks' line, the verdict, the comment's headline); and sampling that no distribution test can read is
neither planned nor run, with the reason recorded as skips.  One rule decides what a config leaves unmeasurable
(``Config.unmeasurable``), behind the refusal, the skipped phase and plan's warning alike.  No weights load here.
"""

from __future__ import annotations

import json

import pytest
import synthetic as syn

from gate.cli import main
from gate.inputs.config import parse_config

LOCAL = """\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cpu}
suite: {max_prompts_per_slice: 1}
output: {cache_dir: null}
generation: {max_new_tokens: 8%(generation)s}
checks:
  %(check)s: {required: true%(more)s}
"""
SERVED = """\
version: 1
models: {target: {path: "specguard:demo/target"}, draft: {path: "specguard:demo/draft"}, device: cpu,
         local_weights: false}
batching: {batch_sizes: [1, 2]}
suite: {max_prompts_per_slice: 1}
output: {cache_dir: null}
generation: {max_new_tokens: 8, sampling: {temperature: %(t)s}}
engines:
  - type: http
    name: stack
    http:
      preset: %(preset)s
      server: {url: "http://127.0.0.1:18000"}
      reference: {url: "http://127.0.0.1:18001"}
checks: {distribution: {required: %(required)s}}
"""


def said(argv, capsys) -> tuple[int, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("check,generation,more,why", [
    ("equivalence", ", greedy: false, sampling: {temperature: 1.0}", "", "generation.greedy is false"),
    ("distribution", "", "", "generation.sampling is not set"),
    ("speedup", "", ", enabled: false", "checks.speedup.enabled is false"),
    ("speedup", ", greedy: false, sampling: {temperature: 1.0}", "", "the timing phase times greedy decoding"),
])
def test_a_required_check_the_config_leaves_nothing_to_measure_is_exit_2_naming_it(tmp_path, capsys, check,
                                                                                 generation, more, why):
    path = tmp_path / "specguard.yaml"
    path.write_text(LOCAL % {"check": check, "generation": generation, "more": more})
    for command in ("validate", "plan"):
        code, text = said([command, str(path)], capsys)
        assert code == 2, text
        assert f"{path}:7: checks.{check}.required: the {check} check is required" in text and why in text, text


def test_a_served_target_that_cannot_score_with_the_distribution_required_is_exit_2_with_the_reason(tmp_path,
                                                                                                   capsys):
    """A served-only target behind a stack whose reference scores nothing (SGLang's input logprobs are not wired):
    the sampled tokens are unreadable, and a required check says so.  vLLM's prompt logprobs are read at any
    temperature (issue 53 item 1: tempered here, gate.checks.coarse.as_sampled)."""
    path = tmp_path / "served.yaml"
    path.write_text(SERVED % {"t": 0.7, "required": "true", "preset": "sglang"})
    code, text = said(["validate", str(path)], capsys)
    assert code == 2 and f"{path}:15: checks.distribution.required: " in text and "preset sglang" in text, text
    path.write_text(SERVED % {"t": 0.7, "required": "true", "preset": "vllm"})
    assert said(["validate", str(path)], capsys)[0] == 0


def test_a_run_that_would_measure_nothing_at_all_is_exit_2(tmp_path, capsys):
    """Greedy off, and the sampled tokens unreadable: no check would have anything, required or not."""
    path = tmp_path / "served.yaml"
    text = SERVED % {"t": 0.7, "required": "false", "preset": "sglang"}
    path.write_text(text.replace("max_new_tokens: 8,", "max_new_tokens: 8, greedy: false,"))
    code, text = said(["validate", str(path)], capsys)
    assert code == 2 and "generation.greedy: nothing this run would generate can be measured" in text, text


def test_unreadable_sampling_is_not_planned_and_plan_says_why(tmp_path, capsys):
    """Not required: the gate runs, but generates no sampled tokens that no test can read; the planner (which the
    run executes) plans no sampling group, and records each as a skip with the reason."""
    from gate.engines.base import Capabilities
    from gate.run.plan import EngineInfo, PromptInfo, plan

    path = tmp_path / "served.yaml"
    path.write_text(SERVED % {"t": 0.7, "required": "false", "preset": "sglang"})
    code, text = said(["plan", str(path), "--json"], capsys)
    report = json.loads(text)
    assert code == 0 and not [w for w in report["work"] if w["phase"] == "sampling"], report["work"]
    assert any("sampling phase is not run" in w and "preset sglang" in w for w in report["warnings"]), \
        report["warnings"]

    cfg = parse_config(path.read_text(), path).config
    prompts = [PromptInfo(i, f"p{i}", "s", "0-127", (1, 2, 3), 4) for i in range(3)]
    p = plan(cfg, prompts, [EngineInfo("stack", Capabilities())])
    assert p.sampling == [] and p.outputs
    skipped = {(s.engine, s.batch_size) for s in p.skips if s.mode == "sampling"}
    assert skipped == {("reference", 1), ("stack", 1), ("stack", 2)}
    assert all("preset sglang" in s.reason for s in p.skips if s.mode == "sampling")
    readable = parse_config(path.read_text().replace("preset: sglang", "preset: vllm"), path).config
    assert plan(readable, prompts, [EngineInfo("stack", Capabilities())]).sampling  # vLLM scores: sampled


def test_the_run_executes_that_plan_and_records_the_skips(tmp_path, configs_only):
    """The runner's own plan (what `run` and `gate` execute, and whose skips results.json keeps) samples nothing on a
    served-only target whose stack cannot score; behind vLLM it samples, at T=0.7 too."""
    from helpers import FakeEngine

    from gate.inputs.suite import suite_for
    from gate.run.runner import Runner

    def runner(preset: str) -> Runner:
        path = tmp_path / f"served-{preset}.yaml"
        path.write_text(SERVED % {"t": 0.7, "required": "false", "preset": preset})
        loaded = parse_config(path.read_text(), path)
        return Runner(loaded, configs_only, suite_for(loaded), FakeEngine("reference", False),
                      [FakeEngine("stack", True)], tmp_path / "out", log=lambda m: None)

    r = runner("sglang")
    assert r.plan.sampling == [] and r.plan.outputs
    assert {s.mode for s in r.plan.skips} == {"sampling"} and all("preset sglang" in s.reason for s in r.plan.skips)
    assert runner("vllm").plan.sampling


def test_a_required_distribution_that_measured_nothing_fails_the_checks_the_verdict_and_the_comment(configs_only):
    """The run's sampling was skipped at every batch size (its reason in results.json's skips): with the check
    required, the checks fail with that reason, the verdict fails, and the comment names the check."""
    from gate.checks.analysis import run_checks
    from gate.report.render import build_page, render_comment
    from gate.run.results import Skip

    base = syn.config().model_dump(mode="json", exclude_none=True)
    sampling = {**base, "generation": {**base["generation"], "sampling": {"temperature": 1.0}}}
    required = {**sampling, "checks": {"distribution": {"required": True}}}
    cfg, cfg_required = (syn.Config.model_validate(c) for c in (sampling, required))
    reason = "assisted supports batch size 1 only"
    results = syn.run().model_copy(update={"skipped": [Skip(engine="speculative", batch_size=bs, mode="sampling",
                                                            reason=reason) for bs in syn.SIZES]})

    lines = [v for v in run_checks(results, configs_only, cfg).verdicts if v.check == "distribution"]
    assert lines == []  # not required: nothing sampled is nothing said
    checks = run_checks(results, configs_only, cfg_required)
    failed = [v for v in checks.failing() if v.check == "distribution"]
    assert len(failed) == 1 and failed[0].unmeasured and reason in failed[0].why, checks.verdicts
    assert "checks.distribution.required: true" in failed[0].why

    verdict = syn.judge(results, checks, cfg_required)
    assert verdict.outcome == "fail"
    assert "the required distribution check was not measured" in verdict.headline, verdict.headline
    assert "no longer follow the target's distribution" not in verdict.headline
    comment = render_comment(build_page(results, checks, verdict, None, "demo"))
    assert f"**distribution**: required, and not measured: {reason}" in comment, comment[:3000]


def test_a_required_checks_own_not_measured_line_becomes_its_failure():
    """Where the check said why it measured nothing ("not measured: ..."), that reason is the failure's, once."""
    from gate.checks.analysis import required_failure
    from gate.checks.doc import VerdictLine

    info = VerdictLine.of("speedup", None, "info", "not measured: the engine cannot be timed here")
    other = VerdictLine.of("speedup", "x", "info", "worst slice 'code'")
    out = required_failure("speedup", [info, other], syn.run())
    assert out[0] == other and len(out) == 2 and out[1].status == "fail" and out[1].unmeasured
    assert out[1].why.startswith("required, and not measured: the engine cannot be timed here")


def test_required_is_not_part_of_the_configs_digest():
    """It judges what was measured and changes nothing measured: a baseline made before stays comparable."""
    plain = parse_config(LOCAL % {"check": "equivalence", "generation": "", "more": ""}, "a.yaml").config
    again = parse_config((LOCAL % {"check": "equivalence", "generation": "", "more": ""}).replace(
        "required: true", "required: false"), "a.yaml").config
    assert plain.checks.equivalence.required and plain.digest() == again.digest()
