"""``specguard plan CONFIG``: what a run will do, and how long it will take on this runner, before it starts.

No weights load: the plan is the run's own planner (:func:`gate.run.plan.plan`) over the suite, tokenized with the
target's tokenizer, and the models' configs.  It says, per phase, engine and batch size, how many batches and rows
run and how many new tokens they may generate; which reference batches the cache already holds (the run's own
cache keys, computed the same way); and, where an earlier run on this runner left ``results.json`` and
``phases.json`` in the output directory, an estimate of the time: the seconds per budgeted token of each phase,
engine and batch size in that run, times this plan's tokens, plus that run's fixed costs (set-up, model load,
calibration, analysis, report).  Timing repeats are adaptive, so the estimate is a range: every cell at
``min_repeats``, up to the timing phase's ``time_budget_s`` where that is longer (repeats stop at the budget or
at ``max_repeats``); request-rate replays (``checks.traffic``) at their traces' expected spans, scaled by the
earlier run's own ratio of its traffic phase to its traces' spans.  ``--hardware-key KEY`` takes the earlier
run from another machine made under KEY (a GPU runner's artifact, planned on a laptop); ``--tokens-per-s N``
estimates from stated rates instead, one or one per batch size and engine (:mod:`gate.run.rates`), with the
assumption printed (a GPU runner before its first run).  Without either there is no estimate, and the plan says
why.  The estimate is kept per phase, engine and batch size (:mod:`gate.run.cost`), and priced in device-minutes:
the devices the run holds through every phase (:mod:`gate.run.devices`) times each phase's wall minutes; it is
warned against the job's timeout (:mod:`gate.run.limits`) and a budget, whose lines say what it keeps and drops
(:func:`gate.run.budget.plan_fit`).  Per launched server the plan also says which waves
(a batch's prompts, sent together) exceed its per-step prefill budget, and whether its weights plus the KV cache
each batch size needs fit its memory share (:mod:`gate.run.weights`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from gate.engines import GenerationSettings
from gate.errors import Problem, SpecguardError
from gate.inputs import fingerprint as fp
from gate.inputs.config import REFERENCE, LoadedConfig
from gate.inputs.suite import Suite
from gate.run.cost import FIXED, PHASE_ORDER, duration, estimate, minutes, span
from gate.run.devices import Holder, held
from gate.run.limits import Limit
from gate.run.plan import EngineInfo, Job, plan
from gate.run.rates import Rates, StatedRate
from gate.run.records import Phase


@dataclass
class Work:
    """Batches of one phase, engine and batch size."""

    batches: int = 0
    rows: int = 0
    tokens: int = 0  # the budget: max new tokens summed over rows
    cached: int = 0  # batches the reference cache already holds
    cached_tokens: int = 0


@dataclass
class PlanReport:
    config: str
    summary: str
    work: dict[tuple[str, str, int], Work] = field(default_factory=dict)  # (phase, engine, batch size)
    timing_repeats: tuple[int, int] = (0, 0)
    warmup: int = 0
    timing_tokens: dict[tuple[str, int], int] = field(default_factory=dict)  # (engine, bs) -> tokens per repeat
    timing_budget_s: float = 0.0  # checks.speedup.time_budget_s: the adaptive repeats stop there
    timing_off: bool = False  # checks.speedup.enabled: false
    warmup_tokens: dict[tuple[str, int], int] = field(default_factory=dict)  # (engine, bs) -> warm-up tokens
    calibration: str | None = None
    cache: str = ""
    traffic: str | None = None  # checks.traffic's replays, in words
    traffic_s: float = 0.0  # the arrival traces' expected spans, summed over every replay
    estimate_s: tuple[float, float] | None = None
    estimate_from: str = ""
    warnings: list[str] = field(default_factory=list)  # what the run will do that measures less than it seems
    servers: list[str] = field(default_factory=list)  # every server the run names (paired mode: both sides), in words
    prefill: list[str] = field(default_factory=list)  # per launched server: whether a prompt is prefilled in chunks
    memory: list[str] = field(default_factory=list)  # per launched server: its weights against its memory share
    # the confirmation pass (gate.checks.confirmation), run only for a group whose distribution test lands between
    # its floor and alpha: (engine, bs) -> the tokens it would sample again; and their time, where rates are known
    confirmation: dict[tuple[str, int], int] = field(default_factory=dict)
    confirmation_s: float | None = None
    confirmation_rule: tuple[float, float] | None = None  # (alpha, floor): the near-miss region that triggers it
    scoring: str | None = None  # where the distribution test gets the target's distribution, and what that costs
    # the estimate's parts: (phase, engine, batch size) -> (least, most) seconds; traffic and fixed costs as
    # ("request-rate traffic", "", 0) and ("fixed costs", "", 0)
    phase_s: dict[tuple[str, str, int], tuple[float, float]] = field(default_factory=dict)
    devices: list[Holder] = field(default_factory=list)  # what holds devices through every phase (gate.run.devices)
    limits: list[Limit] = field(default_factory=list)  # the job's timeout and the budget the estimate is held to
    limits_note: str = ""  # where no timeout was found, why
    longest: int = 0  # the longest row's prompt plus its new tokens (the KV cache a row may need)
    units: list = field(default_factory=list)  # the work in the budget's priority order (gate.run.budget.units)
    budget: dict | None = None  # checks.budget_minutes' fit: what it keeps and drops (plan --json's "budget")
    budget_lines: list[str] = field(default_factory=list)
    baseline: str = ""  # the baseline the gate will be judged against, in words (set by gate.verdict.planned.plan)

    @property
    def held(self) -> tuple[str, ...]:
        return held(self.devices)

    def phases(self) -> list[tuple[str, tuple[float, float]]]:
        """(phase, (least, most) seconds) in the order the run goes through them."""
        out: dict[str, list[float]] = {}
        for (ph, _, _), (lo, hi) in self.phase_s.items():
            acc = out.setdefault(ph, [0.0, 0.0])
            acc[0], acc[1] = acc[0] + lo, acc[1] + hi
        return [(ph, (lo, hi)) for ph, (lo, hi) in sorted(out.items(), key=lambda kv: PHASE_ORDER.index(kv[0]))]

    def bill_lines(self) -> list[str]:
        """Each phase's time (per engine and batch size) and its device-minutes, the devices, and the limits."""
        gpus = len(self.held)
        out = []
        for ph, (lo, hi) in self.phases():
            parts = []
            for engine in sorted({e for (p, e, _) in self.phase_s if p == ph and e},
                                 key=lambda e: (e != REFERENCE, e)):
                parts.append(f"{engine}: " + ", ".join(
                    f"bs {b} {span(*self.phase_s[(p, e, b)])}" for (p, e, b) in sorted(self.phase_s)
                    if p == ph and e == engine))
            bill = f"; {minutes(lo * gpus, hi * gpus)} GPU-min" if gpus else ""
            why = FIXED if ph == "fixed costs" else ""
            out.append(f"  {ph}: {span(lo, hi)}{bill}" + (f" ({'; '.join(parts)})" if parts else why))
        if self.estimate_s is not None and gpus:
            lo, hi = self.estimate_s
            out.append(f"  total: {minutes(lo * gpus, hi * gpus)} GPU-min (wall minutes x {gpus} GPUs held)"
                       + ("; model load, server start-up and calibration not counted"
                          if ("fixed costs", "", 0) not in self.phase_s else ""))
        return out


    def lines(self) -> list[str]:
        out = [f"plan for {self.config}: {self.summary}"]
        phases = sorted({k[0] for k in self.work}, key=["equivalence outputs", "canonical reference",
                                                        "sampling"].index)
        for phase in phases:
            out.append(f"{phase}:")
            for engine in sorted({k[1] for k in self.work if k[0] == phase}, key=lambda e: (e != REFERENCE, e)):
                cells = []
                for (p, e, b), w in sorted(self.work.items()):
                    if p == phase and e == engine:
                        hit = f", {w.cached} cached" if w.cached else ""
                        cells.append(f"bs {b}: {w.batches} batches, {w.rows} rows, {w.tokens} tokens{hit}")
                out.append(f"  {engine}: " + "; ".join(cells))
        if self.scoring:
            out.append(f"distribution: {self.scoring}")
        if self.confirmation:
            every = sum(self.confirmation.values())
            alpha, floor = self.confirmation_rule or (None, None)
            where = (f"between confirm_floor {floor:g} and alpha {alpha:g} (on a correct engine, with probability at "
                     f"most {alpha:g} per group)" if alpha is not None else
                     "between confirm_floor and alpha (on a correct engine, with probability at most alpha per group)")
            out.append(f"confirmation: not planned; one more sampling pass only for a group whose distribution test "
                       f"lands {where}: " + "; ".join(
                           f"{e} bs {b}: up to {t} tokens" for (e, b), t in sorted(self.confirmation.items()))
                       + f"; at worst {every} tokens, every group again"
                       + (f", about {duration(self.confirmation_s)} here" if self.confirmation_s is not None else "")
                       + ", then the checks again (not in the estimate)")
        if self.timing_tokens:
            lo, hi = self.timing_repeats
            engines = sorted({e for e, _ in self.timing_tokens}, key=lambda e: (e != REFERENCE, e))
            per = sum(self.timing_tokens.values())
            out.append(f"timing: {', '.join(engines)}, interleaved; {per} tokens per repeat of every cell, "
                       f"{lo} to {hi} repeats (adaptive, while the phase is within {self.timing_budget_s:g} s) after "
                       f"{self.warmup} warm-up")
        elif self.timing_off:
            out.append("timing: none (checks.speedup.enabled: false); outputs at the repeat batch size run twice, "
                       "for run-to-run reproducibility")
        if self.traffic:
            out.append(f"request-rate traffic: {self.traffic}")
        out += [f"server: {line}" for line in self.servers]
        out += [f"prefill: {line}" for line in self.prefill]
        out += [f"memory: {line}" for line in self.memory]
        if self.calibration:
            out.append(f"calibration: {self.calibration}")
        out.append(f"cache: {self.cache}")
        if self.baseline:
            out.append(f"baseline: {self.baseline}")
        out.append("devices: " + (f"{len(self.held)} GPUs held through every phase (servers start before the first "
                                  "and stop after the last): " if self.held else "no GPU held: ")
                   + "; ".join(h.text() for h in self.devices))
        if self.estimate_s is None:
            out.append(f"estimate: none ({self.estimate_from})")
        else:
            lo, hi = self.estimate_s
            out.append(f"estimate: {duration(lo)} to {duration(hi)} on this runner ({self.estimate_from})")
            out += self.bill_lines()
        out += [f"limit: {lim.name} {lim.minutes:g} min ({lim.source})" for lim in self.limits]
        out += [f"budget: {line}" for line in self.budget_lines]
        if self.limits_note:
            out.append(f"limit: no timeout known ({self.limits_note}; --timeout-minutes N states one)")
        out += [f"warning: {w}" for w in self.warnings]
        return out

    def to_json(self) -> dict:
        return {"config": self.config, "summary": self.summary,
                "work": [{"phase": p, "engine": e, "batch_size": b, **vars(w)}
                         for (p, e, b), w in sorted(self.work.items())],
                "timing_repeats": list(self.timing_repeats), "warmup": self.warmup,
                "timing_tokens_per_repeat": [{"engine": e, "batch_size": b, "tokens": t}
                                             for (e, b), t in sorted(self.timing_tokens.items())],
                "calibration": self.calibration, "traffic": self.traffic, "traffic_s": self.traffic_s,
                "cache": self.cache, "baseline": self.baseline or None,
                "estimate_s": list(self.estimate_s) if self.estimate_s else None, "estimate_from": self.estimate_from,
                "warnings": self.warnings, "servers": self.servers, "prefill": self.prefill, "memory": self.memory,
                "confirmation": [{"engine": e, "batch_size": b, "tokens": t}
                                 for (e, b), t in sorted(self.confirmation.items())],
                "confirmation_s": self.confirmation_s, "scoring": self.scoring,
                "phases": [{"phase": ph, "seconds": [lo, hi],
                            "device_minutes": [lo * len(self.held) / 60, hi * len(self.held) / 60],
                            "cells": [{"engine": e, "batch_size": b, "seconds": list(self.phase_s[(p, e, b)])}
                                      for (p, e, b) in sorted(self.phase_s) if p == ph and e]}
                           for ph, (lo, hi) in self.phases()],
                "devices": {"held": list(self.held), "holders": [h.to_json() for h in self.devices]},
                "device_minutes": ([self.estimate_s[0] * len(self.held) / 60, self.estimate_s[1] * len(self.held) / 60]
                                   if self.estimate_s else None),
                "limits": [lim.to_json() for lim in self.limits], "limits_note": self.limits_note,
                "budget": self.budget,
                "confirmation_rule": ({"alpha": self.confirmation_rule[0], "floor": self.confirmation_rule[1]}
                                      if self.confirmation_rule else None)}


