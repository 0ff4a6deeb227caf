"""Compare a run with its baseline: what got worse than what was accepted before, and why.

``compare`` needs ``results.json``, ``checks.json`` and a baseline: no model.
It holds two summaries of one type against each other: the head's, derived once
from the run by the code that derives a baseline (:func:`gate.baseline.summarize`),
and the stored baseline.  Each rule gives pass, fail, warn or neutral with one
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gate.baseline import Baseline, Comparability, SpeedupCell, cell_key, comparability
from gate.checksdoc import ChecksDoc
from gate.config import REFERENCE, Config, baseline_name
from gate.report.numbers import signed_pct, times
from gate.results import PairedRun, Results
from gate.stats import alpha_from_mean_accepted
from gate.verdictdoc import (
    EXIT_FAIL,
    EXIT_PASS,
    SCHEMA,
    AcceptanceChange,
    BaselineRef,
    Changed,
    CheckVerdict,
    EquivalenceChange,
    Explanation,
    Interval,
    SpeedupChange,
    VerdictDoc,
)

# --- the cause split ------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """What the Leviathan model needs of one side: tokens per target forward (from acceptance), k, c, v."""

    tokens_per_forward: float
    k: int
    cost_ratio: float | None = None  # c: one draft step over one target step
    verify_ratio: float | None = None  # v: one (k+1)-token verification over one target step


def explain(base: Cost, head: Cost) -> Explanation:
    """Split the change of log S between base and head into acceptance, draft cost and verification cost.

    S = T / (v + c k), with T the tokens per target forward (Leviathan et al.: T = (1 - a^(k+1)) / (1 - a);
    their model takes v = 1).  log S_head - log S_base is, exactly:

    * acceptance:  log T_h - log T_b
    * draft cost:  -[log(v_b + c_h k_h) - log(v_b + c_b k_b)]
    * verify cost: -[log(v_h + c_h k_h) - log(v_b + c_h k_h)]
    """
    acc = 100 * math.log(head.tokens_per_forward / base.tokens_per_forward)
    pts = _points
    out = Explanation(acceptance=acc, alpha_base=alpha_from_mean_accepted(base.tokens_per_forward, base.k),
                      alpha_head=alpha_from_mean_accepted(head.tokens_per_forward, head.k))
    if None in (base.cost_ratio, head.cost_ratio):
        out.sentence = f"acceptance {out.alpha_base:.2f} → {out.alpha_head:.2f} explains {pts(acc)} points; " \
                       "draft and verification costs not measured"
        return out
    vb, vh = base.verify_ratio or 1.0, head.verify_ratio or 1.0
    cb, ch = base.cost_ratio, head.cost_ratio
    draft = -100 * (math.log(vb + ch * head.k) - math.log(vb + cb * base.k))
    verify = -100 * (math.log(vh + ch * head.k) - math.log(vb + ch * head.k))
    out.draft_cost, out.verify_cost, out.model = draft, verify, acc + draft + verify
    out.cost_base, out.cost_head, out.verify_base, out.verify_head = cb, ch, vb, vh
    out.sentence = (f"acceptance {out.alpha_base:.2f} → {out.alpha_head:.2f} explains {pts(acc)} points, "
                    f"draft cost {pts(draft)}, verify cost {pts(verify)}")
    return out


def _points(x: float) -> str:
    return f"{round(x) + 0:+d}"  # + 0: no "-0"


def main_cause(e: Explanation | None) -> str | None:
    if e is None:
        return None
    parts = {"acceptance": e.acceptance, "draft cost": e.draft_cost or 0.0, "verification cost": e.verify_cost or 0.0}
    return min(parts, key=parts.get)


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


def _interval(cell: SpeedupCell | None) -> Interval:
    if cell is None:
        return Interval(estimate=None)
    return Interval(estimate=cell.estimate, low=cell.low, high=cell.high)


# --- the comparison -------------------------------------------------------------------------


def compare(head: Baseline, baseline: Baseline | None, results: Results, checks: ChecksDoc, config: Config,
            baseline_path: str | None = None, same_hardware: bool = True, say: Callable[[str], None] = lambda m: None,
            others: list[str] | tuple[str, ...] = (), name: str | None = None) -> VerdictDoc:
    """The head's summary (:func:`gate.baseline.summarize` of ``results`` and ``checks``) against the stored
    baseline, or in paired mode (``results.paired``) its speedup against the base's engine timed beside it.
    ``results`` gives only what is not a measurement: the run's status, its config and, in paired mode, the
    (batch, repeat) pairing; ``checks`` the run's own verdicts, carried over.  ``others``: hardware keys that have
    a baseline of this name when this run's key has none (named in the verdict, never used)."""
    rules = config.baseline
    paired = results.paired
    verdicts: list[CheckVerdict] = []
    hw = results.fingerprint.hardware_key

    # Verdicts of the run itself: equivalence, signatures, noise floor, distribution, reproducibility, speedup floor.
    for v in checks.verdicts:
        if v.status == "info":
            continue
        verdicts.append(CheckVerdict(check=v.check, status=v.status, why=v.why, engine=v.engine,
                                     batch_size=v.batch_size, slice=v.slice))
    if results.status != "complete":
        verdicts.append(CheckVerdict(check="run", status="fail",
                                     why=f"the run is {results.status}: only what finished was checked; rerun with "
                                         "--resume to complete it"))

    eq_changes: list[EquivalenceChange] = []
    acc_changes: list[AcceptanceChange] = []
    sp_changes: list[SpeedupChange] = []
    if baseline is None:
        verdicts.append(_missing_baseline(config, results, baseline_path, others, paired is not None,
                                          name or run_baseline_name(results, config)))
    if baseline is not None:
        comp = comparability(baseline, head)
        verdicts += [CheckVerdict(check="baseline", status="neutral", why=note) for note in comp.notes()]
        if comp.same_suite:
            eq_changes = _exact_match_changes(head, baseline, rules.exact_match_drop)
        verdicts += [CheckVerdict(check="equivalence", status="fail", engine=c.engine, batch_size=c.batch_size,
                                  why=f"exact match fell from {c.base:.0%} to {c.head:.0%} at batch size "
                                      f"{c.batch_size}, more than the {c.allowed_drop:.0%} that float noise "
                                      "explains here")
                     for c in eq_changes if c.status == "fail"]
        acc_changes = _acceptance_changes(head, baseline, rules.acceptance_drop, comp)
        verdicts += _acceptance_verdicts(acc_changes, rules.acceptance_drop, comp)
        if paired is None:
            if same_hardware:
                sp_changes = _stored_speedup_changes(head, baseline, rules.speedup_drop, comp)
            else:
                verdicts.append(CheckVerdict(
                    check="speedup", status="warn",
                    why=f"not comparable: the baseline was measured on {baseline.hardware_key}, this run on {hw}; "
                        "timing was not compared (equivalence and acceptance were)"))
    if paired is not None:
        sp_changes = _paired_speedup_changes(head, results, paired, rules.speedup_drop)
    verdicts += _speedup_verdicts(sp_changes, rules.speedup_drop, paired is not None)

    failed = [v for v in verdicts if v.status == "fail"]
    mode = "paired" if paired else ("stored" if baseline else "none")
    outcome = "fail" if failed else ("neutral" if mode == "none" else "pass")
    ref = None
    if baseline is not None:
        ref = BaselineRef(path=baseline_path or "", name=baseline.name, hardware_key=baseline.hardware_key,
                          created_utc=baseline.created_utc, same_hardware=same_hardware,
                          forced=baseline.forced is not None)
    doc = VerdictDoc(outcome=outcome, exit_code=EXIT_FAIL if failed else EXIT_PASS, headline="", mode=mode,
                     baseline=ref, hardware_key=hw, checks=verdicts, equivalence=eq_changes, acceptance=acc_changes,
                     speedup=sp_changes, changed=what_changed(results, baseline, paired), run_status=results.status)
    doc.headline = headline(doc, results)
    return doc


