r"""Pydantic's validation errors as the gate's :class:`~gate.errors.Problem`\ s: the file, the line, the dotted field
path, what was expected and what was found, and for an unknown key the closest known one."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Union

from pydantic import BaseModel, ValidationError

from gate.errors import Problem, closest


def dotted(loc: typing.Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _unwrap(annotation: Any) -> list[Any]:
    """The model/list/dict types that an annotation can hold."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _unwrap(a)]
    return [annotation]


def _known_keys(model: type[BaseModel], loc: typing.Sequence[Any], raw: Any = None) -> list[str]:
    """Field names of the model that sits at ``loc`` inside ``model``.  ``raw``: the document validated, for a model
    that picks the class of an entry from the entry itself (``keys_model``: an engine's section, by its type)."""

    def resolved(c: Any, node: Any) -> Any:
        pick = getattr(c, "keys_model", None) if isinstance(c, type) else None
        return pick(node) if pick is not None else c

    candidates: list[Any] = [resolved(model, raw)]
    for part in loc:
        raw = raw[part] if isinstance(raw, (dict, list)) and _has(raw, part) else None
        nxt: list[Any] = []
        for c in candidates:
            if isinstance(c, type) and issubclass(c, BaseModel) and isinstance(part, str):
                f = c.model_fields.get(part)
                if f is not None:
                    nxt += _unwrap(f.annotation)
            elif typing.get_origin(c) is list and isinstance(part, int):
                nxt += _unwrap(typing.get_args(c)[0])
        candidates = [resolved(c, raw) for c in nxt]
    for c in candidates:
        if isinstance(c, type) and issubclass(c, BaseModel):
            return list(c.model_fields)
    return []


def _has(node: dict | list, part: Any) -> bool:
    return part in node if isinstance(node, dict) else isinstance(part, int) and 0 <= part < len(node)


def problems_from_validation(err: ValidationError, model: type[BaseModel], source: str,
                             lines: dict[tuple, int] | None = None, line: int | None = None, raw: Any = None
                             ) -> list[Problem]:
    """Turn pydantic's errors into Problems with dotted paths, lines and suggestions (``raw``: the document
    validated, which names the class of an entry that its own content picks)."""
    out = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        kind, hint = e["type"], None
        if kind == "extra_forbidden":
            known = _known_keys(model, loc[:-1], raw)
            guess = closest(str(loc[-1]), known)
            msg = "unknown key"
            hint = f"did you mean '{guess}'?" if guess else f"known keys: {', '.join(known)}"
        elif kind == "missing":
            msg = "required field is missing"
        else:
            msg = e["msg"].removeprefix("Value error, ")
            if "got " not in msg and kind not in ("value_error", "assertion_error"):
                msg += f", got {e.get('input')!r}"
        at = line
        if lines is not None:
            for n in range(len(loc), -1, -1):  # nearest enclosing key that has a line
                if loc[:n] in lines:
                    at = lines[loc[:n]]
                    break
        out.append(Problem(source, msg, field=dotted(loc), line=at, hint=hint))
    return out


__all__ = ["dotted", "problems_from_validation"]