def _eos(loaded: LoadedConfig, pair) -> tuple[int, ...]:
    """The EOS ids the run will stop at (as :attr:`gate.inputs.models.ModelPair.eos_token_ids` reads them from
    the loaded model)."""
    if not loaded.config.generation.stop_at_eos:
        return ()
    ids = None
    try:
        from transformers import GenerationConfig

        ids = GenerationConfig.from_pretrained(pair.target.location).eos_token_id
    except Exception:  # no generation_config.json: the model's config, then the tokenizer
        ids = getattr(pair.target.config, "eos_token_id", None)
    if ids is None:
        ids = pair.tokenizer.eos_token_id
    if ids is None:
        return ()
    return tuple(ids) if isinstance(ids, (list, tuple)) else (int(ids),)


def _engines(loaded: LoadedConfig) -> tuple[list[EngineInfo], list[EngineInfo]]:
    """Each engine with its capabilities as its type knows them before weights load, and the engines' own plain
    decodings (which run what their engines run)."""
    from gate.engines import capabilities_of

    engines, own = [], []
    for e in loaded.config.engines:
        caps = capabilities_of(e)
        engines.append(EngineInfo(e.label, caps))
        if e.own_reference_name is not None:
            own.append(EngineInfo(e.own_reference_name, caps))
    return engines, own