def run_baseline_name(results: Results, config: Config) -> str:
    """The baseline name a run was made under (recorded in results.json), else the config's rule without a file."""
    return results.baseline_name or baseline_name(config, None)


def _missing_baseline(config: Config, results: Results, path: str | None, others, paired: bool,
                      name: str) -> CheckVerdict:
    """No baseline for this hardware key: neutral (or, under ``baseline.on_missing: fail``, a failure) that says
    which keys do have one and how to make this one."""
    hw = results.fingerprint.hardware_key
    why = f"no baseline '{name}' for hardware {hw}" + (f" ({path})" if path else "")
    if others:
        why += (f"; baselines exist for {', '.join(others)}, but none is used by chance: set the `hardware-key` "
                "input (or baseline.hardware_key) to one of them if this runner is the same machine, or")
    else:
        why += "; to create it,"
    why += (" run the refresh workflow on this runner (or `specguard baseline refresh CONFIG --from RUN_DIR`) and "
            "commit the file it writes")
    if paired:
        why += "; speedup was judged against the base, timed in this job"
    if config.baseline.on_missing == "fail":
        return CheckVerdict(check="baseline", status="fail", why=why + " (baseline.on_missing: fail)")
    return CheckVerdict(check="baseline", status="neutral", why=why)


def _exact_match_changes(head: Baseline, baseline: Baseline, fixed: float | str) -> list[EquivalenceChange]:
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


