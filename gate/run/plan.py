"""The plan of a run: which batches each engine runs, in which phase, and what is skipped and why.

:func:`plan` is pure: config, prompts and engine capabilities in, a :class:`Plan`
out, with no model and no clock.  The executor (:mod:`gate.run.execute`) runs its
jobs; the timing scheduler (:mod:`gate.run.schedule`) decides how often each timing
cell repeats.  Sharding filters a plan; merging unions executions by
:class:`~gate.run.records.JobKey`.

Three ways to cut the suite into batches of exactly the batch size:

* :func:`plan_batches_mixed` (equivalence and sampling): batches drawn from
  the whole suite under a seeded shuffle, so slices and prompt lengths mix as
  in production traffic.  The last batch is filled with *other* prompts of the
  suite, never with copies of a row already in it; copies only when the suite
  is smaller than the batch, and then the batch says so.  Every prompt appears
  at least once per composition.  At batch sizes above 1,
  ``batching.compositions`` shuffles each run, so every prompt meets different
  batch-mates (batch-composition invariance is measured from them).
* :func:`plan_batches_stress` (``suite.stress_mix``): the longest prompts
  batched with the shortest, the worst case for padding and position bookkeeping.
* :func:`plan_batches_per_cell` (timing): each batch holds one *cell* (slice x
  context bucket), a short cell filled up by repeating its own prompts.  Right
  for speedup, where a cell's own speedup is the point; wrong for equivalence,
  because a copy of a row adds no raggedness and a long prompt never meets a
  short one (the planner before issue 14; the self-test shows what it misses).
"""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from gate.engines.base import Capabilities
from gate.inputs.config import REFERENCE, Config
from gate.run.records import Phase
from gate.run.results import BatchPlanRecord, PromptRecord, Skip

BatchKind = Literal["mixed", "stress", "cell"]


@dataclass(frozen=True)
class PromptInfo:
    index: int
    id: str
    slice: str
    bucket: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    messages: tuple[tuple[str, str], ...] | None = None  # a chat row's, as rendered to prompt_ids

    def record(self) -> PromptRecord:
        return PromptRecord(id=self.id, slice=self.slice, bucket=self.bucket, n_prompt_tokens=len(self.prompt_ids),
                            max_new_tokens=self.max_new_tokens, prompt_ids=list(self.prompt_ids))


@dataclass(frozen=True)
class PlannedBatch:
    batch_size: int
    index: int
    members: tuple[int, ...]  # prompt indices, exactly batch_size of them
    n_real: int  # the first n_real rows are the batch's own; the rest repeat prompts already planned
    kind: BatchKind = "cell"
    composition: int = 0
    slice: str | None = None  # per-cell batches only
    bucket: str | None = None

    @property
    def cell(self) -> tuple[str | None, str | None]:
        return (self.slice, self.bucket)

    @property
    def duplicates(self) -> bool:
        """A prompt twice in one batch (only when the suite is smaller than the batch, for mixed batches)."""
        return len(set(self.members)) < len(self.members)

    def record(self, prompts: list[PromptInfo]) -> BatchPlanRecord:
        lengths = [len(prompts[i].prompt_ids) for i in self.members]
        return BatchPlanRecord(batch_size=self.batch_size, composition=self.composition, batch=self.index,
                               kind=self.kind, prompts=[prompts[i].id for i in self.members], n_real=self.n_real,
                               min_prompt_tokens=min(lengths), max_prompt_tokens=max(lengths),
                               duplicates=self.duplicates)


def bucket_name(n_tokens: int, edges: list[int]) -> str:
    lo = 0
    for e in edges:
        if n_tokens < e:
            return f"{lo}-{e - 1}"
        lo = e
    return f"{lo}+"