def _budget(job_members, prompts) -> int:
    return sum(prompts[i].max_new_tokens for i in job_members)


def describe(loaded: LoadedConfig, suite: Suite, pair, out_dir: Path, cache_dir: Path | None, *,
             tokens_per_s: Rates | float | None = None, hardware_key: str | None = None,
             timed_beside: tuple[str, ...] = ()) -> PlanReport:
    """The plan of a run of ``loaded`` (``pair``: configs and tokenizer, no weights needed); ``timed_beside``:
    engines timed in every cell beside the reference (paired mode's base)."""
    from gate.run.cache import ReferenceCache
    from gate.run.execute import reference_cache_key
    from gate.run.runner import cache_context, prompt_infos

    cfg = loaded.config
    gen, speed = cfg.generation, cfg.checks.speedup
    prompts = prompt_infos(suite, pair, gen.max_new_tokens, list(speed.context_buckets),
                           truncate=cfg.suite.truncate_long_prompts)
    engines, own = _engines(loaded)
    p = plan(cfg, prompts, engines, timed=True, own_references=own)
    report = PlanReport(config=str(loaded.source), prefill=prefill_lines(cfg.engines, prompts, p), summary=(
        f"{len(prompts)} prompts in {len(suite.slices)} slices, batch sizes "
        f"{'/'.join(map(str, cfg.batching.batch_sizes))}, k={cfg.speculation.num_draft_tokens}, "
        f"{gen.max_new_tokens} new tokens"))

    served = next((e.served_reference for e in cfg.engines if e.served_reference is not None), None)
    # a served reference's key holds its stack's version, known once it answers: no hits are counted before
    cache = ReferenceCache(cache_dir) if cache_dir is not None and served is None else None
    context = cache_context(pair, cfg, fp.hardware(pair.device)) if cache is not None else None
    eos = _eos(loaded, pair)
    greedy = GenerationSettings(0.0, cfg.speculation.num_draft_tokens, eos)
    sampled = GenerationSettings(gen.sampling.temperature, cfg.speculation.num_draft_tokens, eos,
                                 **gen.sampling.truncation()) if gen.sampling else None
    seed = gen.sampling.seed if gen.sampling else 0

    def hit(job: Job) -> bool:
        """The run's own cache key of this job (:meth:`gate.run.execute.Executor.cache_key`), found in the cache."""
        if cache is None or not job.cacheable:
            return False
        settings = greedy if job.mode == "greedy" else sampled
        return cache.get(reference_cache_key(context, prompts, job.batch, job.repeat, settings, seed)) is not None

    for phase, jobs in (("equivalence outputs", p.outputs), ("canonical reference", p.canonical)):
        for job in jobs:
            w = report.work.setdefault((phase, job.engine, job.batch.batch_size), Work())
            tokens = _budget(job.batch.members, prompts)
            w.batches, w.rows, w.tokens = w.batches + 1, w.rows + job.batch.batch_size, w.tokens + tokens
            if hit(job):
                w.cached, w.cached_tokens = w.cached + 1, w.cached_tokens + tokens
    scored = 0  # positions the reference server scores where it scores the sampled rows: prompt + continuation
    for g in p.sampling:  # passes over the group's batches until it has its tokens (the budget, at most)
        per_pass = sum(_budget(b.members, prompts) for b in g.batches) or 1
        w = report.work.setdefault(("sampling", g.engine, g.batch_size), Work())
        for r in range(math.ceil(g.need / per_pass)):
            for b in g.batches:
                tokens = _budget(b.members, prompts)
                scored += tokens + sum(len(prompts[i].prompt_ids) for i in b.members)
                w.batches, w.rows, w.tokens = w.batches + 1, w.rows + b.batch_size, w.tokens + tokens
                if hit(Job(Phase.SAMPLING, g.engine, "sampling", b, r, cacheable=g.cacheable)):
                    w.cached, w.cached_tokens = w.cached + 1, w.cached_tokens + tokens
        if cfg.checks.distribution.confirm:  # a second pass of the same size, with new seeds
            report.confirmation[(g.engine, g.batch_size)] = per_pass * math.ceil(g.need / per_pass)
            d = cfg.checks.distribution  # the floor as gate.checks.confirmation.Rule.of reads it (alpha / 100 unset)
            report.confirmation_rule = (d.alpha, d.confirm_floor if d.confirm_floor is not None else d.alpha / 100)
    if p.sampling:
        how, why = cfg.distribution_scoring()
        if how == "server":
            rows = sum(w.rows for (ph, _, _), w in report.work.items() if ph == "sampling")
            width = next(e.score_width for e in cfg.engines if e.scores_continuations)
            width = pair.target.config.vocab_size if width == -1 else width
            why += (f"; scoring costs one prompt_logprobs request per sampled row on the reference server ({rows} "
                    "rows, each its prompt and continuation teacher-forced: a prefill each, no decoding), answered "
                    f"with {width} log-probabilities at each of their {scored:,} positions "
                    f"({scored * width / 1e6:.1f} million in JSON)")
        report.scoring = why
    for level in p.timing:
        per_repeat = sum(_budget(b.members, prompts) for c in level.cells for b in c.batches)
        first = _budget(level.cells[0].batches[0].members, prompts) if level.cells else 0
        for engine in (REFERENCE, *level.engines):
            report.timing_tokens[(engine, level.batch_size)] = per_repeat
            report.warmup_tokens[(engine, level.batch_size)] = first * speed.warmup  # one batch, unrecorded
    for extra in timed_beside:
        for (engine, bs), tokens in list(report.timing_tokens.items()):
            if engine == REFERENCE:
                report.timing_tokens[(extra, bs)] = tokens
                report.warmup_tokens[(extra, bs)] = report.warmup_tokens[(engine, bs)]
    report.timing_repeats, report.warmup = (speed.min_repeats, speed.max_repeats), speed.warmup
    report.timing_budget_s, report.timing_off = speed.time_budget_s, not speed.enabled
    tc = cfg.checks.traffic
    stacks = [e.label for e in cfg.engines if e.takes_traffic]
    if tc is not None and stacks:
        replays = len(stacks) * len(tc.rates) * tc.repeats * 2
        report.traffic_s = len(stacks) * tc.repeats * 2 * sum(tc.trace_span_s(r) for r in tc.rates)
        report.traffic = (f"{', '.join(stacks)} and the reference, {tc.requests} requests at each of "
                          f"{', '.join(f'{r:g}' for r in tc.rates)} req/s ({tc.arrival}), {tc.repeats} replays per "
                          f"side: {replays} replays whose arrivals alone span {duration(report.traffic_s)}")
    from gate.run.budget import units

    report.units = units(p, prompts, cfg.batching.batch_sizes, speed.min_repeats, speed.warmup, hit, report.traffic_s)
    if p.calibrate:
        report.calibration = (f"{speed.calibration_trials} trials of each step cost at batch sizes "
                              f"{'/'.join(map(str, p.calibrate))}")
    cached = sum(w.cached for (phase, _, _), w in report.work.items() if phase != "sampling")
    cacheable = sum(1 for j in p.jobs() if j.cacheable)
    if cache_dir is None:
        report.cache = "not used (output.cache_dir is null)"
    elif served is not None and not served.launch:
        report.cache = ("not used: the reference server is not launched by the gate, so its flags cannot key "
                        "its outputs")
    elif served is not None:
        report.cache = (f"the served reference's {cacheable} reference batches are cached in {cache_dir}, keyed by "
                        "its stack's version, launch line and environment: hits are known once it answers")
    else:
        report.cache = f"{cached} of {cacheable} reference batches already in {cache_dir}"
    report.longest = max((len(q.prompt_ids) + q.max_new_tokens for q in prompts), default=0)
    if isinstance(tokens_per_s, (int, float)):
        tokens_per_s = Rates([StatedRate(None, ((0, float(tokens_per_s)),))])
    if tokens_per_s is not None:
        engines_here = sorted({e for (_, e, _) in report.work} | {e for e, _ in report.timing_tokens},
                              key=lambda e: (e != REFERENCE, e))
        wrong = tokens_per_s.problems(engines_here)
        if wrong:
            raise SpecguardError([Problem("--tokens-per-s", w) for w in wrong])
    estimate(report, out_dir, pair, tokens_per_s, hardware_key, loaded.config.baseline.hardware_key)
    report.warnings += warnings(loaded, prompts, p)
    return report


