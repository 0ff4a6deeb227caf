"""The verdict line, and ``checks.json``: the document that holds the checks' findings and verdicts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gate.errors import Problem, SpecguardError
from gate.io.documents import Document, RunRef, omitted_when_none
from gate.io.rundir import CHECKS, RESULTS, DocumentKind, RunDir, load_document

STATUSES = ("pass", "fail", "warn", "info")
# checks.json's equivalence_method starts with this when any side's output was text re-tokenized by the gate;
# the report then opens with that method on its first line (comment, summary and terminal alike).
RETOKENIZED_METHOD = "text comparison of re-tokenized text"


def retokenized_note(checks: ChecksDoc | None) -> str | None:
    """The equivalence method when it is a comparison of re-tokenized text, else None."""
    method = (checks.equivalence_method if checks else None) or ""
    return method if method.startswith(RETOKENIZED_METHOD) else None


# --- checks.json ---------------------------------------------------------------------------------

CHECKS_SCHEMA = "specguard.checks/2"


_Doc = Document


Status = Literal["pass", "fail", "warn", "info", "neutral"]


class VerdictLine(_Doc):
    """The one verdict-line type: pass, fail, warn or info (a check's, in ``checks.json``), or neutral (the judge's, in
    ``verdict.json``), for one check (and engine, batch size, slice), and why, in a sentence a reviewer can act on."""

    check: str
    engine: str | None = None
    batch_size: int | None = None
    status: Status
    why: str
    slice: str | None = omitted_when_none()  # a verdict about one task slice (the per-slice speedup floor)

    @classmethod
    def of(cls, check: str, engine: str | None, status: str, why: str, batch_size: int | None = None,
           slice: str | None = None) -> VerdictLine:
        return cls(check=check, engine=engine, batch_size=batch_size, status=status, why=why, slice=slice)

    @property
    def unmeasured(self) -> bool:
        """A required check that measured nothing (``checks.<check>.required``): a failure of the run, not a finding
        about the outputs."""
        return self.status == "fail" and self.why.startswith(UNMEASURED)


UNMEASURED = "required, and not measured: "  # how a required check's failure to measure begins (gate.checks.analysis)


def _zero_omitted():
    """A count left out of the document while it is 0 (documents written before it keep their bytes)."""
    return Field(0, exclude_if=lambda v: not v)


class Divergences(_Doc):
    near_tie: int
    confident: int
    length: int
    unclassified: int = 0
    # an engine of another stack: within the cross-stack band where its noise was not measured (not told from
    # noise), and shared with its own plain decoding (the stack's, not speculation's)
    band: int = _zero_omitted()
    plain: int = _zero_omitted()


class EquivalenceSummary(_Doc):
    """One engine at one batch size against the canonical reference."""

    sequences: int
    exact_match: float | None
    prefix_match: float | None
    consistent_share: float | None
    confident_inconsistencies: int
    divergences: Divergences
    band_inconsistencies: int = _zero_omitted()  # tokens below the argmax within the cross-stack band
    plain_inconsistencies: int = _zero_omitted()  # ... where the engine's own plain decoding emitted the same
    signatures: dict[str, int]
    compositions: int = 1
    by_slice: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)
    examples: list[dict[str, Any]] = Field(default_factory=list)
    sequences_with_signatures: list[dict[str, Any]] = Field(default_factory=list)
    first_inconsistencies: list[dict[str, Any]] = Field(default_factory=list)
    # sequences that loop after a near-tie exactly as the target does from their own prefix (not a signature)
    target_loops: int = 0
    target_loop_examples: list[dict[str, Any]] = Field(default_factory=list)


class Incomplete(_Doc):
    missing_canonical: list[str]


class FirstFailure(_Doc):
    """The first failed batch of an engine: where, on which prompts, and the engine's exception."""

    phase: str
    batch_size: int
    prompts: list[str]
    kind: Literal["crash", "timeout", "out_of_memory", "contract"]
    type: str
    message: str


class EngineFailures(_Doc):
    failed: int
    executions: int
    batch_sizes: list[int]
    kinds: list[str]
    first: FirstFailure


class Identical(_Doc):
    identical: int
    compared: int


class Rerun(_Doc):
    batch_size: int
    identical: int
    compared: int


class CompositionIdentity(_Doc):
    compositions: int
    identical: int
    compared: int
    differing: list[str]


