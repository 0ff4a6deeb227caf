"""The ``checks:`` section of ``specguard.yaml``: each check's thresholds and budgets (docs/config.md)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt, field_validator, model_validator

from gate.inputs.fields import MAX_COUNT, BatchSize, Fraction, PositiveInt, Seconds, Strict


# true: the check must be measured, or the gate fails with the reason it was not (a config that makes it impossible is
# refused at load: Config.unmeasurable).  It judges, it does not measure: never in the config's digest.
def _required():
    return Field(False, exclude=True)


REQUIRABLE = ("equivalence", "distribution", "speedup")
MAX_BUDGET_MINUTES = 10_000.0  # about a week: past any job timeout (GitHub caps a job at 6 hours)
MAX_LOGIT_TOLERANCE = 1000.0  # nats: far past any float noise; beyond it every divergence would be a near-tie


class EquivalenceCheck(Strict):
    logit_tolerance: float | Literal["auto"] = "auto"
    max_confident_divergences: Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)] = 0
    max_confident_inconsistencies: Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)] = 0
    min_exact_match: Fraction = 0.0
    required: StrictBool = _required()

    @field_validator("logit_tolerance")
    @classmethod
    def _tol(cls, v):
        if v != "auto" and not 0 < v <= MAX_LOGIT_TOLERANCE:
            raise ValueError(f"expected 'auto' or a number > 0 and <= {MAX_LOGIT_TOLERANCE:g} (nats), got {v!r}")
        return v


class ReproducibilityCheck(Strict):
    repeat_batch_size: BatchSize | None = None
    require_bitwise: StrictBool = False


class DistributionCheck(Strict):
    num_samples: Annotated[StrictInt, Field(ge=100, le=1_000_000)] = 2000
    alpha: Annotated[float, Field(gt=0.0, lt=0.5)] = 0.01
    power_trials: Annotated[StrictInt, Field(ge=0, le=1000)] = 40
    # null draws that calibrate the z-tests' p-values (gate.checks.distribution); 0: their normal approximations;
    # unset: 2000, or 10 / alpha where that is more
    null_trials: Annotated[StrictInt, Field(ge=0, le=100_000)] | None = Field(None, exclude_if=lambda v: v is None)
    required: StrictBool = _required()
    # a group whose p-value lands between confirm_floor and alpha is re-sampled before it fails
    # (gate.checks.confirmation); left out of the config's digest at their defaults, so earlier configs keep theirs
    confirm: StrictBool = Field(True, exclude_if=lambda v: v)
    # unset: alpha / 100
    confirm_floor: Annotated[float, Field(gt=0.0, lt=0.5)] | None = Field(None, exclude_if=lambda v: v is None)

    @property
    def draws(self) -> int:
        """The calibration's null draws this check makes."""
        return self.null_trials if self.null_trials is not None else max(2000, math.ceil(10 / self.alpha))

    @model_validator(mode="after")
    def _resolves_alpha(self) -> DistributionCheck:
        if self.null_trials and self.null_trials < 10 / self.alpha:
            raise ValueError(f"null_trials ({self.null_trials}) must be 0 or at least 10 / alpha "
                             f"({10 / self.alpha:.0f}): a calibrated p-value is at least 1 / (1 + null_trials), and "
                             "the test must reach alpha / 4 with room to spare")
        if self.confirm_floor is not None and self.confirm_floor >= self.alpha:
            raise ValueError(f"confirm_floor ({self.confirm_floor}) must be below alpha ({self.alpha}): a p-value "
                             "between the two is confirmed by a second sampling pass before it fails")
        return self