def plan_batches_per_cell(prompts: list[PromptInfo], batch_size: int) -> list[PlannedBatch]:
    """Cut the suite into batches of exactly ``batch_size``, one cell per batch, filled with the cell's repeats."""
    cells: OrderedDict[tuple[str, str], list[int]] = OrderedDict()
    for p in prompts:
        cells.setdefault((p.slice, p.bucket), []).append(p.index)
    out = []
    for (slc, bucket), idx in cells.items():
        for start in range(0, len(idx), batch_size):
            real = idx[start:start + batch_size]
            fill = [idx[i % len(idx)] for i in range(batch_size - len(real))]
            out.append(PlannedBatch(batch_size, len(out), tuple(real + fill), len(real), "cell", 0, slc, bucket))
    return out


def _cut(order: list[int], batch_size: int, composition: int, kind: BatchKind) -> list[PlannedBatch]:
    """Consecutive batches of ``order``; the last one filled with prompts not already in it."""
    out = []
    for start in range(0, len(order), batch_size):
        real = order[start:start + batch_size]
        fill = [i for i in order if i not in real][: batch_size - len(real)]
        while len(real) + len(fill) < batch_size:  # the suite is smaller than the batch: copies are unavoidable
            fill.append(order[len(fill) % len(order)])
        out.append(PlannedBatch(batch_size, len(out), tuple(real + fill), len(real), kind, composition))
    return out


def plan_batches_mixed(prompts: list[PromptInfo], batch_size: int, composition: int = 0) -> list[PlannedBatch]:
    """Batches drawn from the whole suite, shuffled by a seed of (batch size, composition) only.

    The seed depends on nothing a PR changes (not the draft), so the reference cache serves
    the same batches again.  Batch size 1 keeps the suite order: composition cannot matter there.
    """
    order = [p.index for p in prompts]
    if batch_size > 1:
        random.Random(f"specguard-composition:{batch_size}:{composition}").shuffle(order)
    return _cut(order, batch_size, composition, "mixed")


def plan_batches_stress(prompts: list[PromptInfo], batch_size: int, composition: int) -> list[PlannedBatch]:
    """The longest prompts batched with the shortest: longest, shortest, 2nd longest, 2nd shortest, ..."""
    by_len = [p.index for p in sorted(prompts, key=lambda p: (len(p.prompt_ids), p.index))]
    order, lo, hi = [], 0, len(by_len) - 1
    while lo <= hi:
        order.append(by_len[hi])
        if lo < hi:
            order.append(by_len[lo])
        lo, hi = lo + 1, hi - 1
    return _cut(order, batch_size, composition, "stress")


def equivalence_batches(prompts: list[PromptInfo], batch_size: int, compositions: int,
                        stress_mix: bool) -> list[PlannedBatch]:
    """Every composition of the outputs phase at one batch size."""
    if batch_size == 1:
        return plan_batches_mixed(prompts, 1, 0)
    out = [b for c in range(compositions) for b in plan_batches_mixed(prompts, batch_size, c)]
    if stress_mix:
        out += plan_batches_stress(prompts, batch_size, compositions)
    return out


def spread_subset(batches: list[PlannedBatch], cap: int | None) -> list[PlannedBatch]:
    """At most ``cap`` batches, evenly spread over the list (timing needs fewer tokens than correctness)."""
    if not cap or len(batches) <= cap:
        return list(batches)
    if cap == 1:
        return [batches[0]]
    return [batches[round(i * (len(batches) - 1) / (cap - 1))] for i in range(cap)]


def prompt_seed(base: int, prompt_id: str, pass_index: int) -> int:
    h = hashlib.sha256(f"{base}:{prompt_id}:{pass_index}".encode()).digest()
    return int.from_bytes(h[:6], "little")


# --- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineInfo:
    """What the planner needs to know of an engine."""

    name: str
    capabilities: Capabilities


@dataclass(frozen=True)
class Job:
    """One batch for one engine: the executor runs it, or serves it from the cache or a resumed log."""

    phase: Phase
    engine: str
    mode: Literal["greedy", "sampling"]
    batch: PlannedBatch
    repeat: int = 0
    cacheable: bool = False  # reference generations that do not depend on the draft


