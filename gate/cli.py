"""The ``specguard`` command line.

Exit codes (one table, also in the README and ``--help``):

==== ===============================================================================
0    pass, or neutral (no baseline to compare with yet): verdicts were written
1    a check failed or a regression was found (or the run is incomplete)
2    bad input: config, suite, model, results, arguments
3    the baseline is unusable: corrupt, or another schema version (another suite or k is compared, not refused)
130  interrupted: finished work is kept; rerun with ``--resume``
==== ===============================================================================
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gate import __version__
from gate.errors import Problem, SpecguardError

if TYPE_CHECKING:
    from gate.checksdoc import ChecksDoc

DEMO_CONFIG = Path(__file__).resolve().parent / "demo" / "specguard.yaml"

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_BASELINE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_CODES = ("Exit codes: 0 pass (or neutral: no baseline yet), 1 a check failed or a regression was found, "
              "2 bad input, 3 the baseline is unusable, 130 interrupted.")

# Outputs of one run directory, in the order they are written; the verdict files come last.
RUN_OUTPUTS = ("checks.json", "summary.md", "speedup.png", "comment.md", "verdict.json")
# What a new run (not a resume) clears besides: the previous run's results must never be judged as this one's.
RUN_RESULTS = ("results.json",)


# 0: only the verdict (-q); 1: progress and the report (default); 2: also the libraries' own output (-v)
_VERBOSITY = 1
_PHASES = None  # gate.timing.Phases of the command being run


def _say(msg: str) -> None:
    if _VERBOSITY >= 1:
        print(msg, file=sys.stderr, flush=True)


def _phases():
    global _PHASES
    if _PHASES is None:
        from gate.timing import Phases

        _PHASES = Phases()
    return _PHASES


def _quiet_libraries() -> None:
    """transformers' weight-loading progress bars would interleave with the gate's own progress; -v keeps them."""
    if _VERBOSITY >= 2:
        return
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _hardware_key(text: str) -> str:
    from gate.config import HARDWARE_KEY

    if not HARDWARE_KEY.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected 1-100 characters from [a-z0-9_.-], got {text!r}")
    return text


def _threads(args) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def cmd_validate(args) -> int:
    from gate.config import check_paths, load_config
    from gate.suite import suite_for

    problems, suite = [], None
    try:
        loaded = load_config(args.config)
    except SpecguardError as exc:
        problems += exc.problems
        loaded = None
    problems += check_paths(args.config)
    if loaded is not None and not any(p.field == "suite.path" for p in problems):
        try:
            suite = suite_for(loaded)
        except SpecguardError as exc:
            problems += exc.problems
    if loaded is not None:
        problems += plugin_problems(loaded)
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return EXIT_USAGE
    from gate.config import model_notes

    for note in model_notes(args.config):
        print(f"note: {note}")
    print(f"{args.config}: OK ({len(suite.prompts)} prompts in {len(suite.slices)} slices: "
          f"{', '.join(suite.slices)})")
    return EXIT_OK


def plugin_problems(loaded, log_dir=None, started: dict | None = None) -> list:
    """Import every plug-in callable and check its signature (or that its entry point exists).

    A plug-in isolated in a process (the default) is imported in its own worker, never in the gate: a module
    that calls ``os._exit`` or prints workflow commands at import cannot end or speak for the gate.  Workers
    that loaded are kept in ``started`` (by engine label) for the run to use; without it they are stopped.
    """
    from gate.engines.plugin import EngineFailure, ProcessCallable, load_callable

    problems = []
    for i, e in enumerate(loaded.config.engines):
        if e.type != "plugin":
            continue
        where = f"engines[{i}].callable"
        try:
            if (e.isolation or "process") == "process":
                fn = ProcessCallable(e.callable, str(loaded.source), e.label,
                                     log_path=Path(log_dir) / f"{e.label}.log" if log_dir else None)
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
                load_callable(e.callable, str(loaded.source))
        except SpecguardError as exc:
            problems += [Problem(p.source, p.message, field=where, hint=p.hint) for p in exc.problems]
    return problems


def _keep_log_if_written(log: Path) -> bool:
    """True when the log holds output; an empty one is removed."""
    if log.is_file() and log.stat().st_size > 0:
        return True
    log.unlink(missing_ok=True)
    return False


def _out_dir(args, loaded) -> Path:
    return Path(args.out) if args.out else loaded.resolve_path(loaded.config.output.dir)


def _clear_outputs(out: Path, names=RUN_OUTPUTS) -> None:
    """A run's outputs are a set: stale ones from an earlier run must not sit beside new ones.

    Called only once the inputs validated, so a run refused for bad input leaves the earlier outputs as they
    were; a symlink planted under an output's name is removed, not followed.
    """
    for name in names:
        try:
            (out / name).unlink(missing_ok=True)
        except IsADirectoryError:
            raise SpecguardError(Problem(str(out / name), "a directory sits where the gate writes an output file",
                                         hint="remove it, or pass another --out")) from None


def _run_id(args) -> str:
    import uuid

    return getattr(args, "run_id", None) or uuid.uuid4().hex


def _read_back(out: Path, results, dest: Path | None = None) -> int | None:
    """None when ``verdict.json`` in ``dest`` is this run's and passed; else the exit code to return instead."""
    from gate.verdictfile import read_verdict

    fp = results.fingerprint
    got = read_verdict((dest or out) / "verdict.json", {"id": results.run_id, "config": fp.config,
                                                        "suite": fp.suite.fingerprint})
    if got.passed:
        return None
    if got.outcome != "fail":
        print(f"error: {got.reason}", file=sys.stderr)
    return EXIT_FAIL


