"""The run stage: wait for the launched servers, clear an earlier run's outputs, and run the engines (the
:class:`~gate.run.runner.Runner`): ``results.json`` and ``phases.json``.  Interrupted (Ctrl-C, SIGTERM), the finished
executions are kept in ``records.jsonl`` and ``--resume`` continues."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from gate.io.rundir import JUDGED, RESULTS, RUN
from gate.run.session import Session
from gate.run.setup import Inputs, Models


class Ran(Enum):
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"


@dataclass
class RunOptions:
    resume: bool = False
    no_cache: bool = False
    cache_dir: Path | None = None  # instead of output.cache_dir (the demo's, in the working directory)
    shard: tuple[int, int] | None = None
    hardware_key: str | None = None
    run_id: str | None = None
    timing_only: bool = False  # a baseline's extra timing pass (gate.run.passes): calibration and timing alone
    budget_minutes: float | None = None  # --budget-minutes: instead of checks.budget_minutes

    @classmethod
    def of(cls, args) -> RunOptions:
        """From the command line's options (``run``, ``gate``, ``demo``)."""
        return cls(resume=args.resume, no_cache=args.no_cache, cache_dir=getattr(args, "demo_cache_dir", None),
                   shard=getattr(args, "shard", None), hardware_key=args.hardware_key, run_id=args.run_id,
                   timing_only=getattr(args, "timing_only", False),
                   budget_minutes=getattr(args, "budget_minutes", None))


def run_engines(session: Session, inputs: Inputs, models: Models, opts: RunOptions, servers: Sequence = ()) -> Ran:
    """Wait for the launched ``servers`` (:func:`gate.run.servers.serving`), clear the earlier outputs, run the
    engines: results.json and phases.json; interrupted, the finished work is kept."""
    import uuid

    from gate.engines import build_reference
    from gate.errors import RunInterrupted
    from gate.run.cache import ReferenceCache
    from gate.run.progress import for_terminal
    from gate.run.runner import Runner

    loaded, out, phases = inputs.loaded, inputs.out, session.phases
    cache_dir = opts.cache_dir or (
        loaded.resolve_path(loaded.config.output.cache_dir) if loaded.config.output.cache_dir else None)
    cache = None if (opts.no_cache or not cache_dir) else ReferenceCache(cache_dir)
    progress = for_terminal(session.say, quiet=session.verbosity == 0)
    session.budget = None if opts.timing_only else make_budget(session, loaded, out.path, models.pair, opts)
    try:
        with phases("server start"):
            for server in servers:
                server.wait_ready()
        # Every input loaded and every server answers: from here no output of an earlier run may be judged as
        # this one's.  (A model that fails to load, or a server that never starts, leaves them as they were.)
        out.clear(JUDGED + RUN)
        if not (opts.resume or opts.timing_only):
            from gate.run.passes import clear as clear_passes

            clear_passes(out.path)  # an earlier run's timing passes are not this run's
        runner = Runner(loaded, models.pair, inputs.suite, build_reference(models.pair, loaded), models.engines,
                        out.path, log=session.say, cache=cache, paired=models.base, phases=phases,
                        progress=progress, shard=opts.shard, hardware_key=opts.hardware_key,
                        run_id=opts.run_id or uuid.uuid4().hex, own_references=models.own_references,
                        servers=servers, budget=session.budget)
        if opts.timing_only:  # what a timing pass measures: no outputs, no sampling, nothing to re-score
            runner.plan.outputs, runner.plan.canonical, runner.plan.sampling = [], [], []
        if opts.shard is not None and runner.plan.empty and not (loaded.config.checks.traffic and opts.shard[0] == 0):
            session.say(f"shard {opts.shard[0]}/{opts.shard[1]} has no work: this run's batches, timing cells and "
                        f"sampling groups all fall to other shards (fewer shards give each some); its results.json "
                        "holds no executions, and `specguard merge` takes it as such")
        results = runner.run(resume=opts.resume)
    except RunInterrupted as stop:
        progress.close()
        session.write_phases(out)
        r = stop.results
        where = r.stopped_at.model_dump(exclude_none=True) if r.stopped_at else {}
        session.say(f"interrupted at {where}; {len(r.executions)} finished executions kept in "
                    f"{out / 'records.jsonl'}. Rerun with --resume to continue.")
        return Ran.INTERRUPTED
    progress.close()
    session.write_phases(out)
    n = len(results.executions)
    reused = len(results.cache.get("reused", []))
    session.say(f"wrote {out / RESULTS} ({n} executions"
                + (f", {reused} reused from the reference cache" if reused else "") + ")")
    return Ran.COMPLETE


