"""The judge: a run's summary against its baseline: what got worse than what was accepted before, and why.

``judge(head, stored, rules)`` is pure: a :class:`gate.verdict.summary.RunSummary` (the run's measurements, in
the shape a baseline holds them, derived by the same code, :func:`gate.verdict.baseline.measure`; its status,
config and check verdicts; in paired mode the base timed beside it), the stored baseline (or none), and the
rules (``baseline.*`` of the config).  No document is read, no clock or environment is consulted.  Each rule
gives pass, fail, warn or neutral with one
sentence a reviewer can act on (``baseline.*`` in the config sets the tolerances):

* **equivalence** — any confident divergence, confident inconsistency or
  corruption signature fails (from the checks); so does an exact-match drop
  against the baseline beyond the measured noise floor;
* **distribution** — a test below alpha while the control passes fails;
* **acceptance** — mean acceptance length below the baseline by more than
  ``acceptance_drop`` (5%, vLLM's tolerance) in any slice fails.  Under greedy
  decoding it is deterministic: a noise-free regression signal;
* **speedup** — a drop fails only when it is beyond ``speedup_drop`` *and*
  significant: the bootstrap CI of the head/baseline ratio lies below
  ``1 - speedup_drop``.  (A load level or slice whose speedup CI lies below
  ``checks.speedup.min_speedup`` is the speedup check's own failure, carried
  over like every check verdict.)  On other hardware, timing is "not
  comparable" (a warning), never a failure; equivalence and acceptance are still
  compared.  In paired mode the ratio comes from head and base timed side by
  side, interleaved, in the same job;
* **reproducibility** — reported; fails only under ``require_bitwise``;
* **no baseline** — neutral, with how to create one.

Every speedup change is explained by its causes (:func:`explain`).
"""

from __future__ import annotations

import math

import numpy as np

from gate.checks.doc import VerdictLine
from gate.inputs.config import REFERENCE, BaselineConfig, Config, baseline_name
from gate.numbers import signed_pct, times
from gate.run.load import likely_cause
from gate.run.results import Results
from gate.stats import alpha_from_mean_accepted
from gate.verdict.baseline import Baseline, Comparability, Measurements, comparability
from gate.verdict.changes import what_changed
from gate.verdict.doc import (
    EXIT_FAIL,
    EXIT_PASS,
    SCHEMA,
    AcceptanceChange,
    BaselineRef,
    EquivalenceChange,
    Interval,
    Rules,
    SpeedupChange,
    TimingNoise,
    TrafficChange,
    VerdictDoc,
)
from gate.verdict.explain import Cost, explain, main_cause
from gate.verdict.speed import paired_changes, speedup_verdicts, stored_changes
from gate.verdict.speed_rule import FAMILY_ALPHA
from gate.verdict.store import Stored
from gate.verdict.summary import PairedSummary, RunSummary

# --- ratio statistics -------------------------------------------------------------------------


