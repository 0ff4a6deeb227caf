"""Run planned jobs: the reference cache, resume from a record log, and what stopped a run.

The :class:`Executor` turns a :class:`~gate.run.plan.Job` into an
:class:`~gate.run.results.Execution`.  In order, it takes the execution from:

1. the previous run's ``records.jsonl``, when resuming (same key, same fingerprint);
2. the reference cache, for reference jobs that do not depend on the draft;
3. the engine.

Every finished execution is appended to the record log at once, so an
interrupted run keeps everything but the batch in flight.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gate.engines.base import Engine, EngineFailure, GenerationSettings, Request, is_out_of_memory, safe_message
from gate.engines.clock import free_accelerator_memory
from gate.errors import ConfigError, Interrupted
from gate.inputs import fingerprint as fp
from gate.run.cache import ReferenceCache
from gate.run.plan import Job, PlannedBatch, PromptInfo, prompt_seed
from gate.run.records import Execution, Failure, JobKey, Phase, RecordLog, SequenceOutput

MAX_TIMEOUTS = 2  # after this many timed-out batches, an engine's remaining batches are recorded as not run


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Turn SIGTERM (what `timeout` and a cancelled CI job send) into :class:`Interrupted`."""

    def on_term(signum, frame):
        raise Interrupted("SIGTERM")

    try:
        old = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def reference_cache_key(context: dict, prompts, batch: PlannedBatch, repeat: int, settings: GenerationSettings,
                        seed: int) -> str:
    """The cache key of one reference batch (see :mod:`gate.run.cache`): ``context`` (the run's
    :func:`gate.run.runner.cache_context`), the batch's prompts, budgets and (sampling) per-request seeds, the
    settings.  ``specguard plan`` computes it too, to say which batches the cache already holds."""
    return fp.digest({
        **context,
        "prompts": [prompts[i].prompt_ids for i in batch.members],
        "max_new": [prompts[i].max_new_tokens for i in batch.members],
        "seeds": None if settings.greedy else [prompt_seed(seed, prompts[i].id, repeat) for i in batch.members],
        "settings": settings.to_dict(), "batch_size": batch.batch_size, "n_real": batch.n_real,
    })