def _run(args, paired=None):
    """Load everything and run the engines; returns (exit code, loaded config, model pair, out dir)."""
    phases = _phases()
    with phases("setup (imports, config, suite)"):
        from gate.cache import ReferenceCache
        from gate.config import load_config
        from gate.engines import build_engine, build_reference
        from gate.models import load_pair
        from gate.progress import for_terminal
        from gate.runner import RunInterrupted, Runner
        from gate.suite import suite_for

        _threads(args)
        loaded = load_config(args.config)
        out = _out_dir(args, loaded)
        suite = suite_for(loaded)
        workers: dict = {}
        bad_plugins = plugin_problems(loaded, log_dir=out, started=workers)  # before minutes of model loading
        if bad_plugins:
            raise SpecguardError(bad_plugins)
    _say(f"loading models: target {loaded.config.models.target.path}, draft {loaded.config.models.draft.path}")
    with phases("model load"):
        _quiet_libraries()
        pair = load_pair(loaded)
        engines = [build_engine(e, pair, loaded, log_dir=out, callable_=workers.get(e.label))
                   for e in loaded.config.engines]
        base = paired_engine(args.against, loaded, pair, engines) if getattr(args, "against", None) else None
    cache_dir = getattr(args, "demo_cache_dir", None) or (
        loaded.resolve_path(loaded.config.output.cache_dir) if loaded.config.output.cache_dir else None)
    cache = None if (args.no_cache or not cache_dir) else ReferenceCache(cache_dir)
    progress = for_terminal(_say, quiet=_VERBOSITY == 0)
    try:
        with contextlib.ExitStack() as servers:
            with phases("server start"):
                start_servers(loaded, out, servers)
            # Every input loaded and every server answers: from here no output of an earlier run may be judged
            # as this one's.  (A model that fails to load, or a server that never starts, leaves them as they were.)
            _clear_outputs(out, RUN_OUTPUTS + RUN_RESULTS)
            runner = Runner(loaded, pair, suite, build_reference(pair, loaded), engines, out, log=_say, cache=cache,
                            paired=base, phases=phases, progress=progress, shard=getattr(args, "shard", None),
                            hardware_key=getattr(args, "hardware_key", None), run_id=_run_id(args))
            results = runner.run(resume=args.resume)
    except RunInterrupted as stop:
        progress.close()
        r = stop.results
        where = r.stopped_at.model_dump(exclude_none=True) if r.stopped_at else {}
        _say(f"interrupted at {where}; {len(r.executions)} finished executions kept in {out / 'records.jsonl'}. "
             "Rerun with --resume to continue.")
        return EXIT_INTERRUPTED, loaded, pair, out
    progress.close()
    n = len(results.executions)
    reused = len(results.cache.get("reused", []))
    _say(f"wrote {out / 'results.json'} ({n} executions"
         + (f", {reused} reused from the reference cache" if reused else "") + ")")
    return EXIT_OK, loaded, pair, out


def start_servers(loaded, out: Path, stack: contextlib.ExitStack) -> None:
    """Launch the serving stacks the config asks the gate to start; the stack tears them down, whatever happens."""
    from gate.engines.http import Server

    for i, e in enumerate(loaded.config.engines):
        if e.http is None:
            continue
        for role in ("server", "reference"):
            ep = getattr(e.http, role)
            if ep is None or not ep.launch:
                continue
            _say(f"starting {e.label} {role}: {' '.join(ep.launch)}")
            log = loaded.resolve_path(ep.log) if ep.log else out / f"{e.label}-{role}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(Server(list(ep.launch), ep.url, ep.health, ep.startup_timeout_s, dict(ep.env),
                                       f"engines[{i}].http.{role}", log_path=log))


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


def _check(loaded, pair, out: Path) -> int:
    from gate.checks import run_checks
    from gate.report import render_text
    from gate.results import atomic_write_json, atomic_write_text, load_results

    results = load_results(out)
    _clear_outputs(out)  # after the results loaded: a refused input leaves the earlier outputs alone
    _say("analysing: re-scoring with the target, statistics, power simulations")
    checks = run_checks(results, pair, loaded.config, say=_say)
    phases = _phases()
    phases.add("re-scoring", checks.rescoring_s)
    phases.add("statistics and power simulations", checks.analysis_s - checks.rescoring_s)
    with phases("report"):
        atomic_write_json(out / "checks.json", checks)
        atomic_write_text(out / "summary.md", render_text(results, checks))
    _say(f"wrote {out / 'checks.json'} and {out / 'summary.md'}")
    return EXIT_FAIL if checks.failing() or results.status != "complete" else EXIT_OK


