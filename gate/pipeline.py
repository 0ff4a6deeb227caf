"""The gate's commands as stages: load inputs → load models → run (results.json) → check (checks.json) → compare
(verdict.json, the page) → or refresh (the baseline) → deliver (the PR comment, the refresh PR).

Each stage returns a typed outcome; :func:`exit_code` is the one rule that turns outcomes into the command's exit
code (the table is in ``gate/cli.py``).  The CLI parses arguments and calls these.  What one command shares across
stages (how much it says, where its time went) is a :class:`Session`, passed in, never a module global.  Files are
named and written by :class:`gate.io.rundir.RunDir`, each by one stage only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gate.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, Problem, SpecguardError
from gate.io.documents import PhasesDoc
from gate.io.rundir import (
    CHECKS,
    CHECKS_MD,
    COMMENT,
    COMPARED,
    JUDGED,
    PHASES,
    PNG,
    RESULTS,
    RUN,
    SUMMARY,
    VERDICT,
    RunDir,
)
from gate.run.phases import Phases

if TYPE_CHECKING:  # torch and transformers load with the stages that need them
    from gate.engines.plugin import ProcessCallable
    from gate.inputs.config import Config, LoadedConfig
    from gate.inputs.models import ModelPair
    from gate.inputs.suite import Suite
    from gate.run.results import Results
    from gate.run.runner import PairedBase


@dataclass
class Session:
    """One command: how much it says (0: only the verdict, -q; 1: progress and the report; 2: also the libraries'
    own output, -v) and where its time went (the clock starts when the session is made)."""

    verbosity: int = 1
    phases: Phases = field(default_factory=Phases)

    def say(self, msg: str) -> None:
        if self.verbosity >= 1:
            print(msg, file=sys.stderr, flush=True)

    def write_phases(self, out: RunDir) -> None:
        """phases.json: where this command's time went so far."""
        out.write_json(PHASES, PhasesDoc.model_validate(self.phases.to_dict()))

    def quiet_libraries(self) -> None:
        """transformers' weight-loading progress bars would interleave with the gate's own progress; -v keeps
        them."""
        if self.verbosity >= 2:
            return
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


# --- outcomes and the exit-code rule ---------------------------------------------------------------


class Ran(Enum):
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Checked:
    failing: bool  # a check failed, or the run is incomplete


@dataclass(frozen=True)
class Compared:
    outcome: Literal["pass", "neutral", "fail"]
    read_back: bool  # verdict.json, read back, is this run's and says what this process believes


def exit_code(*outcomes: Ran | Checked | Compared | Path | None) -> int:
    """The one rule: interrupted is 130; a failing check, a failing verdict, or a verdict that did not read back as
    this run's pass is 1; anything else that got this far (verdicts written and passed, a baseline written and read
    back) is 0.  Bad input never gets here: it is an exception, and the CLI maps each to its exit code."""
    for o in outcomes:
        if o is Ran.INTERRUPTED:
            return EXIT_INTERRUPTED
    for o in outcomes:
        if (isinstance(o, Checked) and o.failing) or (isinstance(o, Compared) and (o.outcome == "fail"
                                                                                   or not o.read_back)):
            return EXIT_FAIL
    return EXIT_OK


# --- validate --------------------------------------------------------------------------------------


@dataclass
class Validation:
    problems: list[Problem]
    notes: list[str]
    summary: str  # "N prompts in M slices: a, b" when valid


def validate(config: str) -> Validation:
    """Every problem of a config at once: its schema, its paths, its suite, its plug-ins (imported in their own
    workers)."""
    from gate.engines.plugin import plugin_problems
    from gate.inputs.config import load_config
    from gate.inputs.paths import check_paths, model_notes
    from gate.inputs.suite import suite_for

    problems, suite, loaded = [], None, None
    try:
        loaded = load_config(config)
    except SpecguardError as exc:
        problems += exc.problems
    problems += check_paths(config)
    if loaded is not None and not any(p.field == "suite.path" for p in problems):
        try:
            suite = suite_for(loaded)
        except SpecguardError as exc:
            problems += exc.problems
    if loaded is not None:
        problems += plugin_problems(loaded)
    summary = (f"{len(suite.prompts)} prompts in {len(suite.slices)} slices: {', '.join(suite.slices)}"
               if suite is not None and not problems else "")
    return Validation(problems, model_notes(config) if not problems else [], summary)


