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
    unions: dict[tuple, int] = {}  # a field's place in ``out`` where its union's members each refused the value
    for e in err.errors(include_url=False):
        loc, tags = _without_union_tags(tuple(e["loc"]), raw, e["type"])
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
        if tags and loc in unions:  # one problem per field: "expected a boolean or 'draft', got ..."
            first = out[unions[loc]]
            first.message = first.message.removesuffix(f", got {e.get('input')!r}") + " or " + \
                msg.removeprefix("Input should be ")
            continue
        if tags:
            unions[loc] = len(out)
        out.append(Problem(source, msg, field=dotted(loc), line=at, hint=hint))
    return out


def _without_union_tags(loc: tuple, raw: Any, kind: str) -> tuple[tuple, bool]:
    """``loc`` without pydantic's names of union members (``local_weights.bool``, ``.literal['draft']``), which are
    no key of the document: each part is kept where the document ``raw`` has it (and the last one of a missing or
    unknown key); whether any was dropped."""
    if raw is None:
        return loc, False
    kept, node = [], raw
    for i, part in enumerate(loc):
        if isinstance(node, (dict, list)) and _has(node, part):
            kept.append(part)
            node = node[part]
        elif i == len(loc) - 1 and kind in ("missing", "extra_forbidden"):
            kept.append(part)
        elif isinstance(part, str) and not isinstance(node, dict):
            continue  # a union member's name under a value that is no mapping
        elif (isinstance(part, str) and any(c in part for c in "[-")) or part in _TAGS:
            continue
        else:
            kept.append(part)
            node = None
    return tuple(kept), len(kept) < len(loc)


# pydantic's names of a union's plain members, as they appear in an error's location
_TAGS = {"bool", "int", "float", "str", "list", "dict", "none", "constrained-int", "constrained-float",
         "constrained-str", "constrained-list"}


__all__ = ["dotted", "problems_from_validation"]
