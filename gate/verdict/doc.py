"""``verdict.json``: the judge's verdict lines (:class:`gate.checks.doc.VerdictLine`, the one type of them), changes
and headline (written by :mod:`gate.verdict.judge`, read by the report).  Pydantic only, no numpy.
:mod:`gate.verdict.file` reads it back with the standard library alone.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gate.checks.doc import VerdictLine
from gate.io.documents import Document, RunRef, omitted_when_none

SCHEMA = "specguard.verdict/3"
Status = Literal["pass", "fail", "warn", "neutral"]
EXIT_PASS, EXIT_FAIL = 0, 1


_Doc = Document


class Interval(_Doc):
    estimate: float | None
    low: float | None = None
    high: float | None = None


class Explanation(_Doc):
    """A speedup change split into causes, in points of the measured change (100 x (head/base - 1)), one sign
    convention (> 0: that cause made speculation faster), parts that add up: ``acceptance + draft_cost +
    verify_cost + unexplained == change``.  The Leviathan model splits the change of log S exactly; each part
    is then scaled by ``change / (100 log(head/base))``, so the parts keep their log-scale shares and sum to the
    change as measured.  ``unexplained`` is what acceptance and the step costs do not account for (the runner's
    load, the engine's host overhead).  Without calibration only acceptance is split out."""

    change: float | None = None  # measured: 100 x (head/base - 1)
    acceptance: float
    draft_cost: float | None = None
    verify_cost: float | None = None
    unexplained: float | None = None
    model: float | None = None  # the model's own prediction of the change, same points
    alpha_base: float | None = None
    alpha_head: float | None = None
    cost_base: float | None = None
    cost_head: float | None = None
    verify_base: float | None = None
    verify_head: float | None = None
    sentence: str = ""


class LevelResolution(_Doc):
    """What a load level's timing resolves (docs/baselines.md, "What a run can resolve"): the smallest drop detected
    with 80% power by a 95% test, from the spread the judge holds (``drop``: within the run and, stored, between
    runs) and from the run's own repeats alone (``own``, with ``sd`` per sample); ``judged`` is false where ``own``
    is worse than ``baseline.speedup_drop``: the run cannot see the drop the fail rule is about."""

    drop: float | None
    own: float | None
    sd: float | None
    judged: bool = True


class SpeedupChange(_Doc):
    engine: str
    slice: str | None
    batch_size: int
    bucket: str | None
    base: Interval
    head: Interval
    ratio: Interval  # head speedup / base speedup
    status: Status
    significant: bool
    explanation: Explanation | None = None
    # the one-sided p-value of a drop, Holm-adjusted over every cell and load level of the run (gate.verdict.
    # speed_rule); absent in verdicts written before the family rule
    p_adjusted: float | None = omitted_when_none()
    # a load level's (and its cells'): what its timing resolves, and whether it was judged (status neutral: not)
    resolution: LevelResolution | None = omitted_when_none()

    def mark(self) -> str:
        """What a row shows beside its change: its status, except a pass whose 95% interval lies wholly below no
        change, which is ``slower``; a row not judged (its load level's timing cannot resolve the fail rule's
        drop) is ``neutral``, never a pass: a drop the family does not flag (under ``baseline.min_effect``, or not
        significant once every cell and load level is counted), never shown as a pass."""
        if self.status == "pass" and self.ratio.high is not None and self.ratio.high < 1:
            return "slower"
        return self.status


class TimingNoise(_Doc):
    """The spread the speed rule judged against (gate.verdict.noise): within a run, per side, and between runs."""

    within_sd_head: float  # a sample's log speedup about its batch's mean, pooled over the head's (or pair's) cells
    within_sd_base: float | None = None  # the stored baseline's (stored mode)
    between_sd: float = 0.0  # a cell's mean, between runs (stored mode; 0 in paired mode: one process, interleaved)
    between_source: str = "none"  # where between_sd came from
    passes: int = 1  # the baseline's timing passes


class TrafficChange(_Doc):
    """One engine at one request rate: its latency speedup (reference / engine on the same trace) against the
    baseline's at that rate."""

    engine: str
    rate: float
    base: Interval
    head: Interval
    ratio: Interval  # head speedup / base speedup
    status: Status
    significant: bool
    ttft_p99_base: float | None = None
    ttft_p99_head: float | None = None
    tpot_p99_base: float | None = None
    tpot_p99_head: float | None = None


class AcceptanceChange(_Doc):
    engine: str
    batch_size: int
    slice: str
    base: float
    head: float
    relative: float
    status: Status
    # after a k change: the Leviathan expectation at the head's k from the baseline's acceptance (not judged)
    expected: float | None = None
    acceptance_per_pos_base: list[float | None] = Field(default_factory=list)
    acceptance_per_pos_head: list[float | None] = Field(default_factory=list)


class EquivalenceChange(_Doc):
    engine: str
    batch_size: int
    base: float | None
    head: float | None
    allowed_drop: float
    status: Status


class Changed(_Doc):
    what: str
    base: str
    head: str


class BaselineRef(_Doc):
    path: str
    name: str
    hardware_key: str
    created_utc: str
    same_hardware: bool
    forced: bool = False


class Rules(_Doc):
    """Every threshold the judge applied, as it applied them: the config's ``baseline.*`` rules and the judge's own
    constants.  The comment and the step summary read them here, never from the config again."""

    acceptance_drop: float  # baseline.acceptance_drop: the largest relative drop of acceptance that passes
    speedup_drop: float  # baseline.speedup_drop: a drop fails only when its whole CI lies below 1 - this
    exact_match_drop: float | Literal["auto"]  # baseline.exact_match_drop ("auto": the noise floor's, per row)
    on_missing: Literal["neutral", "fail", "stop"]  # baseline.on_missing: no baseline for this hardware key
    crossover_move: float  # a crossover rate below this share of the baseline's warns
    drift_min: float  # a runner drift is named only when the cells' median moved at least this much
    drift_share: float  # ... and this share of the cells moved the median's way
    # the speed rule's family (absent in verdicts written before it): a drop warns beyond min_effect when its
    # Holm-adjusted p-value is below family_alpha; between_run_sd is baseline.between_run_sd, the floor
    min_effect: float | None = omitted_when_none()
    family_alpha: float | None = omitted_when_none()
    between_run_sd: float | None = omitted_when_none()


class VerdictDoc(_Doc):
    schema_id: Literal["specguard.verdict/3"] = Field(SCHEMA, alias="schema")
    outcome: Literal["pass", "fail", "neutral"]
    exit_code: int
    headline: str
    mode: Literal["stored", "paired", "none"]
    baseline: BaselineRef | None = None
    hardware_key: str
    checks: list[VerdictLine]
    equivalence: list[EquivalenceChange] = Field(default_factory=list)
    acceptance: list[AcceptanceChange] = Field(default_factory=list)
    speedup: list[SpeedupChange] = Field(default_factory=list)
    # per engine and batch size, the mean change over its cells (slice and bucket None), judged in the same family
    speedup_levels: list[SpeedupChange] = Field(default_factory=list, exclude_if=lambda v: not v)
    timing_noise: TimingNoise | None = omitted_when_none()
    # request-rate load against the baseline; left out while empty (verdicts without it keep their documents)
    traffic: list[TrafficChange] = Field(default_factory=list, exclude_if=lambda v: not v)
    changed: list[Changed] = Field(default_factory=list)
    run_status: str
    # the run it belongs to, and the exact documents it was judged from (``python -m gate.verdict.file`` checks all
    # three against the files beside it)
    run: RunRef | None = None
    results_digest: str | None = None
    checks_digest: str | None = None
    rules: Rules | None = None  # the thresholds applied (None: a verdict written before they were recorded)

    def failed(self) -> list[VerdictLine]:
        return [c for c in self.checks if c.status == "fail"]


__all__ = ["EXIT_FAIL", "EXIT_PASS", "SCHEMA", "AcceptanceChange", "BaselineRef", "Changed",
           "EquivalenceChange", "Explanation", "Interval", "LevelResolution", "Rules", "RunRef", "SpeedupChange",
           "Status", "TimingNoise", "TrafficChange", "VerdictDoc"]