DEMO_CONFIG = Path(__file__).resolve().parent / "demo" / "specguard.yaml"


def plan_run(config: str, out: str | None = None, against: str | None = None):
    """What ``specguard gate CONFIG`` will do and how long it will take here, with no weights loaded
    (:mod:`gate.run.estimate`)."""
    from gate.inputs.config import REFERENCE, load_config
    from gate.inputs.models import ModelPair, _config_only, _load_tokenizer, resolve_device
    from gate.inputs.suite import suite_for
    from gate.run.estimate import describe

    loaded = load_config(config)
    device = resolve_device(loaded.config.models.device)
    target, draft = _config_only(loaded, "target", device), _config_only(loaded, "draft", device)
    pair = ModelPair(target, draft, _load_tokenizer(loaded, target.location, "target"), device)
    cache = loaded.config.output.cache_dir
    cache_dir = loaded.resolve_path(cache) if cache else None
    if loaded.source.resolve() == DEMO_CONFIG:  # as `specguard demo` runs it: out and cache in the working directory
        out, cache_dir = out or "specguard-out", Path(".specguard-cache")
    report = describe(loaded, suite_for(loaded), pair, out_dir(loaded, out).path, cache_dir)
    if against:  # paired mode times the base's engine beside the head's: one more engine in every timing cell
        report.summary += f"; paired with {against}"
        for (engine, bs), tokens in list(report.timing_tokens.items()):
            if engine == REFERENCE:
                report.timing_tokens[("base", bs)] = tokens
    return report


# --- load inputs ---------------------------------------------------------------------------------


@dataclass
class Inputs:
    """Everything a run needs before any model loads: the config, its suite, the run directory, and the
    plug-in workers that already loaded (by engine name: the label, and `<label>.reference` for a plug-in's own
    reference callable)."""

    loaded: LoadedConfig
    suite: Suite
    out: RunDir
    workers: dict[str, ProcessCallable] = field(default_factory=dict)


def out_dir(loaded, flag: str | None) -> RunDir:
    return RunDir(flag if flag else loaded.resolve_path(loaded.config.output.dir))


def load_inputs(session: Session, config: str, out: str | None, threads: int | None = None) -> Inputs:
    """The config, its suite and the plug-ins, checked before minutes of model loading."""
    with session.phases("setup (imports, config, suite)"):
        # The imports a run needs (torch, transformers) count as setup, not as the first phase that uses them.
        import gate.engines
        import gate.inputs.models
        import gate.run.cache
        import gate.run.progress
        import gate.run.runner  # noqa: F401
        from gate.engines.plugin import plugin_problems
        from gate.inputs.config import load_config
        from gate.inputs.suite import suite_for

        set_threads(threads)
        loaded = load_config(config)
        rundir = out_dir(loaded, out)
        suite = suite_for(loaded)
        workers: dict = {}
        bad_plugins = plugin_problems(loaded, log_dir=rundir.path, started=workers)
        if bad_plugins:
            raise SpecguardError(bad_plugins)
    return Inputs(loaded, suite, rundir, workers)


def config_of(results: Results) -> Config:
    """The config a run was made with (``compare`` needs no config file); for a run made before results.json kept
    it, the default rules over its models."""
    from gate.inputs.config import Config

    if results.config is not None:
        return results.config
    return Config.model_validate({"models": {r: {"path": m.location} for r, m in results.fingerprint.models.items()}})


# --- load models ---------------------------------------------------------------------------------


@dataclass
class Models:
    pair: ModelPair
    engines: list
    base: PairedBase | None = None  # paired mode: the base's draft and k, timed beside the head's
    own_references: list = field(default_factory=list)  # plug-ins' own plain decoding (engines[].reference)


