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


# The exit codes (the table is in gate/cli.py's docstring, the README and `--help`).
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_BASELINE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

MAX_INPUT_BYTES = 1 << 30  # no input the gate reads (results of a large run included) comes near this


def read_bytes(path, error: type[SpecguardError], kind: str, hint: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """A user file's bytes; a FIFO, a device or a directory, or a file over ``limit``, is ``error``.

    Opened without blocking and checked on the open descriptor, so a FIFO planted where a file belongs
    cannot hang the gate, and a file swapped after the check is still the one that was checked.
    """
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise error(Problem(str(path), f"{kind} not found", hint=hint)) from None
    except OSError as exc:
        raise error(Problem(str(path), f"cannot read {kind}: {exc.strerror or exc}", hint=hint)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
            raise error(Problem(str(path), f"the {kind} is {what}", hint=hint))
        if st.st_size > limit:
            raise error(Problem(str(path), f"the {kind} is {st.st_size:,} bytes, over the limit of {limit:,}",
                                hint=hint))
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise error(Problem(str(path), f"the {kind} grew over the limit of {limit:,} bytes while read",
                                hint=hint))
        return data
    except OSError as exc:
        raise error(Problem(str(path), f"cannot read {kind}: {exc.strerror or exc}", hint=hint)) from None
    finally:
        os.close(fd)


def read_input(path, error: type[SpecguardError], kind: str, hint: str, limit: int = MAX_INPUT_BYTES) -> str:
    """A user file's text, or ``error`` naming the file and saying what to do."""
    data = read_bytes(path, error, kind, hint, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(Problem(str(path), f"cannot read {kind}: not UTF-8 text ({exc.reason} at byte {exc.start})",
                            hint=hint)) from None


def parse_json(text: str, error: type[SpecguardError], source: str, kind: str, hint: str, line: int | None = None,
               allow_nan: bool = False, not_json: str = "not valid JSON: {msg} at column {col}"):
    """One JSON document; invalid or over-deep JSON (a RecursionError in the parser) is ``error`` (``not_json``
    says what was wrong), and so is a NaN or an infinity unless ``allow_nan`` (the gate's own checks.json
    records an estimate it could not make as NaN)."""
    import json

    seen = []

    def constant(name: str) -> float:  # NaN, Infinity, -Infinity: not JSON, and never a measurement
        seen.append(name)
        return float(name)

    try:
        doc = json.loads(text, parse_constant=constant)
        if seen and not allow_nan:
            raise error(Problem(source, f"{seen[0]} is not a number JSON allows (a non-finite value)",
                                field=_path_of_nan(doc), line=line, hint=hint))
        return doc
    except json.JSONDecodeError as exc:
        raise error(Problem(source, not_json.format(msg=exc.msg, col=exc.colno),
                            line=line if line is not None else exc.lineno, hint=hint)) from None
    except RecursionError:
        raise error(Problem(source, f"{kind} is nested too deeply to read", line=line, hint=hint)) from None


def _path_of_nan(doc, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinity in a parsed document."""
    stack = [(doc, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and (node != node or node in (float("inf"), float("-inf"))):
            return where or "(top level)"
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node))))
    return None


def split_lines(text: str) -> list[str]:
    """JSON Lines: split on newline only. ``str.splitlines`` also splits on U+2028, U+2029, \\x0b, \\x0c and
    \\x85, which a JSON string may hold unescaped."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The closest known spelling of ``word``, for 'did you mean' hints."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return found[0] if found else None