@dataclass(frozen=True)
class TimingCell:
    """One cell at one load level: its batches are timed reference vs engines, interleaved."""

    batch_size: int
    slice: str
    bucket: str
    batches: tuple[PlannedBatch, ...]

    @property
    def label(self) -> str:
        return f"{self.slice}|{self.bucket}"


@dataclass(frozen=True)
class TimingLevel:
    batch_size: int
    engines: tuple[str, ...]  # engines under test at this load (the reference always runs)
    cells: tuple[TimingCell, ...]


@dataclass(frozen=True)
class SamplingGroup:
    """Passes over ``batches`` with fresh seeds until ``need`` sampled tokens are collected."""

    engine: str
    batch_size: int
    batches: tuple[PlannedBatch, ...]
    need: int
    cacheable: bool = False


@dataclass
class Plan:
    calibrate: list[int] = field(default_factory=list)  # batch sizes to calibrate at (empty: none)
    calibrated_engines: list[str] = field(default_factory=list)
    outputs: list[Job] = field(default_factory=list)
    timing: list[TimingLevel] = field(default_factory=list)
    canonical: list[Job] = field(default_factory=list)
    sampling: list[SamplingGroup] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    batches: list[PlannedBatch] = field(default_factory=list)  # every planned equivalence batch

    def jobs(self) -> list[Job]:
        return [*self.outputs, *self.canonical]

    @property
    def empty(self) -> bool:
        """Nothing to run (a shard whose share of the units is none)."""
        return not (self.calibrate or self.outputs or self.timing or self.canonical or self.sampling)


