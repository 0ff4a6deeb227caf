"""The one base class of every versioned document the gate writes and reads (results, checks, verdict, baseline),
and the smallest of them, ``phases.json``.

Unknown fields are refused (a typo in a hand-edited baseline is an error, not a silently ignored key), and fields
with a JSON alias (``schema``) can be set by name too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _is_none(value) -> bool:
    return value is None


def omitted_when_none(default=None) -> Any:
    """A field left out of the document when it has no value (None), rather than written as null."""
    return Field(default, exclude_if=_is_none)


PHASES_SCHEMA = "specguard.phases/1"


class PhasesDoc(Document):
    """``phases.json``: where one command's time went (its wall time, and the seconds of each named phase)."""

    schema_id: Literal["specguard.phases/1"] = Field(PHASES_SCHEMA, alias="schema")
    wall_s: float = Field(ge=0)
    seconds: dict[str, Annotated[float, Field(ge=0)]]


__all__ = ["PHASES_SCHEMA", "Document", "PhasesDoc", "omitted_when_none"]
