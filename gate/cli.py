"""The ``specguard`` command line: arguments and exit codes; the work is :mod:`gate.pipeline`'s.

==== ===============================================================================
0    pass, or neutral (no baseline to compare with yet): verdicts were written
1    a check failed or a regression was found (or the run is incomplete)
2    bad input: config, suite, model, results, arguments
3    the baseline is unusable: corrupt, or another schema version (another suite or k is compared, not refused);
       or missing under baseline.on_missing: stop, before the run
130  interrupted: finished work is kept; rerun with ``--resume``
==== ===============================================================================
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import gate.engines  # noqa: F401  (registers the built-in engine types before any config is read)
from gate import pipeline
from gate.arguments import parser
from gate.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    Interrupted,
    Problem,
    RunInterrupted,
    SpecguardError,
    distinct,
    said,
)
from gate.inputs.config import DEMO_CONFIG
from gate.io.rundir import RunDir
from gate.run.session import Session, set_threads


def cmd_validate(args, session: Session) -> int:
    from gate.run.validate import validate

    v = validate(args.config)
    for p, times in distinct(v.problems):
        print(said(p, times).removeprefix("error: "), file=sys.stderr)
    if v.problems:
        print(f"{len(v.problems)} problem(s) found", file=sys.stderr)
        return EXIT_USAGE
    for note in v.notes:
        print(f"note: {note}")
    print(f"{args.config}: OK ({v.summary})")
    return EXIT_OK


def cmd_run(args, session: Session) -> int:
    return pipeline.run_command(session, args.config, args.out, args.threads, pipeline.RunOptions.of(args))


def cmd_check(args, session: Session) -> int:
    return pipeline.check_command(session, args.config, args.out, args.threads)


def cmd_merge(args, session: Session) -> int:
    from gate.run.merge import write_merged

    out = RunDir(args.out)
    merged = write_merged([Path(d) for d in args.dirs], out)
    print(f"wrote {out / 'results.json'} ({len(merged.executions)} executions from {len(args.dirs)} shards); "
          f"now `specguard check CONFIG --out {out}` and `specguard compare {out}`")
    return EXIT_OK


def cmd_compare(args, session: Session) -> int:
    return pipeline.compare_command(session, args.run_dir, args.config, args.baseline, args.baselines_dir, args.out,
                                    args.quiet)


def plan_into(path: str, args, session: Session) -> None:
    """``gate --plan-to FILE``: what ``specguard plan`` says of this gate, appended to FILE as a fenced block before
    the run starts (the Action's job summary: the plan is there even if the job is then cancelled, and it costs no
    interpreter of its own).  Backticks become quotes, so that no text of the config can close the block; a plan
    that fails is one line, and the gate goes on to say why in its own words."""
    from gate.verdict.planned import plan

    try:
        report = plan(args.config, args.out, args.against, hardware_key=args.hardware_key,
                      budget_minutes=args.budget_minutes, baselines_dir=args.baselines_dir, refresh=args.refresh)
        text = "\n".join(report.lines())
    except Exception as exc:  # the plan is an aid: whatever it hits, the gate itself reports
        text = f"(no plan: the gate's own output says why; {type(exc).__name__})"
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("### specguard plan\n```text\n" + text.replace("`", "'") + "\n```\n")
    except OSError as exc:
        session.say(f"warning: the plan was not written to {path}: {exc.strerror or exc}")


def cmd_gate(args, session: Session) -> int:
    from gate.ci.github import step_outputs
    from gate.verdict.planned import stop_without_baseline

    # Before the run, in the setup phase (its imports count there): the threads first, as a CPU's hardware key counts
    # them; the plan, into the job summary; then baseline.on_missing: stop ends a gate without its baseline.
    with session.phases("setup (imports, config, suite)"):
        set_threads(args.threads)
        if getattr(args, "plan_to", None):
            plan_into(args.plan_to, args, session)
        if not args.refresh:
            stop_without_baseline(args.config, args.baselines_dir, args.hardware_key)
    code, baseline = pipeline.gate(session, args.config, pipeline.GateOptions(
        run=pipeline.RunOptions.of(args), threads=args.threads, out=args.out, against=args.against,
        baselines_dir=args.baselines_dir, refresh=args.refresh, force=args.force, reason=args.reason))
    if baseline is not None:
        step_outputs(**{"baseline-path": str(baseline)})
    return code


def cmd_demo(args, session: Session) -> int:
    args.config, args.out = str(DEMO_CONFIG), args.out or "specguard-out"
    args.baselines_dir = args.baselines_dir or "baselines"  # this repository's committed baselines
    args.demo_cache_dir = Path(".specguard-cache")  # the working directory's, not beside the packaged config
    return cmd_gate(args, session)


def cmd_baseline_refresh(args, session: Session) -> int:
    from gate.inputs.config import load_config
    from gate.verdict.refresh import write_baseline
    from gate.verdict.store import baselines_root

    loaded = load_config(args.config)
    write_baseline(loaded, RunDir(args.from_dir), baselines_root(args.dir, loaded=loaded), args.force, args.reason)
    return EXIT_OK


def cmd_baseline_history(args, session: Session) -> int:
    from gate.verdict.history import history_of
    print(history_of(args.name, args.dir, args.config, args.hardware))
    return EXIT_OK


def cmd_changed(args, session: Session) -> int:
    from gate.ci.changed import detect
    from gate.ci.github import step_outputs
    change = detect(Path(args.repo), args.config, args.base, args.head)
    print("\n".join(change.lines()))
    step_outputs(changed="true" if change.changed else "false")
    return EXIT_OK


def cmd_github_comment(args, session: Session) -> int:
    from gate.ci.publish import comment_command
    print(comment_command(args.pr, args.when, args.config, args.run_dir, args.refused, args.setup_failed,
                          args.update_only))
    return EXIT_OK


def cmd_github_refresh_pr(args, session: Session) -> int:
    from gate.inputs.config import load_config
    from gate.verdict.store import baselines_root

    loaded = load_config(args.config)
    print(pipeline.publish_refresh(loaded, RunDir(args.run_dir), baselines_root(args.dir, loaded=loaded),
                                   Path(args.repo).resolve(), args.base_branch, args.branch, not args.push_only))
    return EXIT_OK


def cmd_plan(args, session: Session) -> int:
    from gate.verdict.planned import plan

    set_threads(args.threads)  # a CPU's hardware key counts torch threads: the key of the gate run at --threads N
    report = plan(args.config, args.out, args.against, tokens_per_s=args.tokens_per_s, hardware_key=args.hardware_key,
                  timeout_minutes=args.timeout_minutes, gpu_memory_gib=args.gpu_memory,
                  budget_minutes=args.budget_minutes, baselines_dir=args.baselines_dir)
    print(json.dumps(report.to_json()) if args.json else "\n".join(report.lines()))
    return EXIT_OK


def cmd_suite_import(args, session: Session) -> int:
    from gate.inputs.importer import import_suite
    print("\n".join(import_suite(args.file, args.out, args.slice_field, args.per_slice, args.max_rows, args.seed,
                                  args.max_bytes).lines()))
    return EXIT_OK


def cmd_selftest(args, session: Session) -> int:
    from gate.selftest import selftest
    from gate.selftest.null import null_selftest
    from gate.selftest.speed import speed_selftest

    set_threads(args.threads)
    session.quiet_libraries()
    if args.speed and args.null:
        raise SpecguardError(Problem("specguard selftest", "--speed and --null are two self-tests: run one at a time",
                                     field="--null"))
    where = {"dtype": args.dtype, "device": args.device}
    report = speed_selftest(runs=args.runs, repeats=args.repeats, say=session.say, **where) if args.speed else \
        null_selftest(runs=args.runs, repeats=args.repeats, samples=args.samples, say=session.say, **where) \
        if args.null else \
        selftest(seeds=args.seeds, samples=args.samples, mutants=args.mutant or None, say=session.say,
                 detail=session.say if session.verbosity >= 2 else None, repro=args.repro,
                 every_check=args.every_check, **where)
    print(json.dumps(report.to_json()) if args.json else "\n".join(report.lines()))
    return EXIT_OK if report.passed else 1


def cmd_repro(args, session: Session) -> int:
    from gate.inputs.config import load_config
    from gate.repro import repro_command

    budget = args.budget_s if args.budget_s is not None else load_config(args.config).config.checks.repro.budget_s
    return repro_command(session, args.run_dir, args.config, budget, args.threads)


def build_parser() -> argparse.ArgumentParser:
    return parser(sys.modules[__name__])


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The parser, built once per process (building it costs more than most commands' own checks): a parse keeps no
    state in it."""
    return build_parser()