def _find_baseline(results, config, name: str | None, baselines_dir: Path):
    """(baseline, path, same hardware, other keys) for a name or a path.

    A name is looked up for this run's hardware key only: with none, (None, where it would be, True, the keys
    that do have one).  Another k or suite is no reason to refuse it (see ``gate.baseline.Comparability``);
    only a corrupt baseline or another schema is (exit 3)."""
    from gate.baseline import BaselineStore, load_baseline

    hw = results.fingerprint.hardware_key
    if name and (name.endswith(".json") or Path(name).is_file()):
        _screen_baseline(Path(name))
        baseline = load_baseline(name)
        return baseline, str(name), baseline.hardware_key == hw, []
    store = BaselineStore(baselines_dir, name or config.baseline.name or "specguard", config.baseline.history)
    path = store.find(hw)
    if path is None:
        return None, str(store.path_for(hw)), True, store.others(hw)
    _screen_baseline(path)
    return load_baseline(path), str(path), True, []


def _screen_baseline(path: Path) -> None:
    """Refuse, with exit 3, a baseline that is not a regular file, is too large, is nested too deeply or holds a
    NaN or an infinity (no baseline the gate writes does): before its schema is read."""
    from gate.baseline import BaselineError
    from gate.errors import parse_json, read_input

    hint = "refresh it: run the refresh workflow, or `specguard baseline refresh CONFIG --from RUN_DIR`"
    if not path.exists():
        return
    try:
        doc = parse_json(read_input(path, BaselineError, "baseline", hint, limit=64 << 20), BaselineError,
                         str(path), "the baseline", hint)
    except BaselineError as exc:
        if exc.problems[0].message.startswith("not valid JSON"):
            return  # load_baseline says "corrupt baseline", with the line
        raise
    stack = [(doc, "")]
    while stack:  # a baseline holds measurements: counts, rates, ratios, seconds; none is negative
        node, where = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and (
                node < 0 or (node == 0 and where.endswith(("tokens_per_target_forward", "mean_accepted_length")))):
            raise BaselineError(Problem(str(path), f"expected a measurement > 0 here, got {node}", field=where,
                                        hint=hint))


def _compare(out: Path, config, baseline_name: str | None, baselines_dir: Path, report_dir: Path | None = None,
             quiet: bool = False, record_phases: bool = False) -> int:
    from gate.checksdoc import retokenized_note
    from gate.compare import Paired, compare
    from gate.report import build_page, print_terminal, render_comment, render_summary, render_text, write_png
    from gate.results import atomic_write_json, atomic_write_text, load_results

    started = time.perf_counter()
    results = load_results(out)
    checks = read_checks(out)
    dest = report_dir or out
    name = baseline_name or config.baseline.name or "specguard"
    paired = None
    if results.paired:
        p = results.paired
        paired = Paired(engine=p["engine"], head_engine=p["head_engine"], k=p["num_draft_tokens"],
                        calibration=p.get("calibration", {}), config=p.get("config", {}))
    baseline, path, same, others = _find_baseline(results, config, name, baselines_dir)
    _clear_outputs(dest, ("speedup.png", "comment.md", "verdict.json"))  # the inputs loaded: now replace them
    from gate.verdictdoc import RunRef

    verdict = compare(results, checks, config, baseline=baseline, baseline_path=path, same_hardware=same,
                      paired=paired, others=others)
    verdict = verdict.model_copy(update={"run": RunRef(id=results.run_id, config=results.fingerprint.config,
                                                       suite=results.fingerprint.suite.fingerprint)})
    # The marker names the config (its baseline name), never a baseline file's own name field, nor a --baseline path.
    by_path = bool(baseline_name) and (baseline_name.endswith(".json") or Path(baseline_name).is_file())
    page = build_page(results, checks, verdict, baseline, (config.baseline.name or "specguard") if by_path else name)
    atomic_write_text(dest / "summary.md", render_summary(page, details=render_text(results, checks).split("\n", 1)[1]))
    note = write_png(checks, dest / "speedup.png")
    if note:
        _say(note)
    atomic_write_text(dest / "comment.md", render_comment(page))
    if record_phases:  # the whole command's breakdown, into results.json, before the verdict goes last
        phases = _phases()
        phases.add("report", time.perf_counter() - started)
        atomic_write_json(out / "results.json", results.model_copy(update={"phases": phases.to_dict()}))
    atomic_write_json(dest / "verdict.json", verdict)  # last: its presence means the verdicts were written
    caveat = retokenized_note(checks)
    if quiet or _VERBOSITY == 0:
        print(f"specguard: {verdict.outcome.upper()}{' · ' + caveat if caveat else ''} — {verdict.headline}")
    else:
        print_terminal(verdict, note=caveat)
    _say(f"wrote {dest / 'verdict.json'}, {dest / 'comment.md'} and {dest / 'summary.md'}")
    if verdict.exit_code == EXIT_OK:  # a pass is what the file says, read back, not what this process believes
        return _read_back(out, results, dest) or EXIT_OK
    return verdict.exit_code


