"""Prompt suites: JSONL files with one prompt per line, grouped into slices.

Each line is an object with ``id``, ``slice``, ``prompt`` and an optional
``max_new_tokens``.  A malformed line fails with ``file:line`` and the reason;
every bad line is reported at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from gate.errors import Problem, SuiteError
from gate.inputs.config import LoadedConfig, problems_from_validation
from gate.io.files import parse_json, read_input, split_lines


class _PromptLine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Annotated[str, Field(min_length=1, max_length=200)]
    slice: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
    prompt: str
    max_new_tokens: Annotated[StrictInt, Field(gt=0, le=4096)] | None = None  # not true, "4" or 4.0

    @field_validator("prompt")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("expected a non-empty prompt")
        return v

    @field_validator("id", "slice", "prompt")
    @classmethod
    def _encodable(cls, v: str) -> str:
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate such as \ud800: no tokenizer can take it
            raise ValueError(f"not valid Unicode text (a lone surrogate at character {exc.start})") from None
        return v


@dataclass(frozen=True)
class Prompt:
    id: str
    slice: str
    text: str
    max_new_tokens: int | None = None


@dataclass(frozen=True)
class Suite:
    name: str
    prompts: tuple[Prompt, ...]

    @property
    def slices(self) -> list[str]:
        return sorted({p.slice for p in self.prompts})

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for p in self.prompts:
            h.update(json.dumps([p.id, p.slice, p.text, p.max_new_tokens]).encode())
        return h.hexdigest()[:16]

    def select(self, slices: list[str] | None = None, max_per_slice: int | None = None) -> Suite:
        if slices:
            unknown = sorted(set(slices) - set(self.slices))
            if unknown:
                raise SuiteError(Problem(self.name, f"unknown slice(s) {unknown}",
                                         field="suite.slices", hint=f"the suite has {self.slices}"))
        kept, seen = [], {}
        for p in self.prompts:
            if slices and p.slice not in slices:
                continue
            seen[p.slice] = seen.get(p.slice, 0) + 1
            if max_per_slice is None or seen[p.slice] <= max_per_slice:
                kept.append(p)
        return Suite(self.name, tuple(kept))


def parse_suite(text: str, name: str) -> Suite:
    problems: list[Problem] = []
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}
    for n, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line, SuiteError, name, "the line", "each line must be one JSON object", line=n)
        except SuiteError as exc:
            problems += exc.problems
            continue
        if not isinstance(obj, dict):
            problems.append(Problem(name, f"expected a JSON object, got {type(obj).__name__}", line=n))
            continue
        try:
            row = _PromptLine.model_validate(obj)
        except ValidationError as exc:
            problems += problems_from_validation(exc, _PromptLine, name, line=n)
            continue
        if row.id in first_line:
            problems.append(Problem(name, f"duplicate id {row.id!r} (first on line {first_line[row.id]})",
                                    field="id", line=n, hint="ids must be unique within a suite"))
            continue
        first_line[row.id] = n
        prompts.append(Prompt(row.id, row.slice, row.prompt, row.max_new_tokens))
    if not prompts and not problems:
        problems.append(Problem(name, "the suite has no prompts", hint="add one JSON object per line"))
    if problems:
        raise SuiteError(problems)
    return Suite(name, tuple(prompts))


def load_suite(path: str | Path) -> Suite:
    path = Path(path)
    return parse_suite(read_input(path, SuiteError, "suite file", "set suite.path to a JSONL file"), str(path))


def suite_for(loaded: LoadedConfig) -> Suite:
    cfg = loaded.config.suite
    return load_suite(loaded.resolve_path(cfg.path)).select(cfg.slices or None, cfg.max_prompts_per_slice)
