"""Reading the files a user gives and writing the files the gate writes.

* Reads are size-capped, never block on a FIFO (opened non-blocking, checked on the descriptor), decode strict
  UTF-8, and parse JSON without NaN (unless asked): every failure is the caller's error class, naming the file.
* Writes are atomic (temp file in the same folder, fsync, rename, folder fsync): a reader sees the old file or the
  new one, never half of one, and every failure names the file (never the temp file).
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
from collections.abc import Iterable  # noqa: F401
from pathlib import Path

from pydantic import BaseModel

from gate.errors import Problem, SpecguardError
from gate.io.documents import serialized

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


def loads_json(text: str, **kwargs):
    """``json.loads`` with the garbage collector paused.  A hostile document nested 100,000 deep drives the C
    decoder to the interpreter's recursion limit before it raises RecursionError; a collection there would run other
    objects' finalizers with no stack left, each failing as 'Exception ignored in ...' (under pytest its hook then
    failed the test that fed such a line).  Nothing is collected during one decode; the collector resumes after."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text, **kwargs)
    finally:
        if was_on:
            gc.enable()


def parse_json(text: str, error: type[SpecguardError], source: str, kind: str, hint: str, line: int | None = None,
               allow_nan: bool = False, not_json: str = "not valid JSON: {msg} at column {col}"):
    """One JSON document; invalid or over-deep JSON (a RecursionError in the parser) is ``error`` (``not_json``
    says what was wrong), and so is a NaN or an infinity unless ``allow_nan`` (the gate's own checks.json
    records an estimate it could not make as NaN)."""
    seen = []

    def constant(name: str) -> float:  # NaN, Infinity, -Infinity: not JSON, and never a measurement
        seen.append(name)
        return float(name)

    try:
        doc = loads_json(text, parse_constant=constant)
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



def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so that readers see the old one or the new one, never half of one (:func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old one or the new one, never half of one.

    Temp file in the same directory, fsync, rename, directory fsync.  The file gets
    the permissions a plain ``open()`` would give (the umask is respected), so an
    artifact upload or a second user on the runner can read it.  Every failure (a full
    disk, a read-only directory, a size limit) names ``path``, never the temp file.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise named_error(exc, path) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)  # replaces a symlink planted at path; never writes through it
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise named_error(exc, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def named_error(exc: OSError, path: Path) -> OSError:
    """The same error, naming the file the gate was writing (a write on an open file names none)."""
    return type(exc)(exc.errno, exc.strerror or str(exc), str(path))


def atomic_write_json(path: Path, obj: BaseModel | dict) -> None:
    atomic_write_text(path, serialized(obj).decode("utf-8"))


