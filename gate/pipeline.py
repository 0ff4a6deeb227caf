"""The gate's stages, each a function: load inputs → load models → run (results.json) → check (checks.json) →
compare (verdict.json, the page) → or refresh (the baseline).

The CLI parses arguments, calls these and maps what they return to exit codes.  What one command shares across
stages (how much it says, where its time went) is a :class:`Session`, passed in, never a module global.  Files
are named and written by :class:`gate.rundir.RunDir`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gate.documents import PhasesDoc
from gate.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, Problem, SpecguardError
from gate.rundir import (
    CHECKS,
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
    made_from,
)
from gate.timing import Phases

if TYPE_CHECKING:  # torch and transformers load with the stages that need them
    from gate.config import LoadedConfig
    from gate.models import ModelPair
    from gate.runner import PairedBase
    from gate.suite import Suite


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


# --- load inputs ---------------------------------------------------------------------------------


@dataclass
class Inputs:
    """Everything a run needs before any model loads: the config, its suite, the run directory, and the
    plug-in workers that already loaded (by engine label)."""

    loaded: LoadedConfig
    suite: Suite
    out: RunDir
    workers: dict = field(default_factory=dict)


def out_dir(loaded, flag: str | None) -> RunDir:
    return RunDir(flag if flag else loaded.resolve_path(loaded.config.output.dir))


def load_inputs(session: Session, config: str, out: str | None, threads: int | None = None) -> Inputs:
    """The config, its suite and the plug-ins, checked before minutes of model loading."""
    with session.phases("setup (imports, config, suite)"):
        # The imports a run needs (torch, transformers) count as setup, not as the first phase that uses them.
        import gate.cache
        import gate.engines
        import gate.models
        import gate.progress
        import gate.runner  # noqa: F401
        from gate.config import load_config
        from gate.suite import suite_for

        set_threads(threads)
        loaded = load_config(config)
        rundir = out_dir(loaded, out)
        suite = suite_for(loaded)
        workers: dict = {}
        bad_plugins = plugin_problems(loaded, log_dir=rundir.path, started=workers)
        if bad_plugins:
            raise SpecguardError(bad_plugins)
    return Inputs(loaded, suite, rundir, workers)


def plugin_problems(loaded, log_dir=None, started: dict | None = None) -> list:
    """Import every plug-in callable and check its signature (or that its entry point exists).

    A plug-in isolated in a process (the default) is imported in its own worker, never in the gate: a module
    that calls ``os._exit`` or prints workflow commands at import cannot end or speak for the gate.  Workers
    that loaded are kept in ``started`` (by engine label) for the run to use; without it they are stopped.
    """
    from gate.engines.plugin import EngineFailure, ProcessCallable, load_in_process

    problems = []
    for i, e in enumerate(loaded.config.engines):
        if e.type != "plugin":
            continue
        where = f"engines[{i}].callable"
        try:
            if (e.isolation or "process") == "process":
                fn = ProcessCallable(e.callable, str(loaded.source), e.label,
                                     log_path=Path(log_dir) / f"{e.label}.log" if log_dir else None,
                                     roots=loaded.import_roots(e))
                try:
                    fn.start()
                except (EngineFailure, SpecguardError) as exc:
                    said = _keep_log_if_written(Path(fn.log_path))  # a refused run adds no empty log to OUT
                    if isinstance(exc, SpecguardError):
                        raise
                    problems.append(Problem(str(loaded.source), f"the plug-in {e.callable!r} does not load: "
                                            f"{exc.message}", field=where,
                                            hint=f"its output is in {fn.log_path}" if said else
                                            "import it by hand to see why"))
                    continue
                if started is None:
                    fn.stop()
                else:
                    started[e.label] = fn
            else:
                load_in_process(e.callable, str(loaded.source), loaded.import_roots(e))
        except SpecguardError as exc:
            problems += [Problem(p.source, p.message, field=where, hint=p.hint) for p in exc.problems]
    return problems


def _keep_log_if_written(log: Path) -> bool:
    """True when the log holds output; an empty one is removed."""
    if log.is_file() and log.stat().st_size > 0:
        return True
    log.unlink(missing_ok=True)
    return False


def results_belong_to(loaded, results, source: str) -> None:
    """Refuse results.json made with another config, suite or models, before loading any model (exit 2)."""
    from gate import fingerprint as fp
    from gate.models import _location, fingerprint_model, resolve_device, resolve_dtype
    from gate.suite import suite_for

    differs = []
    if fp.digest(loaded.config.model_dump(mode="json")) != results.fingerprint.config:
        differs.append("config (its settings differ from the ones the run used)")
    suite = suite_for(loaded)
    if suite.fingerprint() != results.fingerprint.suite.fingerprint:
        differs.append(f"suite ({suite.name} {suite.fingerprint()} vs the run's {results.fingerprint.suite.name} "
                       f"{results.fingerprint.suite.fingerprint})")
    device = resolve_device(loaded.config.models.device)
    for role in ("target", "draft"):
        spec = getattr(loaded.config.models, role)
        ran = results.fingerprint.models.get(role)
        location = _location(loaded, spec)
        dtype = resolve_dtype(spec.dtype, device)
        if ran is None or fingerprint_model(location, spec, dtype) != ran.fingerprint:
            differs.append(f"{role} model ({location} is not the model the run used)")
    if differs:
        raise SpecguardError(Problem(source, "these results were not made with this config: " + "; ".join(differs),
                                     hint="run `specguard gate CONFIG` (or pass the --out of a run of this config)"))


def config_of(results):
    """The config a run was made with (``compare`` needs no config file)."""
    from gate.config import Config

    try:
        return Config.model_validate(results.config)
    except Exception:  # an older results file without its config: default rules
        models = {r: {"path": m.location} for r, m in results.fingerprint.models.items()}
        return Config.model_validate({"models": models})


# --- load models ---------------------------------------------------------------------------------


@dataclass
class Models:
    pair: ModelPair
    engines: list
    base: PairedBase | None = None  # paired mode: the base's draft and k, timed beside the head's


def load_models(session: Session, inputs: Inputs, against: str | None = None) -> Models:
    from gate.engines import build_engine
    from gate.models import load_pair

    loaded = inputs.loaded
    session.say(f"loading models: target {loaded.config.models.target.path}, draft {loaded.config.models.draft.path}")
    with session.phases("model load"):
        session.quiet_libraries()
        pair = load_pair(loaded)
        engines = [build_engine(e, pair, loaded, log_dir=inputs.out.path, callable_=inputs.workers.get(e.label))
                   for e in loaded.config.engines]
        base = paired_engine(against, loaded, pair, engines) if against else None
    return Models(pair, engines, base)


def load_pair(session: Session, loaded):
    """The model pair alone (``check``: the run is done, only re-scoring needs the target)."""
    from gate.models import load_pair

    with session.phases("model load"):
        session.quiet_libraries()
        return load_pair(loaded)


def paired_engine(against: str, loaded, pair, engines):
    """The base's speculative configuration, as an engine timed beside the head's (paired mode)."""
    from gate.config import load_config
    from gate.engines.speculative import SpeculativeEngine
    from gate.models import load_draft_for
    from gate.runner import PairedBase

    base = load_config(against)
    head_target, base_target = loaded.config.models.target, base.config.models.target
    if (loaded.resolve_path(head_target.path), head_target.dtype, head_target.revision) != \
            (base.resolve_path(base_target.path), base_target.dtype, base_target.revision):
        raise SpecguardError(Problem(str(base.source), "paired mode times the base's draft against the head's "
                                     "with one target; the two configs name different targets",
                                     field="models.target", hint="compare against the stored baseline instead"))
    if not any(e.name == "speculative" for e in engines):
        raise SpecguardError(Problem(str(loaded.source), "paired mode compares the gate's own engine: add "
                                     "`- type: speculative` to engines", field="engines"))
    draft = load_draft_for(base, pair)
    engine = SpeculativeEngine(pair.target.model, draft.model, pair.device)
    engine.name = "base-speculative"
    return PairedBase(engine=engine, head_engine="speculative", draft=draft,
                      num_draft_tokens=base.config.speculation.num_draft_tokens,
                      config=base.config.model_dump(mode="json"), source=str(base.source))


# --- run: results.json ---------------------------------------------------------------------------


@dataclass
class RunOptions:
    resume: bool = False
    no_cache: bool = False
    cache_dir: Path | None = None  # instead of output.cache_dir (the demo's, in the working directory)
    shard: tuple[int, int] | None = None
    hardware_key: str | None = None
    run_id: str | None = None


def run(session: Session, inputs: Inputs, models: Models, opts: RunOptions, servers: Sequence = ()) -> int:
    """Wait for the launched ``servers`` (:func:`serving`), clear the earlier outputs, run the engines: results.json
    and phases.json.  EXIT_OK, or EXIT_INTERRUPTED with the finished work kept."""
    import uuid

    from gate.cache import ReferenceCache
    from gate.engines import build_reference
    from gate.progress import for_terminal
    from gate.runner import RunInterrupted, Runner

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
                        run_id=opts.run_id or uuid.uuid4().hex)
        results = runner.run(resume=opts.resume)
    except RunInterrupted as stop:
        progress.close()
        session.write_phases(out)
        r = stop.results
        where = r.stopped_at.model_dump(exclude_none=True) if r.stopped_at else {}
        session.say(f"interrupted at {where}; {len(r.executions)} finished executions kept in "
                    f"{out / 'records.jsonl'}. Rerun with --resume to continue.")
        return EXIT_INTERRUPTED
    progress.close()
    session.write_phases(out)
    n = len(results.executions)
    reused = len(results.cache.get("reused", []))
    session.say(f"wrote {out / RESULTS} ({n} executions"
                + (f", {reused} reused from the reference cache" if reused else "") + ")")
    return EXIT_OK


@contextlib.contextmanager
def serving(session: Session, loaded, out: Path) -> Iterator[list]:
    """Launch every serving stack the config asks the gate to start, side by side and before the gate loads its
    own models (a stack takes minutes to load a model; the gate's load overlaps it); yields the launched servers,
    which :func:`run` waits for, and tears them all down on leaving, whatever happens."""
    from gate.engines.http import Server

    with contextlib.ExitStack() as stack:
        launched = []
        for i, e in enumerate(loaded.config.engines):
            if e.http is None:
                continue
            for role in ("server", "reference"):
                ep = getattr(e.http, role)
                if ep is None or not ep.launch:
                    continue
                session.say(f"starting {e.label} {role}: {' '.join(ep.launch)}")
                log = loaded.resolve_path(ep.log) if ep.log else out / f"{e.label}-{role}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                server = Server(list(ep.launch), ep.url, ep.health, ep.startup_timeout_s, dict(ep.env),
                                f"engines[{i}].http.{role}", log_path=log)
                stack.callback(server.stop)  # registered before the launch: a launch that fails midway is stopped
                launched.append(server.launch())
        yield launched


def merge(dirs: list[Path], out: RunDir):
    """The shards' results as one run of its own, written to ``out``; the merged Results."""
    import uuid

    from gate.merge import merge as merge_shards

    merged = merge_shards(dirs)
    merged = merged.model_copy(update={"run_id": uuid.uuid4().hex})  # the merged run is a run of its own
    out.clear(JUDGED + RUN)
    out.write_json(RESULTS, merged)
    return merged


# --- check: checks.json --------------------------------------------------------------------------


def check(session: Session, loaded, pair, out: RunDir) -> int:
    """Analyse results.json: checks.json and summary.md.  EXIT_FAIL when a check fails or the run is incomplete."""
    from gate.checks import run_checks
    from gate.report import render_text

    results = out.results()
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
        out.write_text(SUMMARY, render_text(results, checks))
    session.say(f"wrote {out / CHECKS} and {out / SUMMARY}")
    return EXIT_FAIL if checks.failing() or results.status != "complete" else EXIT_OK


# --- compare: verdict.json and the page ----------------------------------------------------------


def find_baseline(results, config, name: str | None, baselines_dir: Path):
    """(baseline, path, same hardware, other keys) for a name or a path.

    A name is looked up for this run's hardware key only: with none, (None, where it would be, True, the keys
    that do have one).  Another k or suite is no reason to refuse it (see ``gate.baseline.Comparability``);
    only an unusable baseline is (exit 3: ``gate.baseline.load_baseline``)."""
    from gate.baseline import BaselineStore, load_baseline
    from gate.compare import run_baseline_name

    hw = results.fingerprint.hardware_key
    if name and is_baseline_file(name):
        baseline = load_baseline(name)
        return baseline, str(name), baseline.hardware_key == hw, []
    store = BaselineStore(baselines_dir, name or run_baseline_name(results, config), config.baseline.history)
    path = store.find(hw)
    if path is None:
        return None, str(store.path_for(hw)), True, store.others(hw)
    return load_baseline(path), str(path), True, []


def is_baseline_file(name: str) -> bool:
    """``--baseline`` names a file (a path) rather than a baseline looked up by name."""
    return name.endswith(".json") or Path(name).is_file()


def compare(session: Session, out: RunDir, config, baseline_name: str | None, baselines_dir: Path,
            report_dir: RunDir | None = None, quiet: bool = False, record_phases: bool = False) -> int:
    """Compare a run with its baseline: the page (summary.md, speedup.png, comment.md), then verdict.json, read
    back.  The verdict's exit code, or EXIT_FAIL when the verdict did not read back as this run's pass."""
    from gate.baseline import summarize
    from gate.checksdoc import retokenized_note
    from gate.compare import compare as judge
    from gate.report import build_page, print_terminal, render_comment, render_details, render_summary, write_png
    started = time.perf_counter()
    results, checks = out.judged()  # checks.json of this very results.json, or exit 2 naming both
    from gate.compare import run_baseline_name

    dest = report_dir or out
    # The config's baseline name (what refresh writes under), even when --baseline names a file: it also names the
    # comment's marker.
    name = run_baseline_name(results, config) if not baseline_name or is_baseline_file(baseline_name) \
        else baseline_name
    baseline, path, same, others = find_baseline(results, config, baseline_name or name, baselines_dir)
    dest.clear(COMPARED)  # the inputs loaded: now replace them
    head = summarize(results, checks, config, name)  # the head's measurements, once, as a baseline holds them
    verdict = judge(head, baseline, results, checks, config, baseline_path=path, same_hardware=same, others=others,
                    name=name)
    verdict = verdict.model_copy(update={"run": results.ref(), "results_digest": results.digest,
                                         "checks_digest": checks.digest})
    # The marker names the config (its baseline name), never a baseline file's own name field, nor a --baseline path.
    page = build_page(results, checks, verdict, baseline, name)
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
    if verdict.exit_code == EXIT_OK:  # a pass is what the file says, read back, not what this process believes
        return read_back(results, checks, dest) or EXIT_OK
    return verdict.exit_code


def read_back(results, checks, dest: RunDir) -> int | None:
    """None when ``verdict.json`` in ``dest`` is this run's (judged from these results and checks) and passed; else
    the exit code to return instead."""
    from gate.verdictfile import read_verdict

    got = read_verdict(dest / VERDICT, results.ref().model_dump(), digests={"results_digest": results.digest,
                                                                            "checks_digest": checks.digest})
    if got.passed:
        return None
    if got.outcome != "fail":
        print(f"error: {got.reason}", file=sys.stderr)
    return EXIT_FAIL


# --- refresh: the baseline -----------------------------------------------------------------------


def write_baseline(loaded, results, run_dir: RunDir, root: Path, force: bool, reason: str | None) -> Path:
    """Derive the baseline of a run, write it (the old one to history) and read it back; its path."""
    from gate.baseline import BaselineStore, derive, load_baseline

    if force and not reason:
        raise SpecguardError(Problem("specguard", "--force needs --reason: the baseline records why a failing "
                                     "run was accepted", field="--reason"))
    checks = run_dir.checks()
    made_from(checks, results, run_dir / CHECKS, run_dir / RESULTS)
    baseline = derive(results, checks, loaded.config, loaded.baseline_name,
                      force_reason=reason if force else None, reason=reason)
    store = BaselineStore(root, loaded.baseline_name, loaded.config.baseline.history)
    path = store.write(baseline)
    if load_baseline(path).created_utc != baseline.created_utc:
        raise SpecguardError(Problem(str(path), "the baseline did not read back as written", hint="check the disk"))
    print(f"wrote {path}" + (f" (forced: {reason})" if baseline.forced else (f" (reason: {reason})" if reason
                                                                             else "")))
    return path
