"""Baselines: compact documents derived from an accepted run, committed to the repository and reviewed in PRs.

A baseline (``specguard.baseline/1``) holds what a later run is compared with:

* the fingerprint, with **no runner-local paths**: models are named by their
  config path or hub id (an absolute path keeps only its last component), with
  revision, dtype and content fingerprint;
* the settings and the config digest;
* per engine x batch size: equivalence figures (exact match, prefix match,
  near-ties, confident divergences, signatures, per slice), and per slice the
  mean acceptance length, acceptance rate and per-position acceptance of the
  greedy outputs (deterministic: the noise-free regression signal);
* per timing cell (slice x load x context bucket): the raw paired speedup
  samples, so a later comparison can bootstrap against them, and the
  acceptance and step costs behind them (to explain a change);
* distribution p-values and measured power, reproducibility, peak memory.

Baselines live at ``<dir>/<name>/<hardware key>.json``, one per config name and
hardware, so one repository can hold an A100 runner's and an H100 runner's side
by side; the previous ones go to ``<dir>/<name>/history/<hardware key>/``
(the last ``baseline.history``).  Writes are atomic (temp file, fsync, rename,
directory fsync): a refresh killed at any point leaves the old baseline intact.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from gate.checks.doc import ChecksDoc, EquivalenceSummary, Reproducibility, Resolution
from gate.engines.base import SpecCounters
from gate.errors import BaselineError, Problem, RefreshRefused
from gate.inputs.config import REFERENCE, Config
from gate.io.documents import Document, omitted_when_none
from gate.io.rundir import DocumentKind, load_document
from gate.run.records import Phase
from gate.run.results import Results

SCHEMA = "specguard.baseline/1"
SAMPLE_DIGITS = 5  # significant digits kept of each speedup sample: far below timing noise


_Doc = Document


class ModelName(_Doc):
    name: str  # config path (relative or specguard:...), hub id, or local:<directory name>
    revision: str | None = None
    dtype: str
    fingerprint: str


class SuiteId(_Doc):
    name: str
    fingerprint: str
    prompts: int
    slices: list[str]
    # per slice, a digest of its prompts as run (ids, token ids, budgets): a changed suite is compared on the
    # slices both runs share unchanged (absent in baselines written before it existed)
    slice_fingerprints: dict[str, str] = Field(default_factory=dict)


class StackId(_Doc):
    """A serving stack as the baseline's run found it: its reported version and its launch line, with each
    absolute path cut to its last part (no runner-local paths in a committed baseline)."""

    version: str | None = None
    launch: list[str] | None = None


class BaselineFingerprint(_Doc):
    models: dict[str, ModelName]
    libraries: dict[str, str]
    config: str
    suite: SuiteId
    stacks: dict[str, StackId] = Field(default_factory=dict, exclude_if=lambda v: not v)  # left out while none


class EquivalenceFigures(_Doc):
    sequences: int
    exact_match: float | None
    prefix_match: float | None
    near_ties: int
    confident: int
    length: int
    confident_inconsistencies: int
    signatures: dict[str, int] = Field(default_factory=dict)
    by_slice: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)


class AcceptanceFigures(_Doc):
    """Greedy acceptance of one engine at one batch size on one slice (or all slices: ``*``)."""

    drafts: int
    mean_accepted_length: float | None
    acceptance_rate: float | None
    tokens_per_target_forward: float | None
    acceptance_per_pos: list[float | None] = Field(default_factory=list)


class TimingPass(_Doc):
    """One more timing pass of a baseline's cell, run in a process of its own (``baseline.timing_passes``)."""

    samples: list[float]
    batches: list[int]


