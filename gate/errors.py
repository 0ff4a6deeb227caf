"""User-facing errors.

Every error the CLI prints names where the problem is (file, line, dotted field
path), what was wrong, and what to do about it.  Programming errors stay plain
exceptions with tracebacks.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Problem:
    """One thing wrong with one input."""

    source: str  # file name, or a logical source such as "engine 'inhouse'"
    message: str  # what is wrong and what was expected
    field: str | None = None  # dotted field path, e.g. "models.target.dtype"
    line: int | None = None
    hint: str | None = None  # what to do about it

    def __str__(self) -> str:
        where = self.source + (f":{self.line}" if self.line else "")
        text = f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class Interrupted(BaseException):
    """The run was asked to stop (SIGTERM; SIGINT arrives as KeyboardInterrupt).

    Here, not in :mod:`gate.execute`, so the CLI can catch it without importing torch."""


class SpecguardError(Exception):
    """An error caused by the user's input or environment, with every problem found."""

    exit_code = 2

    def __init__(self, problems: Problem | str | Iterable[Problem]):
        if isinstance(problems, (Problem, str)):
            problems = [problems]
        self.problems = [p if isinstance(p, Problem) else Problem("specguard", p) for p in problems]
        super().__init__("\n".join(str(p) for p in self.problems))


class ConfigError(SpecguardError):
    """The config file is invalid."""


class SuiteError(SpecguardError):
    """A prompt suite file is invalid."""


class ModelError(SpecguardError):
    """A model could not be loaded, or the pair does not fit together."""


class EngineError(SpecguardError):
    """An engine was misconfigured or returned something malformed."""


def read_input(path, error: type[SpecguardError], kind: str, hint: str) -> str:
    """A user file's text, or ``error`` naming the file and saying what to do."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(Problem(str(path), f"{kind} not found", hint=hint)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(Problem(str(path), f"cannot read {kind}: {exc}")) from None


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The closest known spelling of ``word``, for 'did you mean' hints."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return found[0] if found else None