def warnings(loaded: LoadedConfig, prompts, p) -> list[str]:
    """What a run of this config will do that measures less than it seems: rows repeated in a batch (a stack's
    prefix cache then serves the repeats), sampling no test can read (not run), servers that cannot fit on one GPU
    together, launch lines whose executable is not on this runner, that the gate cannot read, whose speculation flags or
    keys it does not read, that turn speculation off at some batch sizes, or that differ from their server's on
    purpose (each engine's ``launch_warnings``)."""
    import os
    import shutil

    cfg, out = loaded.config, []
    repeated = sorted({b.batch_size for b in p.batches if b.duplicates}
                      | {b.batch_size for lvl in p.timing for c in lvl.cells for b in c.batches
                         if len(set(b.members)) < len(b.members)})
    # serving stacks whose prefix cache may be on: not every server's launch line turns it off
    cached = [e for e in cfg.engines if e.endpoints() and not (e.prefix_cache_off and all(
        ep.launch and e.prefix_cache_off in ep.launch for _, ep in e.endpoints()))]
    if repeated and cached:
        off = sorted({e.prefix_cache_off for e in cached if e.prefix_cache_off})
        out.append(f"batch size {'/'.join(map(str, repeated))} repeats prompts within a batch (the suite has "
                   f"{len(prompts)} distinct prompts, or a timing cell fewer than the batch size): a stack with a "
                   "prefix cache serves the repeats' prompts from it, which flatters the speedup; add prompts, or "
                   "turn the cache off on both servers" + (f" ({', '.join(off)})" if off else ""))
    why = cfg.unmeasurable("distribution") if cfg.generation.sampling is not None else None
    if why is not None:
        out.append(f"generation.sampling is set, and the sampling phase is not run: {why}")
    for i, e in enumerate(cfg.engines):
        out += [f"engines[{i}].{said}" for said in e.launch_warnings(cfg)]
        for where, ep in e.endpoints():
            if ep.launch and shutil.which(ep.launch[0], path=ep.env.get("PATH", os.environ.get("PATH"))) is None:
                out.append(f"engines[{i}].{where}.launch[0]: {ep.launch[0]!r} is not an executable on this runner: "
                           "the gate cannot launch it here")
    from gate.inputs.launch import remote_servers

    remote = remote_servers(cfg.engines)
    if remote and not cfg.baseline.hardware_key:
        out.append(f"{remote[0][0]} ({remote[0][1]}) runs on another machine: `gate` and `run` refuse it unless "
                   "--hardware-key or baseline.hardware_key names that machine's hardware")
    if cfg.models.device == "cpu":
        return out
    return out + memory_warnings(launched_shares(cfg.engines))