def read_checks(run_dir: Path) -> ChecksDoc:
    """checks.json of a run directory, validated against its schema."""
    from pydantic import ValidationError

    from gate.checksdoc import ChecksDoc

    path = run_dir / "checks.json"
    hint = "run `specguard check CONFIG` (or `specguard gate CONFIG`) to write it"
    from gate.errors import parse_json, read_input

    doc = parse_json(read_input(path, SpecguardError, "checks file", hint), SpecguardError, str(path),
                     "the checks file", hint, allow_nan=True)
    try:
        return ChecksDoc.model_validate(doc)
    except RecursionError:
        raise SpecguardError(Problem(str(path), "the checks file is nested too deeply to read", hint=hint)) from None
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        raise SpecguardError(Problem(str(path), f"corrupt checks: {e['msg']}",
                                     field=".".join(str(x) for x in e["loc"]) or None, hint=hint)) from None


def _verdict_says(out: Path) -> str | None:
    from gate.verdictdoc import VerdictDoc

    try:
        return VerdictDoc.model_validate_json((out / "verdict.json").read_bytes()).outcome
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


def _config_of(results):
    from gate.config import Config

    try:
        return Config.model_validate(results.config)
    except Exception:  # an older results file without its config: default rules
        models = {r: {"path": m.location} for r, m in results.fingerprint.models.items()}
        return Config.model_validate({"models": models})


def cmd_run(args) -> int:
    return _run(args)[0]


def cmd_merge(args) -> int:
    import uuid

    from gate.merge import merge
    from gate.results import atomic_write_json

    merged = merge([Path(d) for d in args.dirs])
    merged = merged.model_copy(update={"run_id": uuid.uuid4().hex})  # the merged run is a run of its own
    out = Path(args.out)
    _clear_outputs(out, RUN_OUTPUTS + RUN_RESULTS)
    atomic_write_json(out / "results.json", merged)
    print(f"wrote {out / 'results.json'} ({len(merged.executions)} executions from {len(args.dirs)} shards); "
          f"now `specguard check CONFIG --out {out}` and `specguard compare {out}`")
    return EXIT_OK