class SpeedupCell(_Doc):
    slice: str | None
    batch_size: int
    bucket: str | None
    samples: list[float]  # paired reference/engine wall-time ratios
    # the timed batch of each sample (a batch's repeats share one); absent in baselines written before it was kept,
    # whose samples then count as one group (gate.verdict.noise)
    batches: list[int] | None = omitted_when_none()
    passes: list[TimingPass] | None = omitted_when_none()  # a refresh's further passes (gate.run.passes)
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    tokens_per_target_forward: float | None = None
    acceptance_rate: float | None = None


class TrafficCell(_Doc):
    """One engine at one request rate (``checks.traffic``): the paired latency ratios (reference / engine, per
    request of the same trace), overall and per slice, and the engine's tail latencies and goodput beside them."""

    rate: float
    samples: list[float]
    by_slice: dict[str, list[float]] = Field(default_factory=dict)
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    ttft_p99: float | None = None
    tpot_p99: float | None = None
    goodput_rps: float | None = None
    # paired mode: the base server's latency speedup on the same traces (not compared against a stored baseline)
    base_estimate: float | None = omitted_when_none()


class DistributionResult(_Doc):
    n: int
    pvalues: dict[str, float]
    rejected: bool


class BaselineDistribution(_Doc):
    """The sampling tests of the accepted run, and the smallest distortion each family's power could detect."""

    alpha: float
    engines: dict[str, dict[str, DistributionResult]]
    min_detectable_epsilon: dict[str, float | None] | None = omitted_when_none()


class Forced(_Doc):
    reason: str
    failing: list[str]


class BaselineSettings(_Doc):
    """The run settings a baseline was measured under: typed, so a hand-edited baseline with ``"k": ""`` is a
    refused baseline (exit 3), never a crash in the comparison."""

    num_draft_tokens: int = Field(strict=True, ge=0, le=4096)
    batch_sizes: list[Annotated[int, Field(strict=True, ge=1, le=65536)]]
    max_new_tokens: int = Field(strict=True, ge=1, le=1 << 20)
    greedy: bool = Field(strict=True)
    sampling: dict[str, Any] | None = None
    engines: list[str]
    compositions: int = Field(1, strict=True, ge=1, le=1024)


class Measurements(_Doc):
    """What a run measured, in the shape a baseline stores it: what the judge holds a run's against a baseline's.
    Derived from the run's documents alone (:func:`measure`): no clock, no environment."""

    fingerprint: BaselineFingerprint
    settings: BaselineSettings
    equivalence: dict[str, dict[str, EquivalenceFigures]] = Field(default_factory=dict)
    noise_floor: dict[str, EquivalenceFigures] = Field(default_factory=dict)
    acceptance: dict[str, dict[str, dict[str, AcceptanceFigures]]] = Field(default_factory=dict)
    speedup: dict[str, dict[str, SpeedupCell]] = Field(default_factory=dict)  # engine -> cell key -> cell
    calibration: dict[str, dict[str, float]] = Field(default_factory=dict)
    calibrated_engines: list[str] = Field(default_factory=list)
    distribution: BaselineDistribution | None = None
    reproducibility: dict[str, Reproducibility] = Field(default_factory=dict)
    memory: dict[str, dict[str, dict[str, int]]] = Field(default_factory=dict)
    # engine -> rate -> cell; left out while empty, so baselines without request-rate load keep their documents
    traffic: dict[str, dict[str, TrafficCell]] = Field(default_factory=dict, exclude_if=lambda v: not v)
    # What the run's own timing spread resolves, per engine and load level (checks.json's; gate.checks.resolution),
    # and the load levels it cannot resolve the fail rule's drop at (config's baseline.speedup_drop): not judged,
    # never stored (:func:`derive` leaves their cells out).  Read from the run, never written to a baseline.
    resolution: dict[str, dict[str, Resolution]] = Field(default_factory=dict, exclude=True)
    unresolved: dict[str, list[int]] = Field(default_factory=dict, exclude=True)


