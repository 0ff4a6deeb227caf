"""The one base class of every versioned document the gate writes and reads (results, checks, verdict, baseline).

Unknown fields are refused (a typo in a hand-edited baseline is an error, not a silently ignored key), and fields
with a JSON alias (``schema``) can be set by name too.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


__all__ = ["Document"]
