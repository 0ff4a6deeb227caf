"""``specguard run``: plan, execute and time, writing results as it goes.

The run is three parts with one job each:

* :func:`gate.run.plan.plan` decides which batches each engine runs in which phase,
  and records every skip with its reason (pure; no model);
* :class:`gate.run.execute.Executor` runs a job, or takes it from the resumed log or
  the reference cache, and appends it to ``records.jsonl``;
* :class:`gate.run.schedule.TimingScheduler` decides how often each timing cell repeats.

Phases, in order:

0. **anchor**: the in-process reference checked against ``transformers``' ``generate()`` on a
   few suite prompts (:mod:`gate.run.anchor`); a confident difference stops the run with exit 2,
   before any verdict.  Cached, keyed without the draft;
1. **calibration** of the loaded pair (:mod:`gate.run.calibrate`), for engines that run its steps;
2. **outputs** (greedy): every engine on the whole suite at every batch size, the
   equivalence data, in batches that mix slices and prompt lengths as traffic does,
   under ``batching.compositions`` shuffles (:mod:`gate.run.plan`).  Reference
   executions come from the cache when nothing they depend on changed;
3. **timing** (greedy): per load level, a spread subset of each cell, reference and
   engines interleaved, with adaptive repeats.  Never cached: an honest paired
   timing needs the reference measured now, beside the engine;
4. **canonical**: the reference at batch size 1, if 1 is not a configured size;
5. **sampling**: passes with fresh per-prompt seeds until each engine (and the
   reference, the control) has ``checks.distribution.num_samples`` tokens.

After the checks, ``specguard gate`` may ask for one more (:meth:`Runner.confirm`): a **confirmation** pass of
the sampling groups whose distribution test landed between its floor and alpha (:mod:`gate.checks.confirmation`),
with new seeds, appended to the same log and results.

A run can be interrupted (Ctrl-C, SIGTERM) and resumed with ``--resume``, which
refuses a log from a different setup (suite, config, models, libraries, hardware).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gate.engines import ENGINE_VERSION, Engine, GenerationSettings
from gate.engines.base import served
from gate.engines.paired import PairedBase
from gate.errors import Problem, ResumeError, RunInterrupted, SuiteError
from gate.inputs import fingerprint as fp
from gate.inputs.config import REFERENCE, LoadedConfig
from gate.inputs.models import ModelPair
from gate.inputs.suite import Suite
from gate.io.files import atomic_write_json
from gate.io.rundir import RECORDS, RESULTS
from gate.run import load
from gate.run.anchor import Anchor
from gate.run.budgeted import budget_record, budgeted_phases
from gate.run.cache import ReferenceCache
from gate.run.calibrate import calibrate
from gate.run.execute import Executor, Interrupted, sigterm_interrupts
from gate.run.isolation import Neighbours
from gate.run.phases import Phases
from gate.run.plan import EngineInfo, Job, Plan, PlannedBatch, PromptInfo, bucket_name, plan
from gate.run.plan import shard as shard_plan
from gate.run.progress import Lines
from gate.run.records import Execution, Phase, RecordLog, TrafficReplay
from gate.run.results import (
    SCHEMA,
    AnchorRecord,
    Fingerprint,
    ModelFingerprint,
    NeighbourProbe,
    PairedRun,
    Results,
    RunHeader,
    Settings,
    Skip,
    StackIdentity,
    StoppedAt,
    SuiteFingerprint,
    read_log,
)
from gate.run.schedule import TimingScheduler

if TYPE_CHECKING:
    from gate.run.budget import Budget

MAX_SAMPLING_PASSES = 100
CONFIRM_REPEAT = MAX_SAMPLING_PASSES  # the confirmation's repeats start here: seeds no sampling pass used


def prompt_infos(suite: Suite, pair: ModelPair, max_new_tokens: int, bucket_edges: list[int],
                 truncate: bool = False) -> list[PromptInfo]:
    """Tokenized prompts; a prompt the target cannot take with its token budget is refused (or, when the
    suite opts in with ``suite.truncate_long_prompts``, cut to its last tokens)."""
    limit = getattr(pair.target.config, "max_position_embeddings", None)
    out, problems = [], []
    unrendered: dict[str, list[str]] = {}  # why -> the chat prompts that failed so (said once, with a count)
    for i, p in enumerate(suite.prompts):
        if p.messages is None:
            ids = ids_full = tuple(pair.encode(p.text))
        else:
            try:
                ids = tuple(pair.encode_chat(p.as_messages(), suite.chat_template))
                ids_full = ids
            except Exception as exc:  # no template, or one that raises (jinja's TemplateError, its raise_exception)
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                unrendered.setdefault(why, []).append(p.id)
                continue
        budget = p.max_new_tokens or max_new_tokens
        if limit and len(ids) + budget > limit:
            room = limit - budget
            if truncate and room > 0:
                ids = ids[-room:]
            else:
                problems.append(Problem(suite.name, f"prompt {p.id!r} has {len(ids)} tokens, but the target takes "
                                        f"{limit} positions and the prompt needs room for {budget} new tokens "
                                        f"(at most {max(room, 0)} prompt tokens)", field="prompt",
                                        hint="shorten it, lower its max_new_tokens, or set "
                                             "suite.truncate_long_prompts: true"))
                continue
        truncated = p.messages is not None and len(ids) != len(ids_full)
        out.append(PromptInfo(i, p.id, p.slice, bucket_name(len(ids), bucket_edges), ids, budget,
                              None if truncated else p.messages))
    for why, ids in unrendered.items():
        which = f"prompt {ids[0]!r} has" if len(ids) == 1 else (
            f"{len(ids)} prompts ({', '.join(map(repr, ids[:3]))}{', …' if len(ids) > 3 else ''}) have")
        problems.insert(0, Problem(suite.name, f"{which} chat messages, and rendering them failed: {why}",
                                   field="messages", hint="set suite.chat_template to a Jinja chat template, or use "
                                   "a target tokenizer that has one (tokenizer_config.json chat_template)"))
    if problems:
        raise SuiteError(problems)
    return out


def cache_context(pair: ModelPair, cfg, hardware: dict) -> dict:
    """What every cached reference generation depends on besides its batch (see :mod:`gate.run.cache`)."""
    t = pair.target
    return {"target": t.fingerprint, "dtype": str(t.dtype), "device": pair.device.type,
            "hardware": fp.hardware_key(hardware), "libraries": fp.libraries(),
            "attn": cfg.models.attn_implementation, "engine_version": ENGINE_VERSION}


class Runner:
    def __init__(self, loaded: LoadedConfig, pair: ModelPair, suite: Suite, reference: Engine,
                 engines: list[Engine], out_dir: Path, log: Callable[[str], None] = print,
                 cache: ReferenceCache | None = None, timed: bool = True, repeat_runs: bool = True,
                 paired: PairedBase | None = None, phases: Phases | None = None, progress=None,
                 shard: tuple[int, int] | None = None, run_id: str | None = None,
                 hardware_key: str | None = None, own_references: Sequence[Engine] = (), servers: Sequence = (),
                 budget: Budget | None = None):
        """``own_references``: plug-ins' own plain decoding (``engines[].reference``, named ``<engine>.reference``),
        run on their engines' equivalence batches (their stack's own noise) and timed beside them; never judged as
        engines under test.  ``servers``: the serving stacks the gate launched (gate.run.isolation)."""
        self.loaded = loaded
        self.run_id = run_id
        self.hardware_key_given = hardware_key  # --hardware-key (fp.baseline_key: the rule)
        self.cfg = loaded.config
        self.pair = pair
        self.suite = suite
        self.reference = reference
        self.engines = engines  # speculative engines under test
        self.paired = paired
        self.by_name: dict[str, Engine] = {REFERENCE: reference, **{e.name: e for e in engines}}
        if paired is not None:
            self.by_name[paired.engine.name] = paired.engine
        self.own_references = list(own_references)
        self._stacks: dict | None = None
        self.by_name.update({e.name: e for e in self.own_references})
        self.neighbours = Neighbours(servers, {n: s.url if (s := served(e)) else None for n, e in self.by_name.items()})
        self.isolate = bool(self.cfg.checks.speedup.isolate_servers and self.neighbours.servers)
        self.probes: list[NeighbourProbe] = []
        self.out_dir = Path(out_dir)
        self.say = log
        # A served reference is cached only where the gate launches it: its launch line, environment and version
        # then key its outputs; a server it does not start could run other flags behind the same url.
        self.served = next((e.served_reference for e in self.cfg.engines if e.served_reference is not None), None)
        self.cache = cache if self.served is None or self.served.launch else None
        self.phases = phases or Phases()
        self.progress = progress or Lines(log)
        self.hardware = fp.hardware(pair.device)
        gen = self.cfg.generation
        with self.phases("setup (tokenize, plan)"):
            self.prompts = prompt_infos(suite, pair, gen.max_new_tokens,
                                        list(self.cfg.checks.speedup.context_buckets),
                                        truncate=self.cfg.suite.truncate_long_prompts)
            self.plan: Plan = plan(self.cfg, self.prompts, [EngineInfo(e.name, e.capabilities) for e in engines],
                                   timed=timed, repeat_runs=repeat_runs,
                                   timing_only=[EngineInfo(paired.engine.name, paired.engine.capabilities)]
                                   if paired else None,
                                   own_references=[EngineInfo(e.name, e.capabilities) for e in self.own_references])
            self.shard = shard
            if shard is not None:
                self.plan = shard_plan(self.plan, *shard)
        k = self.cfg.speculation.num_draft_tokens
        self.greedy = GenerationSettings(0.0, k, pair.eos_token_ids if gen.stop_at_eos else ())
        self.sampled = GenerationSettings(gen.sampling.temperature, k, self.greedy.eos_token_ids,
                                          **gen.sampling.truncation()) if gen.sampling else None
        self.executor: Executor | None = None
        self.anchored: AnchorRecord | None = None
        self.traffic: list[TrafficReplay] = []
        self.previous_traffic: dict = {}
        self.log: RecordLog | None = None
        self.budget = budget
        self.budget_skips: list[Skip] = []

    # --- identity -------------------------------------------------------------------------

    def fingerprint(self) -> Fingerprint:
        models = {
            role: ModelFingerprint(location=m.location, fingerprint=m.fingerprint,
                                   dtype=str(m.dtype).replace("torch.", ""), revision=m.spec.revision)
            for role, m in (("target", self.pair.target), ("draft", self.pair.draft)) if m is not None
        }
        return Fingerprint(
            hardware=self.hardware,
            hardware_key=fp.baseline_key(self.hardware_key_given, self.cfg.baseline.hardware_key, self.hardware),
            libraries=fp.libraries(),
            models=models, config=self.cfg.digest(),
            suite=SuiteFingerprint(name=self.suite.name, fingerprint=self.suite.fingerprint(),
                                   prompts=len(self.suite.prompts), slices=self.suite.slices),
            stacks=self.stacks())

    def stacks(self) -> dict[str, StackIdentity]:
        """Each serving stack's version (asked once) and launch line, by engine and for a served reference."""
        if self._stacks is None:
            launches = {}
            for e in self.cfg.engines:
                for where, ep in e.endpoints():
                    launches[e.label if where.endswith(".server") else REFERENCE] = ep.launch
            self._stacks = {s.name: StackIdentity(version=s.identity(), launch=launches.get(s.name))
                            for s in map(served, [*self.engines, self.reference]) if s is not None}
        return self._stacks

    def header(self) -> RunHeader:
        cfg = self.cfg
        settings = Settings(
            num_draft_tokens=cfg.speculation.num_draft_tokens, batch_sizes=cfg.batching.batch_sizes,
            max_new_tokens=cfg.generation.max_new_tokens, eos_token_ids=list(self.greedy.eos_token_ids),
            greedy=cfg.generation.greedy,
            sampling=cfg.generation.sampling.model_dump() if cfg.generation.sampling else None,
            engines=[e.name for e in self.engines], engine_version=ENGINE_VERSION,
            capabilities={e.name: e.capabilities.to_dict()
                          for e in [self.reference, *self.engines, *self.own_references]},
            compositions=cfg.batching.compositions, stress_mix=cfg.suite.stress_mix,
        )
        return RunHeader(schema=SCHEMA, fingerprint=self.fingerprint(), settings=settings, shard=self.shard,
                         run_id=self.run_id, baseline_name=self.loaded.baseline_name,
                         config=cfg,
                         prompts=[p.record() for p in self.prompts],
                         batches=[b.record(self.prompts) for b in self.plan.batches])

    def cache_context(self) -> dict:
        context = cache_context(self.pair, self.cfg, self.hardware)
        if self.served is not None and self.served.launch:  # the serving stack, not the local target, generates
            from gate.inputs.launch import without_port

            stack = self.stacks().get(REFERENCE)
            context["served"] = {"version": stack.version if stack else None, "env": sorted(self.served.env.items()),
                                 "launch": without_port(list(self.served.launch))}
        return context

    # --- phases ---------------------------------------------------------------------------

    def anchor_phase(self) -> None:
        """Check the in-process reference against transformers' generate() before anything depends on it."""
        if not self.reference.capabilities.anchored_to_generate or self.pair.target.model is None \
                or not self.prompts:
            return  # a serving stack (or a test's scripted engine) is the reference: nothing to anchor
        eq = self.cfg.checks.equivalence
        fixed = None if eq.logit_tolerance == "auto" else float(eq.logit_tolerance)
        anchor = Anchor(self.pair, self.reference, self.cache.dir.parent if self.cache else None, fixed,
                        noise_batch_size=self.cfg.noise_batch_size)
        self.progress.start("anchor: the reference against transformers.generate", None)
        self.anchored = anchor.run(self.prompts, self.greedy, self.cache_context())
        self.progress.note(self.anchored.line)

    def _run(self, job: Job) -> Execution:
        settings = self.greedy if job.mode == "greedy" else self.sampled
        if self.paired is not None and job.engine == self.paired.engine.name:  # the base's own k
            settings = dataclasses.replace(settings, num_draft_tokens=self.paired.num_draft_tokens)
        rec = self.executor.run(self.by_name[job.engine], job, settings)
        if self.budget is not None and not rec.cached and rec.failure is None:
            self.budget.pace.record(job.phase.value, job.engine, job.batch.batch_size,
                                    sum(self.prompts[i].max_new_tokens for i in job.batch.members), rec.wall_s)
        return rec

    def outputs_phase(self, jobs: Sequence[Job] | None = None) -> None:
        jobs = self.plan.outputs if jobs is None else jobs
        size = None
        for job in jobs:
            if job.batch.batch_size != size:
                size = job.batch.batch_size
                names = sorted({j.engine for j in jobs if j.batch.batch_size == size} - {REFERENCE})
                todo = sum(j.batch.batch_size == size for j in jobs)
                self.progress.start(f"outputs at batch size {size}: reference, {', '.join(names) or '(none)'}", todo)
            with self.phases(f"equivalence outputs: {job.engine}"):
                self._run(job)
            self.progress.advance()

    def timing_phase(self) -> dict:
        scheduler = TimingScheduler(self.cfg.checks.speedup)
        share = self.cfg.checks.speedup.time_budget_s / max(1, len(self.plan.timing))
        return {str(level.batch_size): self._time_level(level, list(level.cells), scheduler, share)
                for level in self.plan.timing}

    def _time_level(self, level, cells: list, scheduler: TimingScheduler, share: float, guard=None) -> dict:
        """One load level's ``cells``, reference and engines interleaved, after their warm-up (a ``guard`` of the
        budget admits each cell and each adaptive repeat)."""
        sp = self.cfg.checks.speedup
        n_batches = sum(len(c.batches) for c in cells)
        self.progress.start(f"timing at batch size {level.batch_size}: {len(cells)} cells, "
                            f"{n_batches} batches, engines: reference, {', '.join(level.engines) or '(none)'}",
                            n_batches * sp.min_repeats)
        if cells:
            first = cells[0].batches[0]
            for name in (REFERENCE, *level.engines):  # warm-up runs are not recorded
                with self.neighbours.alone(name, on=self.isolate):
                    self.executor.warm_up(self.by_name[name], first, self.greedy, sp.warmup)
            if not self.isolate and not self.probes and len(self.neighbours.servers) > 1:
                self._probe_neighbours(first, (REFERENCE, *level.engines))

        def timed(job: Job):
            with self.neighbours.alone(job.engine, on=self.isolate):
                return self._run(job)

        def run_pair(pb: PlannedBatch, repeat: int, order: list[str]) -> dict[str, float | None]:
            recs = {name: timed(Job(Phase.TIMING, name, "greedy", pb, repeat)) for name in order}
            if repeat >= sp.min_repeats:  # an adaptive repeat: more than the estimate
                self.progress.grow(1)
            self.progress.advance()
            return {name: None if rec.failure else rec.wall_s for name, rec in recs.items()}

        return scheduler.run_level(cells, REFERENCE, list(level.engines), share, run_pair, guard)

    def _probe_neighbours(self, batch: PlannedBatch, names: Sequence[str]) -> None:
        """Each served engine's first timing batch alone and beside the other launched servers (unrecorded)."""
        import time

        def once(engine) -> float | None:
            started = time.perf_counter()
            self.executor.warm_up(engine, batch, self.greedy, 1)
            return time.perf_counter() - started

        def others_first(name: str) -> None:  # what runs just before it in the interleaved timing
            for other in names:
                if other != name:
                    self.executor.warm_up(self.by_name[other], batch, self.greedy, 1)

        for name in names:
            probe = self.neighbours.probe(name, lambda name=name: once(self.by_name[name]),
                                          lambda name=name: others_first(name))
            if probe is not None:
                self.probes.append(probe)
                self.progress.note(f"{name}: {probe.slowdown:+.0%} beside the other launched servers than alone"
                                   + (" (interference: its cells are not judged; checks.speedup.isolate_servers: "
                                      "true times one server at a time)" if probe.interfered else ""))

    def traffic_phase(self) -> None:
        """``checks.traffic``: each rate's arrival traces replayed to every http engine and to the reference (its
        stack without speculation), ABBA across repeats; each finished replay is logged at once."""
        from gate.run.traffic import http_sender, make_trace, replay, replay_record, sides, trace_seed

        tc = self.cfg.checks.traffic
        pairs = [e for e in map(served, self.engines) if e is not None]
        if served(self.reference) is None or not pairs:
            self.progress.note("request-rate traffic skipped: no engine takes requests while others run "
                               "(an http engine with http.reference)")
            return
        settings = self.greedy if self.cfg.generation.greedy else self.sampled
        base = served(self.paired.engine) if self.paired is not None else None
        head = self.paired.head_engine if base is not None else None
        todo = len(tc.rates) * tc.repeats * sum(len(sides(0, e.name == head)) for e in pairs)
        self.progress.start(f"request-rate traffic: {len(tc.rates)} rates x {tc.repeats} repeats x "
                            f"{tc.requests} requests, {tc.arrival} arrivals, engine and reference"
                            + (f" (and {base.name} on the same traces)" if base else ""), todo)
        for engine in pairs:
            with_base = engine.name == head
            for ri, rate in enumerate(tc.rates):
                for repeat in range(tc.repeats):
                    seed = trace_seed(tc.seed, ri, repeat)
                    trace = make_trace(self.prompts, rate, tc.requests, tc.arrival, seed)
                    for side in sides(repeat, with_base):
                        key = (engine.name, side, rate, repeat)
                        rec = self.previous_traffic.get(key)
                        if rec is None:
                            target = {"engine": engine, "reference": self.reference, "base": base}[side]
                            self.executor.current = {"phase": "traffic", "engine": target.name, "batch_size": 1}
                            rec = replay_record(engine.name, side, rate, repeat, tc.arrival, seed,
                                                replay(trace, http_sender(target, settings),
                                                       max_in_flight=tc.max_in_flight, abort=target.cancel))
                            self.log.append(rec)
                        self.traffic.append(rec)
                        self.progress.advance()

    def canonical_phase(self) -> None:
        if self.plan.canonical:
            self.progress.start("canonical reference at batch size 1", len(self.plan.canonical))
        for job in self.plan.canonical:
            self._run(job)
            self.progress.advance()

    def sampling_phase(self) -> None:
        for group in self.plan.sampling:
            self._sample(group, Phase.SAMPLING, 0)

    def _sample(self, group, phase: Phase, first_repeat: int, need: int | None = None, queued=None) -> None:
        """Passes over a sampling group's batches, each with its own seeds (its repeat index), until it has its
        tokens (``need``, under a budget that cut them; a pass is then run only while it fits beside the
        ``queued`` sampling work)."""
        need = group.need if need is None else need
        what = "sampling" if phase == Phase.SAMPLING else "confirmation: sampling again, new seeds,"
        self.progress.start(f"{what} with {group.engine} at batch size {group.batch_size}, "
                            f"T={self.sampled.temperature}: {need} tokens", len(group.batches))
        got, p = 0, 0
        per_pass = {(phase.value, group.engine, group.batch_size):
                    sum(self.prompts[i].max_new_tokens for pb in group.batches for i in pb.members)}
        while got < need and p < MAX_SAMPLING_PASSES:
            before = got
            if self.budget is not None and p and queued is not None:
                estimate = self.budget.pace.seconds(per_pass) or 0.0
                behind = self.budget.need([u for u in queued if u.what == "sampling"]) * need / group.need
                if not self.budget.room(estimate + behind):
                    break  # the next pass does not fit beside the groups after it (at their share): keep what it has
            if p:
                self.progress.grow(len(group.batches))
            for pb in group.batches:
                rec = self._run(Job(phase, group.engine, "sampling", pb, first_repeat + p, cacheable=group.cacheable))
                got += sum(len(s.token_ids) for s in rec.real())
                self.progress.advance()
            p += 1
            if got == before:  # a whole pass gave nothing (the engine fails or emits nothing): stop asking
                break
        if self.budget is not None and queued is not None and got < group.need:
            self.budget.cut.append((group.engine, group.batch_size, got, group.need))
            self.progress.note(f"sampling with {group.engine} at batch size {group.batch_size}: {got} of "
                               f"{group.need} tokens within the budget ({self.budget.source})")

    def confirm(self, groups: Sequence[tuple[str, int]], results: Results) -> Results:
        """The confirmation pass (:mod:`gate.checks.confirmation`) of ``groups`` (engine, batch size) of a finished
        run, ``results``: each group's sampling batches again, with seeds no sampling pass used (repeats from
        ``CONFIRM_REPEAT``), until it has its tokens.  Each execution is appended to ``records.jsonl`` as it
        finishes, and ``results.json`` is rewritten with them however the pass ends: stopped midway, the finished
        ones are kept on disk, and the results say where it stopped."""
        log = RecordLog(self.out_dir / RECORDS)
        log.reopen()
        self.log = log
        self.executor = self._executor(log, {})
        wanted = set(groups)
        status, stopped = results.status, results.stopped_at
        try:
            with sigterm_interrupts():
                for group in self.plan.sampling:
                    if (group.engine, group.batch_size) in wanted:
                        with self.phases("confirmation"):
                            self._sample(group, Phase.CONFIRMATION, CONFIRM_REPEAT)
        except (KeyboardInterrupt, Interrupted) as exc:
            status = "interrupted"
            stopped = StoppedAt(**(self.executor.current or {}), reason=str(exc) or "interrupted (SIGINT)")
        except BaseException as exc:
            status = "failed"
            stopped = StoppedAt(**(self.executor.current or {}), reason=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            log.close()
            data = results.model_dump(by_alias=True)
            data.update(executions=[*results.executions, *self.executor.records], status=status, stopped_at=stopped)
            results = Results(**data)
            atomic_write_json(self.out_dir / RESULTS, results)
        if status == "interrupted":
            raise RunInterrupted(results)
        return results

    def _executor(self, log: RecordLog, previous: dict) -> Executor:
        seed = self.cfg.generation.sampling.seed if self.cfg.generation.sampling else 0
        scoring, _ = self.cfg.distribution_scoring()
        server = served(self.reference) if scoring == "server" else None
        score = server.score if server is not None else None
        return Executor(self.prompts, self.pair.decode, log, seed=seed, cache=self.cache,
                        cache_context=self.cache_context(), previous=previous, say=self.progress.note, score=score)

    def _traffic_here(self) -> bool:
        return self.cfg.checks.traffic is not None and (self.shard is None or self.shard[0] == 0)  # on one shard

    def _calibrate(self, sizes: list[int]) -> tuple[dict, dict]:
        """Step costs of the pair (and of paired mode's base pair) at ``sizes``."""
        self.progress.start("calibration: step costs of the pair", None)
        base_calibration = {}
        with self.phases("calibration"):
            trials = self.cfg.checks.speedup.calibration_trials
            calibration = calibrate(self.pair, sizes, self.cfg.speculation.num_draft_tokens, trials=trials)
            if self.paired is not None and self.paired.draft is not None:
                base_pair = dataclasses.replace(self.pair, draft=self.paired.draft)
                base_calibration = calibrate(base_pair, sizes, self.paired.num_draft_tokens, trials=trials)
        return calibration, base_calibration

    # --- the whole run --------------------------------------------------------------------

    def _previous(self, header: RunHeader, records_path: Path) -> dict:
        old_header, old, traffic = read_log(records_path)
        if old_header is None:
            if records_path.exists():
                raise ResumeError(Problem(str(records_path), "cannot resume: the log is from another version "
                                          "of specguard, or has no header",
                                          hint="run without --resume to start over"))
            self.say(f"nothing to resume in {records_path}; starting a new run")
            return {}
        self.previous_traffic = {r.key: r for r in traffic}
        differs = header.fingerprint.differences(old_header.fingerprint)
        if differs:
            raise ResumeError(Problem(str(records_path), "cannot resume: the interrupted run had a different "
                                      "setup (" + "; ".join(differs) + ")",
                                      hint="run without --resume to start over, or pass another --out"))
        self.say(f"resuming: {len(old)} finished executions found in {records_path}")
        return {r.key: r for r in old}

    def run(self, resume: bool = False) -> Results:
        header = self.header()
        log = RecordLog(self.out_dir / RECORDS)  # opened (truncated) by start(), after --resume read it
        previous = self._previous(header, log.path) if resume else {}
        log.start(header)
        for rec in [*previous.values(), *self.previous_traffic.values()]:
            log.append(rec)  # keep them on disk even if this run stops before reusing them
        self.log = log
        self.executor = self._executor(log, previous)
        for skip in self.plan.skips:
            self.progress.note(f"skip {skip.engine} at batch size {skip.batch_size} ({skip.mode}): {skip.reason}")
        status, stopped, calibration, timing = "complete", None, {}, {}
        runner_load = None
        base_calibration: dict[str, dict[str, float]] = {}
        try:
            with sigterm_interrupts():
                with self.phases("anchor"):
                    self.anchor_phase()
                if self.budget is not None:
                    calibration, base_calibration, timing, runner_load = budgeted_phases(self)
                else:
                    if self.plan.calibrate:
                        calibration, base_calibration = self._calibrate(self.plan.calibrate)
                    self.outputs_phase()
                    if self.plan.timing:
                        with self.phases("timing"):
                            started = load.snapshot()
                            timing = self.timing_phase()
                            runner_load = load.record(started)
                    if self._traffic_here():
                        with self.phases("request-rate traffic"):
                            self.traffic_phase()
                    with self.phases("canonical reference"):
                        self.canonical_phase()
                    if self.sampled is not None:
                        with self.phases("sampling"):
                            self.sampling_phase()
            if self.executor.reused:
                self.progress.note(f"reference cache: {len(self.executor.reused)} reference batches read from "
                                   f"{self.cache.dir}, not generated again")
        except (KeyboardInterrupt, Interrupted) as exc:
            status = "interrupted"
            stopped = StoppedAt(**(self.executor.current or {}), reason=str(exc) or "interrupted (SIGINT)")
        except BaseException as exc:
            status = "failed"
            stopped = StoppedAt(**(self.executor.current or {}), reason=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            log.close()
            with self.phases("writing results"):
                paired = None
                if self.paired is not None:
                    paired = PairedRun(engine=self.paired.engine.name, head_engine=self.paired.head_engine,
                                       num_draft_tokens=self.paired.num_draft_tokens, calibration=base_calibration,
                                       config=self.paired.config, source=self.paired.source)
                results = Results(**header.model_dump(by_alias=True), status=status, stopped_at=stopped,
                                  calibration=calibration, calibrated_engines=self.plan.calibrated_engines,
                                  timing=timing, executions=self.executor.records, skipped=self.plan.skips,
                                  cache={"reused": self.executor.reused}, paired=paired,
                                  anchor=self.anchored, traffic=self.traffic, neighbours=self.probes,
                                  isolated=self.isolate, runner_load=runner_load, budget=budget_record(self))
                if self.budget_skips:
                    results.skipped += self.budget_skips
                atomic_write_json(self.out_dir / RESULTS, results)
        if status == "interrupted":
            raise RunInterrupted(results)
        return results
