"""The results of ``specguard run``: a versioned JSON document, written incrementally.

While a run is in progress every finished batch execution is appended to
``records.jsonl`` (flushed and fsynced), and ``results.json`` is rewritten
atomically at the end, or when the run is interrupted, with ``status`` saying
which.  A crash mid-run therefore loses at most the batch in flight, and
``specguard run --resume`` picks up where it stopped.

Layout of ``results.json`` (schema ``specguard.results/1``)::

    {"schema": "specguard.results/1", "status": "complete" | "interrupted" | "failed",
     "stopped_at": null | {"phase", "engine", "batch_size", "batch", "repeat", "reason"},
     "fingerprint": {...}, "settings": {...},
     "prompts": [{"id", "slice", "bucket", "prompt_ids", "max_new_tokens"}],
     "executions": [{"engine", "mode", "phase", "batch_size", "batch", "repeat", "slice", "bucket",
                     "prompts", "wall_s", "realign_s", ..., "sequences": [...]}],
     "skipped": [{"engine", "batch_size", "mode", "reason"}],
     "cache": {"reused": [...]}}
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from gate.errors import Problem, SpecguardError

SCHEMA = "specguard.results/1"
RECORDS = "records.jsonl"
RESULTS = "results.json"


class ResultsError(SpecguardError):
    """A results file is missing, corrupt or from another schema version."""


def atomic_write_json(path: Path, obj) -> None:
    """Write JSON so that readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=1, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RecordLog:
    """Append-only JSONL log of a run: a header line, then one line per finished execution."""

    def __init__(self, path: Path):
        self.path = path
        self._fh = None

    def start(self, header: dict, keep: list[dict] | None = None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("w", encoding="utf-8")
        self._write({"kind": "header", **header})
        for rec in keep or []:
            self._write(rec)

    def append(self, record: dict) -> None:
        self._write(record)

    def _write(self, record: dict) -> None:
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None


def read_records(path: Path) -> tuple[dict | None, list[dict]]:
    """The header and the complete records of a log; a torn last line (a crash mid-write) is dropped."""
    header, records = None, []
    if not path.exists():
        return None, []
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, start=1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):
                break  # torn write of the batch in flight
            raise ResultsError(Problem(str(path), "corrupt record (not JSON)", line=n,
                                       hint="delete the output directory and run again")) from None
        if rec.get("kind") == "header":
            header = rec
        else:
            records.append(rec)
    return header, records


def load_results(path: str | Path) -> dict:
    """Read results.json (or a directory holding it) and check its schema."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(Problem(str(path), "results file not found",
                                   hint="run `specguard run CONFIG` first")) from None
    except json.JSONDecodeError as exc:
        raise ResultsError(Problem(str(path), f"not valid JSON: {exc.msg}", line=exc.lineno,
                                   hint="the file is corrupt; rerun, or rebuild it from records.jsonl "
                                        "with `specguard run --resume`")) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ResultsError(Problem(str(path), f"expected schema {SCHEMA!r}, got {found!r}", field="schema",
                                   hint="produce it with this version of specguard"))
    for key in ("prompts", "executions", "fingerprint", "settings"):
        if key not in doc:
            raise ResultsError(Problem(str(path), "required field is missing", field=key))
    return doc