def plan(config: Config, prompts: list[PromptInfo], engines: list[EngineInfo], timed: bool = True,
         repeat_runs: bool = True, timing_only: list[EngineInfo] | None = None,
         own_references: list[EngineInfo] | None = None) -> Plan:
    """Which batches, which phases, which engines; every skip with its reason.

    Sampling that no distribution test can read (``Config.unmeasurable``: a served target's scores at T != 1 or
    truncated, a stack that cannot score) is not planned: each of its groups is a skip with that reason.

    ``timed=False`` (the self-test, or ``checks.speedup.enabled: false``) plans no calibration and no timing, and, with
    ``repeat_runs``, a second outputs pass at the repeat batch size for run-to-run
    repeatability (timed runs get that from the timing repeats).  ``timing_only``
    engines (paired mode's base) run in the timing phase only.  ``own_references`` (plug-ins' own plain decoding,
    ``<engine>.reference``) run the greedy outputs on the engines' batches, which measure their stack's own
    numerical noise (:mod:`gate.checks.stack_noise`), and the timing phase, which times their engines against them.
    """
    out = Plan()
    sizes = config.batching.batch_sizes
    gen = config.generation
    timed = timed and config.checks.speedup.enabled  # off: as the self-test, outputs repeated instead of timed

    def able(batch_size: int, mode: str) -> list[str]:
        ok = []
        for e in engines:
            reason = e.capabilities.refuses(batch_size)
            if reason is None:
                ok.append(e.name)
            elif not any(s.engine == e.name and s.batch_size == batch_size and s.mode == mode for s in out.skips):
                out.skips.append(Skip(engine=e.name, batch_size=batch_size, mode=mode, reason=f"{e.name} {reason}"))
        return ok

    steppable = [e.name for e in engines if e.capabilities.steppable]
    if timed and gen.greedy and steppable:  # calibration times the loaded pair: only they run its steps
        out.calibrate = list(sizes)
        out.calibrated_engines = steppable

    if gen.greedy:
        repeat_bs = config.repeat_batch_size
        second = repeat_runs and not timed
        for b in sizes:
            names = able(b, "greedy")
            batches = equivalence_batches(prompts, b, config.batching.compositions, config.suite.stress_mix)
            out.batches += batches
            names += [e.name for e in own_references or [] if e.capabilities.refuses(b) is None]
            for pb in batches:
                # The run-to-run repeat reruns the first composition's batches unchanged.
                for r in range(2 if (second and b == repeat_bs and pb.composition == 0) else 1):
                    out.outputs.append(Job(Phase.OUTPUTS, REFERENCE, "greedy", pb, r, cacheable=r == 0))
                    out.outputs += [Job(Phase.OUTPUTS, n, "greedy", pb, r) for n in names]
        if timed:
            cap = config.checks.speedup.max_batches_per_cell
            for b in sizes:
                cells: OrderedDict[tuple[str, str], list[PlannedBatch]] = OrderedDict()
                for pb in plan_batches_per_cell(prompts, b):
                    cells.setdefault(pb.cell, []).append(pb)
                names = able(b, "greedy") + [e.name for e in [*(timing_only or []), *(own_references or [])]
                                             if e.capabilities.refuses(b) is None]
                out.timing.append(TimingLevel(b, tuple(names), tuple(
                    TimingCell(b, slc, bucket, tuple(spread_subset(members, cap)))
                    for (slc, bucket), members in cells.items())))
        if 1 not in sizes:
            out.canonical = [Job(Phase.CANONICAL, REFERENCE, "greedy", pb, 0, cacheable=True)
                             for pb in plan_batches_mixed(prompts, 1)]

    unreadable = config.unmeasurable("distribution") if gen.sampling is not None else None
    if unreadable is not None:  # sampled tokens no test reads are not generated: each group skipped, with why
        sample_sizes = gen.sampling.batch_sizes or sizes
        for b in sample_sizes:
            names = ([REFERENCE] if b == sample_sizes[0] else []) + [e.name for e in engines]
            out.skips += [Skip(engine=n, batch_size=b, mode="sampling", reason=f"not sampled: {unreadable}")
                          for n in names]
    elif gen.sampling is not None:
        need = config.checks.distribution.num_samples
        sample_sizes = gen.sampling.batch_sizes or sizes
        for b in sample_sizes:
            batches = tuple(plan_batches_mixed(prompts, b))
            # The plain sampler is the control; with per-request seeds its output does not depend
            # on batch composition, so one batch size is enough for it.
            if b == sample_sizes[0]:
                out.sampling.append(SamplingGroup(REFERENCE, b, batches, need, cacheable=True))
            out.sampling += [SamplingGroup(n, b, batches, need) for n in able(b, "sampling")]
    return out


# --- sharding ----------------------------------------------------------------------------------------


def _bucket(parts: tuple, n: int) -> int:
    return int(hashlib.sha256(repr(parts).encode()).hexdigest(), 16) % n


def shard(p: Plan, index: int, count: int) -> Plan:
    """The part of a plan shard ``index`` of ``count`` runs; the shards together run it all, once.

    An equivalence batch goes to one shard with every engine that runs it (the pair compares there); a
    timing cell stays whole (its repeats are interleaved and adaptive); a sampling group stays whole;
    calibration runs on shard 0.
    """
    if count == 1:
        return p
    mine = lambda *parts: _bucket(parts, count) == index  # noqa: E731
    out = Plan(calibrate=p.calibrate if index == 0 else [],
               calibrated_engines=p.calibrated_engines if index == 0 else [],
               skips=list(p.skips))
    out.outputs = [j for j in p.outputs if mine("outputs", j.batch.batch_size, j.batch.composition, j.batch.index)]
    out.batches = [b for b in p.batches if mine("outputs", b.batch_size, b.composition, b.index)]
    out.canonical = [j for j in p.canonical if mine("canonical", j.batch.index)]
    out.timing = [TimingLevel(lvl.batch_size, lvl.engines,
                              tuple(c for c in lvl.cells if mine("timing", c.batch_size, c.slice, c.bucket)))
                  for lvl in p.timing]
    out.timing = [lvl for lvl in out.timing if lvl.cells]
    out.sampling = [g for g in p.sampling if mine("sampling", g.engine, g.batch_size)]
    return out