class Baseline(Measurements):
    """``baselines/<name>/<hardware key>.json``: an accepted run's measurements, and what accepted them."""

    schema_id: Literal["specguard.baseline/1"] = Field(SCHEMA, alias="schema")
    name: str
    hardware_key: str
    hardware: dict[str, Any]
    created_utc: str
    forced: Forced | None = None
    reason: str | None = None  # why this refresh was made (`--reason`), also when nothing failed
    source: dict[str, str | None] = Field(default_factory=dict)  # specguard version, commit, run id


def cell_key(slice_: str | None, batch_size: int, bucket: str | None) -> str:
    return f"{slice_}|{batch_size}|{bucket}"


# --- deriving a baseline from a run -------------------------------------------------------------


def model_name(config_path: str, location: str) -> str:
    """How a baseline names a model (or a suite file): never by a runner-local absolute path."""
    local = config_path.startswith(("/", "~")) or Path(config_path).is_absolute()
    if config_path.startswith("specguard:") or not local:
        return config_path
    return f"local:{Path(location).name}"


def _portable(argv: list[str] | None) -> list[str] | None:
    """A launch line with each absolute path cut to its last part (``/opt/models/llama`` is ``…/llama``) and its
    port written as ``{port}`` (paired mode moves a server to a free one: no change of the stack)."""
    if argv is None:
        return None
    from gate.inputs.launch import without_port

    return [f"…/{Path(a).name}" if a.startswith("/") and len(Path(a).parts) > 1 else a for a in without_port(argv)]


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _round(x: float) -> float:
    return float(f"{x:.{SAMPLE_DIGITS}g}")


def _equivalence(summary: EquivalenceSummary) -> EquivalenceFigures:
    d = summary.divergences
    return EquivalenceFigures(sequences=summary.sequences, exact_match=summary.exact_match,
                              prefix_match=summary.prefix_match, near_ties=d.near_tie, confident=d.confident,
                              length=d.length, confident_inconsistencies=summary.confident_inconsistencies,
                              signatures=dict(summary.signatures), by_slice=summary.by_slice)


def _figures(c: SpecCounters) -> AcceptanceFigures:
    return AcceptanceFigures(drafts=c.num_drafts, mean_accepted_length=c.mean_accepted_length,
                             acceptance_rate=c.acceptance_rate, tokens_per_target_forward=c.tokens_per_target_forward,
                             acceptance_per_pos=c.acceptance_per_pos())


def acceptance(results: Results) -> dict[str, dict[str, dict[str, AcceptanceFigures]]]:
    """Per engine, batch size and slice (and ``*`` for all): greedy acceptance over the equivalence outputs.

    A server reports counters per wave, not per row: its per-slice figures come from the per-cell timing
    batches (first repeat), where every row belongs to one slice."""
    sums: dict[tuple[str, int, str], SpecCounters] = {}
    per_row: set[str] = set()
    for ex in results.executions:
        if ex.mode != "greedy" or ex.phase != Phase.OUTPUTS or ex.engine == REFERENCE or ex.repeat:
            continue
        for s in ex.real():
            if s.counters is None:
                continue
            per_row.add(ex.engine)
            for slc in (results.prompt(s.prompt_id).slice, "*"):
                sums.setdefault((ex.engine, ex.batch_size, slc), SpecCounters()).add(s.counters)
    for ex in results.executions:
        if (ex.phase == Phase.TIMING and ex.repeat == 0 and ex.engine not in per_row and ex.engine != REFERENCE
                and ex.batch_counters is not None and ex.slice is not None and ex.failure is None):
            for slc in (ex.slice, "*"):
                sums.setdefault((ex.engine, ex.batch_size, slc), SpecCounters()).add(ex.batch_counters)
    out: dict = {}
    for (engine, bs, slc), c in sorted(sums.items()):
        if c.num_drafts:
            out.setdefault(engine, {}).setdefault(str(bs), {})[slc] = _figures(c)
    return out


