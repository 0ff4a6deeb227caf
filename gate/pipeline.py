"""The gate's commands as stages: load inputs → load models → run (results.json) → check (checks.json) → compare
(verdict.json, the page) → or refresh (the baseline) → deliver (the PR comment, the refresh PR).

Each stage returns a typed outcome; :func:`exit_code` is the one rule that turns outcomes into the command's exit
code (the table is in ``gate/cli.py``).  The CLI parses arguments and calls these.  What one command shares across
stages (how much it says, where its time went) is a :class:`Session`, passed in, never a module global.  Files are
named and written by :class:`gate.io.rundir.RunDir`, each by one stage only.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gate.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, Problem, SpecguardError
from gate.io.rundir import CHECKS, CHECKS_MD, COMMENT, COMPARED, PNG, RESULTS, SUMMARY, VERDICT, RunDir
from gate.run.budget import after_checks
from gate.run.session import Session, set_threads
from gate.run.setup import config_of, load_inputs, load_models, load_pair, out_dir
from gate.run.stage import Ran, RunOptions, confirm_sampling, run_engines

# --- outcomes and the exit-code rule ---------------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    failing: bool  # a check failed, or the run is incomplete
    unconfirmed: tuple[tuple[str, int], ...] = ()  # sampling groups awaiting a second pass (gate.checks.confirmation)


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


# --- run: results.json ---------------------------------------------------------------------------


def run_command(session: Session, config: str, out: str | None, threads: int | None, opts: RunOptions) -> int:
    """``specguard run``: inputs, servers, models, the run."""
    import os

    from gate.run.passes import SERVERS_UP
    from gate.run.servers import serving

    inputs = load_inputs(session, config, out, threads, opts.hardware_key)
    # A refresh's timing pass times the servers its parent launched, and launches none of its own.
    up = opts.timing_only and os.environ.get(SERVERS_UP)
    with contextlib.nullcontext([]) if up else serving(session.say, inputs.loaded, inputs.out.path) as servers:
        return exit_code(run_engines(session, inputs, load_models(session, inputs), opts, servers))


# --- check: checks.json --------------------------------------------------------------------------


def check(session: Session, loaded, pair, out: RunDir) -> Checked:
    """Analyse results.json: checks.json and checks.md (the checks' full text)."""
    from gate.checks.analysis import run_checks
    from gate.report.render import render_text
    from gate.repro import clear as clear_cases
    from gate.run.results import load_results

    results = load_results(out / RESULTS)
    bad = results.vocabulary_problem(pair.target.vocab_size, str(out / RESULTS))
    if bad is not None:  # an id the target cannot score would be an IndexError deep in re-scoring
        raise SpecguardError(bad)
    out.clear()  # after the results loaded: a refused input leaves the earlier outputs alone
    clear_cases(out.path)  # an earlier run's minimal cases too (gate.repro)
    session.say("analysing: re-scoring with the target, statistics, power simulations")
    checks = run_checks(results, pair, loaded.config, say=session.say)
    phases = session.phases
    phases.add("re-scoring", checks.rescoring_s)
    phases.add("statistics and power simulations", checks.analysis_s - checks.rescoring_s)
    with phases("report"):
        out.write_json(CHECKS, checks)
        out.write_text(CHECKS_MD, render_text(results, checks))
    session.say(f"wrote {out / CHECKS} and {out / CHECKS_MD}")
    return Checked(bool(checks.failing()) or results.status != "complete", tuple(checks.unconfirmed()))


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
    from gate.ci.github import run_links
    from gate.report.render import build_page, print_terminal, render_comment, render_details, render_summary, write_png
    from gate.repro import REPRO_DIR
    from gate.repro.case import read_index
    from gate.verdict.judge import judge, run_baseline_name
    from gate.verdict.store import is_baseline_file, lookup
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
    commit = (stored.baseline.source or {}).get("commit") if stored.baseline is not None else None
    links = run_links(stored.path if stored.baseline is not None else None, commit)  # the repository's path
    index = read_index(out.path / REPRO_DIR)  # this run's minimal cases (gate.repro), when it wrote them
    page = build_page(results, checks, verdict, stored.baseline, name, links=links,
                      cases=index["cases"] if index and index.get("run") == results.run_id else None)
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
    from gate.verdict.store import baselines_root

    out = RunDir(run_dir)
    loaded = load_config(config) if config else None
    name = baseline or (loaded.baseline_name if loaded is not None else None)  # else the run's own
    return exit_code(compare(session, out, config_of(load_results(out / RESULTS)), name,
                             baselines_root(baselines_dir, loaded=loaded), RunDir(report_dir) if report_dir else None,
                             quiet=quiet))


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
    from gate.engines.paired import base_side
    from gate.run.servers import serving
    from gate.verdict.refresh import write_baseline
    from gate.verdict.store import baselines_root

    if opts.refresh and opts.force and not opts.reason:  # before minutes of generation
        raise SpecguardError(Problem("specguard gate", "--force needs --reason: the baseline records why a failing "
                                     "run was accepted", field="--reason"))
    inputs = load_inputs(session, config, opts.out, opts.threads, opts.run.hardware_key)
    base = base_side(opts.against, inputs.loaded) if opts.against else None  # refused here, before any launch
    for change in base.changes if base else ():
        session.say(f"paired mode: {change}")
    base_config = base.loaded if base else None
    loaded, out = inputs.loaded, inputs.out
    with serving(session.say, loaded, out.path, base_config) as servers:  # torn down after the minimal cases
        models = load_models(session, inputs, base)
        ran = run_engines(session, inputs, models, opts.run, servers)
        if ran is not Ran.COMPLETE:
            return exit_code(ran), None
        tail = time.perf_counter()
        checked = check(session, loaded, models.pair, out)
        if not after_checks(session, checked.unconfirmed, time.perf_counter() - tail, loaded.config):
            pass  # the groups fail as unconfirmed, as `specguard check` alone fails them: never a pass not measured
        elif checked.unconfirmed:  # a distribution test near alpha: sampled again on the engines still up
            if confirm_sampling(session, inputs, models, opts.run, checked.unconfirmed, servers) is Ran.INTERRUPTED:
                return exit_code(Ran.INTERRUPTED), None
            checked = check(session, loaded, models.pair, out)
        passes = loaded.config.baseline.timing_passes
        if opts.refresh and passes > 1 and loaded.config.checks.speedup.enabled:  # while the servers are up
            from gate.run.passes import run_passes

            with session.phases("timing passes"):
                run_passes(config, out.path, passes - 1, opts.threads, opts.run.hardware_key, session.say)
        budget = loaded.config.checks.repro.budget_s
        budget = min(budget, session.budget.deadline.left()) if session.budget else budget  # what the budget left
        if checked.failing and budget > 0 and not opts.refresh:  # the engines re-run while they are still up
            from gate.repro import reproduce

            with session.phases("minimal cases"):
                try:
                    reproduce(out, loaded, models, budget, session.say)
                except Exception as exc:  # the cases are an aid: their failure must never cost the verdict
                    session.say(f"minimal cases not written: {type(exc).__name__}: {exc}"[:500])
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
    from gate.report.refresh import refresh_body, refresh_message
    from gate.run.results import load_results
    from gate.verdict.baseline import Baseline, load_baseline
    from gate.verdict.history import render_history
    from gate.verdict.store import BaselineStore

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
    body = refresh_body(old, new, render_history(store.history(new.hardware_key)))
    done = deliver_refresh(GitHub.from_env(), repo, written, deleted, refresh_message(new), base_branch,
                           refresh_branch(new.name, new.hardware_key), body, branch=branch, open_pr=open_pr)
    step_outputs(**{"pr-url": done.pr_url, "branch": done.branch, "commit": done.commit})
    return (f"pull request: {done.pr_url} (branch {done.branch}, commit {done.commit})" if done.pr_url else
            f"committed {done.commit} to branch {done.branch}")


__all__ = ["Checked", "Compared", "GateOptions", "Ran", "RunOptions", "check", "compare", "exit_code", "gate",
           "publish_refresh"]