def make_budget(session: Session, loaded, out_dir: Path, pair, opts: RunOptions):
    """``--budget-minutes``, else ``checks.budget_minutes`` (None: no budget), on the command's clock; its estimates
    from the last run in ``out_dir`` on this hardware (read before this run clears it), else this run's own rates as
    they are measured (:mod:`gate.run.budget`)."""
    from gate.run.budget import AFTER_RUN, TAIL_SHARE, Budget, Deadline, Pace, process_started
    from gate.run.cost import last_run

    minutes, source = ((opts.budget_minutes, "--budget-minutes") if opts.budget_minutes is not None else
                       (loaded.config.checks.budget_minutes, "checks.budget_minutes"))
    if minutes is None:
        return None
    last = last_run(out_dir, pair, opts.hardware_key, loaded.config.baseline.hardware_key)
    if isinstance(last, str):
        reserve = TAIL_SHARE * minutes * 60
        said = (f"this run's own rates as it goes ({last}); {TAIL_SHARE:.0%} of the budget kept for the checks and "
                "report")
        prior = None
    else:
        reserve = sum(last.seconds.get(k, 0.0) for k in AFTER_RUN)
        said = (f"{last.said()}, scaled by this run's pace against it as it goes; {reserve:.0f} s kept for the checks "
                "and report, as that run spent")
        prior = last.per_token
    session.say(f"budget: {minutes:g} min ({source}); estimates from {said}")
    started = min(session.phases.started, process_started())  # the process's start: its imports count too
    return Budget(minutes, source, Deadline(minutes * 60, started, reserve), Pace(prior), said)


def confirm_sampling(session: Session, inputs: Inputs, models: Models, opts: RunOptions,
                     groups: Sequence[tuple[str, int]], servers: Sequence = ()) -> Ran:
    """The confirmation pass of ``groups`` (engine, batch size) on the engines the run loaded, still up
    (:meth:`gate.run.runner.Runner.confirm`): appended to records.jsonl and results.json; interrupted, the
    finished executions are kept."""
    from gate.engines import build_reference
    from gate.errors import RunInterrupted
    from gate.run.cache import ReferenceCache
    from gate.run.progress import for_terminal
    from gate.run.results import load_results
    from gate.run.runner import Runner

    loaded, out = inputs.loaded, inputs.out
    results = load_results(out / RESULTS)
    cache_dir = opts.cache_dir or (
        loaded.resolve_path(loaded.config.output.cache_dir) if loaded.config.output.cache_dir else None)
    cache = None if (opts.no_cache or not cache_dir) else ReferenceCache(cache_dir)
    progress = for_terminal(session.say, quiet=session.verbosity == 0)
    session.say("confirmation: " + ", ".join(f"{e} at batch size {b}" for e, b in groups) + " landed between the "
                "distribution test's floor and alpha; sampling them again with new seeds before they fail")
    runner = Runner(loaded, models.pair, inputs.suite, build_reference(models.pair, loaded), models.engines,
                    out.path, log=session.say, cache=cache, paired=models.base, phases=session.phases,
                    progress=progress, shard=opts.shard, hardware_key=opts.hardware_key, run_id=results.run_id,
                    own_references=models.own_references, servers=servers)
    try:
        runner.confirm(groups, results)
    except RunInterrupted:
        progress.close()
        session.say(f"interrupted during the confirmation pass; its finished executions are kept in "
                    f"{out / 'records.jsonl'} and {out / RESULTS}")
        return Ran.INTERRUPTED
    progress.close()
    return Ran.COMPLETE


__all__ = ["Ran", "RunOptions", "confirm_sampling", "make_budget", "run_engines"]