def waves(p, prompts) -> dict[int, list[int]]:
    """Batch size -> the prompt tokens of each distinct batch the plan sends at once (equivalence, timing and
    sampling batches; a batch planned twice counted once)."""
    seen: dict[int, dict[tuple[int, ...], int]] = {}
    batches = [*p.batches, *(b for lvl in p.timing for c in lvl.cells for b in c.batches),
               *(b for g in p.sampling for b in g.batches)]
    for b in batches:
        seen.setdefault(b.batch_size, {})[tuple(sorted(b.members))] = sum(len(prompts[i].prompt_ids)
                                                                           for i in b.members)
    return {bs: list(by.values()) for bs, by in sorted(seen.items())}


def prefill_lines(engines, prompts, p=None) -> list[str]:
    """Per launched server: its prefill budget per scheduler step (the launch line's flag, or the stack's documented
    default), and per batch size how many of the plan's waves (a batch's requests, sent together) hold more
    prompt tokens than it, so that the step budget splits their prefill into chunks; where neither is known,
    that too.  Without a plan (``p``), each prompt alone is a wave."""
    from gate.inputs.launch import prefill_chunk

    longest = max((len(q.prompt_ids) for q in prompts), default=0)
    by_size = waves(p, prompts) if p is not None else {1: [len(q.prompt_ids) for q in prompts]}
    out = []
    for i, e in enumerate(engines):
        preset = e.launch_preset
        for where, ep in e.endpoints():
            if not ep.launch or preset is None:
                continue
            chunk, flag = prefill_chunk(preset, ep.launch)
            field = f"engines[{i}].{where}"
            if chunk is None:
                out.append(f"{field}: the line sets no prefill chunk and the stack's default depends on its version "
                           f"and hardware; the longest prompt is {longest} tokens, the largest wave "
                           f"{max((max(w) for w in by_size.values() if w), default=0)}")
                continue
            given = f"{flag} {chunk}" if flag != "default" else f"{chunk}, the stack's default"
            over = {bs: sum(t > chunk for t in w) for bs, w in by_size.items()}
            said = "; ".join(f"bs {bs}: {over[bs]} of {len(w)} waves exceed it" for bs, w in by_size.items())
            largest = max((max(w) for w in by_size.values() if w), default=0)
            out.append(f"{field}: prefill chunk {given} tokens per scheduler step, shared by the requests of a wave "
                       f"(a batch sent together): {said}: " + (
                           "chunked prefill is exercised (those waves are prefilled in chunks)" if any(over.values())
                           else f"no wave exceeds it (the largest is {largest} tokens): chunked prefill is not "
                           "exercised"))
    return out


