"""What ``checks.budget_minutes`` left out of the run, and the power that remained where it cut (``checks.json``'s
``budget``).

Left out means not run: its batch sizes, cells and groups are absent from the results, so no check judges them and
no baseline stores them.  This section and its ``info`` lines say so by name, so that a reader never takes the absence
for a pass.  Where the budget cut the sampling test below ``num_samples``, the power is the distribution check's own
simulation at the tokens it had (:func:`gate.checks.distribution.power`); where it stopped a load level's adaptive
repeats, the drop those repeats still resolve is the speedup check's (:mod:`gate.checks.resolution`).
"""

from __future__ import annotations

from gate.checks.doc import Budget, BudgetLeftOutLine, BudgetSamplingPower, BudgetSpeed, VerdictLine

WORDS = {"equivalence": "equivalence", "sampling": "the sampling test", "timing": "timing",
         "traffic": "request-rate traffic"}


def section(results, distribution, speedup) -> tuple[Budget | None, list[VerdictLine]]:
    """The budget's section and its lines, from the run's record and the distribution and speedup findings."""
    rec = results.budget
    if rec is None:
        return None, []
    left = [BudgetLeftOutLine(what=x.what, batch_size=x.batch_size, engine=x.engine, cell=x.cell, reason=x.reason)
            for x in rec.left_out]
    detect, n = None, None
    if distribution is not None and distribution.power is not None:
        detect = {f: fam.min_detectable_epsilon for f, fam in distribution.power.families.items()}
        n = distribution.power.n
    sampling = [BudgetSamplingPower(engine=s.engine, batch_size=s.batch_size, tokens=s.tokens, need=s.need,
                                    min_detectable_epsilon=detect, power_n=n) for s in rec.sampling]
    speed = []
    for engine, found in (speedup.engines.items() if speedup is not None else ()):
        for bs in rec.repeats_cut:
            level = found.load_curve.get(str(bs))
            if level is not None:
                speed.append(BudgetSpeed(engine=engine, batch_size=bs,
                                         repeats=level.repeats.min if level.repeats else 0,
                                         drop=level.resolution.drop if level.resolution else None))
    doc = Budget(minutes=rec.minutes, source=rec.source, run_s=rec.run_s, left_out=left, sampling=sampling,
                 speed=speed)
    return doc, lines(doc)


def lines(doc: Budget) -> list[VerdictLine]:
    """One info line per kind of work left out (never a pass of it), per sampling group cut, per level cut."""
    out = []
    by_what: dict[str, list[BudgetLeftOutLine]] = {}
    for x in doc.left_out:
        by_what.setdefault(x.what, []).append(x)
    for what, xs in by_what.items():
        where = sorted({x.batch_size for x in xs if x.batch_size is not None}, reverse=True)
        cells = [x for x in xs if x.cell]
        said = (f"{len(cells)} timing cells" if cells else WORDS.get(what, what)) + (
            f" at batch size {'/'.join(map(str, where))}" if where else "")
        out.append(VerdictLine.of("budget", None, "info", f"not run, not judged: {said} left out by the budget "
                                  f"({doc.minutes:g} min, {doc.source}): {xs[0].reason.split(': ', 1)[-1]}"))
    for s in doc.sampling:
        eps = ", ".join(f"{f} {e:g}" for f, e in (s.min_detectable_epsilon or {}).items() if e is not None)
        out.append(VerdictLine.of("budget", s.engine, "info", f"the sampling test ran on {s.tokens} of "
                                  f"{s.need} tokens (checks.distribution.num_samples) within the budget"
                                  + (f"; the smallest distortion detected with 80% power: {eps}" if eps else "")
                                  + (f" (simulated at {s.power_n} tokens, the first group analysed: at {s.tokens} "
                                     "the power is lower)" if eps and s.power_n and s.power_n > s.tokens else ""),
                                  batch_size=s.batch_size))
    for sp in doc.speed:
        res = f"; its repeats resolve a drop of {sp.drop:.0%} with 80% power" if sp.drop is not None else ""
        out.append(VerdictLine.of("budget", sp.engine, "info", f"timing repeats stopped by the budget at "
                                  f"{sp.repeats} per cell{res}", batch_size=sp.batch_size))
    return out


__all__ = ["lines", "section"]
