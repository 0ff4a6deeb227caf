"""The serving stack's identity (issue 40, item 6): a vLLM upgrade is a change the comment names.  The server's
version (``/version``) and launch line are recorded in results and in the baseline; the judge lists a version
change among what changed, and a launch line that differs only in its port (paired mode moves the base's server
to a free one) is no change."""

from __future__ import annotations

import synthetic

from gate.run.results import Results

LAUNCH = ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/llama",
          "--port", "8000"]


def with_stack(results: Results, version: str, launch: list[str]) -> Results:
    data = results.model_dump(mode="json", by_alias=True)
    data["fingerprint"]["stacks"] = {"speculative": {"version": version, "launch": launch}}
    return Results.model_validate(data)


def test_a_server_upgrade_is_named_in_what_changed_and_a_moved_port_is_not():
    cfg = synthetic.config()
    base = with_stack(synthetic.run(), "vllm 0.32.0", LAUNCH)
    baseline = synthetic.baseline_of(base, synthetic.checks_for(base), cfg)
    assert baseline.fingerprint.stacks["speculative"].launch == [
        "…/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "…/llama", "--port", "{port}"]
    head = with_stack(synthetic.run(), "vllm 0.33.0", LAUNCH[:-1] + ["43121"])
    verdict = synthetic.judge(head, synthetic.checks_for(head), cfg, baseline=baseline)
    rows = [(c.what, c.base, c.head) for c in verdict.changed]
    assert ("speculative server version", "vllm 0.32.0", "vllm 0.33.0") in rows, rows
    assert not any("launch line" in what for what, _, _ in rows), "only the port moved"
    flags = with_stack(synthetic.run(), "vllm 0.32.0", LAUNCH + ["--gpu-memory-utilization", "0.45"])
    rows = [c.what for c in synthetic.judge(flags, synthetic.checks_for(flags), cfg, baseline=baseline).changed]
    assert rows == ["speculative server launch line"], rows
