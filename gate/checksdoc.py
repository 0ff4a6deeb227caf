"""Verdict lines, and ``checks.json``: the document that holds the checks' findings and verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from gate.documents import Document, RunRef, omitted_when_none

STATUSES = ("pass", "fail", "warn", "info")
# checks.json's equivalence_method starts with this when any side's output was text re-tokenized by the gate;
# the report then opens with that method on its first line (comment, summary and terminal alike).
RETOKENIZED_METHOD = "text comparison of re-tokenized text"


def retokenized_note(checks: ChecksDoc | None) -> str | None:
    """The equivalence method when it is a comparison of re-tokenized text, else None."""
    method = (checks.equivalence_method if checks else None) or ""
    return method if method.startswith(RETOKENIZED_METHOD) else None


@dataclass(frozen=True)
class Verdict:
    """pass, fail, warn or info for one check (and engine, and batch size), and why, in a sentence a
    reviewer can act on."""

    check: str
    engine: str | None
    status: str
    why: str
    batch_size: int | None = None
    slice: str | None = None  # a verdict about one task slice (the per-slice speedup floor)

    def to_dict(self) -> dict:
        out = {"check": self.check, "engine": self.engine, "batch_size": self.batch_size, "status": self.status,
               "why": self.why}
        if self.slice is not None:
            out["slice"] = self.slice
        return out


# --- checks.json ---------------------------------------------------------------------------------

CHECKS_SCHEMA = "specguard.checks/2"


_Doc = Document


class VerdictLine(_Doc):
    check: str
    engine: str | None
    batch_size: int | None
    status: Literal["pass", "fail", "warn", "info"]
    why: str
    slice: str | None = omitted_when_none()


class Divergences(_Doc):
    near_tie: int
    confident: int
    length: int
    unclassified: int = 0


class EquivalenceSummary(_Doc):
    """One engine at one batch size against the canonical reference."""

    sequences: int
    exact_match: float | None
    prefix_match: float | None
    consistent_share: float | None
    confident_inconsistencies: int
    divergences: Divergences
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
    base_batch_size: int
    across_batch_sizes: dict[str, Identical]
    bitwise_across_batch_sizes: bool | None
    across_runs: Rerun | None
    bitwise_across_runs: bool | None
    across_compositions: dict[str, CompositionIdentity] = Field(default_factory=dict)
    bitwise_across_compositions: bool | None = None


class DistributionRow(_Doc):
    n: int
    pvalues: dict[str, float]
    rejected: bool
    control: bool


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


class LoadStats(SpeedupStats):
    """One load level, pooled over its cells, with the range of repeats they took."""

    repeats: Repeats | None


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


class Speedup(_Doc):
    engines: dict[str, SpeedupEngine]
    protocol: dict[str, dict[str, dict[str, Any]]]  # results.json's timing: batch size -> cell -> repeats
    calibration: dict[str, dict[str, float]]
    calibrated_engines: list[str]


class Tolerance(_Doc):
    """The logit tolerance the classifier used, and the rule that set it (:class:`gate.checks.tolerance.Tolerance`)."""

    dtype: str
    eps: float
    measured_noise: float | None
    fixed: float | None
    noise_factor: float
    ulp_factor: float
    rule: str


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
    tolerance: Tolerance | None = omitted_when_none()
    equivalence_method: str | None = omitted_when_none()
    verdicts: list[VerdictLine]
    analysis_s: float
    rescoring_s: float = 0.0
    rescoring_forwards: int

    def failing(self) -> list[VerdictLine]:
        return [v for v in self.verdicts if v.status == "fail"]
