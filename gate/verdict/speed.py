"""The speed half of the judge: each timing cell and load level of a run against the stored baseline (every pass of
it) or against the base timed beside it (paired mode), judged as one family by :mod:`gate.verdict.speed_rule`, and
the verdict lines they give."""

from __future__ import annotations

import math

from gate.checks import resolution
from gate.checks.doc import Resolution, VerdictLine
from gate.inputs.config import BaselineConfig
from gate.numbers import signed_pct, times
from gate.verdict.baseline import Baseline, Comparability, Measurements
from gate.verdict.doc import Interval, LevelResolution, SpeedupChange, TimingNoise
from gate.verdict.explain import Cost, explain
from gate.verdict.noise import CellRun, cell_mean, within
from gate.verdict.speed_rule import (
    Tested,
    between_of,
    groups,
    holm,
    load_level,
    paired_cell,
    side_spread,
    stored_cell,
)
from gate.verdict.speed_rule import status as speed_status
from gate.verdict.summary import PairedSummary


def _geo(runs: list[CellRun]) -> Interval:
    """A side's speedup as the rule estimates it: ``exp`` of its cell mean (each batch's mean log speedup, averaged
    over batches; over a baseline's passes, their mean): the estimator the change is judged on, so a row's base,
    head and change agree (head / base == the change, exactly)."""
    runs = [r for r in runs if any(r)]
    if not runs:
        return Interval(estimate=None)
    return Interval(estimate=math.exp(sum(cell_mean(r) for r in runs) / len(runs)))


def _costs(bs: int, tpf: float | None, calibration: dict | None, k: int) -> Cost | None:
    if not tpf:
        return None
    row = (calibration or {}).get(str(bs))
    return Cost(tpf, k, row.get("cost_ratio") if row else None, row.get("verify_ratio") if row else None)


def _change(engine: str, slice_: str | None, bs: int, bucket: str | None, base: Interval, head: Interval,
            tested: Tested, explanation=None) -> SpeedupChange:
    """A cell (or a load level: slice and bucket None) before the family is judged: status pass until then."""
    return SpeedupChange(engine=engine, slice=slice_, batch_size=bs, bucket=bucket, base=base, head=head,
                         ratio=tested.interval(), status="pass", significant=False, explanation=explanation)


def _family(cells: list[tuple[SpeedupChange, Tested]], levels: list[tuple[SpeedupChange, Tested]],
            rules: BaselineConfig) -> tuple[list[SpeedupChange], list[SpeedupChange]]:
    """Every cell and load level of the run that its timing can resolve, one family: Holm over their p-values, then
    each one's status.  A load level whose own timing spread cannot resolve ``speedup_drop`` (its
    ``resolution.judged`` false) is not judged, nor are its cells: neutral, outside the family."""
    unjudged = {(c.engine, c.batch_size) for c, _ in levels if c.resolution is not None and not c.resolution.judged}
    every = cells + levels
    judged_rows = [(c, t) for c, t in every if (c.engine, c.batch_size) not in unjudged]
    adjusted = dict(zip((id(c) for c, _ in judged_rows), holm([t.p_drop for _, t in judged_rows])))
    levels_by = {(c.engine, c.batch_size): c.resolution for c, _ in levels}
    judged = []
    for change, _ in every:
        if (change.engine, change.batch_size) in unjudged:
            judged.append(change.model_copy(update={"status": "neutral", "significant": False,
                                                    "resolution": levels_by[(change.engine, change.batch_size)]}))
            continue
        p = adjusted[id(change)]
        status, significant = speed_status(change.ratio, p, rules.speedup_drop, rules.min_effect)
        judged.append(change.model_copy(update={"status": status, "significant": significant, "p_adjusted": p}))
    return judged[:len(cells)], judged[len(cells):]


def _resolved(levels: list[tuple[SpeedupChange, Tested]], own: dict[str, dict[str, Resolution]] | None,
              rules: BaselineConfig) -> list[tuple[SpeedupChange, Tested]]:
    """Each load level with what it resolves: ``drop`` from the spread the judge holds (its interval's), ``own``
    from the run's own repeats: the checks' (stored mode), or the paired ratios' (paired mode: all of the spread
    is the run's own).  Not judged where ``own`` is worse than ``speedup_drop``."""
    out = []
    for change, t in levels:
        stated = resolution.drop(math.sqrt(t.var), t.df) if t.var is not None else None
        mine = (own or {}).get(change.engine, {}).get(str(change.batch_size)) if own is not None else None
        if own is None:  # paired: the judged spread is the run's own
            own_drop, sd = stated, None
        else:
            own_drop, sd = (mine.drop, mine.sd) if mine is not None else (None, None)
        judged = own_drop is None or own_drop <= rules.speedup_drop
        if stated is not None and own_drop is not None:  # the judge pools the head's spread over every level: a
            stated = max(stated, own_drop)  # level noisier than the rest is never stated finer than its own spread
        res = LevelResolution(drop=stated, own=own_drop, sd=sd, judged=judged)
        out.append((change.model_copy(update={"resolution": res}), t))
    return out