class Reproducibility(_Doc):
    """One engine's bitwise identity across batch sizes, runs and batch compositions (None: not measured)."""

    speculative: bool
    # what to call its decoding where "speculative" or "non-speculative" would say more than is known
    label: str | None = omitted_when_none()
    base_batch_size: int
    across_batch_sizes: dict[str, Identical]
    bitwise_across_batch_sizes: bool | None
    across_runs: Rerun | None
    bitwise_across_runs: bool | None
    across_compositions: dict[str, CompositionIdentity] = Field(default_factory=dict)
    bitwise_across_compositions: bool | None = None


class ConfirmationRow(_Doc):
    """A group's decision past one pass (gate.checks.confirmation): the first pass's Bonferroni-adjusted p-value, and
    the confirmation pass's where one ran."""

    p1: float
    decision: Literal["failed at once", "confirmed", "not confirmed", "unconfirmed"]
    p2: float | None = omitted_when_none()
    n2: int | None = omitted_when_none()
    pvalues2: dict[str, float] | None = omitted_when_none()
    outside2: int | None = omitted_when_none()  # the second pass's tokens outside the truncated distribution


class ConfirmRule(_Doc):
    enabled: bool
    floor: float  # below it a group fails at once
    size: float  # the rule's false-rejection bound per group: floor + (alpha - floor) * alpha


class DistributionRow(_Doc):
    n: int
    pvalues: dict[str, float]  # what the decision reads: calibrated on the null draws where they were made
    rejected: bool
    control: bool
    asymptotic: dict[str, float] | None = omitted_when_none()  # the normal approximations' p-values beside them
    # with truncated sampling (top_k/top_p/min_p): sampled tokens the truncated distribution gives probability 0
    outside: int | None = omitted_when_none()
    # a served target sampled at T != 1 or truncated: sampled tokens its top-k cannot place in or out of the
    # truncation, so not judged (gate.checks.coarse.as_sampled)
    not_judged: int | None = omitted_when_none()
    # where the first pass's p-value fell below alpha: the confirmation's decision (absent: passed on one pass)
    confirmation: ConfirmationRow | None = omitted_when_none()


class PowerFamily(_Doc):
    curve: list[dict[str, float]]  # epsilon, and the rejection rate of each test and of the combined test
    min_detectable_epsilon: float | None


class Power(_Doc):
    trials: int
    n: int
    families: dict[str, PowerFamily]


class Distribution(_Doc):
    alpha: float
    num_samples: int
    temperature: float
    tests: list[str]
    engines: dict[str, dict[str, DistributionRow]]
    power: Power | None = omitted_when_none()
    null_rejection_rate: float | None = omitted_when_none()
    null_rejection_rate_confirmed: float | None = omitted_when_none()  # the same null draws, the confirmed decision
    confirm: ConfirmRule | None = omitted_when_none()  # absent: a checks.json from before the confirmation
    # the null draws each martingale test's p-value was calibrated on (gate.checks.distribution.Calibration); absent:
    # normal approximations (null_trials: 0, past CALIBRATE_BELOW tokens, or a checks.json from before)
    null_trials: int | None = omitted_when_none()
    # what stands for the proposer in the draft-side tests where it is not a loaded draft model (gate.checks.proposers)
    proposer: str | None = omitted_when_none()
    # where the target's distribution came from when it is served, not loaded here (None: the loaded target)
    scoring: str | None = omitted_when_none()
    # the truncation the target's distribution was truncated with, as served (absent: none)
    truncation: dict | None = omitted_when_none()


class SpeedupCI(_Doc):
    """A median speedup with its bootstrap CI: :class:`gate.stats.Interval` as written."""

    estimate: float
    low: float
    high: float
    n: int
    rel_half_width: float

    @classmethod
    def of(cls, ci) -> SpeedupCI:
        """From a :class:`gate.stats.Interval`."""
        return cls(estimate=ci.estimate, low=ci.low, high=ci.high, n=ci.n, rel_half_width=ci.rel_half_width)

    def interval(self):
        from gate.stats import Interval

        return Interval(self.estimate, self.low, self.high, self.n)


class EngineVsReference(_Doc):
    reference: float | None
    engine: float | None


class Expected(_Doc):
    """Leviathan et al.'s expectation for the measured acceptance, k and cost ratio."""

    alpha_effective: float
    cost_ratio: float
    speedup: float
    efficiency: float | None
    verify_ratio: float | None = omitted_when_none()
    speedup_with_verify_cost: float | None = omitted_when_none()