def load_models(session: Session, inputs: Inputs, against: str | None = None) -> Models:
    from gate.engines import build_engine, build_own_reference
    from gate.inputs.config import OWN_REFERENCE_SUFFIX
    from gate.inputs.models import load_pair

    loaded = inputs.loaded
    session.say(f"loading models: target {loaded.config.models.target.path}, draft {loaded.config.models.draft.path}")
    with session.phases("model load"):
        session.quiet_libraries()
        pair = load_pair(loaded)
        engines = [build_engine(e, pair, loaded, log_dir=inputs.out.path, callable_=inputs.workers.get(e.label))
                   for e in loaded.config.engines]
        base = paired_engine(against, loaded, pair, log_dir=inputs.out.path) if against else None
        own = [build_own_reference(spec, engine, pair, loaded, log_dir=inputs.out.path,
                                   callable_=inputs.workers.get(spec.label + OWN_REFERENCE_SUFFIX))
               for spec, engine in zip(loaded.config.engines, engines, strict=True)]
    return Models(pair, engines, base, [e for e in own if e is not None])


def load_pair(session: Session, loaded):
    """The model pair alone (``check``: the run is done, only re-scoring needs the target)."""
    from gate.inputs.models import load_pair

    with session.phases("model load"):
        session.quiet_libraries()
        return load_pair(loaded)


def paired_head(loaded):
    """Which of the head's engines paired mode times beside its base: the gate's own engine when the config has
    one (None is returned: it is built from the base's draft), else the first plug-in or http engine."""
    if any(e.type == "speculative" for e in loaded.config.engines):
        return None
    return next((e for e in loaded.config.engines if e.type in ("plugin", "http")), None)


def paired_engine(against: str, loaded, pair, log_dir=None):
    """The base's speculative configuration, as an engine timed beside the head's (paired mode): the gate's own
    engine with the base's draft and k, or the base config's plug-in (its callable, extra, draft and k)."""
    from gate.inputs.config import load_config
    from gate.run.runner import PairedBase

    base = load_config(against)
    head_target, base_target = loaded.config.models.target, base.config.models.target
    if (loaded.resolve_path(head_target.path), head_target.dtype, head_target.revision) != \
            (base.resolve_path(base_target.path), base_target.dtype, base_target.revision):
        raise SpecguardError(Problem(str(base.source), "paired mode times the base's draft against the head's "
                                     "with one target; the two configs name different targets",
                                     field="models.target", hint="compare against the stored baseline instead"))
    common = {"num_draft_tokens": base.config.speculation.num_draft_tokens,
              "config": base.config.model_dump(mode="json"), "source": str(base.source)}
    own = next((e for e in loaded.config.engines if e.type == "speculative"), None)
    if own is not None:
        from gate.engines.speculative import SpeculativeEngine
        from gate.inputs.models import load_draft_for

        draft = load_draft_for(base, pair)
        engine = SpeculativeEngine(pair.target.model, draft.model, pair.device)
        engine.name = f"base-{own.label}"
        return PairedBase(engine=engine, head_engine=own.label, draft=draft, **common)
    head = paired_head(loaded)
    if head is None:
        raise SpecguardError(Problem(str(loaded.source), "paired mode times the gate's own engine, a plug-in or an "
                                     "http engine beside its base; this config has none",
                                     field="engines", hint="add `- type: speculative`"))
    kind = "plug-in" if head.type == "plugin" else "http engine"
    same_type = [e for e in base.config.engines if e.type == head.type]
    base_spec = next((e for e in same_type if e.label == head.label), same_type[0] if len(same_type) == 1 else None)
    if base_spec is None:
        raise SpecguardError(Problem(str(base.source), f"paired mode times the base's {kind} beside the head's "
                                     f"{head.label!r}; the base config has "
                                     f"{'no ' + kind if not same_type else 'no ' + kind + ' of that name'}",
                                     field="engines", hint=f"name the base's {kind} as the head's"))
    name = f"base-{head.label}"
    if head.type == "http":
        from gate.engines import http_engine

        if base_spec.http.server.url.rstrip("/") == head.http.server.url.rstrip("/"):
            raise SpecguardError(Problem(str(base.source), f"the base's server is the head's "
                                         f"({head.http.server.url}): paired mode needs both running side by side",
                                         field="engines[].http.server.url",
                                         hint="give the base config's server its own port (and its launch line)"))
        engine = http_engine(base_spec, base_spec.http.server.url, pair, base, speculative=True, name=name)
        return PairedBase(engine=engine, head_engine=head.label, draft=None, **common)
    from dataclasses import replace

    from gate.engines import build_engine
    from gate.inputs.models import draft_location

    # The plug-in loads its own models: it is told the base's draft and dtypes; the gate loads no base weights.
    base_pair = replace(pair, draft=replace(pair.draft, location=draft_location(base), spec=base.config.models.draft))
    engine = build_engine(base_spec.model_copy(update={"name": name}), base_pair, base, log_dir=log_dir)
    return PairedBase(engine=engine, head_engine=head.label, draft=None, **common)