def speedup_cells(results: Results, checks: ChecksDoc | None = None) -> dict[str, dict[str, SpeedupCell]]:
    """Per engine and cell, the paired speedup samples and their CI.  The CI is the speedup check's own (from
    ``checks.json``) when there is one, so a report never shows two intervals for one cell; it is bootstrapped
    here, with the check's default resamples, only for a run that has no checks document."""
    from gate.checks.speedup import beyond_acceptance
    from gate.stats import bootstrap_median_ci

    checked = checks.speedup.engines if checks and checks.speedup else {}
    from gate.checks.speedup import interfered, interfering_cells

    crowded = interfered(results)  # timed beside a server that slowed one side: never judged, never stored
    beyond = interfering_cells(checks.speedup if checks else None)  # faster than the acceptance allows

    out: dict = {}
    for (engine, key), pairs in sorted(timing_groups(results).items()):
        if engine in crowded or key in beyond.get(engine, ()):
            continue
        ratios = [r for r in (p.ratio for p in pairs) if r is not None]
        cell = checked[engine].cells.get(key) if engine in checked else None
        if cell and cell.speedup.n == len(ratios):
            ci = cell.speedup.interval()
        else:
            ci = bootstrap_median_ci(ratios)
        total = SpecCounters.total(p.execution.counters() for p in pairs if p.repeat == 0) or SpecCounters()
        if beyond_acceptance(ci, total.tokens_per_target_forward or total.mean_accepted_length) is not None:
            continue  # interference, not a speedup (gate.checks.speedup): never judged, never stored
        first = pairs[0]
        out.setdefault(engine, {})[key] = SpeedupCell(
            slice=first.slice, batch_size=first.batch_size, bucket=first.bucket,
            samples=[_round(r) for r in ratios], batches=[p.execution.batch for p in pairs if p.ratio is not None],
            estimate=ci.estimate if ratios else None,
            low=ci.low if len(ratios) > 1 else None, high=ci.high if len(ratios) > 1 else None,
            tokens_per_target_forward=total.tokens_per_target_forward, acceptance_rate=total.acceptance_rate)
    return out


def timing_groups(results: Results) -> dict[tuple[str, str], list]:
    """Per engine and cell key, its timing pairs as judged (a plug-in with its own reference: against it)."""
    groups: dict[tuple[str, str], list] = {}
    for p in results.judged_timing_pairs():
        groups.setdefault((p.engine, cell_key(p.slice, p.batch_size, p.bucket)), []).append(p)
    return groups


def with_passes(cells: dict[str, dict[str, SpeedupCell]], passes: list[Results]) -> dict[str, dict[str, SpeedupCell]]:
    """The run's cells with each further timing pass's samples of the same cell (a pass's cell the run lacks, or an
    interference-flagged one, is left out: the run decides which cells a baseline holds)."""
    if not passes:
        return cells
    extra: dict[tuple[str, str], list[TimingPass]] = {}
    for run in passes:
        for (engine, key), pairs in timing_groups(run).items():
            kept = [p for p in pairs if p.ratio is not None]
            if kept:
                extra.setdefault((engine, key), []).append(TimingPass(
                    samples=[_round(p.ratio) for p in kept], batches=[p.execution.batch for p in kept]))
    return {engine: {key: cell.model_copy(update={"passes": extra.get((engine, key))}) for key, cell in rows.items()}
            for engine, rows in cells.items()}


def slice_fingerprints(results: Results) -> dict[str, str]:
    """Per slice, a digest of the prompts the run used: id, token ids and budget, in suite order."""
    import hashlib

    digests: dict[str, Any] = {}
    for p in results.prompts:
        digests.setdefault(p.slice, hashlib.sha256()).update(
            json.dumps([p.id, p.prompt_ids, p.max_new_tokens]).encode())
    return {slc: h.hexdigest()[:16] for slc, h in sorted(digests.items())}


