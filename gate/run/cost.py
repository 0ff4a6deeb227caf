"""The estimate's arithmetic, for ``specguard plan`` (:mod:`gate.run.estimate`): seconds per phase, engine and
batch size, at the seconds per budgeted token of the last run on this hardware (per phase, engine and batch size)
or at stated rates (:mod:`gate.run.rates`), plus the last run's fixed costs; the time in words."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gate.inputs import fingerprint as fp
from gate.inputs.config import REFERENCE
from gate.run.rates import Rates

RESULT_PHASE = {"equivalence outputs": "outputs", "canonical reference": "canonical", "sampling": "sampling"}
GENERATION_PHASES = ("equivalence outputs: ", "timing", "canonical reference", "sampling", "request-rate traffic",
                     "confirmation")
PHASE_ORDER = ["fixed costs", "equivalence outputs", "timing", "request-rate traffic", "canonical reference",
               "sampling"]
FIXED = " (set-up, server start-up, model load, calibration, analysis and report, as the last run spent them)"


def span(lo: float, hi: float) -> str:
    return duration(lo) if round(lo) == round(hi) else f"{duration(lo)} to {duration(hi)}"


def minutes(lo_s: float, hi_s: float) -> str:
    lo, hi = lo_s / 60, hi_s / 60
    return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f} to {hi:.1f}"


def duration(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def fill(report, per_token, fixed_s: float | None, traffic_scale: float = 1.0) -> None:
    """The estimate per phase, engine and batch size (``report.phase_s``) and in all (``report.estimate_s``), at
    ``per_token(phase, engine, batch size)`` seconds per budgeted token (the phase as results.json names it).
    Every cell gets its ``min_repeats`` of timing; more repeats only while the timing phase is within
    ``time_budget_s`` (split over the load levels, counted from each level's start), up to ``max_repeats``: the
    upper end spreads the phase's extra time over its cells in proportion to their tokens."""
    cells: dict[tuple[str, str, int], tuple[float, float]] = {}
    for (ph, e, b), w in report.work.items():
        s = per_token(RESULT_PHASE[ph], e, b) * (w.tokens - w.cached_tokens)
        cells[(ph, e, b)] = (s, s)
    once = {k: per_token("timing", *k) * t for k, t in report.timing_tokens.items()}
    warm = {k: per_token("timing", *k) * report.warmup_tokens.get(k, 0) for k in once}
    lo, hi = report.timing_repeats
    least = sum(once.values()) * lo
    most = max(least, min(sum(once.values()) * hi, report.timing_budget_s))
    for (e, b), t in once.items():
        share = t * lo * (most / least if least else 1.0)
        cells[("timing", e, b)] = (warm[(e, b)] + t * lo, warm[(e, b)] + share)
    if report.traffic_s:  # open loop: a replay lasts its trace plus the last requests' latency
        cells[("request-rate traffic", "", 0)] = (report.traffic_s * traffic_scale,) * 2
    if fixed_s is not None:
        cells[("fixed costs", "", 0)] = (fixed_s, fixed_s)
    report.phase_s = cells
    report.estimate_s = (sum(c[0] for c in cells.values()), sum(c[1] for c in cells.values()))
    if report.confirmation:
        report.confirmation_s = sum(per_token("sampling", e, b) * t for (e, b), t in report.confirmation.items())


def stated(report, rates: Rates) -> None:
    """The estimate at stated rates (:mod:`gate.run.rates`): each engine's budgeted tokens at its rate at each batch
    size; timing repeats, warm-up and request-rate traces as the last-run estimate counts them."""
    fill(report, lambda _phase, engine, bs: 1 / rates.tokens_per_s(engine, bs), None)
    cells = sorted({(e, b) for (_, e, b) in report.phase_s if e})
    report.estimate_from = ("assumed: " + rates.assumption(cells) + " (--tokens-per-s); model load, server start-up, "
                            "calibration and analysis not counted")


class LastRun:
    """The last run in an output directory on this hardware: its seconds per budgeted token per phase, engine and
    batch size (:meth:`per_token`), its fixed costs, and where its time went (``phases.json``'s seconds)."""

    def __init__(self, out_dir: Path, run_id: str | None, rate: dict[tuple, float], fixed_s: float,
                 seconds: dict[str, float], traffic_scale: float, hardware_key: str | None):
        self.out_dir, self.run_id, self.rate, self.fixed_s = out_dir, run_id, rate, fixed_s
        self.seconds, self.traffic_scale, self.hardware_key = seconds, traffic_scale, hardware_key

    def per_token(self, phase: str, engine: str, bs: int) -> float:
        """Seconds per budgeted token: this phase's in the last run, else the engine's at this batch size over
        every phase, else its slowest, else the reference's (a new engine runs at least as slowly)."""
        for key in ((phase, engine, bs), (engine, bs)):
            if key in self.rate:
                return self.rate[key]
        pooled = {k: r for k, r in self.rate.items() if len(k) == 2}
        same = [r for (e, _), r in pooled.items() if e == engine] or \
            [r for (e, _), r in pooled.items() if e == REFERENCE] or list(pooled.values())
        return max(same)

    def said(self) -> str:
        named = [f"{name} {duration(self.seconds[key])}" for key, name in (("server start", "server start-up"),
                                                                            ("model load", "model load"))
                 if self.seconds.get(key)]
        return (f"rates of the run in {self.out_dir} ({self.run_id or 'no run id'}"
                + (f", made on {self.hardware_key}" if self.hardware_key else "")
                + f"), its fixed costs {duration(self.fixed_s)}" + (f" ({', '.join(named)} of them)" if named
                                                                     else ""))


def last_run(out_dir: Path, pair, hardware_key: str | None = None, configured: str | None = None) -> LastRun | str:
    """The last run in ``out_dir`` on this hardware, or made under the key the gate would store this run under
    (``--hardware-key``, else ``baseline.hardware_key``: ``configured``), or why there is none."""
    from gate.io.documents import PhasesDoc
    from gate.io.rundir import load_document
    from gate.run.results import RESULTS_DOC

    results_path, phases_path = out_dir / "results.json", out_dir / "phases.json"
    if not results_path.is_file() or not phases_path.is_file():
        return (f"no earlier run in {out_dir} (results.json and phases.json); the first run's "
                "timings make the next plan's estimate, or state a rate with --tokens-per-s")
    try:
        last = load_document(results_path, RESULTS_DOC)
        phases = PhasesDoc.model_validate_json(phases_path.read_bytes())
    except Exception as exc:  # an unreadable earlier run gives no estimate; it is not this command's input
        return f"the run in {out_dir} cannot be read ({type(exc).__name__})"
    hw = fp.hardware(pair.device)
    here = fp.baseline_key(hardware_key, configured, hw)
    # a run judged under baseline.hardware_key still runs here: this machine's own earlier runs time it too
    made_on = {here} if hardware_key else {here, fp.hardware_key(hw)}
    if last.fingerprint.hardware_key != here and fp.hardware_key(last.fingerprint.hardware) not in made_on:
        source = "--hardware-key" if hardware_key else "baseline.hardware_key" if configured else None
        return (f"the run in {out_dir} was made on {last.fingerprint.hardware_key}, not on "
                + (f"{here} ({source})" if source else f"this runner ({here})"))
    budget = {pr.id: pr.max_new_tokens for pr in last.prompts}
    spent: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for ex in last.executions:
        if ex.cached or ex.failure is not None:
            continue
        tokens = sum(budget.get(pid, 0) for pid in ex.prompts)
        for key in ((ex.phase.value, ex.engine, ex.batch_size), (ex.engine, ex.batch_size)):
            spent[key][0] += ex.wall_s
            spent[key][1] += tokens
    rate = {k: sec / tok for k, (sec, tok) in spent.items() if tok}
    if not rate:
        return f"the run in {out_dir} timed no generation"
    generation = sum(v for k, v in phases.seconds.items() if k.startswith(GENERATION_PHASES))
    fixed = max(0.0, phases.wall_s - generation)
    # the traces' spans scaled by the last run's own ratio of its traffic phase to its traces' spans, where it had one
    spans = sum(max((q.scheduled_s for q in r.requests), default=0.0) for r in last.traffic)
    scale = max(1.0, phases.seconds.get("request-rate traffic", 0.0) / spans) if spans else 1.0
    return LastRun(out_dir, last.run_id, rate, fixed, dict(phases.seconds), scale,
                   last.fingerprint.hardware_key if hardware_key or configured else None)


def estimate(report, out_dir: Path, pair, rates: Rates | None = None,
             hardware_key: str | None = None, configured: str | None = None) -> None:
    """Seconds per budgeted token per (engine, batch size), from the last run in ``out_dir`` on this hardware (or
    made under ``hardware_key``, else ``configured``: :func:`last_run`), or stated rates."""
    if rates is not None:
        return stated(report, rates)
    last = last_run(out_dir, pair, hardware_key, configured)
    if isinstance(last, str):
        report.estimate_from = last
        return
    fill(report, last.per_token, last.fixed_s, last.traffic_scale)
    report.estimate_from = last.said()


__all__ = ["FIXED", "GENERATION_PHASES", "PHASE_ORDER", "RESULT_PHASE", "LastRun", "duration", "estimate", "fill",
           "last_run", "minutes", "span", "stated"]