def _levels(cells: list[tuple[SpeedupChange, Tested]], shared: float) -> list[tuple[SpeedupChange, Tested]]:
    by: dict[tuple[str, int], list[tuple[SpeedupChange, Tested]]] = {}
    for c, t in cells:
        by.setdefault((c.engine, c.batch_size), []).append((c, t))
    out = []
    for (engine, bs), rows in sorted(by.items()):
        t = load_level([r[1] for r in rows], shared)
        kept = [r[0] for r in rows if r[1].d is not None and r[1].var is not None  # the cells load_level averages
                and r[0].base.estimate and r[0].head.estimate]
        base = [c.base.estimate for c in kept]
        head = [c.head.estimate for c in kept]
        out.append((_change(engine, None, bs, None, Interval(estimate=_geomean(base)),
                            Interval(estimate=_geomean(head)), t), t))
    return out


def _geomean(xs: list[float]) -> float | None:
    """A load level's side: the geometric mean of its cells' (the level's change is the mean of their log changes,
    so head / base of a level is its change too)."""
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def stored_changes(head: Measurements, baseline: Baseline, rules: BaselineConfig,
                            comp: Comparability | None = None) -> tuple[list[SpeedupChange], list[SpeedupChange],
                                                                         TimingNoise | None]:
    """Each head cell against the baseline's cell (every pass of it), then the load levels, judged as one family
    against the spread within and between runs (:mod:`gate.verdict.speed_rule`)."""
    k = head.settings.num_draft_tokens
    pairs = []
    for engine, cells in head.speedup.items():
        for key, now in cells.items():
            if comp is not None and not comp.slice_ok(now.slice):
                continue
            base = baseline.speedup.get(engine, {}).get(key)
            if base is None or not base.samples or not now.samples:
                continue
            pairs.append((engine, now, base))
    if not pairs:
        return [], [], None
    head_runs = [groups(now.samples, now.batches) for _, now, _ in pairs]
    base_runs = [[groups(base.samples, base.batches)] + [groups(p.samples, p.batches) for p in base.passes or []]
                 for _, _, base in pairs]
    # A baseline written before batches were kept holds each cell's samples as one group, which mixes its prompts'
    # real differences into the spread: its repeats' spread is taken to be the head's.
    grouped = [runs for runs, (_, _, base) in zip(base_runs, pairs) if base.batches]
    w_base0 = within([g for runs in grouped for r in runs for g in r])
    w_head0 = within([g for r in head_runs for g in r])
    w_head = side_spread(head_runs, w_base0)
    w_base = side_spread([r for runs in grouped for r in runs], w_head0) if grouped else w_head
    between = between_of(base_runs, rules.between_run_sd)
    tested = []
    for (engine, now, base), h, b in zip(pairs, head_runs, base_runs):
        t = stored_cell(h, b, w_head, w_base, between.between_sd)
        head_cal = head.calibration if engine in head.calibrated_engines else None
        base_cal = baseline.calibration if engine in baseline.calibrated_engines else None
        hc = _costs(now.batch_size, now.tokens_per_target_forward, head_cal, k)
        bc = _costs(base.batch_size, base.tokens_per_target_forward, base_cal, baseline.settings.num_draft_tokens)
        ratio = t.interval()
        tested.append((_change(engine, now.slice, now.batch_size, now.bucket, _geo(b), _geo([h]), t,
                               explain(bc, hc, ratio.estimate) if hc and bc and ratio.estimate else None), t))
    levels = _resolved(_levels(tested, 2 * between.between_sd ** 2), head.resolution, rules)
    cells, levels = _family(tested, levels, rules)
    noise = TimingNoise(within_sd_head=w_head.sd, within_sd_base=w_base.sd, between_sd=between.between_sd,
                        between_source=between.source, passes=max(len(r) for r in base_runs))
    return cells, levels, noise


def paired_changes(measured: Measurements, paired: PairedSummary, rules: BaselineConfig
                            ) -> tuple[list[SpeedupChange], list[SpeedupChange], TimingNoise | None]:
    """Head vs base from the same timed batches: base wall / head wall of each (batch, repeat), grouped by batch;
    both engines' cells (estimate, acceptance) are the run's own measurements.  One family, as stored."""
    rows = [(key, cell, groups(cell.ratios, cell.batches)) for key, cell in sorted(paired.cells.items())
            if cell.ratios]
    if not rows:
        return [], [], None
    w = within([g for _, _, r in rows for g in r])
    tested = []
    for key, cell, run in rows:
        t = paired_cell(run, w)
        head = measured.speedup.get(paired.head_engine, {}).get(key)
        base = measured.speedup.get(paired.engine, {}).get(key)
        hc = _costs(cell.batch_size, head.tokens_per_target_forward if head else None, measured.calibration,
                    measured.settings.num_draft_tokens)
        bc = _costs(cell.batch_size, base.tokens_per_target_forward if base else None, paired.calibration,
                    paired.num_draft_tokens)
        ratio = t.interval()
        # The head's speedup by the rule's estimator; the base's is what the paired change implies (head / change):
        # both are timed against the same reference execution of each (batch, repeat), so this is the base's own
        # estimate wherever every sample was kept, and the row's three figures agree by construction.
        shown = _geo([groups(head.samples, head.batches)]) if head else Interval(estimate=None)
        base_shown = Interval(estimate=shown.estimate / ratio.estimate
                              if shown.estimate is not None and ratio.estimate else None)
        if base_shown.estimate is None and base is not None:
            base_shown = _geo([groups(base.samples, base.batches)])
        tested.append((_change(paired.head_engine, cell.slice, cell.batch_size, cell.bucket, base_shown, shown, t,
                               explain(bc, hc, ratio.estimate) if hc and bc and ratio.estimate else None), t))
    levels = _resolved(_levels(tested, 0.0), None, rules)
    for i, (change, t) in enumerate(levels):  # the paired ratios' spread per sample: the run's own
        if change.resolution is not None:
            levels[i] = (change.model_copy(update={"resolution": change.resolution.model_copy(
                update={"sd": w.sd})}), t)
    cells, levels = _family(tested, levels, rules)
    return cells, levels, TimingNoise(within_sd_head=w.sd, between_source="paired: one process, interleaved")