def failing_checks(checks: ChecksDoc) -> list[str]:
    """The failing verdicts that make a run unfit to be a baseline: equivalence, signatures, distribution."""
    return sorted({f"{v.check} ({v.engine}, batch size {v.batch_size})" for v in checks.failing()
                   if v.check in ("equivalence", "distribution", "noise_floor") or v.check.startswith("signature:")})


def refusal(status: str, checks_failing: list[str], force_reason: str | None) -> RefreshRefused | None:
    """Why a run may not become a baseline (incomplete, or failing without a forced reason), or None."""
    if status != "complete":
        return RefreshRefused(Problem("results.json", f"the run is {status}, not complete",
                                      hint="finish it with `specguard run --resume`, then refresh"))
    if checks_failing and force_reason is None:
        return RefreshRefused(Problem("checks.json", "refusing to make a baseline of a run that fails "
                                      + "; ".join(checks_failing),
                                      hint="fix the engine, or pass --force --reason '...' to record it as accepted"))
    return None


def derive(measured: Measurements, *, name: str, hardware_key: str, hardware: dict[str, Any], status: str,
           failing: list[str], created_utc: str, source: dict[str, str | None], force_reason: str | None = None,
           reason: str | None = None) -> Baseline:
    """The baseline of an accepted run: its measurements, the clock and the commit it is stamped with (given, never
    read here), refused for an incomplete or failing run unless forced (with the reason recorded)."""
    refused = refusal(status, failing, force_reason)
    if refused is not None:
        raise refused
    BaselineSettings.model_validate(measured.settings.model_dump())  # only settings a stored baseline may hold
    forced = Forced(reason=force_reason, failing=failing) if failing and force_reason is not None else None
    if measured.unresolved:  # speed the run could not resolve is not judged, and never stored
        measured = measured.model_copy(update={"speedup": {
            engine: {key: c for key, c in cells.items() if c.batch_size not in measured.unresolved.get(engine, ())}
            for engine, cells in measured.speedup.items()}})
    return Baseline(**dict(measured), name=name, hardware_key=hardware_key, hardware=hardware,
                    created_utc=created_utc, forced=forced, reason=reason or force_reason, source=source)


def hardware_of(results: Results) -> dict[str, Any]:
    """What a baseline keeps of the run's hardware description."""
    fpr = results.fingerprint
    return {k: fpr.hardware.get(k) for k in ("device_type", "cpu", "cpu_count", "torch_threads", "gpu", "machine")
            if fpr.hardware.get(k) is not None}


