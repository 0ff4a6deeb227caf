"""Minimal reproductions: every failing equivalence or sampling check of a run, shrunk to the smallest case that
still fails, as a folder a maintainer can act on without specguard's analysis (``specguard repro``, and a failing
``gate`` within ``checks.repro.budget_s``).

* :mod:`gate.repro.shrink`: delta debugging over a batch's rows, its token budget and its prompts' lengths, every
  candidate confirmed on two replays in a row;
* :mod:`gate.repro.probe`: whether a greedy case still fails (the equivalence check's own rule);
* :mod:`gate.repro.equivalence`, :mod:`gate.repro.sampling`: a failing check's start, its shrinking and its folder
  (:mod:`gate.repro.target_side`: a sampling case the target alone recounts; :mod:`gate.repro.sampled`: what the
  sampling cases share);
* :mod:`gate.repro.case`: the folder (``case.json``, ``replay.py``, ``REPORT.md``) and ``repro/index.json``.

Each folder is ``repro/<check>-<n>/`` in the run directory; the comment lists them and the Action uploads them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gate.repro.case import Written, write_index
from gate.repro.case import no_case as _not_shrunk

REPRO_DIR = "repro"


def failing(checks) -> dict[str, list[tuple[str, int]]]:
    """{check: [(engine, smallest failing batch size)]} of the checks this module shrinks, in verdict order."""
    out: dict[str, dict[str, int]] = {}
    for v in checks.failing():
        if v.check in ("equivalence", "distribution") and v.engine and v.batch_size is not None:
            seen = out.setdefault(v.check, {})
            seen[v.engine] = min(seen.get(v.engine, v.batch_size), v.batch_size)
    return {check: list(engines.items()) for check, engines in out.items()}


def reproduce(out, loaded, models, budget_s: float, say: Callable[[str], None] = print,
              describe: Callable | None = None, root: Path | None = None, checked=None) -> list[Written]:
    """Shrink every failing equivalence and distribution check of the run in ``out`` (a RunDir) with the engines in
    ``models`` (:class:`gate.run.setup.Models`), within ``budget_s`` seconds in all; the folders and the index
    written under ``root`` (default: the run's ``repro/``, cleared first).  ``describe(label, spec, engine)``:
    case.json's engine description (default: the engine's type's,
    :meth:`gate.engines.registry.EngineType.case_engine`; the self-test's names its mutant).  ``checked``:
    (results, checks) already in memory (the self-test's), else read from ``out``."""
    from gate.checks.context import CheckContext
    from gate.checks.doc import load_checked
    from gate.engines import build_reference, engine_type
    from gate.repro import equivalence as eq
    from gate.repro import sampling

    started = time.monotonic()
    results, checks = checked or load_checked(out)
    todo = failing(checks)
    if root is None:
        clear(out.path)
    root = root or out.path / REPRO_DIR
    written: list[Written] = []
    if not todo:
        write_index(root, written, budget_s, 0.0, results.run_id)
        return written
    ctx = CheckContext(results, models.pair, loaded.config)
    specs = {e.label: e for e in loaded.config.engines}
    engines = {e.name: e for e in models.engines}
    plains = {e.name: e for e in models.own_references}
    reference = build_reference(models.pair, loaded)
    left = lambda: budget_s - (time.monotonic() - started)  # noqa: E731
    def info(label: str) -> dict:
        spec, engine = specs.get(label), engines.get(label)
        if describe:
            return describe(label, spec, engine)
        return engine_type(spec).case_engine(spec, engine, loaded, models.pair, label)

    for n, (label, bs) in enumerate(todo.get("equivalence", []), 1):
        rel = f"{root.name}/equivalence-{n}"
        spec, engine = specs.get(label), engines.get(label)
        why = _cannot(ctx, engine, left())
        starts = eq.failing_batches(ctx, label, bs) if why is None else []
        if why is None and not starts:
            why = "no batch of the run shows the failure the check reported (it needs the recorded outputs)"
        if why is not None:
            written.append(_not_shrunk(root.parent / rel, rel, "equivalence", label, bs, why, say))
            continue
        plain = plains.get(spec.own_reference_name) if spec is not None and spec.own_reference_name else None
        target = eq.Target(engine, label, starts[0], info(label), plain)
        probe = eq.EquivalenceProbe(engine, reference, ctx.scorer, ctx.tolerances.get(label, ctx.tolerance),
                                    eq.settings_of(results), plain)
        say(f"repro: shrinking {label}'s equivalence failure at batch size {bs} ({left():.0f} s left)")
        shrunk = eq.shrink_one(target, probe, left(), say)
        if shrunk is None:
            written.append(_not_shrunk(root.parent / rel, rel, "equivalence", label, bs,
                                       "the run's failing batch did not fail again on two replays in a row (a flaky "
                                       "failure, or one that needs the run's whole sequence of batches)", say))
            continue
        written.append(eq.write_case(root.parent / rel, rel, target, shrunk, probe, results, models.pair.decode, say))
    for n, (label, bs) in enumerate(todo.get("distribution", []), 1):
        rel = f"{root.name}/distribution-{n}"
        engine = engines.get(label)
        if engine is None:
            written.append(_not_shrunk(root.parent / rel, rel, "distribution", label, bs, _cannot(ctx, None, 1), say))
            continue
        described = info(label)
        row = (checks.distribution.engines.get(label) or {}).get(str(bs)) if checks.distribution else None
        written.append(sampling.write_sampling_case(root.parent / rel, rel, ctx, results, label, bs, described, say,
                                                    extra=eq.batch_of(described, engine), run_engine=engine,
                                                    row=row, budget_s=max(left(), 0.0)))
    write_index(root, written, budget_s, time.monotonic() - started, results.run_id)
    return written


def clear(run_dir: Path) -> None:
    """An earlier run's cases must never sit beside this run's verdict: the folder goes when new checks are made."""
    import shutil

    folder = run_dir / REPRO_DIR
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.is_dir():
        shutil.rmtree(folder)


def _cannot(ctx, engine, left: float) -> str | None:
    if engine is None:
        return "the engine is not in this config (paired mode's base, or a renamed engine)"
    if not ctx.local:
        return ("not shrunk: each candidate is re-scored with the target, which is not loaded here "
                "(models.local_weights: true)")
    if left <= 0:
        return "not shrunk: the budget (checks.repro.budget_s) was spent on the cases before it"
    return None


def repro_command(session, run_dir: str, config: str, budget_s: float, threads: int | None) -> int:
    """``specguard repro RUN_DIR --config CONFIG``: the engines rebuilt (servers launched) from the config the run
    was made with, then :func:`reproduce`."""
    from gate.errors import EXIT_OK
    from gate.inputs.identity import refuse_unless_made_with
    from gate.io.rundir import RESULTS, RunDir
    from gate.run.results import load_results
    from gate.run.servers import serving
    from gate.run.setup import load_inputs, load_models

    out = RunDir(run_dir)
    results = load_results(out / RESULTS)
    inputs = load_inputs(session, config, run_dir, threads)
    refuse_unless_made_with(inputs.loaded, results.fingerprint, str(out / RESULTS))
    with serving(session.say, inputs.loaded, out.path) as servers:
        models = load_models(session, inputs)
        for server in servers:
            server.wait_ready()
        written = reproduce(out, inputs.loaded, models, budget_s, session.say)
    for w in written:
        session.say(f"{w.folder}: {w.trigger}")
    if not written:
        session.say("no failing equivalence or distribution check: nothing to reproduce")
    return EXIT_OK


__all__ = ["REPRO_DIR", "clear", "failing", "repro_command", "reproduce"]