# --- run: results.json ---------------------------------------------------------------------------


@dataclass
class RunOptions:
    resume: bool = False
    no_cache: bool = False
    cache_dir: Path | None = None  # instead of output.cache_dir (the demo's, in the working directory)
    shard: tuple[int, int] | None = None
    hardware_key: str | None = None
    run_id: str | None = None

    @classmethod
    def of(cls, args) -> RunOptions:
        """From the command line's options (``run``, ``gate``, ``demo``)."""
        return cls(resume=args.resume, no_cache=args.no_cache, cache_dir=getattr(args, "demo_cache_dir", None),
                   shard=getattr(args, "shard", None), hardware_key=args.hardware_key, run_id=args.run_id)


def run(session: Session, inputs: Inputs, models: Models, opts: RunOptions, servers: Sequence = ()) -> Ran:
    """Wait for the launched ``servers`` (:func:`serving`), clear the earlier outputs, run the engines: results.json
    and phases.json; interrupted, the finished work is kept."""
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
    try:
        with phases("server start"):
            for server in servers:
                server.wait_ready()
        # Every input loaded and every server answers: from here no output of an earlier run may be judged as
        # this one's.  (A model that fails to load, or a server that never starts, leaves them as they were.)
        out.clear(JUDGED + RUN)
        runner = Runner(loaded, models.pair, inputs.suite, build_reference(models.pair, loaded), models.engines,
                        out.path, log=session.say, cache=cache, paired=models.base, phases=phases,
                        progress=progress, shard=opts.shard, hardware_key=opts.hardware_key,
                        run_id=opts.run_id or uuid.uuid4().hex, own_references=models.own_references)
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


@contextlib.contextmanager
def serving(session: Session, loaded, out: Path, against: str | None = None) -> Iterator[list]:
    """Launch every serving stack the config asks the gate to start, side by side and before the gate loads its
    own models (a stack takes minutes to load a model; the gate's load overlaps it); yields the launched servers,
    which :func:`run` waits for, and tears them all down on leaving, whatever happens.  In paired mode with an
    http engine (``against``: the base config), the base's server is launched beside the head's and the
    reference (named ``base-<engine>``); the reference is the head's."""
    from gate.engines.http import Server

    stacks = [(loaded, e, e.label, i, ("server", "reference")) for i, e in enumerate(loaded.config.engines)]
    head = paired_head(loaded) if against else None
    if head is not None and head.type == "http":
        from gate.inputs.config import load_config

        base = load_config(against)
        stacks += [(base, e, f"base-{head.label}", i, ("server",)) for i, e in enumerate(base.config.engines)
                   if e.type == "http" and e.label == head.label]
    with contextlib.ExitStack() as stack:
        launched = []
        for owner, e, label, i, roles in stacks:
            if e.http is None:
                continue
            for role in roles:
                ep = getattr(e.http, role)
                if ep is None or not ep.launch:
                    continue
                session.say(f"starting {label} {role}: {' '.join(ep.launch)}")
                log = owner.resolve_path(ep.log) if ep.log else out / f"{label}-{role}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                server = Server(list(ep.launch), ep.url, ep.health, ep.startup_timeout_s, dict(ep.env),
                                f"engines[{i}].http.{role}" + (f" of {owner.source}" if owner is not loaded else ""),
                                log_path=log)
                stack.callback(server.stop)  # registered before the launch: a launch that fails midway is stopped
                launched.append(server.launch())
        yield launched


def run_command(session: Session, config: str, out: str | None, threads: int | None, opts: RunOptions) -> int:
    """``specguard run``: inputs, servers, models, the run."""
    inputs = load_inputs(session, config, out, threads)
    with serving(session, inputs.loaded, inputs.out.path) as servers:
        return exit_code(run(session, inputs, load_models(session, inputs), opts, servers))


