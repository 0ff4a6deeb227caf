"""A run's output directory, and the one reader of the gate's versioned JSON documents.

Each stage reads its own documents through :func:`load_document` with its own :class:`DocumentKind`
(:func:`gate.run.results.load_results`, :func:`gate.checks.doc.load_checks`,
:func:`gate.verdict.baseline.load_baseline`).

:class:`RunDir` names every file a run writes, clears the stale ones of an earlier run, and writes atomically
(a reader sees the old file or the new one, never half of one).  :func:`load_document` reads results, checks
and baselines alike: read (size-capped, no FIFO), parse (NaN refused unless the kind allows it), screen, check
the schema (migrating an older one), validate; every failure is the kind's own error, naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.errors import Problem, SpecguardError
from gate.io.documents import digest_of
from gate.io.files import MAX_INPUT_BYTES, parse_json, read_input

RESULTS = "results.json"  # the run (`run`, `merge`)
RECORDS = "records.jsonl"  # the run's append-only log, what `--resume` reads
PHASES = "phases.json"  # where the command's time went (`run`, `gate`)
CHECKS = "checks.json"  # the checks' findings and verdict lines (`check`)
CHECKS_MD = "checks.md"  # the checks' full text (`check`)
SUMMARY = "summary.md"  # the page with the checks' full text: the step summary (`compare`)
PNG = "speedup.png"
COMMENT = "comment.md"
VERDICT = "verdict.json"  # written last: its presence means the verdicts were written

# What the checks and the comparison write, in the order they are written; the verdict files come last.
JUDGED = (CHECKS, CHECKS_MD, SUMMARY, PNG, COMMENT, VERDICT)
# What `compare` replaces (the checks' own files stay).
COMPARED = (SUMMARY, PNG, COMMENT, VERDICT)
# What a new run (not a resume) clears besides: the previous run's results must never be judged as this one's.
RUN = (RESULTS, PHASES)


@dataclass(frozen=True)
class DocumentKind:
    """One kind of versioned JSON document: its model, its schema (and how an older one is brought up to date),
    and what the gate says when a file of this kind cannot be used."""

    name: str  # "results file": "results file not found", "the results file is nested too deeply to read"
    error: type[SpecguardError]
    model: Callable[[], Any]  # the pydantic model (imported when first read)
    hint: str  # what to do, when nothing more specific is said below
    schema: str | None = None
    older: tuple[str, ...] = ()
    migrate: Callable[[dict], dict] | None = None
    read_hint: str | None = None  # missing or unreadable
    json_hint: str | None = None  # not JSON
    schema_hint: str | None = None  # not an object, or another schema
    wrong_schema: str = "expected schema {want!r}, got {found!r}"
    not_json: str = "not valid JSON: {msg} at column {col}"
    invalid: str = "{msg}"  # a validation error
    allow_nan: bool = False
    limit: int = MAX_INPUT_BYTES
    screen: Callable[[Any, str], None] | None = None  # a check of the parsed document before its schema is read


def load_document(path: str | Path, kind: DocumentKind, raw: bool = False):
    """The validated model of a document (``raw``: the validated document as parsed, a dict)."""
    from pydantic import ValidationError

    path = Path(path)
    source = str(path)
    text = read_input(path, kind.error, kind.name, kind.read_hint or kind.hint, limit=kind.limit)
    doc = parse_json(text, kind.error, source, f"the {kind.name}", kind.json_hint or kind.hint,
                     allow_nan=kind.allow_nan, not_json=kind.not_json)
    if not isinstance(doc, dict):
        raise kind.error(Problem(source, f"expected a JSON object, got {type(doc).__name__}",
                                 hint=kind.schema_hint or kind.hint))
    if kind.screen is not None:
        kind.screen(doc, source)
    digest = digest_of(text.encode("utf-8"))  # the file's bytes (read as strict UTF-8, so they encode back)
    if kind.schema is not None:
        found = doc.get("schema")
        if found in kind.older and kind.migrate is not None:
            doc = kind.migrate(doc)
        elif found != kind.schema:
            raise kind.error(Problem(source, kind.wrong_schema.format(want=kind.schema, found=found), field="schema",
                                     hint=kind.schema_hint or kind.hint))
    try:
        model = kind.model().model_validate(doc)
        model._digest = digest
    except RecursionError:
        raise kind.error(Problem(source, f"the {kind.name} is nested too deeply to read", hint=kind.hint)) from None
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        msg = "required field is missing" if e["type"] == "missing" else e["msg"].removeprefix("Value error, ")
        where = ".".join(str(x) for x in e["loc"])
        named = re.fullmatch(r"([\w.\[\]]+): (.*)", msg, re.S) if not where else None
        if named:  # a rule over the whole document names its own field
            where, msg = named.groups()
        raise kind.error(Problem(source, kind.invalid.format(msg=msg), field=where or "(top level)",
                                 hint=kind.hint)) from None
    return doc if raw else model


class RunDir:
    """The output directory of one run: where each file goes, what a stage clears before it writes, and the
    atomic writes themselves."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __str__(self) -> str:
        return str(self.path)

    def clear(self, names: tuple[str, ...] = JUDGED) -> None:
        """A run's outputs are a set: stale ones from an earlier run must not sit beside new ones.

        Called only once the inputs validated (and, for a run, every launched server answers), so a run refused
        for bad input leaves the earlier outputs as they were; a symlink planted under an output's name is
        removed, not followed.
        """
        for name in names:
            try:
                (self.path / name).unlink(missing_ok=True)
            except IsADirectoryError:
                raise SpecguardError(Problem(str(self.path / name), "a directory sits where the gate writes an "
                                             "output file", hint="remove it, or pass another --out")) from None

    def write_json(self, name: str, obj) -> Path:
        from gate.io.files import atomic_write_json

        atomic_write_json(self.path / name, obj)
        return self.path / name

    def write_text(self, name: str, text: str) -> Path:
        from gate.io.files import atomic_write_text

        atomic_write_text(self.path / name, text)
        return self.path / name
