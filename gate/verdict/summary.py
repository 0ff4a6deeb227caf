"""A run, summarised for the judge: what it measured, how it ended, what its checks said, and (paired mode) the
base timed beside it.  The judge (:func:`gate.verdict.judge.judge`) sees this and a stored baseline, nothing else:
no results or checks document, no clock, no environment.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gate.checks.doc import ChecksDoc, VerdictLine
from gate.inputs.config import Config
from gate.io.documents import Document, RunRef, omitted_when_none
from gate.run.load import RunnerLoad
from gate.run.results import Results
from gate.verdict.baseline import Measurements, cell_key, measure


class PairedCell(Document):
    """One timing cell in paired mode: base wall time over head wall time of each timed (batch, repeat)."""

    slice: str | None
    batch_size: int
    bucket: str | None
    ratios: list[float]
    batches: list[int] | None = omitted_when_none()  # the timed batch of each ratio (its repeats share one)


class PairedSummary(Document):
    """The base config's speculative engine, timed beside the head's on the same batches in this run."""

    engine: str  # the base engine's name in the results, e.g. "base-speculative"
    head_engine: str
    num_draft_tokens: int  # the base's k
    calibration: dict[str, dict[str, float]] = Field(default_factory=dict)  # the base pair's step costs
    config: dict[str, Any] = Field(default_factory=dict)  # the base config, as loaded
    cells: dict[str, PairedCell] = Field(default_factory=dict)  # cell key -> its paired ratios
    # request rate -> base latency / head latency of each request both finished, on the same traces
    traffic: dict[str, list[float]] = Field(default_factory=dict)


class RunSummary(Document):
    """What the judge holds against a stored baseline."""

    run: RunRef
    name: str  # the baseline name the run is judged under
    status: Literal["complete", "interrupted", "failed"]
    hardware_key: str
    config: Config
    measured: Measurements
    checks: list[VerdictLine]  # the run's own verdict lines (info left out)
    paired: PairedSummary | None = None
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)  # role -> location, fingerprint, dtype
    runner_load: RunnerLoad | None = None  # the runner while the run timed (gate.run.load): the likely cause of noise


def _paired_cell(cell: tuple, rows: dict[tuple, dict[str, float]], base: str, head: str) -> PairedCell:
    """Base wall / head wall of each (batch, repeat) both timed, with its batch."""
    kept = [(batch, r[base] / r[head]) for (batch, _), r in sorted(rows.items())
            if base in r and head in r and r[head] > 0]
    return PairedCell(slice=cell[0], batch_size=cell[1], bucket=cell[2], ratios=[x for _, x in kept],
                      batches=[b for b, _ in kept])


def summarize(results: Results, checks: ChecksDoc, config: Config, name: str) -> RunSummary:
    """The run as the judge sees it (derived once, from the run's documents alone)."""
    paired = None
    if results.paired is not None:
        p = results.paired
        groups: dict[str, dict[tuple, dict[str, float]]] = {}
        cells: dict[str, tuple] = {}
        for pair in results.timing_pairs():
            if pair.engine not in (p.engine, p.head_engine):
                continue
            key = cell_key(pair.slice, pair.batch_size, pair.bucket)
            cells[key] = (pair.slice, pair.batch_size, pair.bucket)
            groups.setdefault(key, {}).setdefault((pair.execution.batch, pair.repeat), {})[pair.engine] = \
                pair.execution.wall_s
        from gate.checks.traffic import latency, rate_key
        from gate.checks.traffic import paired as paired_ratios

        traffic = {}
        for rate in sorted({r.rate for r in results.traffic if r.engine == p.head_engine and r.side == "base"}):
            reps = [r for r in results.traffic if r.engine == p.head_engine and r.rate == rate]
            ratios = paired_ratios([r for r in reps if r.side == "engine"], [r for r in reps if r.side == "base"],
                                   latency).get(None, [])
            traffic[rate_key(rate)] = ratios
        crowded = {x.engine for x in results.neighbours if x.interfered}
        if crowded & {p.engine, p.head_engine}:  # one side timed slower beside the other servers: not judged
            groups = {}
        from gate.checks.speedup import interfering_cells

        beyond = interfering_cells(checks.speedup)  # a side faster than its acceptance allows: not judged
        groups = {key: rows for key, rows in groups.items()
                  if key not in beyond.get(p.engine, set()) | beyond.get(p.head_engine, set())}
        paired = PairedSummary(
            engine=p.engine, head_engine=p.head_engine, num_draft_tokens=p.num_draft_tokens,
            calibration=p.calibration, config=p.config, traffic=traffic,
            cells={key: _paired_cell(cells[key], rows, p.engine, p.head_engine)
                   for key, rows in sorted(groups.items())})
    return RunSummary(
        run=results.ref(), name=name, status=results.status, hardware_key=results.fingerprint.hardware_key,
        config=config, measured=measure(results, checks, config),
        checks=[v for v in checks.verdicts if v.status != "info"], paired=paired,
        models={role: {"location": m.location, "fingerprint": m.fingerprint, "dtype": m.dtype}
                for role, m in results.fingerprint.models.items()}, runner_load=results.runner_load)


__all__ = ["PairedCell", "PairedSummary", "RunSummary", "summarize"]