def _on_sigterm(signum, frame):
    raise Interrupted("SIGTERM")


def main(argv: list[str] | None = None) -> int:
    import errno
    import signal

    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the subcommand that was given them, with its own usage (not the top level's)
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    session = Session(verbosity=0 if getattr(args, "quiet", False) else (2 if getattr(args, "verbose", False) else 1))
    try:  # SIGTERM (timeout, a cancelled CI job) ends the whole command, like Ctrl-C
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        if hasattr(signal, "SIGXFSZ"):  # a file size limit: a write fails with EFBIG instead of killing the gate
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    except ValueError:  # not the main thread
        previous = None
    try:
        return args.fn(args, session)
    except SpecguardError as exc:
        for problem, count in distinct(exc.problems):
            print(said(problem, count), file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # the environment, not a verdict: a read-only --out, a full disk, a file size limit
        code = errno.errorcode.get(exc.errno, "")
        print(f"error: {exc.filename or 'an output or log file (the system named none)'}: {exc.strerror or exc}"
              + (f" ({code})" if code else "") + ": free disk space, make the output directory writable or raise "
              "the file size limit, then rerun (`--resume` keeps the finished batches)", file=sys.stderr)
        return EXIT_USAGE
    except (KeyboardInterrupt, Interrupted, RunInterrupted) as exc:
        session.say(f"interrupted ({exc or 'SIGINT'}); finished work is kept")
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