def _acceptance_changes(head_summary: Baseline, baseline: Baseline, tolerance: float,
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
                         comp: Comparability | None = None) -> list[CheckVerdict]:
    out = []
    if comp is not None and not comp.same_k:
        for engine in sorted({c.engine for c in changes}):
            rows = [c for c in changes if c.engine == engine and c.slice == "*"] or \
                [c for c in changes if c.engine == engine]
            parts = [f"{'all slices' if c.slice == '*' else c.slice} at batch size {c.batch_size}: "
                     f"{c.base:.2f} → {c.head:.2f} (Leviathan expects {c.expected:.2f})"
                     for c in rows[:4] if c.expected is not None]
            out.append(CheckVerdict(check="acceptance", status="neutral", engine=engine,
                                    why=f"k changed {comp.base_k} → {comp.head_k}, so mean acceptance length moves "
                                        f"as expected, not judged: {'; '.join(parts)}"))
        return out
    for c in changes:
        if c.status == "fail":
            where = "all slices" if c.slice == "*" else f"{c.slice}"
            out.append(CheckVerdict(check="acceptance", status="fail", engine=c.engine, batch_size=c.batch_size,
                                    slice=c.slice,
                                    why=f"mean acceptance length on {where} at batch size {c.batch_size} fell "
                                        f"{c.base:.2f} → {c.head:.2f} ({signed_pct(c.relative)}), beyond the "
                                        f"{tolerance:.0%} tolerance: the draft agrees with the target less often"))
    for engine in sorted({c.engine for c in changes}):
        mine = [c for c in changes if c.engine == engine]
        if all(c.status == "pass" for c in mine):
            worst = min(mine, key=lambda c: c.relative)
            where = "all slices" if worst.slice == "*" else worst.slice
            out.append(CheckVerdict(check="acceptance", status="pass", engine=engine,
                                    why=f"mean acceptance length within {tolerance:.0%} of the baseline on every "
                                        f"slice and batch size (worst {where} at batch size "
                                        f"{worst.batch_size}: {signed_pct(worst.relative)})"))
    return out


def _costs(bs: int, tpf: float | None, calibration: dict | None, k: int) -> Cost | None:
    if not tpf:
        return None
    row = (calibration or {}).get(str(bs))
    return Cost(tpf, k, row.get("cost_ratio") if row else None, row.get("verify_ratio") if row else None)


def _speedup_status(ratio: Interval, tolerance: float) -> tuple[str, bool]:
    """The speedup rule, stored or paired: fail when the ratio's CI lies wholly below ``1 - tolerance``
    (significant), warn when only its estimate does."""
    significant = ratio.high is not None and ratio.high < 1 - tolerance
    beyond = ratio.estimate is not None and ratio.estimate < 1 - tolerance
    return ("fail" if significant else ("warn" if beyond else "pass")), significant