def _where(c: SpeedupChange) -> str:
    return (f"{c.slice} (context {c.bucket}) at batch size {c.batch_size}" if c.slice is not None or c.bucket
            else f"batch size {c.batch_size}, all slices")


def not_judged_why(level: SpeedupChange, rules: BaselineConfig, cause: str | None = None) -> str:
    """Why a load level's speed is not judged, in one sentence: its timing spread, what it resolves, the likely
    cause where the runner's load names one."""
    r = level.resolution
    spread = f", {r.sd:.0%} per sample," if r is not None and r.sd is not None else ""
    why = (f"speed at batch size {level.batch_size} not judged: this run's timing spread{spread} cannot resolve a "
           f"{rules.speedup_drop:.0%} drop (baseline.speedup_drop); it resolves drops of {r.own:.0%} or more")
    if cause:
        why += f"; likely cause: {cause}"
    return why + ("; rerun on a quiet runner, time more repeats (checks.speedup.min_repeats, time_budget_s) or "
                  "compare paired")


def speedup_verdicts(changes: list[SpeedupChange], levels: list[SpeedupChange], rules: BaselineConfig,
                      paired: bool, required: bool = False, cause: str | None = None) -> list[VerdictLine]:
    """The speed lines: each failure, one warning for the family, each load level not judged (neutral; a failure
    under ``checks.speedup.required``), and a pass for the rest."""
    out = []
    how = "paired with the base in this job" if paired else "against the baseline, within- and between-run spread"
    tolerance = rules.speedup_drop
    every = changes + levels
    for c in every:
        if c.status != "fail":
            continue
        why = (f"speedup on {_where(c)}: {times(c.base.estimate)} → {times(c.head.estimate)} "
               f"({signed_pct(c.ratio.estimate - 1)}, 95% CI {signed_pct(c.ratio.low - 1)} to "
               f"{signed_pct(c.ratio.high - 1)} {how}), beyond the {tolerance:.0%} tolerance")
        if c.explanation:
            why += f": {c.explanation.sentence}"
        out.append(VerdictLine(check="speedup", status="fail", engine=c.engine, batch_size=c.batch_size,
                                slice=c.slice, why=why))
    for c in levels:
        if c.status == "neutral":
            why = not_judged_why(c, rules, cause)
            out.append(VerdictLine(check="speedup", status="fail" if required else "neutral", engine=c.engine,
                                    batch_size=c.batch_size,
                                    why=f"{REQUIRED}{why}" if required else why))
    judged = [c for c in every if c.status != "neutral"]
    warned = [c for c in judged if c.status == "warn"]
    if warned:
        worst = min(warned, key=lambda c: c.ratio.estimate)
        out.append(VerdictLine(
            check="speedup", status="warn", engine=worst.engine,
            why=f"{len(warned)} slower, beyond the {rules.min_effect:.0%} worth naming and significant over the "
                f"run's {len(judged)} cells and load levels (Holm), within the {tolerance:.0%} tolerance ({how}; "
                f"worst {_where(worst)}: {signed_pct(worst.ratio.estimate - 1)}"
                + (f", 95% CI {signed_pct(worst.ratio.low - 1)} to {signed_pct(worst.ratio.high - 1)}"
                   if worst.ratio.low is not None else "") + ")"))
    if judged and not any(c.status in ("fail", "warn") for c in judged):
        worst = min((c for c in judged if c.ratio.estimate is not None), key=lambda c: c.ratio.estimate, default=None)
        if worst is not None:
            out.append(VerdictLine(check="speedup", status="pass", engine=worst.engine,
                                    why=f"no drop beyond the spread between runs in any "
                                        f"{'judged ' if len(judged) < len(every) else ''}cell or load level "
                                        f"({how}; worst {_where(worst)}: {signed_pct(worst.ratio.estimate - 1)})"))
    return out


REQUIRED = "required (checks.speedup.required), and "


__all__ = ["REQUIRED", "not_judged_why", "paired_changes", "speedup_verdicts", "stored_changes"]
