"""Is there a passing verdict for this run?  The one question a CI step asks after the gate exits.

    python -m gate.verdict.file RUN_DIR [--run-id ID]

prints one word on stdout and exits:

======= ==== ====================================================================================
word    exit meaning
======= ==== ====================================================================================
pass    0    ``verdict.json`` belongs to the run in RUN_DIR and passed
neutral 0    the same, with no baseline to compare with yet, or speed a noisy run could not judge
fail    1    the verdict belongs to the run and failed
error   2    no verdict, an unreadable one, or one that belongs to another run (the reason on stderr)
======= ==== ====================================================================================

A verdict belongs to the run when its ``run`` section (id, config digest, suite fingerprint) equals
``results.json``'s ``run_id`` and fingerprints in the same directory, its ``results_digest`` and
``checks_digest`` are the sha256 of the ``results.json`` and ``checks.json`` there (the exact documents it
was judged from), and, with ``--run-id``, that id too.  An exit code alone is never proof: a process that
dies with 0 leaves no such file.

Standard library only: it runs before (or without) the gate's dependencies.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

PASSING = ("pass", "neutral")
MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class Readback:
    outcome: str  # pass, neutral, fail or error
    reason: str
    run_id: str | None = None

    @property
    def passed(self) -> bool:
        return self.outcome in PASSING

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else (1 if self.outcome == "fail" else 2)


def _bytes(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            raise ValueError("not a regular file of a sane size")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(MAX_BYTES + 1)
    finally:
        os.close(fd)


def _read(path: Path) -> object:
    return json.loads(_bytes(path).decode("utf-8"))


def digest_of(data: bytes) -> str:
    """As :func:`gate.io.documents.digest_of` (this module imports nothing of the gate)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def expected_run(results: object) -> dict | None:
    """The run section a verdict of these results must carry (None when results.json names no run)."""
    fingerprint = results.get("fingerprint") if isinstance(results, dict) else None
    if not isinstance(fingerprint, dict) or not isinstance(fingerprint.get("suite"), dict):
        return None
    return {"id": results.get("run_id"), "config": fingerprint.get("config"),
            "suite": fingerprint["suite"].get("fingerprint")}


def read_verdict(path: Path, run: dict, run_id: str | None = None, digests: dict | None = None) -> Readback:
    """What ``verdict.json`` at ``path`` says, if it belongs to ``run`` (see :func:`expected_run`) and, with
    ``digests`` (``results_digest``, ``checks_digest``), was judged from exactly those documents."""
    try:
        verdict = _read(path)
    except FileNotFoundError:
        return Readback("error", f"{path}: no verdict was written")
    except (OSError, ValueError, RecursionError) as exc:
        return Readback("error", f"{path}: unreadable ({exc})")
    if not isinstance(verdict, dict) or not isinstance(verdict.get("run"), dict):
        return Readback("error", f"{path}: names no run (written by an older specguard?)")
    theirs = {k: verdict["run"].get(k) for k in run}
    if theirs != run:
        return Readback("error", f"{path} belongs to another run ({theirs}) than results.json ({run})",
                        theirs.get("id"))
    for name, want in (digests or {}).items():
        if verdict.get(name) != want:
            what = name.removesuffix("_digest") + ".json"
            return Readback("error", f"{path} was judged from another {what} ({_short(verdict.get(name))}) than "
                                     f"the one beside it ({_short(want)})", run["id"])
    if run_id is not None and run["id"] != run_id:
        return Readback("error", f"{path}: the run there is {run['id']!r}, not {run_id!r}", run["id"])
    outcome = verdict.get("outcome")
    if outcome not in ("pass", "neutral", "fail"):
        return Readback("error", f"{path}: unknown outcome {outcome!r}", run["id"])
    if outcome in PASSING and verdict.get("exit_code") != 0:
        return Readback("error", f"{path}: outcome {outcome!r} with exit code {verdict.get('exit_code')!r}",
                        run["id"])
    return Readback(outcome, f"{path}: {outcome} ({verdict.get('headline', '')})"[:500], run["id"])


def _short(digest) -> str:
    return str(digest).removeprefix("sha256:")[:12] if digest else "none named"


def check(run_dir: str | Path, run_id: str | None = None) -> Readback:
    """Read back ``verdict.json``, ``results.json`` and ``checks.json`` of a run directory: is the verdict this
    run's, judged from these very documents, and what does it say?"""
    run_dir = Path(run_dir)
    digests = {}
    for name in ("results.json", "checks.json"):
        try:
            data = _bytes(run_dir / name)
        except FileNotFoundError:
            return Readback("error", f"{run_dir / name}: not there, so no verdict can belong to this run")
        except (OSError, ValueError) as exc:
            return Readback("error", f"{run_dir / name}: unreadable ({exc})")
        digests[name.replace(".json", "_digest")] = digest_of(data)
        if name == "results.json":
            try:
                results = json.loads(data.decode("utf-8"))
            except (ValueError, RecursionError) as exc:
                return Readback("error", f"{run_dir / name}: unreadable ({exc})")
    run = expected_run(results)
    if run is None or not run["id"]:
        return Readback("error", f"{run_dir / 'results.json'}: names no run id (written by an older specguard, "
                                 "or by hand)")
    return read_verdict(run_dir / "verdict.json", run, run_id, digests)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gate.verdict.file", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", metavar="RUN_DIR")
    ap.add_argument("--run-id", help="the id the gate was started with (specguard gate --run-id)")
    args = ap.parse_args(argv)
    got = check(args.run_dir, args.run_id)
    print(got.outcome)
    print(got.reason, file=sys.stderr)
    return got.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
