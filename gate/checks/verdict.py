"""One line of the verdict table."""

from __future__ import annotations

from dataclasses import dataclass

STATUSES = ("pass", "fail", "warn", "info")


@dataclass(frozen=True)
class Verdict:
    """pass, fail, warn or info for one check (and engine, and batch size), and why, in a sentence a
    reviewer can act on."""

    check: str
    engine: str | None
    status: str
    why: str
    batch_size: int | None = None

    def to_dict(self) -> dict:
        return {"check": self.check, "engine": self.engine, "batch_size": self.batch_size, "status": self.status,
                "why": self.why}