class Executor:
    def __init__(self, prompts: list[PromptInfo], decode: Callable[[list[int]], str], log: RecordLog,
                 seed: int = 0, cache: ReferenceCache | None = None, cache_context: dict | None = None,
                 previous: dict[JobKey, Execution] | None = None, say: Callable[[str], None] = lambda m: None,
                 score: Callable[[tuple, list[int]], tuple[list[float], list[dict[int, float]]]] | None = None):
        """``score``: the reference server's scoring of a sampled continuation (``HttpEngine.score``), where the
        distribution test gets the target's distribution from it (``Config.distribution_scoring``): every sampled
        row is scored as its execution finishes, before it is logged."""
        self.prompts = prompts
        self.decode = decode
        self.log = log
        self.seed = seed
        self.cache = cache
        self.cache_context = cache_context or {}
        self.previous = dict(previous or {})
        self.records: list[Execution] = []
        self.reused: list[str] = []
        self.current: dict | None = None  # the job in flight, for "stopped at"
        self.say = say
        self.timeouts: dict[str, int] = {}
        self.score = score

    def requests(self, batch: PlannedBatch, repeat: int) -> list[Request]:
        return [Request(self.prompts[i].prompt_ids, self.prompts[i].max_new_tokens,
                        prompt_seed(self.seed, self.prompts[i].id, repeat), self.prompts[i].id,
                        self.prompts[i].messages) for i in batch.members]

    def cache_key(self, batch: PlannedBatch, repeat: int, settings: GenerationSettings) -> str:
        """Everything a reference generation depends on (see :mod:`gate.run.cache`); the draft is not part of it, and
        neither are the per-request seeds of a greedy generation (adding sampling to a config, which sets the run's
        seed, keeps its greedy generations cached)."""
        return reference_cache_key(self.cache_context, self.prompts, batch, repeat, settings, self.seed)

    def run(self, engine: Engine, job: Job, settings: GenerationSettings) -> Execution:
        b = job.batch
        key = JobKey(job.phase.value, engine.name, job.mode, b.batch_size, b.composition, b.index, job.repeat)
        if key in self.previous:
            rec = self.previous.pop(key)
            self.records.append(rec)
            return rec
        self.current = {"phase": job.phase.value, "engine": engine.name, "mode": job.mode,
                        "batch_size": b.batch_size, "composition": b.composition, "batch": b.index,
                        "repeat": job.repeat}
        if self.timeouts.get(engine.name, 0) >= MAX_TIMEOUTS:  # a hung engine does not get to hang every batch
            rec = self._failed(engine, job, settings, EngineFailure(
                "timeout", "Skipped", f"not run: {MAX_TIMEOUTS} earlier batches of {engine.name} timed out"), 0.0)
            self.log.append(rec)
            self.records.append(rec)
            self.current = None
            return rec
        cache_key = self.cache_key(b, job.repeat, settings) if (self.cache and job.cacheable) else None
        cached = self._from_cache(self.cache.get(cache_key), engine, job) if cache_key else None
        if cached is not None:
            rec = cached
            self.reused.append(key.label())
        else:
            rec = self._generate(engine, job, settings)
            if rec.failure is not None and rec.failure.kind == "timeout":
                self.timeouts[engine.name] = self.timeouts.get(engine.name, 0) + 1
            if cache_key and rec.failure is None:
                self.cache.put(cache_key, rec)
        if self.score is not None and job.phase in (Phase.SAMPLING, Phase.CONFIRMATION) and rec.failure is None:
            rec = self._scored(rec)
        self.log.append(rec)
        self.records.append(rec)
        self.current = None
        return rec

    def _scored(self, rec: Execution) -> Execution:
        """Each real row of a sampled execution with the served target's scores of its tokens (a row the server
        cannot score keeps none, and the distribution test says how many it lacks)."""
        prompts = {p.id: p.prompt_ids for p in self.prompts}
        rows = []
        for s in rec.sequences:
            if s.filler or not s.token_ids or s.served_logprobs is not None:
                rows.append(s)
                continue
            try:
                logprobs, top = self.score(prompts[s.prompt_id], list(s.token_ids))
            except EngineFailure as exc:
                self.say(f"the reference server could not score a sampled row of {rec.engine} ({exc.message})")
                rows.append(s)
                continue
            rows.append(s.model_copy(update={"served_logprobs": logprobs, "served_top": top}))
        return rec.model_copy(update={"sequences": rows})

    def _from_cache(self, cached: Execution | None, engine: Engine, job: Job) -> Execution | None:
        """A cached reference execution as this job's, or None (a miss).  The key is the batch's content (token
        ids, budgets, settings), never its prompts' names: the rows take this run's names, and an entry whose shape
        does not fit the batch (another size or another row count) is a miss, not a crash."""
        b = job.batch
        if cached is None or cached.failure is not None or cached.batch_size != b.batch_size \
                or len(cached.sequences) != len(b.members) or cached.n_real != b.n_real:
            return None
        names = [self.prompts[i].id for i in b.members]
        rows = [s.model_copy(update={"prompt_id": name, "filler": row >= b.n_real})
                for row, (name, s) in enumerate(zip(names, cached.sequences))]
        return cached.model_copy(update={"phase": job.phase, "engine": engine.name, "mode": job.mode,
                                         "composition": b.composition, "batch": b.index, "repeat": job.repeat,
                                         "slice": b.slice, "bucket": b.bucket, "prompts": names, "sequences": rows,
                                         "cached": True})

    def _generate(self, engine: Engine, job: Job, settings: GenerationSettings) -> Execution:
        b = job.batch
        requests = self.requests(b, job.repeat)
        started = time.perf_counter()
        try:
            result = engine.generate(requests, settings)
        except (KeyboardInterrupt, Interrupted, ConfigError):  # a config the stack cannot serve: stop now
            raise
        except BaseException as exc:  # engine code, plug-ins included, may raise anything, SystemExit too
            return self._failed(engine, job, settings, exc, time.perf_counter() - started)
        return Execution(
            phase=job.phase, engine=engine.name, mode=job.mode, batch_size=b.batch_size,
            composition=b.composition, batch=b.index, repeat=job.repeat, slice=b.slice, bucket=b.bucket,
            temperature=settings.temperature, prompts=[self.prompts[i].id for i in b.members], n_real=b.n_real,
            wall_s=result.wall_s, realign_s=result.realign_s, num_target_forwards=result.num_target_forwards,
            num_draft_forwards=result.num_draft_forwards, peak_memory_bytes=result.peak_memory_bytes,
            batch_counters=result.counters,
            sequences=[
                SequenceOutput(prompt_id=self.prompts[i].id, filler=row >= b.n_real, seed=req.seed,
                               text=s.text if s.text is not None else self.decode(s.token_ids),
                               token_ids=list(s.token_ids), stop_reason=s.stop_reason, wall_s=s.wall_s,
                               ttft_s=s.ttft_s, per_token_s=s.per_token_s, counters=s.counters,
                               top_logprobs=s.top_logprobs, text_only=s.text_only, token_texts=s.token_texts,
                               top_text_logprobs=s.top_text_logprobs, precision=s.precision)
                for row, (i, req, s) in enumerate(zip(b.members, requests, result.sequences))
            ],
        )

    def _failed(self, engine: Engine, job: Job, settings: GenerationSettings, exc: BaseException,
                wall: float) -> Execution:
        """A failed execution: which engine, batch size and prompts, and the exception's type and message."""
        b = job.batch
        if isinstance(exc, EngineFailure) and exc.kind == "out_of_memory":
            kind, type_ = exc.kind, exc.type
            message = f"out of memory at batch size {b.batch_size}: {' '.join(exc.message.split())[:300]}"
        elif isinstance(exc, EngineFailure):
            kind, type_, message = exc.kind, exc.type, " ".join(exc.message.split())[:500]
        elif is_out_of_memory(exc):
            kind, type_ = "out_of_memory", type(exc).__name__
            message = f"out of memory at batch size {b.batch_size}: {safe_message(exc, 300)}"
            free_accelerator_memory()
        else:
            kind, type_ = "crash", type(exc).__name__
            message = safe_message(exc)
        prompts = [self.prompts[i].id for i in b.members]
        self.say(f"{engine.name} failed at batch size {b.batch_size} ({kind}) on {len(prompts)} prompt(s): "
                 f"{type_}: {message}")
        return Execution(
            phase=job.phase, engine=engine.name, mode=job.mode, batch_size=b.batch_size, composition=b.composition,
            batch=b.index, repeat=job.repeat, slice=b.slice, bucket=b.bucket, temperature=settings.temperature,
            prompts=prompts, n_real=b.n_real, wall_s=wall, sequences=[],
            failure=Failure(kind=kind, type=type_, message=message))

    def warm_up(self, engine: Engine, batch: PlannedBatch, settings: GenerationSettings, times: int) -> None:
        """Unrecorded runs before timing (first calls pay for allocation and kernel selection)."""
        for _ in range(times):
            try:
                engine.generate([Request(self.prompts[i].prompt_ids, self.prompts[i].max_new_tokens)
                                 for i in batch.members], settings)
            except (KeyboardInterrupt, Interrupted):
                raise
            except BaseException:  # a failing engine fails its recorded runs, not the warm-up
                return


__all__ = ["Executor", "Interrupted", "Phase", "sigterm_interrupts"]