def measure(results: Results, checks: ChecksDoc, config: Config) -> Measurements:
    """A run's measurements in the baseline's shape, whatever the run's status or verdicts: what a refresh stores,
    and what the judge holds against the stored baseline (the head side is derived here, once, by the same code as
    the baseline it is compared with).  Its settings are the run's, unvalidated: a run is judged, and only
    :func:`derive` refuses settings a stored baseline may not hold."""
    fpr = results.fingerprint
    models = {}
    for role in ("target", "draft"):
        if role not in fpr.models:
            continue
        m = fpr.models[role]
        spec = getattr(config.models, role)
        models[role] = ModelName(name=model_name(spec.path, m.location), revision=m.revision, dtype=m.dtype,
                                 fingerprint=m.fingerprint)
    s = results.settings
    memory = {e: v.memory for e, v in checks.speedup.engines.items()} if checks.speedup else {}
    dist = checks.distribution
    distribution = None
    if dist:
        distribution = BaselineDistribution(
            alpha=dist.alpha,
            engines={e: {bs: DistributionResult(n=row.n, pvalues=row.pvalues, rejected=row.rejected)
                         for bs, row in rows.items()} for e, rows in dist.engines.items()},
            min_detectable_epsilon={f: v.min_detectable_epsilon for f, v in dist.power.families.items()}
            if dist.power else None)
    own = {engine: {bs: row.resolution for bs, row in e.load_curve.items() if row.resolution is not None}
           for engine, e in (checks.speedup.engines.items() if checks.speedup else ())}
    drop = config.baseline.speedup_drop
    unresolved = {engine: sorted(int(bs) for bs, r in rows.items() if r.drop is not None and r.drop > drop)
                  for engine, rows in own.items()}
    return Measurements(
        resolution={e: rows for e, rows in own.items() if rows},
        unresolved={e: sizes for e, sizes in unresolved.items() if sizes},
        fingerprint=BaselineFingerprint(models=models, libraries=dict(fpr.libraries), config=fpr.config,
                                        stacks={name: StackId(version=s.version, launch=_portable(s.launch))
                                                for name, s in fpr.stacks.items()},
                                        suite=SuiteId(**{**fpr.suite.model_dump(),
                                                         "name": model_name(config.suite.path, fpr.suite.name),
                                                         "slice_fingerprints": slice_fingerprints(results)})),
        settings=BaselineSettings.model_construct(num_draft_tokens=s.num_draft_tokens, batch_sizes=s.batch_sizes,
                                                  max_new_tokens=s.max_new_tokens, greedy=s.greedy,
                                                  sampling=s.sampling, engines=s.engines, compositions=s.compositions),
        equivalence={e: {bs: _equivalence(x) for bs, x in rows.items()}
                     for e, rows in (checks.equivalence or {}).items()},
        noise_floor={bs: _equivalence(x) for bs, x in (checks.noise_floor or {}).items()},
        acceptance=acceptance(results), speedup=speedup_cells(results, checks),
        calibration={bs: {k: row[k] for k in ("cost_ratio", "verify_ratio") if k in row}
                     for bs, row in results.calibration.items()},
        calibrated_engines=list(results.calibrated_engines), distribution=distribution,
        reproducibility=checks.reproducibility or {}, memory=memory, traffic=traffic_cells(results, checks),
    )


def traffic_cells(results: Results, checks: ChecksDoc) -> dict[str, dict[str, TrafficCell]]:
    """Per engine and rate: the paired latency ratios of the run's request-rate replays, as a baseline keeps them."""
    if checks.traffic is None:
        return {}
    from gate.checks.traffic import latency, paired

    out: dict[str, dict[str, TrafficCell]] = {}
    for engine, e in checks.traffic.engines.items():
        for key, row in e.rates.items():
            reps = [r for r in results.traffic if r.engine == engine and r.rate == row.rate]
            ratios = paired([r for r in reps if r.side == "engine"], [r for r in reps if r.side == "reference"],
                            latency)
            sp = row.speedup
            out.setdefault(engine, {})[key] = TrafficCell(
                rate=row.rate, samples=[_round(x) for x in ratios.get(None, [])],
                by_slice={s: [_round(x) for x in xs] for s, xs in sorted((k, v) for k, v in ratios.items()
                                                                          if k is not None)},
                estimate=_finite(sp.estimate if sp else None), low=_finite(sp.low if sp else None),
                high=_finite(sp.high if sp else None),
                ttft_p99=row.engine.ttft.p99, tpot_p99=row.engine.tpot.p99, goodput_rps=row.engine.goodput_rps,
                base_estimate=_finite(row.base_speedup.estimate) if row.base_speedup else None)
    return out


HINT = "refresh it: run the refresh workflow, or `specguard baseline refresh CONFIG --from RUN_DIR`"


def _screen(doc: Any, source: str) -> None:
    """Refuse a baseline holding a negative measurement, or a zero where none can be (no baseline the gate writes
    does): before its schema is read."""
    stack = [(doc, "")]
    while stack:  # a baseline holds measurements: counts, rates, ratios, seconds; none is negative
        node, where = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and (
                node < 0 or (node == 0 and where.endswith(("tokens_per_target_forward", "mean_accepted_length")))):
            raise BaselineError(Problem(source, f"expected a measurement > 0 here, got {node}", field=where,
                                        hint=HINT))


