"""The config's field types: a strict model base and numbers with stated ranges, shared by every section."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
# Every number has a stated range: NaN and infinities are refused (allow_inf_nan), and so is an integer beyond
# any real batch size, token budget or count, which would only hang the planner.
MAX_BATCH_SIZE = 4096
MAX_COUNT = 1 << 20
MAX_SECONDS = 7 * 86400.0
PositiveInt = Annotated[StrictInt, Field(gt=0, le=MAX_COUNT)]
BatchSize = Annotated[StrictInt, Field(gt=0, le=MAX_BATCH_SIZE)]
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


def _nonblank(v: str) -> str:
    if not v.strip():
        raise ValueError(f"expected a non-empty string, got {v!r}")
    return v


def _url_path(v: str) -> str:
    if not v.startswith("/"):
        raise ValueError(f"expected a path on the server starting with '/' (it follows the url), got {v!r}")
    return v


# A name, path or folder: an empty one would silently mean the config's own folder, the server's root, no name.
Text = Annotated[str, AfterValidator(_nonblank)]
UrlPath = Annotated[str, AfterValidator(_url_path)]  # a path the gate appends to a server's url


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