class SpeedupStats(_Doc):
    """Statistics over paired (reference, engine) executions: a cell, a load level, a slice or a bucket."""

    samples: int
    speedup: SpeedupCI
    throughput_tok_s: EngineVsReference
    per_token_latency_s: EngineVsReference
    realign_share: float | None
    acceptance_rate: float | None
    mean_accepted_length: float | None
    tokens_per_target_forward: float | None
    acceptance_per_pos: list[float | None] | None  # None at a position no draft reached
    expected: Expected | None
    # the acceptance allows at most this speedup (tokens per target forward: a verification costs at least one plain
    # step), and its point estimate lies above it by more than INTERFERENCE_TOLERANCE (or its whole CI above it):
    # interference, not speculation (gate.checks.speedup.beyond_acceptance); else left out
    interference: float | None = omitted_when_none()


class CellKey(_Doc):
    slice: str
    batch_size: int
    bucket: str | None
    stopped_by: str | None
    repeats: int | None


class CellStats(SpeedupStats, CellKey):
    """One cell (slice x load x context bucket): its key and stopping rule, then its statistics."""


class Repeats(_Doc):
    min: int
    max: int
    stopped_by: list[str | None]


class Resolution(_Doc):
    """The smallest drop of speedup this run would detect with 80% power (a 95% test), from its own timing spread
    (gate.checks.resolution): ``drop = 1 - exp(-(t_.975 + t_.80) se)``, ``se`` the standard error of the mean log
    speedup, ``sd`` the repeat-to-repeat spread of a log sample it came from, on ``df`` degrees of freedom."""

    drop: float | None  # None: no repeats, no spread measured
    se: float | None
    sd: float
    df: int


class LoadStats(SpeedupStats):
    """One load level, pooled over its cells, with the range of repeats they took."""

    repeats: Repeats | None
    # what this load level's own timing spread resolves (absent in checks written before it)
    resolution: Resolution | None = omitted_when_none()


class Crossover(_Doc):
    batch_size: int | None
    clearly_below_1_from: int | None
    seen: bool
    shrinks_with_load: bool | None


class WorstSlice(_Doc):
    slice: str
    speedup: float
    mean_of_slices: float
    gap_to_mean: float
    relative_gap: float | None


class SpeedupEngine(_Doc):
    cells: dict[str, CellStats]
    load_curve: dict[str, LoadStats]
    by_bucket: dict[str, dict[str, SpeedupStats]]
    by_slice: dict[str, dict[str, SpeedupStats]]
    crossover: Crossover
    worst_slice: dict[str, WorstSlice]
    crossover_by_slice: dict[str, Crossover]
    memory: dict[str, dict[str, int]]  # batch size -> reference / engine -> peak bytes
    expected_note: str | None
    # What the speedup is against (issue 32).  ``against``: the engine's own plain decoding (a plug-in's
    # ``engines[].reference``, timed beside it) when it has one; None: the gate's reference.  ``versus_gate``: the
    # load curve against the gate's reference as well, where the two differ.  ``not_a_speedup``: said of an
    # engine of another stack timed only against the gate's torch reference (throughput, not a speedup).
    against: str | None = Field(None, exclude_if=lambda v: v is None)
    versus_gate: dict[str, SpeedupCI] | None = Field(None, exclude_if=lambda v: v is None)
    not_a_speedup: str | None = Field(None, exclude_if=lambda v: v is None)
    # its timing measured co-located servers, not speculation (gate.run.isolation): why; its cells are not judged
    neighbours: str | None = Field(None, exclude_if=lambda v: v is None)
    # what the run's own timing spread resolves of a drop in every cell alike (absent in checks written before it)
    resolution: Resolution | None = omitted_when_none()


class Speedup(_Doc):
    engines: dict[str, SpeedupEngine]
    protocol: dict[str, dict[str, dict[str, Any]]]  # results.json's timing: batch size -> cell -> repeats
    calibration: dict[str, dict[str, float]]
    calibrated_engines: list[str]


class Percentiles(_Doc):
    """Seconds; None when nothing was measured."""

    p50: float | None = None
    p99: float | None = None


class TrafficSide(_Doc):
    """One side (the engine under test, or its reference) at one rate, pooled over its replays."""

    requests: int
    completed: int
    failed: int
    first_error: str | None = omitted_when_none()
    offered_rps: float | None  # arrivals per second, as sent
    achieved_rps: float | None  # completions per second, from a replay's first arrival to its last token
    saturated: bool  # completions fell behind arrivals (below 75% of the offered rate), or a replay was cut short
    cut_short: str | None = omitted_when_none()
    output_tps: float | None  # output tokens per second over the replays' durations
    ttft: Percentiles
    tpot: Percentiles  # (end - first token) / (tokens - 1), per request
    itl: Percentiles  # gaps between token bursts (arrivals under 1 ms apart are one burst), pooled
    e2e: Percentiles  # end-to-end latency, from the arrival
    goodput_rps: float | None = None  # requests meeting checks.traffic.slo per second (None: no SLO given)
    max_send_lag_s: float  # how far behind its trace the replay sent a request (the replay's own fidelity)