def merge(dirs: list[Path], out: RunDir):
    """The shards' results as one run of its own, written to ``out``; the merged Results."""
    import uuid

    from gate.run.merge import merge as merge_shards

    merged = merge_shards(dirs)
    merged = merged.model_copy(update={"run_id": uuid.uuid4().hex})  # the merged run is a run of its own
    out.clear(JUDGED + RUN)
    out.write_json(RESULTS, merged)
    return merged


# --- check: checks.json --------------------------------------------------------------------------


def check(session: Session, loaded, pair, out: RunDir) -> Checked:
    """Analyse results.json: checks.json and checks.md (the checks' full text)."""
    from gate.checks.analysis import run_checks
    from gate.report.render import render_text
    from gate.run.results import load_results

    results = load_results(out / RESULTS)
    bad = results.vocabulary_problem(pair.target.vocab_size, str(out / RESULTS))
    if bad is not None:  # an id the target cannot score would be an IndexError deep in re-scoring
        raise SpecguardError(bad)
    out.clear()  # after the results loaded: a refused input leaves the earlier outputs alone
    session.say("analysing: re-scoring with the target, statistics, power simulations")
    checks = run_checks(results, pair, loaded.config, say=session.say)
    phases = session.phases
    phases.add("re-scoring", checks.rescoring_s)
    phases.add("statistics and power simulations", checks.analysis_s - checks.rescoring_s)
    with phases("report"):
        out.write_json(CHECKS, checks)
        out.write_text(CHECKS_MD, render_text(results, checks))
    session.say(f"wrote {out / CHECKS} and {out / CHECKS_MD}")
    return Checked(bool(checks.failing()) or results.status != "complete")


def check_command(session: Session, config: str, out: str | None, threads: int | None) -> int:
    """``specguard check``: the run's results, refused (before any model loads) unless made with this config."""
    from gate.inputs.config import load_config
    from gate.inputs.identity import refuse_unless_made_with
    from gate.run.results import load_results

    set_threads(threads)
    loaded = load_config(config)
    rundir = out_dir(loaded, out)
    refuse_unless_made_with(loaded, load_results(rundir / RESULTS).fingerprint, str(rundir / RESULTS))
    return exit_code(check(session, loaded, load_pair(session, loaded), rundir))


# --- compare: verdict.json and the page ----------------------------------------------------------


def compare(session: Session, out: RunDir, config, baseline_name: str | None, baselines_dir: Path,
            report_dir: RunDir | None = None, quiet: bool = False, record_phases: bool = False) -> Compared:
    """Judge a run against its baseline: the page (summary.md, speedup.png, comment.md), then verdict.json, read
    back."""
    from gate.checks.doc import load_checked, retokenized_note
    from gate.report.render import build_page, print_terminal, render_comment, render_details, render_summary, write_png
    from gate.verdict.baseline import is_baseline_file, lookup
    from gate.verdict.judge import judge, run_baseline_name
    from gate.verdict.summary import summarize

    started = time.perf_counter()
    results, checks = load_checked(out)  # checks.json of this very results.json, or exit 2 naming both
    dest = report_dir or out
    # The config's baseline name (what refresh writes under), even when --baseline names a file: it also names the
    # comment's marker.
    name = run_baseline_name(results, config) if not baseline_name or is_baseline_file(baseline_name) \
        else baseline_name
    stored = lookup(baselines_dir, name, results.fingerprint.hardware_key, baseline_name, config.baseline.history)
    dest.clear(COMPARED)  # the inputs loaded: now replace them
    head = summarize(results, checks, config, name)  # the run, once, as the judge sees it
    verdict = judge(head, stored, config.baseline)
    verdict = verdict.model_copy(update={"results_digest": results.digest, "checks_digest": checks.digest})
    page = build_page(results, checks, verdict, stored.baseline, name, links=_links(stored))
    dest.write_text(SUMMARY, render_summary(page, details=render_details(results, checks)))
    note = write_png(checks, dest / PNG)
    if note:
        session.say(note)
    dest.write_text(COMMENT, render_comment(page))
    if record_phases:  # the whole command's breakdown, before the verdict goes last
        session.phases.add("report", time.perf_counter() - started)
        session.write_phases(out)
    dest.write_json(VERDICT, verdict)  # last: its presence means the verdicts were written
    caveat = retokenized_note(checks)
    if quiet or session.verbosity == 0:
        print(f"specguard: {verdict.outcome.upper()}{' · ' + caveat if caveat else ''} — {verdict.headline}")
    else:
        print_terminal(verdict, note=caveat)
    session.say(f"wrote {dest / VERDICT}, {dest / COMMENT} and {dest / SUMMARY}")
    # A pass is what the file says, read back, not what this process believes.
    return Compared(verdict.outcome, verdict.outcome == "fail" or read_back(results, checks, dest))


