"""Verdict lines, and ``checks.json``: the document that holds the checks' findings and verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from gate.documents import Document

STATUSES = ("pass", "fail", "warn", "info")
# checks.json's equivalence_method starts with this when any side's output was text re-tokenized by the gate;
# the report then opens with that method on its first line (comment, summary and terminal alike).
RETOKENIZED_METHOD = "text comparison of re-tokenized text"


def retokenized_note(checks: dict | None) -> str | None:
    """The equivalence method when it is a comparison of re-tokenized text, else None."""
    method = (checks or {}).get("equivalence_method") or ""
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

CHECKS_SCHEMA = "specguard.checks/1"


_Doc = Document


class VerdictLine(_Doc):
    check: str
    engine: str | None
    batch_size: int | None
    status: Literal["pass", "fail", "warn", "info"]
    why: str
    slice: str | None = None


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


class ChecksDoc(_Doc):
    """``checks.json``: the findings of each check and the verdict lines."""

    schema_id: Literal["specguard.checks/1"] = Field(CHECKS_SCHEMA, alias="schema")
    results_status: str | None
    incomplete: dict[str, Any] | None = None
    engine_failures: dict[str, dict[str, Any]] | None = None
    equivalence: dict[str, dict[str, EquivalenceSummary]] | None = None
    noise_floor: dict[str, EquivalenceSummary] | None = None
    reproducibility: dict[str, dict[str, Any]] | None = None
    distribution: dict[str, Any] | None = None
    speedup: dict[str, Any] | None = None
    tolerance: dict[str, Any] | None = None
    equivalence_method: str | None = None
    verdicts: list[VerdictLine]
    analysis_s: float
    rescoring_s: float = 0.0
    rescoring_forwards: int