class TrafficSlice(_Doc):
    """One slice's requests within a rate's traffic (the load is every slice's; the figures are this one's)."""

    engine: TrafficSide
    reference: TrafficSide
    speedup: SpeedupCI | None  # end-to-end latency, paired per request
    ttft_speedup: SpeedupCI | None
    tpot_speedup: SpeedupCI | None


class TrafficRate(_Doc):
    rate: float  # requests per second, as configured
    engine: TrafficSide
    reference: TrafficSide
    # per request of the same trace: reference / engine (> 1: speculation made it faster); the median, 95% CI
    speedup: SpeedupCI | None  # end-to-end latency
    ttft_speedup: SpeedupCI | None = None
    tpot_speedup: SpeedupCI | None
    itl_p50_ratio: float | None = None  # reference ITL p50 / engine's (not paired: gaps are not matched one to one)
    itl_p99_ratio: float | None = None
    throughput_ratio: float | None = None  # engine output tokens/s / reference's
    goodput_ratio: float | None = None
    by_slice: dict[str, SpeedupCI] = Field(default_factory=dict)  # the end-to-end latency speedup per slice
    slices: dict[str, TrafficSlice] = Field(default_factory=dict)
    # paired mode: the base config's server on the same traces, and its latency speedup against the reference
    base: TrafficSide | None = omitted_when_none()
    base_speedup: SpeedupCI | None = omitted_when_none()


class TrafficCrossover(_Doc):
    """Where speculation stops paying as the request rate grows."""

    rate: float | None  # the lowest configured rate whose median latency speedup is below 1
    clearly_below_1_from: float | None  # ... whose whole CI is below 1
    interpolated: float | None  # where the speedup crosses 1 between the rates around it (linear in log rate)
    below_at_lowest: bool  # below 1 already at the lowest rate: the crossover lies below the sweep
    seen: bool


class TrafficEngine(_Doc):
    rates: dict[str, TrafficRate]  # key: the rate as written (e.g. "0.5", "2")
    crossover: TrafficCrossover
    crossover_by_slice: dict[str, TrafficCrossover]


class Traffic(_Doc):
    """Sustained request-rate load (``checks.traffic``, :mod:`gate.checks.traffic`)."""

    arrival: str
    requests: int
    repeats: int
    slo: dict[str, float]
    engines: dict[str, TrafficEngine]


class Tolerance(_Doc):
    """The logit tolerance the classifier used, and the rule that set it (:class:`gate.engines.tolerance.Tolerance`)."""

    dtype: str
    eps: float
    measured_noise: float | None
    fixed: float | None
    noise_factor: float
    ulp_factor: float
    rule: str


class StackNoise(_Doc):
    """An engine of another stack: its own numerical noise, measured on its own plain decoding, and the tolerance it
    was judged with (:mod:`gate.checks.stack_noise`)."""

    mode: Literal["measured", "unmeasured"]
    plain: str | None  # the engine whose greedy outputs are its plain decoding; None: unmeasured
    precision: str  # what it computes in: as it reported (precision_reported), else the config's dtype
    precision_reported: bool
    config_dtype: str
    noise: float | None  # its plain decoding's largest departure from the target within the band (nats)
    departures: int  # plain-decoding tokens beyond the gate's own tolerance, within the band
    beyond_band: int  # ... beyond the band: no precision explains them
    tokens: int  # plain-decoding tokens re-scored
    rule: str  # the engine's tolerance
    tolerance_at_10: float
    band_at_10: float
    # a plug-in's own reference against the canonical reference, per batch size (a server reference's is noise_floor)
    plain_by_batch_size: dict[str, EquivalenceSummary] = Field(default_factory=dict,
                                                               exclude_if=lambda v: not v)


class BudgetLeftOutLine(_Doc):
    """A unit of work ``checks.budget_minutes`` left out: not run, so not judged (gate.run.budget)."""

    what: str  # equivalence, sampling, timing, traffic
    batch_size: int | None = None
    engine: str | None = None
    cell: str | None = None
    reason: str