def _links(stored) -> dict[str, str]:
    """The comment's links (in CI): the run, its artifact, the baseline file as the repository holds it, and the
    commit the baseline was measured at."""
    from gate.ci.github import run_links

    commit = (stored.baseline.source or {}).get("commit") if stored.baseline is not None else None
    return run_links(stored.path if stored.baseline is not None else None, commit)  # repository-relative


def read_back(results, checks, dest: RunDir) -> bool:
    """Whether ``verdict.json`` in ``dest`` is this run's (judged from these results and checks) and passed."""
    from gate.verdict.file import read_verdict

    got = read_verdict(dest / VERDICT, results.ref().model_dump(), digests={"results_digest": results.digest,
                                                                            "checks_digest": checks.digest})
    if not got.passed and got.outcome != "fail":
        print(f"error: {got.reason}", file=sys.stderr)
    return got.passed


def compare_command(session: Session, run_dir: str, config: str | None, baseline: str | None,
                    baselines_dir: str | None, report_dir: str | None, quiet: bool) -> int:
    """``specguard compare``: no model is loaded; the run's own config and recorded baseline name serve unless
    ``--config`` names the file (whose baseline.dir and name then serve)."""
    from gate.inputs.config import load_config
    from gate.run.results import load_results
    from gate.verdict.baseline import baselines_root

    out = RunDir(run_dir)
    loaded = load_config(config) if config else None
    name = baseline or (loaded.baseline_name if loaded is not None else None)  # else the run's own
    return exit_code(compare(session, out, config_of(load_results(out / RESULTS)), name,
                             baselines_root(baselines_dir, loaded=loaded), RunDir(report_dir) if report_dir else None,
                             quiet=quiet))


# --- refresh: the baseline -----------------------------------------------------------------------


def write_baseline(loaded, run_dir: RunDir, root: Path, force: bool, reason: str | None,
                   now: datetime | None = None) -> Path:
    """Derive the baseline of a run of this config, write it (the old one to history) and read it back; its
    path.  The clock and the commit are read here, once, and given to the derivation."""

    from gate.checks.doc import load_checked
    from gate.inputs.identity import refuse_unless_made_with
    from gate.verdict.baseline import BaselineStore, derive, failing_checks, hardware_of, load_baseline, measure

    if force and not reason:
        raise SpecguardError(Problem("specguard", "--force needs --reason: the baseline records why a failing "
                                     "run was accepted", field="--reason"))
    results, checks = load_checked(run_dir)
    refuse_unless_made_with(loaded, results.fingerprint, str(run_dir / RESULTS))
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    source = {"specguard": results.fingerprint.libraries.get("specguard"), "commit": os.environ.get("GITHUB_SHA"),
              "run_id": os.environ.get("GITHUB_RUN_ID")}
    baseline = derive(measure(results, checks, loaded.config), name=loaded.baseline_name,
                      hardware_key=results.fingerprint.hardware_key, hardware=hardware_of(results),
                      status=results.status, failing=failing_checks(checks), created_utc=stamp, source=source,
                      force_reason=reason if force else None, reason=reason)
    store = BaselineStore(root, loaded.baseline_name, loaded.config.baseline.history)
    path = store.write(baseline)
    if load_baseline(path).created_utc != baseline.created_utc:
        raise SpecguardError(Problem(str(path), "the baseline did not read back as written", hint="check the disk"))
    print(f"wrote {path}" + (f" (forced: {reason})" if baseline.forced else (f" (reason: {reason})" if reason
                                                                             else "")))
    return path


