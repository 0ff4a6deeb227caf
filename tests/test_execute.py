"""The Executor's failure kinds, in process and without a model: whatever an engine raises at a batch is a
recorded finding naming the engine, batch size and prompts, and the run goes on.

tests/test_reliability.py keeps one subprocess gate per fault class (an exception, a hang, a process that
exits); the kinds themselves are decided here.
"""

from __future__ import annotations

import sys

import pytest

from gate.engines.base import BatchResult, EngineFailure, GenerationSettings, SequenceResult
from gate.errors import ConfigError, Interrupted
from gate.run.execute import MAX_TIMEOUTS, Executor
from gate.run.plan import Job, PlannedBatch, PromptInfo
from gate.run.records import Phase

PROMPTS = [PromptInfo(i, f"p{i}", "prose", "short", (1, 2, 3 + i), 4) for i in range(4)]


class Scripted:
    """An engine that raises `exc` at batch sizes above one, and answers at batch size one."""

    speculative = True

    def __init__(self, exc: BaseException | None):
        self.name, self.exc, self.calls = "inhouse", exc, 0

    def generate(self, requests, settings):
        self.calls += 1
        if self.exc is not None and len(requests) > 1:
            raise self.exc
        return BatchResult(sequences=[SequenceResult([5] * r.max_new_tokens, "max_tokens", 0.01) for r in requests],
                           wall_s=0.01)


class Log(list):
    """The record log's one call: every finished execution is handed to it at once."""

    def append(self, record) -> None:
        super().append(record.model_dump(mode="json"))


def _executor(said: list[str]) -> tuple[Executor, Log]:
    log = Log()
    return Executor(PROMPTS, lambda ids: "x" * len(ids), log, say=said.append), log


def _job(batch_size: int, index: int = 0) -> Job:
    members = tuple(range(index * batch_size, index * batch_size + batch_size))
    return Job(Phase.OUTPUTS, "inhouse", "greedy", PlannedBatch(batch_size, index, members, batch_size))


def _run(exc: BaseException):
    said: list[str] = []
    ex, log = _executor(said)
    engine = Scripted(exc)
    good = ex.run(engine, _job(1), GenerationSettings())
    bad = ex.run(engine, _job(2), GenerationSettings())
    return good, bad, said, log


class TorchLikeOOM(RuntimeError):
    pass


@pytest.mark.parametrize("exc,kind,type_,message", [
    (RuntimeError("kv cache index 17 out of range"), "crash", "RuntimeError", "kv cache index 17 out of range"),
    (SystemExit(0), "crash", "SystemExit", "0"),
    (MemoryError(), "out_of_memory", "MemoryError", "out of memory at batch size 2: MemoryError()"),
    (TorchLikeOOM("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: you tried "
                  "to allocate 400000000000000 bytes"), "out_of_memory", "TorchLikeOOM",
     "out of memory at batch size 2: [enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator"),
    (EngineFailure("out_of_memory", "OutOfMemoryError", "CUDA out of memory.\n Tried to allocate 2 GiB"),
     "out_of_memory", "OutOfMemoryError", "out of memory at batch size 2: CUDA out of memory. Tried to allocate"),
    (EngineFailure("crash", "ProcessExit", "the plug-in worker exited with code 0"), "crash", "ProcessExit",
     "the plug-in worker exited with code 0"),
])
def test_whatever_an_engine_raises_is_a_recorded_failure_and_the_run_goes_on(exc, kind, type_, message):
    good, bad, said, logged = _run(exc)
    assert good.failure is None and len(good.sequences) == 1
    assert (bad.failure.kind, bad.failure.type) == (kind, type_)
    assert bad.failure.message.startswith(message), bad.failure.message
    assert bad.prompts == ["p0", "p1"] and bad.sequences == [] and bad.batch_size == 2
    assert [r["failure"] for r in logged] == [None, bad.failure.model_dump(mode="json")], \
        "every finished execution is logged at once, the failed one included"
    assert said and said[-1].startswith(f"inhouse failed at batch size 2 ({kind}) on 2 prompt(s): {type_}: ")


def test_an_unprintable_exception_is_still_recorded():
    class Unprintable(Exception):
        def __str__(self):
            raise ValueError("no")

    _, bad, _, _ = _run(Unprintable())
    assert bad.failure.kind == "crash" and bad.failure.type == "Unprintable" and bad.failure.message


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), Interrupted("SIGTERM"), ConfigError("engines[0]: no")])
def test_an_interrupt_or_a_config_error_stops_the_run_instead_of_being_recorded(exc):
    ex, log = _executor([])
    with pytest.raises(type(exc)):
        ex.run(Scripted(exc), _job(2), GenerationSettings())
    assert ex.records == [] == log and ex.current is not None, "the batch in flight is what stopped the run"
    assert ex.current["batch_size"] == 2


def test_after_two_timeouts_an_engines_other_batches_are_not_run():
    ex, log = _executor([])
    engine = Scripted(EngineFailure("timeout", "Timeout", "timed out after 2 s"))
    out = [ex.run(engine, _job(2, i), GenerationSettings()) for i in range(2)]
    assert [r.failure.kind for r in out] == ["timeout"] * MAX_TIMEOUTS == ["timeout", "timeout"]
    assert engine.calls == 2
    skipped = ex.run(engine, _job(1, 3), GenerationSettings())
    assert engine.calls == 2, "not called again"
    assert skipped.failure.kind == "timeout" and skipped.failure.type == "Skipped"
    assert skipped.failure.message == "not run: 2 earlier batches of inhouse timed out"
    assert len(log) == 3, "the batch not run is logged as such"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_a_greedy_cache_key_ignores_the_runs_seed_and_a_sampled_one_keeps_it():
    """Bug: adding sampling to a config sets the run's seed, and every greedy reference generation then missed the
    cache (the per-request seeds were part of its key, though argmax uses none)."""
    from gate.run.cache import ReferenceCache

    batch = PlannedBatch(2, 0, (0, 1), 2)
    keys = {}
    for seed in (0, 1):
        ex = Executor(PROMPTS, lambda ids: "", Log(), seed=seed, cache=ReferenceCache("unused"))
        keys[seed] = (ex.cache_key(batch, 0, GenerationSettings(0.0)), ex.cache_key(batch, 0, GenerationSettings(1.0)))
    assert keys[0][0] == keys[1][0], "greedy: the seed plays no part"
    assert keys[0][1] != keys[1][1], "sampled: another seed is another generation"