BASELINE_DOC = DocumentKind("baseline", BaselineError, lambda: Baseline, HINT, schema=SCHEMA,
                            wrong_schema="baseline schema {found!r}, but this specguard reads {want!r}",
                            not_json="corrupt baseline (not valid JSON: {msg})", invalid="corrupt baseline: {msg}",
                            limit=64 << 20, screen=_screen)


def load_baseline(path: str | Path) -> Baseline:
    """Read and validate a baseline; every way it can be unusable (not a regular file, too large, nested too
    deeply, a NaN, a negative measurement, another schema, corrupt) is a BaselineError (exit code 3)."""
    return load_document(path, BASELINE_DOC)


@dataclass
class Comparability:
    """What of a stored baseline a run can be compared with, when its k or its suite changed.

    * Speedup per cell (against the non-speculative reference at the same batch size, slice and context) means
      the same at any k: it is compared whenever the slice is shared.
    * Mean acceptance length depends on k: after a k change it is reported beside the Leviathan expectation
      for the new k, not judged.
    * Exact match is a figure over the whole suite: compared only on the same suite.
    """

    base_k: int | None
    head_k: int
    same_suite: bool
    shared: list[str]  # slices both runs have, with the same prompts (or, for an old baseline, the same name)
    new: list[str]  # slices only the run has
    changed: list[str]  # slices both have, with other prompts
    removed: list[str]  # slices only the baseline has
    by_name_only: bool = False  # the baseline predates per-slice fingerprints: slices matched by name

    @property
    def same_k(self) -> bool:
        return self.base_k == self.head_k

    def slice_ok(self, slc: str | None) -> bool:
        return self.same_suite or slc in (None, "*") or slc in self.shared

    def notes(self) -> list[str]:
        out = []
        if not self.same_k:
            out.append(f"k changed {self.base_k} → {self.head_k}: speedup per cell is compared with the stored "
                       "baseline (it is measured against the reference, so it means the same at any k); mean "
                       "acceptance length is reported beside the Leviathan expectation for the new k, not judged")
        if not self.same_suite:
            parts = [f"compared on the slices both runs share unchanged ({', '.join(self.shared) or 'none'})"]
            if self.by_name_only:
                parts[0] = (f"compared on the slices both runs share by name ({', '.join(self.shared) or 'none'}; "
                            "the baseline predates per-slice fingerprints)")
            if self.new:
                parts.append(f"new: {', '.join(self.new)}")
            if self.changed:
                parts.append(f"changed prompts, not compared: {', '.join(self.changed)}")
            if self.removed:
                parts.append(f"no longer run: {', '.join(self.removed)}")
            out.append("the suite changed since the baseline: " + "; ".join(parts)
                       + "; exact match over the whole suite is not compared")
        return out


def comparability(baseline: Baseline, head_summary: Measurements) -> Comparability:
    """How a run (its :func:`gate.verdict.summary.summarize`) relates to a stored baseline of another k or suite
    (never an error: see :class:`Comparability`)."""
    suite = head_summary.fingerprint.suite
    k = baseline.settings.num_draft_tokens
    same_suite = baseline.fingerprint.suite.fingerprint == suite.fingerprint
    head = suite.slice_fingerprints
    base_fp = baseline.fingerprint.suite.slice_fingerprints
    base_slices = set(base_fp) or set(baseline.fingerprint.suite.slices)
    head_slices = set(head) or set(suite.slices)
    both = base_slices & head_slices
    if same_suite:
        shared, changed = sorted(both), []
    elif base_fp:
        shared = sorted(s for s in both if base_fp[s] == head.get(s))
        changed = sorted(both - set(shared))
    else:
        shared, changed = sorted(both), []
    return Comparability(base_k=k, head_k=head_summary.settings.num_draft_tokens,
                         same_suite=same_suite, shared=shared, new=sorted(head_slices - base_slices), changed=changed,
                         removed=sorted(base_slices - head_slices), by_name_only=not same_suite and not base_fp)
