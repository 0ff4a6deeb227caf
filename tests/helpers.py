"""Test helpers: the demo config, and engines with scripted outputs and synthetic timings.

The fake engines stand in only where the point of a test is the bookkeeping
around engines (incremental writes, resume, adaptive repeats, caching), not
the engines themselves, which are tested on the real demo pair.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal

from gate.engines.base import BatchResult, Capabilities, GenerationSettings, Request, SequenceResult, SpecCounters
from gate.inputs.config import LoadedConfig, parse_config

# torch threads for the tests' own gates, in process or not: one under `make test` (a pytest-xdist worker per core;
# more threads per worker oversubscribe the cores), else up to two.
THREADS = "1" if os.environ.get("PYTEST_XDIST_WORKER") else str(min(2, os.cpu_count() or 1))

DEMO_YAML = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: %(dtype)s}
  draft: {path: "specguard:demo/draft", dtype: %(dtype)s}
  device: cpu
"""


# --- signals -------------------------------------------------------------------------------------------------
# A background job of a non-interactive shell (`bash -c 'make test > log 2>&1 &'`, a scheduler) starts with SIGINT
# and SIGQUIT ignored (POSIX), and Python keeps an inherited SIG_IGN: Ctrl-C then neither raises in the tests nor
# reaches the processes they start.  A test that sends or expects a signal sets the disposition it needs here,
# in its own process and in each it starts (each runs with SIGINT ignored from its start: conftest.py).


def default_signals() -> None:
    """``preexec_fn`` of a process a signal test starts: SIGINT and SIGTERM at their defaults, as an interactive
    terminal or a CI runner gives them, whatever the suite was started with."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def sigint_raises():
    """Inside: SIGINT raises KeyboardInterrupt in this (main) thread, as Python's own default handler does; the
    disposition the suite was started with comes back afterwards."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


# A slow property test (a process per example) reports its first failing example as found: shrinking it would rerun
# the slow thing for minutes (a SIGINT test shrank for five).  ``settings(phases=NO_SHRINK, ...)``.
def _no_shrink():
    from hypothesis import Phase

    return (Phase.explicit, Phase.reuse, Phase.generate)


NO_SHRINK = _no_shrink()


def demo_config(dtype: str = "float32", extra: str = "") -> LoadedConfig:
    return parse_config(DEMO_YAML % {"dtype": dtype} + extra, "tests/demo.yaml")


class FakeEngine:
    """Emits ``(last prompt token + i) % 50 + 10`` and reports a scripted wall time.

    It cannot be stepped, so runs with it skip calibration (which times the real pair)."""

    def __init__(self, name: str, speculative: bool, wall=lambda n: 1.0, fail_after: int | None = None,
                 exc: type[BaseException] = KeyboardInterrupt, capabilities: Capabilities | None = None):
        self.name = name
        self.speculative = speculative
        self.capabilities = capabilities or Capabilities(counters="engine" if speculative else "none")
        self.wall = wall
        self.calls = 0
        self.fail_after = fail_after
        self.exc = exc

    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise self.exc()
        self.calls += 1
        seqs = []
        for r in requests:
            toks = [(r.prompt_ids[-1] + i) % 50 + 10 for i in range(r.max_new_tokens)]
            c = None
            if self.speculative:
                c = SpecCounters(num_drafts=4, num_draft_tokens=16, num_accepted_tokens=8,
                                 num_accepted_tokens_per_pos=[4, 2, 1, 1], num_draft_tokens_per_pos=[4, 4, 4, 4],
                                 num_target_forwards=4, num_draft_forwards=16, num_emitted_tokens=len(toks))
            seqs.append(SequenceResult(toks, "max_tokens", wall_s=0.5, ttft_s=0.1, per_token_s=0.01, counters=c))
        return BatchResult(seqs, wall_s=self.wall(self.calls), realign_s=0.001, num_target_forwards=4,
                           peak_memory_bytes=1 << 20)


def noisy(ratio_median: float, spread: float, seed: int = 0):
    """Wall times whose ratio to 1.0 has the given median and multiplicative spread."""
    rng = random.Random(seed)
    return lambda n: 1.0 / (ratio_median * (1 + rng.uniform(-spread, spread)))


def constant(value: float):
    return lambda n: value



def results_doc(prompts: list[tuple], outputs: dict, max_new: int, eos=(), slices=("t", "s")):
    """A minimal, valid results document: {(engine, batch_size[, composition]): [(token ids, stop reason)]} as
    greedy outputs of one batch each, the prompts alternating between two slices."""
    from gate.run.results import Results

    pids = [f"p{i}" for i in range(len(prompts))]
    execs = []
    for key, outs in outputs.items():
        engine, bs, composition = (*key, 0)[:3]
        execs.append({
            "phase": "outputs", "engine": engine, "mode": "greedy", "batch_size": bs, "batch": 0,
            "composition": composition,
            "prompts": pids, "n_real": len(pids), "wall_s": 1.0,
            "sequences": [{"prompt_id": pid, "token_ids": list(o), "stop_reason": stop, "wall_s": 1.0}
                          for pid, (o, stop) in zip(pids, outs)]})
    return Results.model_validate({
        "schema": "specguard.results/2", "status": "complete",
        "fingerprint": {"hardware": {}, "hardware_key": "h", "libraries": {}, "models": {}, "config": "c",
                        "suite": {"name": "s", "fingerprint": "f", "prompts": len(prompts), "slices": list(slices)}},
        "settings": {"num_draft_tokens": 4, "batch_sizes": sorted({k[1] for k in outputs}),
                     "max_new_tokens": max_new, "eos_token_ids": list(eos), "greedy": True,
                     "engines": sorted({k[0] for k in outputs if k[0] != "reference"}), "engine_version": "test"},
        "prompts": [{"id": pid, "slice": slices[i % 2], "bucket": "0-127", "n_prompt_tokens": len(p),
                     "max_new_tokens": max_new, "prompt_ids": list(p)}
                    for i, (pid, p) in enumerate(zip(pids, prompts))],
        "executions": execs})


def replay_here(folder, *args: str) -> str:
    """A case's replay.py run in this process (runpy), for the counterfactual after the case has replayed in a
    process of its own, as a developer runs it (tests/test_repro.py, tests/test_toy_engine.py): the script is the
    same, and a second interpreter would cost 5 to 9 CPU-s of imports.  A plug-in module the case imports is imported
    afresh, and whatever this process held under its name is put back, as are sys.path, sys.argv and torch's
    threads.  Returns replay.py's last line; its exit code must match it (1: reproduced)."""
    import io
    import json
    import runpy
    import sys
    from pathlib import Path

    import pytest
    import torch

    folder = Path(folder)
    case = json.loads((folder / "case.json").read_text())
    mod = (case["engine"].get("callable") or "").split(":")[0]

    def theirs() -> list[str]:
        return [k for k in sys.modules if mod and (k == mod or k.startswith(mod + "."))]

    held = {k: sys.modules.pop(k) for k in theirs()}
    path, argv, threads = list(sys.path), sys.argv, torch.get_num_threads()
    out = io.StringIO()
    try:
        sys.argv = ["replay.py", *args]
        with contextlib.chdir(folder), contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
            runpy.run_path("replay.py", run_name="__main__")
    finally:
        for k in theirs():
            del sys.modules[k]
        sys.modules.update(held)
        sys.path[:], sys.argv = path, argv
        torch.set_num_threads(threads)
    last = out.getvalue().strip().splitlines()[-1]
    assert ended.value.code == (1 if last.startswith("reproduced") else 0), out.getvalue()[-2000:]
    return last