def launched_shares(engines, prefix: str = "", only_server: bool = False) -> list[tuple[str, float, bool, str, str]]:
    """(field, share of a GPU's memory, whether the line says it, the flag, CUDA_VISIBLE_DEVICES) of each launched
    server that claims a fixed share; ``only_server``: the engine under test's servers alone (paired mode's base,
    whose reference the head's serves)."""
    import os

    out = []
    for i, e in enumerate(engines):
        endpoints = dict(e.endpoints())
        for where, share, said, flag in e.memory_shares():
            field = where.removesuffix(".launch")
            if only_server and not field.endswith(".server"):
                continue
            gpus = endpoints[field].env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "all"))
            out.append((f"{prefix}engines[{i}].{where}", share, said, flag, gpus))
    return out


def _devices(gpus: str) -> frozenset[str] | None:
    """A CUDA_VISIBLE_DEVICES value as a set of device ids (None: every GPU of the machine)."""
    ids = frozenset(g.strip() for g in str(gpus).split(",") if g.strip())
    return None if not ids or gpus == "all" else ids


def memory_warnings(servers: list[tuple[str, float, bool, str, str]]) -> list[str]:
    """Servers whose device sets overlap (compared as sets: "0,1,2,3" and "2,3,4,5" share GPUs 2 and 3; an unset
    CUDA_VISIBLE_DEVICES is every GPU) and whose shares add up to more than ``MEMORY_BUDGET`` on a GPU they
    share, or one of which claims the stack's default share without saying so."""
    from gate.inputs.launch import MEMORY_BUDGET

    sets = [_devices(g) for *_, g in servers]
    ids = sorted(set().union(*(d for d in sets if d is not None)) or {"all"})
    said_once: set[tuple[int, ...]] = set()
    out = []
    for gpu in ids:
        on = tuple(i for i, d in enumerate(sets) if d is None or gpu in d)
        if len(on) < 2 or on in said_once:
            continue
        said_once.add(on)
        group = [servers[i] for i in on]
        total = sum(s for _, s, *_ in group)
        unsaid = [w for w, _, said, *_ in group if not said]
        if total > MEMORY_BUDGET or unsaid:
            shared = sorted(set.intersection(*(set(d) for d in (sets[i] for i in on) if d is not None)) or {gpu}) \
                if any(sets[i] is not None for i in on) else ["all"]
            flags = ", ".join(dict.fromkeys(f for *_, f, _ in group))
            out.append(f"{' and '.join(w for w, *_ in group)} share GPU(s) {','.join(shared)} and claim "
                       f"{' + '.join(f'{s:g}' for _, s, *_ in group)} = {total:.2f} of their memory"
                       + (f" ({', '.join(unsaid)}: the stack's default, the line sets none)" if unsaid else "")
                       + f": give each line its share ({flags}) so that they add up to at most {MEMORY_BUDGET:g} "
                       "(docs/serving.md, one GPU)")
    return out


