"""Prompt suites: JSONL files with one prompt per line, grouped into slices.

Each line is an object with ``id``, ``slice``, ``prompt`` (a raw string) or ``messages`` (OpenAI chat format,
rendered by the target tokenizer's chat template or ``suite.chat_template``), and an optional ``max_new_tokens``.
A malformed line fails with ``file:line`` and the reason; every bad line is reported at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator

from gate.errors import Problem, SuiteError
from gate.inputs.config import LoadedConfig
from gate.inputs.config_errors import problems_from_validation
from gate.io.files import parse_json, read_input, split_lines


def _unicode(v: str) -> str:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate such as \ud800: no tokenizer can take it
        raise ValueError(f"not valid Unicode text (a lone surrogate at character {exc.start})") from None
    return v


CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_MESSAGES = 256


class _Message(BaseModel):
    """One chat message; ``content`` is text (OpenAI's arrays of content parts carry images and audio, which no
    suite here can judge, and are refused)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal[CHAT_ROLES]  # type: ignore[valid-type]
    content: str

    @field_validator("content", mode="before")
    @classmethod
    def _text(cls, v):
        if isinstance(v, list):
            raise ValueError("content parts (a list) are not supported: give the message's text as one string")
        return v

    @field_validator("content")
    @classmethod
    def _encodable(cls, v: str) -> str:
        return _unicode(v)


class _PromptLine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Annotated[str, Field(min_length=1, max_length=200)]
    slice: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")]
    prompt: str | None = None
    messages: Annotated[list[_Message], Field(min_length=1, max_length=MAX_MESSAGES)] | None = None
    max_new_tokens: Annotated[StrictInt, Field(gt=0, le=4096)] | None = None  # not true, "4" or 4.0

    @field_validator("prompt")
    @classmethod
    def _nonempty(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("expected a non-empty prompt")
        return v

    @field_validator("id", "slice", "prompt")
    @classmethod
    def _encodable(cls, v: str | None) -> str | None:
        return v if v is None else _unicode(v)

    @model_validator(mode="after")
    def _one(self) -> _PromptLine:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either 'prompt' (a string) or 'messages' (a list of {role, content}), not "
                             + ("both" if self.prompt is not None else "neither"))
        if self.messages is not None and not any(m.content.strip() for m in self.messages):
            raise ValueError("expected at least one message with text")
        return self


@dataclass(frozen=True)
class Prompt:
    id: str
    slice: str
    text: str  # the raw prompt; "" for a chat row
    max_new_tokens: int | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content), rendered by the chat template

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages or ()]


@dataclass(frozen=True)
class Suite:
    name: str
    prompts: tuple[Prompt, ...]
    chat_template: str | None = None  # suite.chat_template's text; None: the target tokenizer's own

    @property
    def slices(self) -> list[str]:
        return sorted({p.slice for p in self.prompts})

    @property
    def chat(self) -> bool:
        return any(p.messages is not None for p in self.prompts)

    def fingerprint(self) -> str:
        """The prompts (and, for a chat suite, the template that renders them).  A raw-prompt suite's digest is
        what it was before chat rows existed, so its baselines and caches still match."""
        h = hashlib.sha256()
        for p in self.prompts:
            row = [p.id, p.slice, p.text, p.max_new_tokens]
            h.update(json.dumps(row if p.messages is None else [*row, p.messages]).encode())
        if self.chat and self.chat_template is not None:
            h.update(self.chat_template.encode())
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
        return Suite(self.name, tuple(kept), self.chat_template)


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
        if ("prompt" in obj) == ("messages" in obj):
            both = "prompt" in obj
            problems.append(Problem(name, "give either 'prompt' (a string) or 'messages' (a list of {role, content}), "
                                    "not both" if both else "required field is missing (or give 'messages', a list "
                                    "of {role, content}, instead)", field="messages" if both else "prompt", line=n))
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
        messages = None if row.messages is None else tuple((m.role, m.content) for m in row.messages)
        prompts.append(Prompt(row.id, row.slice, row.prompt or "", row.max_new_tokens, messages))
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
    suite = load_suite(loaded.resolve_path(cfg.path)).select(cfg.slices or None, cfg.max_prompts_per_slice)
    if cfg.chat_template is None:
        return suite
    path = loaded.resolve_path(cfg.chat_template)
    template = read_input(path, SuiteError, "chat template", "set suite.chat_template to a Jinja file")
    return Suite(suite.name, suite.prompts, template)
