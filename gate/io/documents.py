"""The one base class of every versioned document the gate writes and reads (results, checks, verdict, baseline),
and the smallest of them, ``phases.json``.

Unknown fields are refused (a typo in a hand-edited baseline is an error, not a silently ignored key), and fields
with a JSON alias (``schema``) can be set by name too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    # sha256 of the file this document was read from (set by gate.io.rundir.load_document; None when made in memory):
    # what a derived document names as its source
    _digest: str | None = PrivateAttr(default=None)

    @property
    def digest(self) -> str:
        """The sha256 of this document's file: the bytes read, or (made in memory) the bytes the gate writes."""
        return self._digest or digest_of(serialized(self))


def serialized(doc: BaseModel | dict) -> bytes:
    """A document as the gate writes it to disk (one definition: the writer's and the digest's)."""
    import json

    if isinstance(doc, BaseModel):
        doc = doc.model_dump(mode="json", by_alias=True)
    return (json.dumps(doc, indent=1) + "\n").encode("utf-8")


def short_digest(obj) -> str:
    """A JSON-able value's fingerprint: 16 hex digits of the SHA-256 of its canonical JSON (sorted keys)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def digest_of(data: bytes) -> str:
    """How a document names the exact bytes of another it was made from."""
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


class RunRef(Document):
    """The run a derived document (checks, verdict) belongs to: ``results.json``'s run id and fingerprints."""

    id: str | None
    config: str  # the run's config digest (results.fingerprint.config)
    suite: str  # the run's suite fingerprint


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


__all__ = ["PHASES_SCHEMA", "Document", "PhasesDoc", "RunRef", "digest_of", "omitted_when_none", "serialized"]