def _run_id_arg(text: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", text):
        raise argparse.ArgumentTypeError(f"expected letters, digits, '.', '_' or '-' (at most 128), got {text!r}")
    return text


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected INDEX/COUNT such as 0/4, got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise argparse.ArgumentTypeError(f"expected 0 <= INDEX < COUNT, got {text!r}")
    return i, n


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


def cmd_check(args) -> int:
    from gate.config import load_config
    from gate.models import load_pair
    from gate.results import load_results

    _threads(args)
    loaded = load_config(args.config)
    out = _out_dir(args, loaded)
    results_belong_to(loaded, load_results(out), str(out / "results.json"))  # before any model is loaded
    with _phases()("model load"):
        _quiet_libraries()
        pair = load_pair(loaded)
    return _check(loaded, pair, out)


def baselines_root(flag: str | None, config_path: str | None = None, loaded=None) -> Path:
    """The one rule every command uses for where baselines live: the command's own flag, else ``baseline.dir``
    of the config (given, or ``--config``), else ``./baselines``."""
    if flag:
        return Path(flag)
    if loaded is None and config_path:
        from gate.config import load_config

        loaded = load_config(config_path)
    if loaded is not None:
        return loaded.resolve_path(loaded.config.baseline.dir)
    return Path("baselines")


def cmd_compare(args) -> int:
    from gate.results import load_results

    out = Path(args.run_dir)
    config = _config_of(load_results(out))
    return _compare(out, config, args.baseline, baselines_root(args.baselines_dir, args.config),
                    Path(args.out) if args.out else None, quiet=args.quiet)


def cmd_gate(args) -> int:
    if getattr(args, "refresh", False) and args.force and not args.reason:  # before minutes of generation
        raise SpecguardError(Problem("specguard gate", "--force needs --reason: the baseline records why a failing "
                                     "run was accepted", field="--reason"))
    code, loaded, pair, out = _run(args)
    if code != EXIT_OK:
        return code
    checked = _check(loaded, pair, out)
    if getattr(args, "refresh", False):
        return _refresh_from(args, loaded, out)
    baselines = baselines_root(getattr(args, "baselines_dir", None), loaded=loaded)
    compared = _compare(out, loaded.config, loaded.baseline_name, baselines, quiet=getattr(args, "quiet", False),
                        record_phases=True)
    _say(_phases().render())
    if compared != EXIT_OK:
        return compared
    return checked  # compared is 0 only once _compare read back a passing verdict.json of this run


def _refresh_from(args, loaded, out: Path) -> int:
    """``gate --refresh``: the checks of this run, not a judgement against the old baseline, decide; equivalence
    and distribution must pass unless ``--force --reason``.  Exit 0 only once the new baseline reads back."""
    from gate.results import load_results

    root = Path(args.baselines_dir) if getattr(args, "baselines_dir", None) else None
    path = _write_baseline(loaded, load_results(out), out, root, args.force, args.reason)
    _github_output(**{"baseline-path": str(path)})
    return EXIT_OK


def _write_baseline(loaded, results, run_dir: Path, root: Path | None, force: bool, reason: str | None) -> Path:
    """Derive the baseline of a run, write it (the old one to history) and read it back; its path."""
    from gate.baseline import BaselineStore, derive, load_baseline

    if force and not reason:
        raise SpecguardError(Problem("specguard", "--force needs --reason: the baseline records why a failing "
                                     "run was accepted", field="--reason"))
    baseline = derive(results, read_checks(run_dir), loaded.config, loaded.baseline_name,
                      force_reason=reason if force else None, reason=reason)
    store = BaselineStore(root or loaded.resolve_path(loaded.config.baseline.dir), loaded.baseline_name,
                          loaded.config.baseline.history)
    path = store.write(baseline)
    if load_baseline(path).created_utc != baseline.created_utc:
        raise SpecguardError(Problem(str(path), "the baseline did not read back as written", hint="check the disk"))
    print(f"wrote {path}" + (f" (forced: {reason})" if baseline.forced else (f" (reason: {reason})" if reason
                                                                             else "")))
    return path


def cmd_demo(args) -> int:
    args.config = str(DEMO_CONFIG)
    args.out = args.out or "specguard-out"
    # The demo's committed baselines are this repository's baselines/ (run from its root).
    args.baselines_dir = args.baselines_dir or "baselines"
    # The reference cache lives in the working directory, not beside the packaged config (site-packages).
    args.demo_cache_dir = Path(".specguard-cache")
    return cmd_gate(args)


def cmd_baseline_refresh(args) -> int:
    from gate.config import load_config
    from gate.results import load_results

    loaded = load_config(args.config)
    run_dir = Path(args.from_dir)
    results = load_results(run_dir)
    ours = results.config and loaded.config.model_dump(mode="json") == results.config
    if not ours:
        raise SpecguardError(Problem(str(run_dir / "results.json"), f"this run was not made with {args.config} "
                                     "(its config differs)", field="config",
                                     hint="run `specguard gate CONFIG` and refresh from that run's directory"))
    _write_baseline(loaded, results, run_dir, Path(args.dir) if args.dir else None, args.force, args.reason)
    return EXIT_OK


def cmd_baseline_history(args) -> int:
    from gate.baseline import BaselineStore
    from gate.history import render_history

    store = BaselineStore(baselines_root(args.dir, args.config), args.name)
    docs = store.history(args.hardware)
    if not docs:
        raise SpecguardError(Problem(str(store.dir), f"no baselines named {args.name!r}",
                                     hint="refresh one first: `specguard baseline refresh CONFIG --from RUN_DIR`"))
    print(render_history(docs))
    return EXIT_OK


def _github_output(**values: str) -> None:
    """Step outputs for GitHub Actions ($GITHUB_OUTPUT), when running there."""
    import os

    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        for k, v in values.items():
            fh.write(f"{k}={' '.join(str(v).split())}\n")


def cmd_changed(args) -> int:
    from gate.changed import detect

    change = detect(Path(args.repo), args.config, args.base, args.head)
    if change.changed:
        print(f"changed: the gate guards what this change touched ({len(change.reasons)} reason(s)):")
        for r in change.reasons[:50]:
            print(f"  - {r}")
    else:
        print("unchanged: no draft, target, speculation or batching change; the gate can be skipped")
    _github_output(changed="true" if change.changed else "false")
    return EXIT_OK


def cmd_github_comment(args) -> int:
    import os

    from gate.github import GitHub, GitHubError
    from gate.publish import FORK_REFUSAL, notice, post

    args.name = _comment_name(args.config)
    if args.run_dir:
        run = Path(args.run_dir)
        body = (run / "comment.md").read_text(encoding="utf-8") if (run / "comment.md").is_file() else None
        outcome = _verdict_says(run)
        if body is None or outcome is None:
            body = notice(args.name, "fail", "The gate wrote no verdict", "The run stopped before its verdicts were "
                          "written (bad input, an unusable baseline, or an interruption): see the job log.")
            outcome = "fail"
    elif args.refused:
        body, outcome = notice(args.name, "fail", "Refused: a fork's pull request", FORK_REFUSAL), "fail"
    elif args.setup_failed is not None:
        body = notice(args.name, "fail", "The gate could not start on this runner",
                      (args.setup_failed or "setting up specguard failed") + " (see the job log).")
        outcome = "fail"
    else:
        body, outcome = notice(args.name, "skipped", "Skipped: nothing the gate guards changed",
                               "No draft, target, speculation or batching change in this pull request."), "skipped"
    try:
        gh = GitHub.from_env()
    except GitHubError as exc:
        print(f"::warning title=specguard::not commenting: {exc.problems[0]}")
        return EXIT_OK
    posted = post(gh, args.pr, body, outcome, args.when, name=args.name,
                  author=os.environ.get("SPECGUARD_COMMENT_AUTHOR") or None, update_only=args.update_only)
    print(f"comment: {posted.action}" + (f" {posted.url}" if posted.url else "")
          + (f" ({posted.reason})" if posted.reason else ""))
    _github_output(**{"comment-url": posted.url})
    return EXIT_OK


def _comment_name(config: str | None) -> str:
    """The config's baseline name: it names the comment's marker. An unreadable config still gets its stem."""
    from gate.config import load_config

    if not config:
        return "specguard"
    try:
        return load_config(config).baseline_name
    except SpecguardError:
        import re

        return re.sub(r"[^A-Za-z0-9_.-]", "-", Path(config).stem)[:64] or "specguard"


def cmd_github_refresh_pr(args) -> int:
    from gate.baseline import BaselineStore
    from gate.config import load_config
    from gate.github import GitHub
    from gate.publish import changed_files, open_refresh_pr
    from gate.results import load_results

    loaded = load_config(args.config)
    results = load_results(Path(args.run_dir))
    root = baselines_root(args.dir, loaded=loaded)
    store = BaselineStore(root, loaded.baseline_name, loaded.config.baseline.history)
    repo = Path(args.repo).resolve()
    written, deleted = changed_files(repo, store.dir)
    if not written and not deleted:
        print("the baseline did not change: nothing to publish")
        return EXIT_OK
    done = open_refresh_pr(GitHub.from_env(), repo, store.path_for(results.fingerprint.hardware_key), written,
                           deleted, args.base_branch, branch=args.branch, open_pr=not args.push_only)
    if done.pr_url:
        print(f"pull request: {done.pr_url} (branch {done.branch}, commit {done.commit})")
    else:
        print(f"committed {done.commit} to branch {done.branch}")
    _github_output(**{"pr-url": done.pr_url, "branch": done.branch, "commit": done.commit})
    return EXIT_OK


def cmd_selftest(args) -> int:
    from gate.selftest import selftest

    _threads(args)
    _quiet_libraries()
    mutants = args.mutant or None
    report = selftest(seeds=args.seeds, samples=args.samples, mutants=mutants, say=_say)
    if args.json:
        print(json.dumps({"mutants": [{k: m[k] for k in ("name", "caught", "caught_by")}
                                      for m in report["mutants"]],
                          "correct_engine": {k: report["correct_engine"][k]
                                             for k in ("passed", "false_alarms", "runs")}}))
    else:
        for m in report["mutants"]:
            print(f"{'caught ' if m['caught'] else 'ESCAPED'} {m['name']:<26} {', '.join(m['caught_by'])}")
        c = report["correct_engine"]
        print(f"correct engine: {c['false_alarms']} false alarm(s) in {c['runs']} run(s)")
    return EXIT_OK if report["passed"] else EXIT_FAIL


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specguard",
        description="A merge gate for speculative decoding: checks that speculative output matches the "
                    "non-speculative reference at production batch sizes (telling bugs from float noise), "
                    "reports reproducibility on its own line, measures speedup per task slice, load level and "
                    "context length, and compares all of it with a committed baseline.",
        epilog=EXIT_CODES,
    )
    p.add_argument("--version", action="version", version=f"specguard {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = sub.add_parser("validate", help="check a config and the suite it names; print every problem at once")
    v.add_argument("config", help="path to specguard.yaml")
    v.set_defaults(fn=cmd_validate)

    def generation_args(q, config: bool = True):
        if config:
            q.add_argument("config", help="path to specguard.yaml")
        q.add_argument("--out", help="output directory (default: output.dir from the config; "
                                     "specguard-out for demo)")
        q.add_argument("--resume", action="store_true", help="reuse finished executions of an interrupted run")
        q.add_argument("--no-cache", action="store_true", help="do not read or write the reference cache")
        q.add_argument("--threads", type=_positive_int, help="torch CPU threads (default: torch's choice)")
        q.add_argument("--hardware-key", type=_hardware_key, metavar="KEY",
                       help="the key this runner's baseline is stored and looked up under (default: "
                            "baseline.hardware_key, else read off the hardware, e.g. cuda-nvidia-h100-80gb-hbm3)")
        q.add_argument("--run-id", type=_run_id_arg, help="this run's id, written into results.json and "
                       "verdict.json (default: a random one); `python -m gate.verdictfile OUT --run-id ID` "
                       "checks that a passing verdict of this run exists")
        talk(q)

    def talk(q):
        if any(a.dest == "quiet" for a in q._actions):
            return
        q.add_argument("-q", "--quiet", action="store_true", help="print only the verdict")
        q.add_argument("-v", "--verbose", action="store_true", help="also show the libraries' own output "
                                                                     "(weight-loading bars)")

    r = sub.add_parser("run", help="generate with every engine at every batch size; write results.json")
    generation_args(r)
    r.add_argument("--shard", type=_shard, metavar="INDEX/COUNT", help="run only this shard's part (equivalence "
                   "batches, whole timing cells, sampling groups), for a job matrix; combine with `merge`")
    r.set_defaults(fn=cmd_run)

    mg = sub.add_parser("merge", help="combine the results.json of every shard of a run into one")
    mg.add_argument("dirs", nargs="+", metavar="SHARD_DIR", help="the shards' output directories")
    mg.add_argument("--out", required=True, help="where the merged results.json goes")
    mg.set_defaults(fn=cmd_merge)

    c = sub.add_parser("check", help="analyse results.json (re-scoring with the target); write checks.json "
                                     "and summary.md; exit 1 if a check fails")
    c.add_argument("config", help="path to specguard.yaml")
    c.add_argument("--out", help="directory holding results.json (default: output.dir from the config)")
    c.add_argument("--threads", type=_positive_int, help="torch CPU threads (default: torch's choice)")
    talk(c)
    c.set_defaults(fn=cmd_check)

    m = sub.add_parser("compare", help="compare a run (results.json + checks.json) with its baseline; write "
                                       "verdict.json, comment.md, summary.md (no model is loaded)")
    m.add_argument("run_dir", metavar="RUN_DIR", help="directory holding results.json and checks.json")
    m.add_argument("--baseline", help="a baseline file, or a baseline name looked up in --baselines-dir for this "
                                      "run's hardware (default: baseline.name from the run's config)")
    m.add_argument("--baselines-dir", help="where named baselines live (default: baseline.dir of --config, else "
                                            "./baselines)")
    m.add_argument("--config", help="the run's specguard.yaml: its baseline.dir is where baselines live")
    m.add_argument("--out", help="directory for the verdict and report (default: RUN_DIR)")
    talk(m)
    m.set_defaults(fn=cmd_compare)

    g = sub.add_parser("gate", help="run, check, then compare with the baseline; exit 1 on a failed check or "
                                    "a regression")
    generation_args(g)
    g.add_argument("--against", metavar="BASE.yaml", help="paired mode: time the base config's speculative "
                                                          "engine (its draft and k) beside this one's, in this job")
    g.add_argument("--baselines-dir", help="where baselines live (default: baseline.dir from the config)")
    g.add_argument("--refresh", action="store_true", help="refresh the baseline from this run instead of comparing "
                                                          "with it (an intended change); equivalence and "
                                                          "distribution must still pass")
    g.add_argument("--force", action="store_true", help="with --refresh: accept a failing run (needs --reason)")
    g.add_argument("--reason", help="with --refresh: why; recorded in the baseline and the refresh PR")
    g.set_defaults(fn=cmd_gate)

    d = sub.add_parser("demo", help="the whole gate on the embedded demo pair and its committed baseline")
    generation_args(d, config=False)
    d.add_argument("--baselines-dir", help="where baselines live (default: ./baselines)")
    d.set_defaults(fn=cmd_demo, against=None)

    b = sub.add_parser("baseline", help="refresh a baseline from an accepted run, or print its history")
    bsub = b.add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    br = bsub.add_parser("refresh", help="write baselines/<name>/<hardware>.json from a run (the old one goes to "
                                         "history); refused for a run that fails equivalence or distribution")
    br.add_argument("config", help="path to specguard.yaml")
    br.add_argument("--from", dest="from_dir", required=True, metavar="RUN_DIR",
                    help="the run's directory (results.json and checks.json)")
    br.add_argument("--force", action="store_true", help="accept a failing run (needs --reason)")
    br.add_argument("--reason", help="why this refresh is made (an intended slowdown, a new draft); recorded in the "
                                     "baseline and the refresh PR; required with --force")
    br.add_argument("--dir", help="where baselines live (default: baseline.dir from the config)")
    br.set_defaults(fn=cmd_baseline_refresh)
    bh = bsub.add_parser("history", help="the trend of speedup and acceptance per slice across refreshes")
    bh.add_argument("name", help="the baseline's name (baseline.name, or the config file's name)")
    bh.add_argument("--dir", help="where baselines live (default: baseline.dir of --config, else ./baselines)")
    bh.add_argument("--config", help="a specguard.yaml: its baseline.dir is where baselines live")
    bh.add_argument("--hardware", help="only this hardware key")
    bh.set_defaults(fn=cmd_baseline_history)

    ch = sub.add_parser("changed", help="did a change touch what the gate guards (draft, target, speculation, "
                                        "batching)? prints why; writes changed=true|false to $GITHUB_OUTPUT; exit 0 "
                                        "either way")
    ch.add_argument("--base", required=True, metavar="REV", help="the base commit (the PR's base SHA)")
    ch.add_argument("--head", default="HEAD", metavar="REV", help="the head commit (default HEAD)")
    ch.add_argument("--config", default="specguard.yaml", help="the config's path in the repository")
    ch.add_argument("--repo", default=".", help="the repository (default: the current directory)")
    ch.set_defaults(fn=cmd_changed)

    gh = sub.add_parser("github", help="deliver to GitHub (used by the Action): the PR comment, the refresh PR")
    ghsub = gh.add_subparsers(dest="github_command", required=True, metavar="ACTION")
    gc = ghsub.add_parser("comment", help="upsert this config's one PR comment (GITHUB_TOKEN, GITHUB_REPOSITORY, "
                                          "GITHUB_API_URL); a failure to post never changes the exit code")
    gc.add_argument("--pr", type=_positive_int, required=True, help="the pull request number")
    gc.add_argument("--when", choices=("always", "on-change", "on-failure", "never"), default="always")
    gc.add_argument("--config", help="the config (its baseline name names the comment's marker)")
    what = gc.add_mutually_exclusive_group(required=True)
    what.add_argument("--run-dir", help="post RUN_DIR/comment.md")
    what.add_argument("--refused", action="store_true", help="post the fork refusal")
    what.add_argument("--skipped", action="store_true", help="post 'nothing the gate guards changed'")
    what.add_argument("--setup-failed", metavar="WHY", help="post that the gate could not start, and why")
    gc.add_argument("--update-only", action="store_true", help="only edit this config's existing comment; post "
                                                               "none (a later push that no longer touches what the "
                                                               "gate guards)")
    gc.set_defaults(fn=cmd_github_comment)
    gr = ghsub.add_parser("refresh-pr", help="commit the refreshed baseline files (written and pruned, one commit) "
                                             "through the REST API, to the dispatched branch or to a refresh branch "
                                             "with a pull request")
    gr.add_argument("config", help="path to specguard.yaml")
    gr.add_argument("--run-dir", required=True, help="the run the baseline was refreshed from")
    gr.add_argument("--base-branch", required=True, help="the repository's default branch (the PR targets it)")
    gr.add_argument("--branch", help="the branch the refresh was dispatched on: when it is not the default branch, "
                                     "the baseline is committed to it (the PR that needs it carries it); else a "
                                     "specguard/baseline-<name>-<hardware> branch and a PR")
    gr.add_argument("--push-only", action="store_true", help="push the branch, open no PR")
    gr.add_argument("--dir", help="where baselines live (default: baseline.dir from the config)")
    gr.add_argument("--repo", default=".", help="the repository's working tree (default: the current directory)")
    gr.set_defaults(fn=cmd_github_refresh_pr)

    s = sub.add_parser("selftest", help="prove the checks catch deliberately broken engines and pass the "
                                        "correct one (on the demo pair)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--seeds", type=int, default=20, help="runs of the correct engine (seed and batch order "
                                                         "vary); default 20")
    s.add_argument("--samples", type=int, default=600, help="sampled tokens per engine for the distribution "
                                                            "test (default 600)")
    s.add_argument("--mutant", action="append", help="only this mutant (repeatable)")
    s.add_argument("--threads", type=_positive_int, help="torch CPU threads (default: torch's choice)")
    talk(s)
    s.set_defaults(fn=cmd_selftest)
    return p


def _on_sigterm(signum, frame):
    from gate.errors import Interrupted

    raise Interrupted("SIGTERM")


def _interruptions() -> tuple[type[BaseException], ...]:
    """What ends a command as interrupted (exit 130). ``gate.runner`` imports torch: it is looked up only when a
    command has loaded it, so light commands (``changed``, ``github``) never import it."""
    from gate.errors import Interrupted

    runner = sys.modules.get("gate.runner")
    return (KeyboardInterrupt, Interrupted) + ((runner.RunInterrupted,) if runner is not None else ())


def main(argv: list[str] | None = None) -> int:
    import signal

    global _VERBOSITY, _PHASES
    args = build_parser().parse_args(argv)
    _PHASES = None
    _phases()  # the wall clock of this command starts now
    _VERBOSITY = 0 if getattr(args, "quiet", False) else (2 if getattr(args, "verbose", False) else 1)
    try:  # SIGTERM (timeout, a cancelled CI job) ends the whole command, like Ctrl-C
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        if hasattr(signal, "SIGXFSZ"):  # a file size limit: a write fails with EFBIG instead of killing the gate
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    except ValueError:  # not the main thread
        previous = None
    try:
        return args.fn(args)
    except SpecguardError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # the environment, not a verdict: a read-only --out, a full disk, a file size limit
        import errno

        code = errno.errorcode.get(exc.errno, "")
        print(f"error: {exc.filename or 'a file'}: {exc.strerror or exc}" + (f" ({code})" if code else "")
              + ": free disk space, make the output directory writable or raise the file size limit, then rerun "
                "(`--resume` keeps the finished batches)", file=sys.stderr)
        return EXIT_USAGE
    except BaseException as exc:
        if not isinstance(exc, _interruptions()):
            raise
        _say(f"interrupted ({exc or 'SIGINT'}); finished work is kept")
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def entry() -> None:
    """The ``specguard`` command: :func:`main`, then an exit past an abandoned plug-in thread
    (``engines[].isolation: thread``), whose torch threads would otherwise end the interpreter's shutdown
    with "terminate called without an active exception" (exit 134).  Not a cure for thread isolation: a
    SIGINT while such a thread is inside torch still aborts (docs/reliability.md); the default, process
    isolation, has no such thread."""
    import gc
    import os
    import threading

    code = main()
    gc.disable()  # collecting the run's objects while a plug-in thread is inside torch can abort
    if any(t.name.startswith("specguard-engine-") and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