class SpeedupCheck(Strict):
    # false: a correctness-only gate (equivalence, reproducibility run to run, distribution), with no calibration
    # and no timing, for a runner whose times mean nothing (shared, or not the serving hardware).  Left out of the
    # config's digest while true, so configs written before it keep theirs.
    enabled: StrictBool = Field(True, exclude_if=lambda v: v)
    min_speedup: Annotated[float, Field(gt=0.0, le=1e6)] | None = None
    ci_half_width: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.03
    time_budget_s: Seconds = 120.0
    warmup: Annotated[StrictInt, Field(ge=0, le=1000)] = 1
    min_repeats: Annotated[StrictInt, Field(ge=2, le=100_000)] = 3
    max_repeats: Annotated[StrictInt, Field(ge=2, le=100_000)] = 30
    max_batches_per_cell: PositiveInt | None = 4
    bootstrap_resamples: Annotated[StrictInt, Field(ge=100, le=1_000_000)] = 2000
    context_buckets: list[PositiveInt] = Field(default_factory=lambda: [128, 512])
    # timed forwards per step cost (draft step, target step, verification) and batch size; the median is kept
    calibration_trials: Annotated[StrictInt, Field(ge=3, le=1000)] = 30
    # true: every timed batch runs with the other servers the gate launched frozen (SIGSTOP of their process group),
    # one server at a time, for a runner too small to isolate them (gate.run.isolation); left out of the digest
    # while false
    isolate_servers: StrictBool = Field(False, exclude_if=lambda v: not v)
    required: StrictBool = _required()

    @model_validator(mode="after")
    def _consistent(self) -> SpeedupCheck:
        if not self.enabled and self.min_speedup is not None:
            raise ValueError(f"min_speedup ({self.min_speedup}) needs the timing that enabled: false turns off; "
                             "drop one of them")
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"max_repeats ({self.max_repeats}) must be >= min_repeats ({self.min_repeats})")
        if sorted(set(self.context_buckets)) != list(self.context_buckets):
            raise ValueError(f"context_buckets must be strictly increasing, got {self.context_buckets}")
        return self


MAX_TRACE_S = 3600.0  # the longest arrival trace one replay may take


class TrafficSLO(Strict):
    """A request meets the SLO when every bound given here holds; goodput counts those per second."""

    ttft_s: Seconds | None = None  # time to first token
    tpot_s: Seconds | None = None  # time per output token after the first
    e2e_s: Seconds | None = None  # end-to-end latency


class TrafficCheck(Strict):
    """Sustained request-rate load (docs/serving.md): an open-loop arrival trace per rate, replayed to each http
    engine and to its reference in interleaved repeats, so both see identical traffic."""

    rates: list[Annotated[float, Field(gt=0.0, le=10_000.0)]] = Field(min_length=1, max_length=32)
    arrival: Literal["poisson", "constant"] = "poisson"
    requests: Annotated[StrictInt, Field(ge=4, le=100_000)] = 32  # per rate and replay
    repeats: Annotated[StrictInt, Field(ge=1, le=100)] = 2  # replays per side and rate, in ABBA order
    seed: Annotated[StrictInt, Field(ge=0, lt=1 << 63)] = 0
    slo: TrafficSLO = TrafficSLO()
    max_in_flight: Annotated[StrictInt, Field(ge=1, le=1024)] = 256  # past it a replay is cut short (a thread each)

    @field_validator("rates")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if sorted(set(v)) != list(v):
            raise ValueError(f"rates must be strictly increasing requests per second, got {v}")
        return v

    def trace_span_s(self, rate: float) -> float:
        """How long one replay's arrivals take at ``rate`` (the expected span of a Poisson trace, a constant one's)."""
        return (self.requests - 1) / rate

    @model_validator(mode="after")
    def _bounded(self) -> TrafficCheck:
        slowest = self.trace_span_s(self.rates[0])
        if slowest > MAX_TRACE_S:
            raise ValueError(f"at {self.rates[0]:g} req/s, {self.requests} requests take about {slowest:,.0f} s per "
                             f"replay (at most {MAX_TRACE_S:.0f}): raise the lowest rate or lower 'requests'")
        return self


class ReproCheck(Strict):
    """A failing gate shrinks each failing equivalence and distribution check to its smallest replayable case
    (gate.repro, ``specguard repro``) within this many seconds in all; 0: off."""

    budget_s: Annotated[float, Field(ge=0.0, le=86_400.0)] = 180.0


class ChecksConfig(Strict):
    equivalence: EquivalenceCheck = EquivalenceCheck()
    reproducibility: ReproducibilityCheck = ReproducibilityCheck()
    distribution: DistributionCheck = DistributionCheck()
    speedup: SpeedupCheck = SpeedupCheck()
    # off unless given; left out of the digest while unset, so configs written before it keep theirs
    traffic: TrafficCheck | None = Field(None, exclude_if=lambda v: v is None)
    # how long a failing gate may spend on minimal cases: what it measures is unchanged, so never in the digest
    repro: ReproCheck = Field(default_factory=ReproCheck, exclude=True)
    # wall-clock minutes of one `specguard gate`, start to verdict: the run is fitted to it, what buys most first
    # (gate.run.budget); what it leaves out is recorded in results.json, never in the digest (the same cells measure
    # the same things), so a budgeted run compares with the full one's baseline
    budget_minutes: Annotated[float, Field(gt=0.0, le=MAX_BUDGET_MINUTES)] | None = Field(None, exclude=True)