# --- gate: the whole command -----------------------------------------------------------------------


@dataclass
class GateOptions:
    run: RunOptions
    threads: int | None = None
    out: str | None = None
    against: str | None = None  # paired mode: the base config
    baselines_dir: str | None = None
    refresh: bool = False
    force: bool = False
    reason: str | None = None


def gate(session: Session, config: str, opts: GateOptions) -> tuple[int, Path | None]:
    """``specguard gate``: run, check, then compare with the baseline, or refresh it from this run.  The exit code
    (:func:`exit_code` of the stages' outcomes) and, with ``refresh``, the baseline written."""
    from gate.verdict.baseline import baselines_root

    if opts.refresh and opts.force and not opts.reason:  # before minutes of generation
        raise SpecguardError(Problem("specguard gate", "--force needs --reason: the baseline records why a failing "
                                     "run was accepted", field="--reason"))
    inputs = load_inputs(session, config, opts.out, opts.threads)
    with serving(session, inputs.loaded, inputs.out.path, opts.against) as servers:  # torn down after the run
        models = load_models(session, inputs, opts.against)
        ran = run(session, inputs, models, opts.run, servers)
    if ran is not Ran.COMPLETE:
        return exit_code(ran), None
    loaded, out = inputs.loaded, inputs.out
    checked = check(session, loaded, models.pair, out)
    baselines = baselines_root(opts.baselines_dir, loaded=loaded)
    if opts.refresh:
        # The checks of this run, not a judgement against the old baseline, decide; equivalence and distribution
        # must pass unless --force --reason.  Exit 0 only once the new baseline reads back.
        return exit_code(ran), write_baseline(loaded, out, baselines, opts.force, opts.reason)
    compared = compare(session, out, loaded.config, loaded.baseline_name, baselines, quiet=session.verbosity == 0,
                       record_phases=True)
    session.say(session.phases.render())
    return exit_code(ran, checked, compared), None


# --- deliver ---------------------------------------------------------------------------------------


def publish_refresh(loaded, run_dir: RunDir, root: Path, repo: Path, base_branch: str, branch: str | None,
                    open_pr: bool) -> str:
    """The refreshed baseline as one commit (written and pruned files), to the dispatched branch or to a refresh
    branch with a PR whose body says what changed; what was done, in a line."""
    import json

    from gate.ci.github import GitHub, step_outputs
    from gate.ci.publish import changed_files, committed_text, deliver_refresh, refresh_branch
    from gate.report.refresh import refresh_body
    from gate.run.results import load_results
    from gate.verdict.baseline import Baseline, BaselineStore, load_baseline
    from gate.verdict.history import render_history

    store = BaselineStore(root, loaded.baseline_name, loaded.config.baseline.history)
    written, deleted = changed_files(repo, store.dir)
    if not written and not deleted:
        return "the baseline did not change: nothing to publish"
    path = store.path_for(load_results(run_dir / RESULTS).fingerprint.hardware_key)
    new = load_baseline(path)
    old = None
    with contextlib.suppress(ValueError):
        text = committed_text(repo, path)
        old = Baseline.model_validate(json.loads(text)) if text else None
    message = f"specguard: refresh baseline {new.name} for {new.hardware_key}"
    if new.reason or new.forced:
        message += f"\n\nReason: {' '.join((new.forced.reason if new.forced else new.reason).split())}"
    body = refresh_body(old, new, render_history(store.history(new.hardware_key)))
    done = deliver_refresh(GitHub.from_env(), repo, written, deleted, message, base_branch,
                           refresh_branch(new.name, new.hardware_key), body, branch=branch, open_pr=open_pr)
    step_outputs(**{"pr-url": done.pr_url, "branch": done.branch, "commit": done.commit})
    return (f"pull request: {done.pr_url} (branch {done.branch}, commit {done.commit})" if done.pr_url else
            f"committed {done.commit} to branch {done.branch}")


__all__ = ["Checked", "Compared", "GateOptions", "Inputs", "Models", "Ran", "RunOptions", "Session", "Validation",
           "check", "compare", "exit_code", "gate", "load_inputs", "load_models", "merge", "publish_refresh", "run",
           "serving", "validate", "write_baseline"]