def _stored_speedup_changes(head: Baseline, baseline: Baseline, tolerance: float,
                            comp: Comparability | None = None) -> list[SpeedupChange]:
    head_cells = head.speedup
    k = head.settings.num_draft_tokens
    out = []
    for engine, cells in head_cells.items():
        for key, now in cells.items():
            if comp is not None and not comp.slice_ok(now.slice):
                continue
            base = baseline.speedup.get(engine, {}).get(key)
            if base is None or not base.samples or not now.samples:
                continue
            ratio = ratio_ci(now.samples, base.samples)
            status, significant = _speedup_status(ratio, tolerance)
            head_cal = head.calibration if engine in head.calibrated_engines else None
            base_cal = baseline.calibration if engine in baseline.calibrated_engines else None
            hc = _costs(now.batch_size, now.tokens_per_target_forward, head_cal, k)
            bc = _costs(base.batch_size, base.tokens_per_target_forward, base_cal, baseline.settings.num_draft_tokens)
            out.append(SpeedupChange(engine=engine, slice=now.slice, batch_size=now.batch_size, bucket=now.bucket,
                                     base=_interval(base), head=_interval(now), ratio=ratio, status=status,
                                     significant=significant,
                                     explanation=explain(bc, hc) if hc and bc else None))
    return out


def _paired_speedup_changes(summary: Baseline, results: Results, paired: PairedRun,
                            tolerance: float) -> list[SpeedupChange]:
    """Head vs base from the same timed batches: base wall / head wall of each (batch, repeat).  Both engines'
    cells (estimate, acceptance) come from the run's summary; only the pairing is read from ``results``."""
    groups: dict[str, dict[tuple, dict[str, float]]] = {}
    cells: dict[str, tuple] = {}
    for p in results.timing_pairs():
        if p.engine not in (paired.engine, paired.head_engine):
            continue
        key = cell_key(p.slice, p.batch_size, p.bucket)
        cells[key] = (p.slice, p.batch_size, p.bucket)
        groups.setdefault(key, {}).setdefault((p.execution.batch, p.repeat), {})[p.engine] = p.execution.wall_s
    head_cells = summary.speedup
    out = []
    for key, rows in sorted(groups.items()):
        ratios = [r[paired.engine] / r[paired.head_engine] for r in rows.values()
                  if paired.engine in r and paired.head_engine in r and r[paired.head_engine] > 0]
        ratio = paired_ratio_ci(ratios)
        status, significant = _speedup_status(ratio, tolerance)
        slc, bs, bucket = cells[key]
        head, base = head_cells.get(paired.head_engine, {}).get(key), head_cells.get(paired.engine, {}).get(key)
        hc = _costs(bs, head.tokens_per_target_forward if head else None, summary.calibration,
                    summary.settings.num_draft_tokens)
        bc = _costs(bs, base.tokens_per_target_forward if base else None, paired.calibration,
                    paired.num_draft_tokens)
        out.append(SpeedupChange(engine=paired.head_engine, slice=slc, batch_size=bs, bucket=bucket,
                                 base=_interval(base), head=_interval(head), ratio=ratio, status=status,
                                 significant=significant, explanation=explain(bc, hc) if hc and bc else None))
    return out


def _speedup_verdicts(changes: list[SpeedupChange], tolerance: float, paired: bool) -> list[CheckVerdict]:
    out = []
    how = "paired with the base in this job" if paired else "against the baseline's samples"
    for c in changes:
        if c.status != "fail":
            continue
        why = (f"speedup on {c.slice} (context {c.bucket}) at batch size {c.batch_size}: "
               f"{times(c.base.estimate)} → {times(c.head.estimate)} ({signed_pct(c.ratio.estimate - 1)}, 95% CI "
               f"{signed_pct(c.ratio.low - 1)} to {signed_pct(c.ratio.high - 1)} {how}), beyond the {tolerance:.0%} "
               "tolerance")
        if c.explanation:
            why += f": {c.explanation.sentence}"
        out.append(CheckVerdict(check="speedup", status="fail", engine=c.engine, batch_size=c.batch_size,
                                slice=c.slice, why=why))
    if changes and not any(c.status == "fail" for c in changes):
        worst = min((c for c in changes if c.ratio.estimate is not None), key=lambda c: c.ratio.estimate,
                    default=None)
        if worst is not None:
            out.append(CheckVerdict(check="speedup", status="pass", engine=worst.engine,
                                    why=f"no significant drop beyond {tolerance:.0%} in any cell ({how}; worst "
                                        f"{worst.slice} at batch size {worst.batch_size}: "
                                        f"{signed_pct(worst.ratio.estimate - 1)})"))
    return out


