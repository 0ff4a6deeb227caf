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
import json
import sys
from pathlib import Path

from gate import __version__, pipeline
from gate.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Problem, SpecguardError
from gate.pipeline import Session
from gate.rundir import RunDir

DEMO_CONFIG = Path(__file__).resolve().parent / "demo" / "specguard.yaml"

EXIT_CODES = ("Exit codes: 0 pass (or neutral: no baseline yet), 1 a check failed or a regression was found, "
              "2 bad input, 3 the baseline is unusable, 130 interrupted.")


def _count(low: int, high: int, what: str = ""):
    """An argparse type: a whole number in [low, high] (every count the CLI takes has a stated range)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {high}{what}, got {text!r}"
                                             ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {high}{what}, got {value}")
        return value

    return parse


def _cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# torch's CPU threads: more than the cores only spin against each other (5000 held two cores for minutes; 100000
# made libgomp try to reserve 25 GB and segfault).
_threads = _count(1, max(_cores(), 1), " (this machine's cores)")
THREADS_HELP = "torch CPU threads, 1 to the number of cores (default: torch's choice)"


def _hardware_key(text: str) -> str:
    from gate.config import HARDWARE_KEY

    if not HARDWARE_KEY.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected 1-100 characters from [a-z0-9_.-], got {text!r}")
    return text


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


def cmd_validate(args, session: Session) -> int:
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
        problems += pipeline.plugin_problems(loaded)
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


def cmd_run(args, session: Session) -> int:
    inputs = pipeline.load_inputs(session, args.config, args.out, args.threads)
    with pipeline.serving(session, inputs.loaded, inputs.out.path) as servers:
        return pipeline.run(session, inputs, pipeline.load_models(session, inputs), _run_options(args), servers)


def _run_options(args) -> pipeline.RunOptions:
    return pipeline.RunOptions(resume=args.resume, no_cache=args.no_cache,
                               cache_dir=getattr(args, "demo_cache_dir", None), shard=getattr(args, "shard", None),
                               hardware_key=args.hardware_key, run_id=args.run_id)


def cmd_merge(args, session: Session) -> int:
    out = RunDir(args.out)
    merged = pipeline.merge([Path(d) for d in args.dirs], out)
    print(f"wrote {out / 'results.json'} ({len(merged.executions)} executions from {len(args.dirs)} shards); "
          f"now `specguard check CONFIG --out {out}` and `specguard compare {out}`")
    return EXIT_OK


def cmd_check(args, session: Session) -> int:
    from gate.config import load_config

    pipeline.set_threads(args.threads)
    loaded = load_config(args.config)
    out = pipeline.out_dir(loaded, args.out)
    pipeline.results_belong_to(loaded, out.results(), str(out / "results.json"))  # before any model is loaded
    return pipeline.check(session, loaded, pipeline.load_pair(session, loaded), out)


def cmd_compare(args, session: Session) -> int:
    from gate.baseline import baselines_root
    from gate.config import load_config

    out = RunDir(args.run_dir)
    loaded = load_config(args.config) if args.config else None
    name = args.baseline or (loaded.baseline_name if loaded is not None else None)  # else the run's own
    return pipeline.compare(session, out, pipeline.config_of(out.results()), name,
                            baselines_root(args.baselines_dir, loaded=loaded), RunDir(args.out) if args.out else None,
                            quiet=args.quiet)


def cmd_gate(args, session: Session) -> int:
    from gate.baseline import baselines_root

    if args.refresh and args.force and not args.reason:  # before minutes of generation
        raise SpecguardError(Problem("specguard gate", "--force needs --reason: the baseline records why a failing "
                                     "run was accepted", field="--reason"))
    inputs = pipeline.load_inputs(session, args.config, args.out, args.threads)
    with pipeline.serving(session, inputs.loaded, inputs.out.path) as servers:  # torn down once the run is done
        models = pipeline.load_models(session, inputs, args.against)
        code = pipeline.run(session, inputs, models, _run_options(args), servers)
    if code != EXIT_OK:
        return code
    loaded, out = inputs.loaded, inputs.out
    checked = pipeline.check(session, loaded, models.pair, out)
    baselines = baselines_root(args.baselines_dir, loaded=loaded)
    if args.refresh:
        # The checks of this run, not a judgement against the old baseline, decide; equivalence and distribution
        # must pass unless --force --reason.  Exit 0 only once the new baseline reads back.
        path = pipeline.write_baseline(loaded, out.results(), out, baselines, args.force, args.reason)
        _github_output(**{"baseline-path": str(path)})
        return EXIT_OK
    compared = pipeline.compare(session, out, loaded.config, loaded.baseline_name, baselines, quiet=args.quiet,
                                record_phases=True)
    session.say(session.phases.render())
    if compared != EXIT_OK:
        return compared
    return checked  # compared is 0 only once compare read back a passing verdict.json of this run


def cmd_demo(args, session: Session) -> int:
    args.config = str(DEMO_CONFIG)
    args.out = args.out or "specguard-out"
    # The demo's committed baselines are this repository's baselines/ (run from its root).
    args.baselines_dir = args.baselines_dir or "baselines"
    # The reference cache lives in the working directory, not beside the packaged config (site-packages).
    args.demo_cache_dir = Path(".specguard-cache")
    return cmd_gate(args, session)


def cmd_baseline_refresh(args, session: Session) -> int:
    from gate.baseline import baselines_root
    from gate.config import load_config

    loaded = load_config(args.config)
    run_dir = RunDir(args.from_dir)
    results = run_dir.results()
    ours = results.config and loaded.config.model_dump(mode="json") == results.config
    if not ours:
        raise SpecguardError(Problem(str(run_dir / "results.json"), f"this run was not made with {args.config} "
                                     "(its config differs)", field="config",
                                     hint="run `specguard gate CONFIG` and refresh from that run's directory"))
    pipeline.write_baseline(loaded, results, run_dir, baselines_root(args.dir, loaded=loaded), args.force,
                            args.reason)
    return EXIT_OK


def cmd_baseline_history(args, session: Session) -> int:
    from gate.baseline import BaselineStore, baselines_root
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


def cmd_changed(args, session: Session) -> int:
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


def cmd_github_comment(args, session: Session) -> int:
    import os

    from gate.github import GitHub, GitHubError
    from gate.publish import FORK_REFUSAL, notice, post

    args.name = _comment_name(args.config)
    if args.run_dir:
        run = Path(args.run_dir)
        body = (run / "comment.md").read_text(encoding="utf-8") if (run / "comment.md").is_file() else None
        outcome = RunDir(run).verdict_outcome()
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
    from gate.config import Config, baseline_name, load_config

    try:
        return load_config(config).baseline_name if config else "specguard"
    except SpecguardError:
        return baseline_name(Config.model_construct(), config)


def cmd_github_refresh_pr(args, session: Session) -> int:
    from gate.baseline import BaselineStore, baselines_root
    from gate.config import load_config
    from gate.github import GitHub
    from gate.publish import changed_files, open_refresh_pr

    loaded = load_config(args.config)
    results = RunDir(args.run_dir).results()
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


def cmd_selftest(args, session: Session) -> int:
    from gate.selftest import selftest

    pipeline.set_threads(args.threads)
    session.quiet_libraries()
    mutants = args.mutant or None
    report = selftest(seeds=args.seeds, samples=args.samples, mutants=mutants, say=session.say,
                      detail=session.say if session.verbosity >= 2 else None, dtype=args.dtype)
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
        q.add_argument("--threads", type=_threads, help=THREADS_HELP)
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

    r = sub.add_parser("run", help="generate with every engine at every batch size; write results.json (and "
                                     "phases.json: where the time went)")
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
    c.add_argument("--threads", type=_threads, help=THREADS_HELP)
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
    d.set_defaults(fn=cmd_demo, against=None, refresh=False, force=False, reason=None)

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
    gc.add_argument("--pr", type=_count(1, 1 << 31), required=True, help="the pull request number")
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
                                        "correct one (on the demo pair)",
                       epilog="-v also prints each run's phases, prefixed with the mutant's (or correct-SEED's) name")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--seeds", type=_count(0, 1000), default=20, help="runs of the correct engine (0 to 1000): the "
                   "first on the mutants' own batches and seed, each later one with another seed and batch order; "
                   "default 20")
    s.add_argument("--samples", type=_count(100, 1_000_000), default=600, help="sampled tokens per engine for the "
                                                                               "distribution test (default 600)")
    s.add_argument("--mutant", action="append", help="only this mutant (repeatable; an unknown name is refused "
                                                     "with the list, before any model loads)")
    s.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="the demo pair's dtype (bfloat16 flips near-ties as GPUs do; default float32)")
    s.add_argument("--threads", type=_threads, help=THREADS_HELP)
    talk(s)
    s.set_defaults(fn=cmd_selftest)
    _name_parsers(p)
    return p


def _name_parsers(parser: argparse.ArgumentParser) -> None:
    """Every (sub)command's parser records itself as ``args.parser``: the innermost one given wins."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(parser=sub)
                _name_parsers(sub)


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

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the subcommand that was given them, with its own usage (not the top level's)
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    # The wall clock of this command starts now.
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
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # the environment, not a verdict: a read-only --out, a full disk, a file size limit
        import errno

        code = errno.errorcode.get(exc.errno, "")
        print(f"error: {exc.filename or 'an output or log file (the system named none)'}: {exc.strerror or exc}"
              + (f" ({code})" if code else "")
              + ": free disk space, make the output directory writable or raise the file size limit, then rerun "
                "(`--resume` keeps the finished batches)", file=sys.stderr)
        return EXIT_USAGE
    except BaseException as exc:
        if not isinstance(exc, _interruptions()):
            raise
        session.say(f"interrupted ({exc or 'SIGINT'}); finished work is kept")
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