class BudgetSamplingPower(_Doc):
    """A sampling group the budget cut below num_samples, and the power its tokens kept."""

    engine: str
    batch_size: int
    tokens: int
    need: int
    # per planted distortion family, the smallest epsilon detected with 80% power (distribution.power), simulated at
    # power_n tokens (the first group analysed: where that is more than this group's tokens, its power is lower);
    # None where the power was not simulated (power_trials: 0)
    min_detectable_epsilon: dict[str, float | None] | None
    power_n: int | None = None


class BudgetSpeed(_Doc):
    """A load level whose adaptive repeats the budget stopped, and the drop its repeats still resolve."""

    engine: str
    batch_size: int
    repeats: int  # the fewest any of its cells got
    drop: float | None  # the smallest speedup drop detected with 80% power (speedup.load_curve's resolution)


class Budget(_Doc):
    """``checks.budget_minutes``: what it left out, and the power that remained where it cut (gate.run.budget)."""

    minutes: float
    source: str
    run_s: float  # seconds from the command's start to the run's end
    left_out: list[BudgetLeftOutLine]
    sampling: list[BudgetSamplingPower]
    speed: list[BudgetSpeed]


class ChecksDoc(_Doc):
    """``checks.json``: the findings of each check and the verdict lines."""

    schema_id: Literal["specguard.checks/2"] = Field(CHECKS_SCHEMA, alias="schema")
    # what these checks were made from: the run, and the exact results.json (its sha256)
    run: RunRef
    results_digest: str
    results_status: str | None
    incomplete: Incomplete | None = omitted_when_none()
    engine_failures: dict[str, EngineFailures] | None = omitted_when_none()
    equivalence: dict[str, dict[str, EquivalenceSummary]] | None = omitted_when_none()
    noise_floor: dict[str, EquivalenceSummary] | None = omitted_when_none()
    reproducibility: dict[str, Reproducibility] | None = omitted_when_none()
    distribution: Distribution | None = omitted_when_none()
    speedup: Speedup | None = omitted_when_none()
    traffic: Traffic | None = omitted_when_none()
    budget: Budget | None = omitted_when_none()  # checks.budget_minutes: what it left out or cut (absent: none set)
    tolerance: Tolerance | None = omitted_when_none()
    # engines of another stack (plug-ins, servers): their own noise and tolerance; left out when there are none
    stack_noise: dict[str, StackNoise] = Field(default_factory=dict, exclude_if=lambda v: not v)
    equivalence_method: str | None = omitted_when_none()
    verdicts: list[VerdictLine]
    analysis_s: float
    rescoring_s: float = 0.0
    rescoring_forwards: int

    def failing(self) -> list[VerdictLine]:
        return [v for v in self.verdicts if v.status == "fail"]

    def unconfirmed(self) -> list[tuple[str, int]]:
        """The sampling groups (engine, batch size) whose distribution test awaits a confirmation pass."""
        rows = self.distribution.engines.items() if self.distribution is not None else ()
        return [(engine, int(bs)) for engine, by_bs in rows for bs, row in by_bs.items()
                if row.confirmation is not None and row.confirmation.decision == "unconfirmed"]


CHECKS_DOC = DocumentKind("checks file", SpecguardError, lambda: ChecksDoc,  # already imported: light
                          "run `specguard check CONFIG` (or `specguard gate CONFIG`) to write it",
                          schema=CHECKS_SCHEMA, invalid="corrupt checks: {msg}",
                          allow_nan=True)  # the checks record an estimate they could not make as NaN


def _short(digest: str | None) -> str:
    return (digest or "none").removeprefix("sha256:")[:12]


def made_from(checks: ChecksDoc, results, checks_path, results_path) -> None:
    """Refuse ``checks`` unless they name ``results``: its run (id, config, suite) and the sha256 of its bytes."""
    if checks.run == results.ref() and checks.results_digest == results.digest:
        return
    raise SpecguardError(Problem(
        str(checks_path), f"made from another run's results: it names run {checks.run.id!r} (results.json "
        f"{_short(checks.results_digest)}), but {results_path} is run {results.run_id!r} "
        f"({_short(results.digest)})", field="results_digest",
        hint="rerun `specguard check CONFIG --out DIR` on this run's directory, or keep each run in its own "
             "directory"))


def load_checks(path) -> ChecksDoc:
    """checks.json, validated against its schema."""
    return load_document(path, CHECKS_DOC)


def load_checked(out: RunDir):
    """(results, checks) of a run directory, refused (exit 2, naming both files) unless checks.json was made from
    this very results.json: a stale or foreign checks.json must never be judged as this run's."""
    from gate.run.results import load_results

    results, checks = load_results(out / RESULTS), load_checks(out / CHECKS)
    made_from(checks, results, out / CHECKS, out / RESULTS)
    return results, checks