def what_changed(results: Results, baseline: Baseline | None, paired: PairedRun | None) -> list[Changed]:
    """Draft, target and batching settings, base vs head."""
    head = results.config or {}
    out: list[Changed] = []
    if paired is not None:
        base_cfg = paired.config
        for path in (("models", "draft", "path"), ("models", "draft", "dtype"), ("models", "target", "path"),
                     ("models", "target", "dtype"), ("speculation", "num_draft_tokens"),
                     ("batching", "batch_sizes")):
            b, h = _get(base_cfg, path), _get(head, path)
            if b != h:
                out.append(Changed(what=".".join(path), base=str(b), head=str(h)))
        return out
    if baseline is None:
        return out
    for role in ("target", "draft"):
        b = baseline.fingerprint.models.get(role)
        h = results.fingerprint.models.get(role)
        spec = _get(head, ("models", role, "path"))
        if b is None or h is None:
            continue
        if b.fingerprint != h.fingerprint:
            out.append(Changed(what=f"{role} model", base=f"{b.name} ({b.fingerprint})",
                               head=f"{spec} ({h.fingerprint})"))
        if b.dtype != h.dtype:
            out.append(Changed(what=f"{role} dtype", base=b.dtype, head=h.dtype))
    for name in ("num_draft_tokens", "batch_sizes", "max_new_tokens"):
        b, h = getattr(baseline.settings, name), getattr(results.settings, name)
        if b != h:
            out.append(Changed(what=name, base=str(b), head=str(h)))
    for lib in ("torch", "transformers"):
        b, h = baseline.fingerprint.libraries.get(lib), results.fingerprint.libraries.get(lib)
        if b != h:
            out.append(Changed(what=lib, base=str(b), head=str(h)))
    return out


def _get(d: dict, path: tuple) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _sizes(sizes: list[int]) -> str:
    return "/".join(str(s) for s in sorted(sizes))


def headline(doc: VerdictDoc, results: Results) -> str:
    """One line a reviewer understands, e.g. 'Merging keeps outputs equivalent at bs 1/4/8; speedup drops
    14% on code at bs 8 (acceptance)'."""
    sizes = results.settings.batch_sizes
    eq_fail = [c for c in doc.checks if c.status == "fail" and (c.check in ("equivalence", "noise_floor")
                                                                or c.check.startswith("signature:"))]
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
                     "cannot classify)")
    elif results.settings.greedy and any(c.status == "pass" for c in eq):
        parts.append(f"Merging keeps outputs equivalent at bs {_sizes(sizes)}")
    elif results.settings.greedy:
        parts.append("Merging: output equivalence not measured")
    else:
        parts.append("Merging")
    if any(c.status == "fail" and c.check == "distribution" for c in doc.checks):
        parts.append("sampled tokens no longer follow the target's distribution")
    acc = [c for c in doc.acceptance if c.status == "fail"]
    if acc:
        worst = min(acc, key=lambda c: c.relative)
        where = "all slices" if worst.slice == "*" else worst.slice
        parts.append(f"acceptance drops {-worst.relative:.0%} on {where} at bs {worst.batch_size}")
    drops = [c for c in doc.speedup if c.status == "fail"]
    if drops:
        worst = min(drops, key=lambda c: c.ratio.estimate)
        cause = main_cause(worst.explanation)
        parts.append(f"speedup drops {1 - worst.ratio.estimate:.0%} on {worst.slice} at bs {worst.batch_size}"
                     + (f" ({cause})" if cause else ""))
    elif any(c.check == "speedup" and c.status == "warn" and c.why.startswith("not comparable") for c in doc.checks):
        parts.append("speedup not compared (other hardware)")
    elif doc.speedup:
        parts.append("speedup holds")
    if doc.mode == "none":
        parts.append(f"no baseline for hardware {doc.hardware_key} yet")
    text = "; ".join(parts)
    return text[0].upper() + text[1:]


__all__ = ["REFERENCE", "SCHEMA", "Cost", "VerdictDoc", "compare", "explain", "headline", "ratio_ci"]