def ratio_ci(head: list[float], base: list[float], resamples: int = 2000, seed: int = 0) -> Interval:
    """Bootstrap CI of median(head) / median(base) from independent samples (stored-baseline mode)."""
    if not head or not base:
        return Interval(estimate=None)
    h, b = np.asarray(head, dtype=float), np.asarray(base, dtype=float)
    est = float(np.median(h) / np.median(b))
    if len(h) < 2 or len(b) < 2:
        return Interval(estimate=est)
    rng = np.random.default_rng(seed)
    mh = np.median(h[rng.integers(0, len(h), (resamples, len(h)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    r = mh / mb
    return Interval(estimate=est, low=float(np.quantile(r, 0.025)), high=float(np.quantile(r, 0.975)))


def paired_ratio_ci(ratios: list[float], resamples: int = 2000) -> Interval:
    """Bootstrap CI of the median of paired head/base ratios (paired mode)."""
    from gate.stats import bootstrap_median_ci

    if not ratios:
        return Interval(estimate=None)
    ci = bootstrap_median_ci(ratios, resamples)
    return Interval(estimate=ci.estimate, low=ci.low if len(ratios) > 1 else None,
                    high=ci.high if len(ratios) > 1 else None)


# --- the comparison -------------------------------------------------------------------------


def judge(head: RunSummary, stored: Stored, rules: BaselineConfig) -> VerdictDoc:
    """The head's summary against the stored baseline (``stored.baseline``; None: there is none yet), or, in
    paired mode (``head.paired``), its speedup against the base's engine timed beside it.  Pure: the verdict
    depends on these three values alone."""
    paired = head.paired
    baseline = stored.baseline
    measured = head.measured
    hw = head.hardware_key
    # Verdicts of the run itself: equivalence, signatures, noise floor, distribution, reproducibility, speedup floor.
    verdicts: list[VerdictLine] = list(head.checks)
    if head.status != "complete":
        verdicts.append(VerdictLine(check="run", status="fail",
                                    why=f"the run is {head.status}: only what finished was checked; rerun with "
                                        "--resume to complete it"))

    eq_changes: list[EquivalenceChange] = []
    acc_changes: list[AcceptanceChange] = []
    sp_changes: list[SpeedupChange] = []
    sp_levels: list[SpeedupChange] = []
    noise: TimingNoise | None = None
    if baseline is None:
        verdicts.append(_missing_baseline(rules, hw, stored, paired is not None))
    if baseline is not None:
        comp = comparability(baseline, measured)
        verdicts += [VerdictLine(check="baseline", status="neutral", why=note) for note in comp.notes()]
        if comp.same_suite:
            eq_changes = _exact_match_changes(measured, baseline, rules.exact_match_drop)
        verdicts += [VerdictLine(check="equivalence", status="fail", engine=c.engine, batch_size=c.batch_size,
                                 why=f"exact match fell from {c.base:.0%} to {c.head:.0%} at batch size "
                                     f"{c.batch_size}, more than the {c.allowed_drop:.0%} that float noise "
                                     "explains here")
                     for c in eq_changes if c.status == "fail"]
        acc_changes = _acceptance_changes(measured, baseline, rules.acceptance_drop, comp)
        verdicts += _acceptance_verdicts(acc_changes, rules.acceptance_drop, comp)
        if paired is None:
            if stored.same_hardware:
                sp_changes, sp_levels, noise = stored_changes(measured, baseline, rules, comp)
            else:
                verdicts.append(VerdictLine(
                    check="speedup", status="warn",
                    why=f"not comparable: the baseline was measured on {baseline.hardware_key}, this run on {hw}; "
                        "timing was not compared (equivalence and acceptance were)"))
    if paired is not None:
        sp_changes, sp_levels, noise = paired_changes(measured, paired, rules)
    verdicts += speedup_verdicts(sp_changes, sp_levels, rules, paired is not None,
                                 required=head.config.checks.speedup.required, cause=likely_cause(head.runner_load))
    if paired is not None:
        tr_changes = _paired_traffic_changes(measured, paired, rules.speedup_drop)
    else:
        tr_changes = _traffic_changes(measured, baseline, rules.speedup_drop) \
            if baseline is not None and stored.same_hardware else []
    verdicts += _traffic_verdicts(tr_changes, rules.speedup_drop, measured, None if paired else baseline,
                                  paired is not None)
    # The runner is named only to explain a speed change the family marked: a move inside the spread between runs
    # needs no explanation (and named on unchanged runs, it was one more false alarm).
    marked = any(c.status in ("fail", "warn") for c in sp_changes + sp_levels)
    drift = runner_drift(sp_changes) if paired is None and marked else None
    if drift is not None:
        verdicts.append(drift)

    failed = [v for v in verdicts if v.status == "fail"]
    mode = "paired" if paired else ("stored" if baseline else "none")
    # speed a load level's timing could not resolve is not judged: the job's verdict is neutral, never a pass (or,
    # under checks.speedup.required, its lines failed above)
    unjudged = any(c.status == "neutral" for c in sp_levels)
    outcome = "fail" if failed else ("neutral" if mode == "none" or unjudged else "pass")
    ref = None
    if baseline is not None:
        ref = BaselineRef(path=stored.path, name=baseline.name, hardware_key=baseline.hardware_key,
                          created_utc=baseline.created_utc, same_hardware=stored.same_hardware,
                          forced=baseline.forced is not None)
    doc = VerdictDoc(outcome=outcome, exit_code=EXIT_FAIL if failed else EXIT_PASS, headline="", mode=mode,
                     baseline=ref, hardware_key=hw, checks=verdicts, equivalence=eq_changes, acceptance=acc_changes,
                     speedup=sp_changes, speedup_levels=sp_levels, timing_noise=noise, traffic=tr_changes,
                     changed=what_changed(head, baseline), run_status=head.status, run=head.run, rules=applied(rules))
    doc.headline = headline(doc, measured)
    return doc


def applied(rules: BaselineConfig) -> Rules:
    """The thresholds this judge applies, recorded in the verdict (the report reads them there)."""
    return Rules(acceptance_drop=rules.acceptance_drop, speedup_drop=rules.speedup_drop,
                 exact_match_drop=rules.exact_match_drop, on_missing=rules.on_missing, crossover_move=CROSSOVER_MOVE,
                 drift_min=DRIFT_MIN, drift_share=DRIFT_SHARE, min_effect=rules.min_effect,
                 family_alpha=FAMILY_ALPHA, between_run_sd=rules.between_run_sd)


def run_baseline_name(results: Results, config: Config) -> str:
    """The baseline name a run was made under (recorded in results.json), else the config's rule without a file."""
    return results.baseline_name or baseline_name(config, None)


def _missing_baseline(rules: BaselineConfig, hw: str, stored: Stored, paired: bool) -> VerdictLine:
    """No baseline for this hardware key: neutral (or, under ``baseline.on_missing: fail`` or ``stop``, a failure)
    that says which keys do have one and how to make this one."""
    why = f"no baseline '{stored.name}' for hardware {hw}" + (f" ({stored.path})" if stored.path else "")
    if stored.others:
        why += (f"; baselines exist for {', '.join(stored.others)}, but none is used by chance: set the "
                "`hardware-key` input (or baseline.hardware_key) to one of them if this runner is the same machine, or")
    else:
        why += "; to create it,"
    why += (" run the refresh workflow on this runner (or `specguard baseline refresh CONFIG --from RUN_DIR`) and "
            "commit the file it writes")
    if paired:
        why += "; speedup was judged against the base, timed in this job"
    if rules.on_missing in ("fail", "stop"):  # stop: the gate stops before its run; a compare of a run fails
        return VerdictLine(check="baseline", status="fail", why=why + f" (baseline.on_missing: {rules.on_missing})")
    return VerdictLine(check="baseline", status="neutral", why=why)


def _exact_match_changes(head: Measurements, baseline: Baseline, fixed: float | str) -> list[EquivalenceChange]:
    out = []
    floor = head.noise_floor
    for engine, rows in head.equivalence.items():
        for bs, s in rows.items():
            base = baseline.equivalence.get(engine, {}).get(bs)
            if base is None or base.exact_match is None or s.exact_match is None:
                continue
            if fixed == "auto":
                plain = floor.get(bs)
                noise = 1 - ((plain.exact_match if plain else None) or 1.0)
                allowed = max(noise, 1 / max(s.sequences, 1))
            else:
                allowed = float(fixed)
            drop = base.exact_match - s.exact_match
            out.append(EquivalenceChange(engine=engine, batch_size=int(bs), base=base.exact_match,
                                         head=s.exact_match, allowed_drop=allowed,
                                         status="fail" if drop > allowed + 1e-12 else "pass"))
    return out


def _acceptance_changes(head_summary: Measurements, baseline: Baseline, tolerance: float,
                        comp: Comparability | None = None) -> list[AcceptanceChange]:
    """Per engine, batch size and slice.  After a k change, each row carries the Leviathan expectation at the new
    k from the baseline's acceptance and is neutral; after a suite change only shared slices (and ``*``, over the
    whole suite, only when the suite is the same) are compared."""
    comp = comp or comparability(baseline, head_summary)
    head = head_summary.acceptance
    out = []
    for engine, per_bs in baseline.acceptance.items():
        for bs, per_slice in per_bs.items():
            for slc, base in per_slice.items():
                now = head.get(engine, {}).get(bs, {}).get(slc)
                if now is None or base.mean_accepted_length is None or now.mean_accepted_length is None:
                    continue
                if not comp.same_suite and slc not in comp.shared:
                    continue
                rel = now.mean_accepted_length / base.mean_accepted_length - 1
                expected, status = None, ("fail" if rel < -tolerance else "pass")
                if not comp.same_k and comp.base_k:
                    a = alpha_from_mean_accepted(base.mean_accepted_length, comp.base_k)
                    expected = comp.head_k + 1.0 if a >= 1 else (1 - a ** (comp.head_k + 1)) / (1 - a)
                    status = "neutral"
                out.append(AcceptanceChange(
                    engine=engine, batch_size=int(bs), slice=slc, base=base.mean_accepted_length,
                    head=now.mean_accepted_length, relative=rel, status=status, expected=expected,
                    acceptance_per_pos_base=base.acceptance_per_pos, acceptance_per_pos_head=now.acceptance_per_pos))
    return out


def _acceptance_verdicts(changes: list[AcceptanceChange], tolerance: float,
                         comp: Comparability | None = None) -> list[VerdictLine]:
    out = []
    if comp is not None and not comp.same_k:
        for engine in sorted({c.engine for c in changes}):
            rows = [c for c in changes if c.engine == engine and c.slice == "*"] or \
                [c for c in changes if c.engine == engine]
            parts = [f"{'all slices' if c.slice == '*' else c.slice} at batch size {c.batch_size}: "
                     f"{c.base:.2f} → {c.head:.2f} (Leviathan expects {c.expected:.2f})"
                     for c in rows[:4] if c.expected is not None]
            out.append(VerdictLine(check="acceptance", status="neutral", engine=engine,
                                    why=f"k changed {comp.base_k} → {comp.head_k}, so mean acceptance length moves "
                                        f"as expected, not judged: {'; '.join(parts)}"))
        return out
    for c in changes:
        if c.status == "fail":
            where = "all slices" if c.slice == "*" else f"{c.slice}"
            out.append(VerdictLine(check="acceptance", status="fail", engine=c.engine, batch_size=c.batch_size,
                                    slice=c.slice,
                                    why=f"mean acceptance length on {where} at batch size {c.batch_size} fell "
                                        f"{c.base:.2f} → {c.head:.2f} ({signed_pct(c.relative)}), beyond the "
                                        f"{tolerance:.0%} tolerance: the draft agrees with the target less often"))
    for engine in sorted({c.engine for c in changes}):
        mine = [c for c in changes if c.engine == engine]
        if all(c.status == "pass" for c in mine):
            worst = min(mine, key=lambda c: c.relative)
            where = "all slices" if worst.slice == "*" else worst.slice
            out.append(VerdictLine(check="acceptance", status="pass", engine=engine,
                                    why=f"mean acceptance length within {tolerance:.0%} of the baseline on every "
                                        f"slice and batch size (worst {where} at batch size "
                                        f"{worst.batch_size}: {signed_pct(worst.relative)})"))
    return out


def _speedup_status(ratio: Interval, tolerance: float) -> tuple[str, bool]:
    """The speedup rule, stored or paired: fail when the ratio's CI lies wholly below ``1 - tolerance``
    (significant); warn when only its estimate does, or when the CI lies wholly below 1 (a real drop, within the
    tolerance: never shown as a pass); pass otherwise."""
    significant = ratio.high is not None and ratio.high < 1 - tolerance
    beyond = ratio.estimate is not None and ratio.estimate < 1 - tolerance
    real_drop = ratio.high is not None and ratio.high < 1
    return ("fail" if significant else ("warn" if beyond or real_drop else "pass")), significant


def _traffic_changes(head: Measurements, baseline: Baseline, tolerance: float) -> list[TrafficChange]:
    """Each engine's latency speedup per request rate against the baseline's samples at the same rate (the speedup
    rule: fail when the ratio's CI lies wholly below ``1 - tolerance``)."""
    out = []
    for engine, cells in head.traffic.items():
        for key, cell in cells.items():
            base = baseline.traffic.get(engine, {}).get(key)
            if base is None or not cell.samples or not base.samples:
                continue
            ratio = ratio_ci(cell.samples, base.samples)
            status, significant = _speedup_status(ratio, tolerance)
            out.append(TrafficChange(
                engine=engine, rate=cell.rate, base=Interval(estimate=base.estimate, low=base.low, high=base.high),
                head=Interval(estimate=cell.estimate, low=cell.low, high=cell.high), ratio=ratio, status=status,
                significant=significant, ttft_p99_base=base.ttft_p99, ttft_p99_head=cell.ttft_p99,
                tpot_p99_base=base.tpot_p99, tpot_p99_head=cell.tpot_p99))
    return out


CROSSOVER_MOVE = 0.8  # a crossover rate below this share of the baseline's is worth a warning


def _paired_traffic_changes(measured: Measurements, paired: PairedSummary, tolerance: float) -> list[TrafficChange]:
    """Paired mode: per rate, base latency / head latency of each request of the same traces (> 1: the head is
    faster), its median and bootstrap CI, with the speedup rule; each side's own latency speedup beside it."""
    out = []
    head_cells = measured.traffic.get(paired.head_engine, {})
    for key, ratios in paired.traffic.items():
        cell = head_cells.get(key)
        if cell is None or not ratios:
            continue
        ratio = paired_ratio_ci(ratios)
        status, significant = _speedup_status(ratio, tolerance)
        base = cell.base_estimate
        out.append(TrafficChange(engine=paired.head_engine, rate=cell.rate, base=Interval(estimate=base),
                                 head=Interval(estimate=cell.estimate, low=cell.low, high=cell.high), ratio=ratio,
                                 status=status, significant=significant, ttft_p99_head=cell.ttft_p99,
                                 tpot_p99_head=cell.tpot_p99))
    return out


def _crossover_rate(cells: dict) -> float | None:
    """Where the median latency speedup crosses 1 (interpolated; else the lowest rate below 1; None: it pays at
    every rate)."""
    from gate.checks.traffic import crossing

    first, interpolated = crossing({c.rate: c.estimate for c in cells.values() if c.estimate is not None})
    return interpolated or first


def _traffic_verdicts(changes: list[TrafficChange], tolerance: float, head: Measurements,
                      baseline: Baseline | None, paired: bool = False) -> list[VerdictLine]:
    out = []
    how = "paired with the base on the same traces" if paired else "against the baseline's requests"
    for c in changes:
        if c.status == "fail":
            out.append(VerdictLine(
                check="traffic", status="fail", engine=c.engine,
                why=f"latency speedup at {c.rate:g} req/s: {times(c.base.estimate)} → {times(c.head.estimate)} "
                    f"({signed_pct(c.ratio.estimate - 1)}, 95% CI {signed_pct(c.ratio.low - 1)} to "
                    f"{signed_pct(c.ratio.high - 1)} {how}), beyond the {tolerance:.0%} tolerance"))
        elif c.status == "warn":
            out.append(VerdictLine(
                check="traffic", status="warn", engine=c.engine,
                why=f"latency speedup at {c.rate:g} req/s: {times(c.base.estimate)} → {times(c.head.estimate)} "
                    f"({signed_pct(c.ratio.estimate - 1)}), a drop within the {tolerance:.0%} tolerance or not "
                    "significant"))
    for engine, cells in head.traffic.items():
        base_cells = (baseline.traffic if baseline else {}).get(engine)
        if not base_cells:
            continue
        was, now = _crossover_rate(base_cells), _crossover_rate(cells)
        if now is not None and (was is None or now < CROSSOVER_MOVE * was):
            out.append(VerdictLine(
                check="traffic", status="warn", engine=engine,
                why=f"speculation now stops paying at about {now:.2g} req/s "
                    + (f"(the baseline: about {was:.2g} req/s)" if was is not None else
                       f"(the baseline: it paid at every rate up to {max(c.rate for c in base_cells.values()):g} "
                       "req/s)")))
    if changes and not any(c.status in ("fail", "warn") for c in changes):
        out.append(VerdictLine(check="traffic", status="pass",
                               why=f"latency speedup within {tolerance:.0%} of the "
                                   f"{'base' if paired else 'baseline'} at every request rate"))
    return out


DRIFT_MIN = 0.05  # a median move under 5% is not worth naming
DRIFT_SHARE = 0.8  # the share of cells that must move the median's way


def runner_drift(changes: list[SpeedupChange]) -> VerdictLine | None:
    """Name the runner, not the PR, when every cell moved alike with acceptance unchanged and the step costs moved.

    Stored mode compares timings from two jobs.  A PR moves the cells it touches (a slice, a load level) and
    moves acceptance with them; a different runner (another GPU clock, a noisy neighbour, a driver) moves every
    cell by a similar ratio, leaves acceptance where it was, and moves the calibrated step costs of the pair
    (draft/target, verification/target), which the PR's change of models or config did not touch.  That pattern
    is named as a warning; the cells' own verdicts stand (nothing here proves the PR innocent)."""
    cells = [c for c in changes if c.ratio.estimate and c.explanation is not None]
    if len(cells) < 3 or any(c.explanation.cost_base is None for c in cells):
        return None
    logs = sorted(math.log(c.ratio.estimate) for c in cells)
    median = logs[len(logs) // 2]
    if abs(median) < math.log1p(DRIFT_MIN):
        return None
    alike = sum(x * median > 0 for x in logs)
    acceptance_moved = any(abs(c.explanation.alpha_head - c.explanation.alpha_base) > 0.01 for c in cells)
    steps = max(max(abs(math.log(c.explanation.cost_head / c.explanation.cost_base)),
                    abs(math.log(c.explanation.verify_head / c.explanation.verify_base))) for c in cells)
    if alike < DRIFT_SHARE * len(cells) or acceptance_moved or steps < abs(median) / 2:
        return None
    moves = sorted(c.ratio.estimate - 1 for c in cells)
    return VerdictLine(
        check="runner", status="warn",
        why=f"the runner changed, not the PR: {alike} of {len(cells)} cells moved the same way ({signed_pct(moves[0])} "
            f"to {signed_pct(moves[-1])}, median {signed_pct(math.expm1(median))}) with acceptance unchanged, and "
            f"the pair's step costs moved by up to {signed_pct(math.expm1(steps))}; compare paired "
            "(the Action's paired: true, or specguard gate --against BASE.yaml) or give this runner class its own "
            "hardware-key")


def _sizes(sizes: list[int]) -> str:
    return "/".join(str(s) for s in sorted(sizes))


def headline(doc: VerdictDoc, measured: Measurements) -> str:
    """One line a reviewer understands, e.g. 'Merging keeps outputs equivalent at bs 1/4/8; speedup drops
    14% on code at bs 8 (acceptance)'."""
    sizes = measured.settings.batch_sizes
    eq_fail = [c for c in doc.checks if c.status == "fail" and not c.unmeasured and (
        c.check in ("equivalence", "noise_floor") or c.check.startswith("signature:"))]
    parts = []
    if doc.run_status != "complete":
        parts.append(f"the run is {doc.run_status}")
    crashed = sorted({c.engine for c in doc.checks if c.check == "engine_failure" and c.status == "fail"})
    if crashed:
        parts.append(f"{', '.join(crashed)} failed on some batches (crash, hang or broken contract)")
    eq = [c for c in doc.checks if c.check == "equivalence"]
    unproven = sorted({c.batch_size for c in eq if c.status == "warn" and c.batch_size})
    if eq_fail:
        bad = sorted({c.batch_size for c in eq_fail if c.batch_size})
        parts.append(f"Merging breaks output equivalence{' at bs ' + _sizes(bad) if bad else ''}")
    elif unproven:  # "equivalent" is said only of equivalence that passed, never of a warning
        parts.append(f"Merging leaves output equivalence unproven at bs {_sizes(unproven)} (divergences the gate "
                     "cannot tell from noise)")
    elif measured.settings.greedy and any(c.status == "pass" for c in eq):
        # said only of the batch sizes whose equivalence passed: one a budget left out was not run
        passed = sorted({c.batch_size for c in eq if c.status == "pass" and c.batch_size}) or sizes
        missing = [b for b in sizes if b not in passed]
        parts.append(f"Merging keeps outputs equivalent at bs {_sizes(passed)}"
                     + (f" (bs {_sizes(missing)} not run)" if missing else ""))
    elif measured.settings.greedy:
        parts.append("Merging: output equivalence not measured")
    else:
        parts.append("Merging")
    if any(c.status == "fail" and c.check == "distribution" and not c.unmeasured for c in doc.checks):
        parts.append("sampled tokens no longer follow the target's distribution")
    unmeasured = sorted({c.check for c in doc.checks if c.unmeasured})
    if unmeasured:
        parts.append(f"the required {' and '.join(unmeasured)} check{'s were' if len(unmeasured) > 1 else ' was'} "
                     "not measured")
    acc = [c for c in doc.acceptance if c.status == "fail"]
    if acc:
        worst = min(acc, key=lambda c: c.relative)
        where = "all slices" if worst.slice == "*" else worst.slice
        parts.append(f"acceptance drops {-worst.relative:.0%} on {where} at bs {worst.batch_size}")
    # Speed is named only where a cell or load level fails, or a warning survives the family's correction: a move
    # inside the spread between runs is no news (gate.verdict.speed_rule).
    every = doc.speedup + doc.speedup_levels
    drops = [c for c in every if c.status == "fail"]
    if drops:
        worst = min(drops, key=lambda c: c.ratio.estimate)
        cause = main_cause(worst.explanation)
        where = f"{worst.slice} at bs {worst.batch_size}" if worst.slice else f"all slices at bs {worst.batch_size}"
        parts.append(f"speedup drops {1 - worst.ratio.estimate:.0%} on {where}" + (f" ({cause})" if cause else ""))
    elif any(c.check == "speedup" and c.status == "warn" and c.why.startswith("not comparable") for c in doc.checks):
        parts.append("speedup not compared (other hardware)")
    elif any(c.status == "warn" for c in every):
        worst = min((c for c in every if c.status == "warn"), key=lambda c: c.ratio.estimate)
        where = f"{worst.slice} at bs {worst.batch_size}" if worst.slice else f"all slices at bs {worst.batch_size}"
        parts.append(f"speedup {1 - worst.ratio.estimate:.0%} lower on {where} (significant, within the "
                     "tolerance)")
    unjudged = sorted({c.batch_size for c in doc.speedup_levels if c.status == "neutral"})
    if unjudged:
        parts.append(f"speed not judged at bs {_sizes(unjudged)} (the run's timing spread cannot resolve a "
                     f"{doc.rules.speedup_drop if doc.rules else 0.1:.0%} drop)")
    tr_drops = [c for c in doc.traffic if c.status == "fail"]
    if tr_drops:
        worst = min(tr_drops, key=lambda c: c.ratio.estimate)
        parts.append(f"latency speedup drops {1 - worst.ratio.estimate:.0%} at {worst.rate:g} req/s")
    if any(c.check == "runner" for c in doc.checks):
        parts.append("the runner changed (every cell moved alike)")
    if doc.mode == "none":
        parts.append(f"no baseline for hardware {doc.hardware_key} yet")
    text = "; ".join(parts)
    return text[0].upper() + text[1:]


__all__ = ["REFERENCE", "SCHEMA", "Cost", "VerdictDoc", "explain", "headline", "judge", "ratio_ci"]
