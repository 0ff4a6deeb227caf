"""A run's baseline, written: derived from a checked run of this config (refused for a failing one unless forced
with a reason), stored with its history (:class:`gate.verdict.store.BaselineStore`, atomic) and read back."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

from gate.errors import Problem, SpecguardError
from gate.io.rundir import RESULTS, RunDir
from gate.verdict.baseline import load_baseline
from gate.verdict.store import BaselineStore


def write_baseline(loaded, run_dir: RunDir, root: Path, force: bool, reason: str | None,
                   now: datetime | None = None) -> Path:
    """Derive the baseline of a run of this config, write it (the old one to history) and read it back; its
    path.  The clock and the commit are read here, once, and given to the derivation."""
    from gate.checks.doc import load_checked
    from gate.inputs.identity import refuse_unless_made_with
    from gate.run.passes import load_passes
    from gate.verdict.baseline import derive, failing_checks, hardware_of, measure, with_passes

    if force and not reason:
        raise SpecguardError(Problem("specguard", "--force needs --reason: the baseline records why a failing "
                                     "run was accepted", field="--reason"))
    results, checks = load_checked(run_dir)
    refuse_unless_made_with(loaded, results.fingerprint, str(run_dir / RESULTS))
    if results.budget is not None and results.budget.cut and not force:
        # a baseline replaces the last one: from this run it would lose what the budget left out, and hold the
        # sampling and timing it cut as if the full run had measured them
        what = sorted({x.what for x in results.budget.left_out} | ({"sampling"} if results.budget.sampling else set())
                      | ({"timing repeats"} if results.budget.repeats_cut else set()))
        raise SpecguardError(Problem(str(run_dir / RESULTS), f"the run was fitted to a budget of "
                                     f"{results.budget.minutes:g} min ({results.budget.source}), which left out or "
                                     f"cut {', '.join(what)}: a baseline from it would store less than it replaces",
                                     field="budget", hint="refresh from a run without a budget (the full tier), or "
                                     "pass --force with --reason"))
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    source = {"specguard": results.fingerprint.libraries.get("specguard"), "commit": os.environ.get("GITHUB_SHA"),
              "run_id": os.environ.get("GITHUB_RUN_ID")}
    measured = measure(results, checks, loaded.config)
    passes = load_passes(run_dir.path, results, say=print)  # a refresh's further timing passes (gate.run.passes)
    measured.speedup = with_passes(measured.speedup, passes)
    baseline = derive(measured, name=loaded.baseline_name,
                      hardware_key=results.fingerprint.hardware_key, hardware=hardware_of(results),
                      status=results.status, failing=failing_checks(checks), created_utc=stamp, source=source,
                      force_reason=reason if force else None, reason=reason)
    store = BaselineStore(root, loaded.baseline_name, loaded.config.baseline.history)
    path = store.write(baseline)
    if load_baseline(path).created_utc != baseline.created_utc:
        raise SpecguardError(Problem(str(path), "the baseline did not read back as written", hint="check the disk"))
    print(f"wrote {path}" + (f" (forced: {reason})" if baseline.forced else (f" (reason: {reason})" if reason
                                                                             else ""))
          + (f"; each cell timed in {len(passes) + 1} passes" if passes else ""))
    return path


__all__ = ["write_baseline"]