def server_lines(loaded, prefix: str, only_server: bool = False) -> list[str]:
    """Each server a config's engines name: where, and whether the gate launches it."""
    out = []
    for e in loaded.config.engines:
        for where, ep in e.endpoints():
            role = where.rsplit(".", 1)[-1]
            if only_server and role != "server":
                continue
            how = "launched by the gate" if ep.launch else "already running (not launched by the gate)"
            out.append(f"{prefix}{e.label} {role} at {ep.url}, {how}")
    return out


def plan_config(config: str, out: str | None = None, against: str | None = None, *,
                tokens_per_s: list[StatedRate] | float | None = None, hardware_key: str | None = None,
                timeout_minutes: float | None = None, gpu_memory_gib: float | None = None,
                budget_minutes: float | None = None) -> PlanReport:
    """What ``specguard gate CONFIG`` will do, how long it will take here and what it holds, with no weights loaded
    (:mod:`gate.run.estimate`)."""
    from gate.inputs.config import DEMO_CONFIG, load_config
    from gate.inputs.models import ModelPair, config_only, load_tokenizer, resolve_device
    from gate.inputs.suite import suite_for
    from gate.run.devices import holders
    from gate.run.limits import limits, over
    from gate.run.setup import out_dir

    loaded = load_config(config)
    side = None
    if against:  # refused here as `gate --against` refuses it, before any estimate or tokenizer
        from gate.engines.paired import base_side

        side = base_side(against, loaded)
    device = resolve_device(loaded.config.models.device)
    target = config_only(loaded, "target", device)
    # a method without a draft model (speculation.method: ngram, eagle, ...) has none to read
    draft = config_only(loaded, "draft", device) if loaded.config.models.draft is not None else None
    pair = ModelPair(target, draft, load_tokenizer(loaded, target.location, "target"), device)
    cache = loaded.config.output.cache_dir
    cache_dir = loaded.resolve_path(cache) if cache else None
    if loaded.source.resolve() == DEMO_CONFIG:  # as `specguard demo` runs it: out and cache in the working directory
        out, cache_dir = out or "specguard-out", Path(".specguard-cache")
    rates = Rates(tokens_per_s) if isinstance(tokens_per_s, list) else tokens_per_s
    # paired mode times the base's engine beside the head's: one more engine in every timing cell
    report = describe(loaded, suite_for(loaded), pair, out_dir(loaded, out).path, cache_dir,
                      tokens_per_s=rates, hardware_key=hardware_key, timed_beside=("base",) if side else ())
    report.servers = server_lines(loaded, "")
    report.devices = holders(loaded, str(device))
    if side is not None:
        report.devices += holders(side.loaded, str(device), "base ", only_server=True)
    if loaded.config.models.device != "cpu":  # a CPU server claims no GPU share
        from gate.run.weights import KvNeed, gpu_memory, weight_lines

        gpu_bytes, said = gpu_memory(gpu_memory_gib)
        kv = KvNeed.of(target.config, report.longest,
                        {b for (_, _, b) in report.work} | {b for _, b in report.timing_tokens})
        report.memory, unfit = weight_lines(loaded, gpu_bytes, kv, said)
        report.warnings += unfit
    if side is not None:
        if loaded.config.models.device != "cpu":  # and its server takes GPU memory beside the head's
            both = memory_warnings(launched_shares(loaded.config.engines)
                                   + launched_shares(side.loaded.config.engines, "base ", only_server=True))
            report.warnings += [w for w in both if w not in report.warnings]
        report.summary += f"; paired with {against}"
        report.servers += server_lines(side.loaded, "base-", only_server=True)
        report.servers += [f"{c} (a port free now: the gate picks one again when it launches)" for c in side.changes]
    report.limits, report.limits_note = limits(loaded.source, timeout_minutes)
    if report.estimate_s is not None:
        uncounted = "" if ("fixed costs", "", 0) in report.phase_s else \
            " (before model load and server start-up, which the stated rates leave out)"
        report.warnings += [w for w in (over(lim, report.estimate_s, uncounted) for lim in report.limits) if w]
    minutes, source = ((budget_minutes, "--budget-minutes") if budget_minutes is not None else
                       (loaded.config.checks.budget_minutes, "checks.budget_minutes"))
    if minutes is not None:
        from gate.run.budget import plan_fit

        plan_fit(report, Limit("budget", minutes, source), loaded.config.checks.distribution.num_samples
                   if loaded.config.generation.sampling else None)
    return report


__all__ = ["PlanReport", "Work", "describe", "plan_config", "server_lines"]
