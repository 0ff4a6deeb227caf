"""The ``specguard`` command line: arguments and exit codes; the work is :mod:`gate.pipeline`'s.

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
import json
import sys
from pathlib import Path

from gate import __version__, pipeline
from gate.arguments import HELP, count, hardware_key, run_id, seconds, shard, threads, tokens_per_s
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


def cmd_gate(args, session: Session) -> int:
    from gate.ci.github import step_outputs

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
    from gate.run.estimate import plan_config

    report = plan_config(args.config, args.out, args.against, tokens_per_s=args.tokens_per_s,
                         hardware_key=args.hardware_key)
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
    report = speed_selftest(runs=args.runs, repeats=args.repeats, say=session.say) if args.speed else \
        null_selftest(runs=args.runs, repeats=args.repeats, samples=args.samples, say=session.say) if args.null else \
        selftest(seeds=args.seeds, samples=args.samples, mutants=args.mutant or None, say=session.say,
                 detail=session.say if session.verbosity >= 2 else None, dtype=args.dtype, repro=args.repro)
    print(json.dumps(report.to_json()) if args.json else "\n".join(report.lines()))
    return EXIT_OK if report.passed else 1


def cmd_repro(args, session: Session) -> int:
    from gate.inputs.config import load_config
    from gate.repro import repro_command

    budget = args.budget_s if args.budget_s is not None else load_config(args.config).config.checks.repro.budget_s
    return repro_command(session, args.run_dir, args.config, budget, args.threads)


def build_parser() -> argparse.ArgumentParser:

    p = argparse.ArgumentParser(prog="specguard", description=HELP["specguard"], epilog=HELP["exit codes"])
    p.add_argument("--version", action="version", version=f"specguard {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(parent, name: str, fn, **kw):
        q = parent.add_parser(name, help=HELP[name], **kw)
        q.set_defaults(fn=fn, parser=q)
        return q

    def arg(q, *names, **kw):
        q.add_argument(*names, **{"help": HELP.get(names[-1]), **kw})

    def talk(q):
        for short, name in (("-q", "--quiet"), ("-v", "--verbose")):
            arg(q, short, name, action="store_true")

    def generating(q, config: bool = True):
        if config:
            arg(q, "config")
        arg(q, "--out")
        for name in ("--resume", "--no-cache"):
            arg(q, name, action="store_true")
        arg(q, "--threads", type=threads)
        arg(q, "--hardware-key", type=hardware_key, metavar="KEY")
        arg(q, "--run-id", type=run_id)
        talk(q)

    arg(command(sub, "validate", cmd_validate), "config")
    r = command(sub, "run", cmd_run)
    generating(r)
    arg(r, "--shard", type=shard, metavar="INDEX/COUNT")
    arg(r, "--timing-only", action="store_true")
    mg = command(sub, "merge", cmd_merge)
    arg(mg, "dirs", nargs="+", metavar="SHARD_DIR")
    arg(mg, "--out", required=True, help=HELP["merge --out"])
    c = command(sub, "check", cmd_check)
    for name, kw in (("config", {}), ("--out", {"help": HELP["check --out"]}), ("--threads", {"type": threads})):
        arg(c, name, **kw)
    talk(c)
    rp = command(sub, "repro", cmd_repro)
    arg(rp, "run_dir", metavar="RUN_DIR")
    arg(rp, "--config", required=True, help=HELP["repro --config"])
    arg(rp, "--budget-s", type=seconds, metavar="S", help=HELP["repro --budget-s"])
    arg(rp, "--threads", type=threads)
    talk(rp)
    m = command(sub, "compare", cmd_compare)
    arg(m, "run_dir", metavar="RUN_DIR")
    for name in ("--baseline", "--baselines-dir", "--config"):
        arg(m, name)
    arg(m, "--out", help=HELP["compare --out"])
    talk(m)
    for name, fn in (("gate", cmd_gate), ("demo", cmd_demo)):
        g = command(sub, name, fn)
        generating(g, config=name == "gate")
        arg(g, "--baselines-dir")
        if name == "gate":
            arg(g, "--against", metavar="BASE.yaml")
            for name in ("--refresh", "--force", "--reason"):
                arg(g, name, **({} if name == "--reason" else {"action": "store_true"}))
        else:
            g.set_defaults(against=None, refresh=False, force=False, reason=None)
    bsub = command(sub, "baseline", None).add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    br = command(bsub, "refresh", cmd_baseline_refresh)
    arg(br, "config")
    arg(br, "--from", dest="from_dir", required=True, metavar="RUN_DIR", help=HELP["--from"])
    for name in ("--force", "--reason", "--dir"):
        arg(br, name, **({"action": "store_true"} if name == "--force" else {}))
    bh = command(bsub, "history", cmd_baseline_history)
    for name in ("name", "--dir", "--config", "--hardware"):
        arg(bh, name)
    ch = command(sub, "changed", cmd_changed)
    arg(ch, "--base", required=True, metavar="REV")
    arg(ch, "--head", default="HEAD", metavar="REV")
    arg(ch, "--config", default="specguard.yaml", help=HELP["changed --config"])
    arg(ch, "--repo", default=".")
    ghsub = command(sub, "github", None).add_subparsers(dest="github_command", required=True, metavar="ACTION")
    gc = command(ghsub, "comment", cmd_github_comment)
    arg(gc, "--pr", type=count(1, 1 << 31), required=True)
    arg(gc, "--when", choices=("always", "on-change", "on-failure", "never"), default="always")
    arg(gc, "--config", help=HELP["comment --config"])
    what = gc.add_mutually_exclusive_group(required=True)
    for name, kw in (("--run-dir", {}), ("--refused", {"action": "store_true"}),
                     ("--skipped", {"action": "store_true"}), ("--setup-failed", {"metavar": "WHY"})):
        arg(what, name, **kw)
    arg(gc, "--update-only", action="store_true")
    gr = command(ghsub, "refresh-pr", cmd_github_refresh_pr)
    arg(gr, "config")
    arg(gr, "--run-dir", required=True, help=HELP["refresh-pr --run-dir"])
    arg(gr, "--base-branch", required=True)
    for name in ("--branch", "--push-only", "--dir", "--repo"):
        arg(gr, name, **({"action": "store_true"} if name == "--push-only" else
                         {"default": "."} if name == "--repo" else {}))
    s = command(sub, "selftest", cmd_selftest, epilog=HELP["selftest epilog"])
    for name in ("--json", "--speed", "--null"):
        arg(s, name, action="store_true")
    arg(s, "--seeds", type=count(0, 1000), default=20)
    arg(s, "--samples", type=count(100, 1_000_000), default=600)
    arg(s, "--mutant", action="append")
    arg(s, "--dtype", choices=("float32", "bfloat16"), default="float32")
    arg(s, "--repro", metavar="DIR", help=HELP["selftest --repro"])
    for name, low, default in (("--runs", 1, 10), ("--repeats", 2, 16)):
        arg(s, name, type=count(low, 1000), default=default)
    arg(s, "--threads", type=threads)
    talk(s)
    si = command(command(sub, "suite", None).add_subparsers(dest="suite_command", required=True, metavar="ACTION"),
                 "import", cmd_suite_import)
    for name, kw in (("file", {"metavar": "FILE", "help": HELP["FILE"]}), ("--slice-field", {"default": "slice"}),
                     ("--out", {"required": True, "help": HELP["suite --out"]})):
        arg(si, name, **kw)
    for name, low, high, default in (("--per-slice", 1, 100_000, 16), ("--max-rows", 1, 1_000_000, 1000),
                                     ("--seed", 0, 1 << 31, 0), ("--max-bytes", 1, 1 << 40, 256 << 20)):
        arg(si, name, type=count(low, high), default=default)
    pl = command(sub, "plan", cmd_plan)
    for name, kw in (("config", {}), ("--out", {"help": HELP["check --out"]}), ("--json", {"action": "store_true"}),
                     ("--against", {"metavar": "BASE.yaml", "help": HELP["plan --against"]}),
                     ("--tokens-per-s", {"type": tokens_per_s, "metavar": "N", "help": HELP["plan --tokens-per-s"]}),
                     ("--hardware-key", {"type": hardware_key, "metavar": "KEY",
                                         "help": HELP["plan --hardware-key"]})):
        arg(pl, name, **kw)
    return p


def _on_sigterm(signum, frame):
    raise Interrupted("SIGTERM")


def main(argv: list[str] | None = None) -> int:
    import errno
    import signal

    parser = build_parser()
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
