"""A minimal case as a folder a maintainer can act on without specguard's analysis: ``case.json`` (the prompts,
settings, expected and actual tokens, the evidence), ``replay.py`` (the engine alone: prints "reproduced" or "not
reproduced") and ``REPORT.md`` (what an upstream issue needs: versions, the trigger in one sentence, expected and
actual, the shrink log).  The folder's index, ``repro/index.json``, is what the comment links."""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from gate.io.files import atomic_write_text

CASE_SCHEMA = "specguard.repro/1"
INDEX = "index.json"
REPLAY = Path(__file__).with_name("replay.py")


@dataclass
class Written:
    """One failing check's folder, as the index and the comment name it."""

    check: str
    engine: str
    folder: str  # relative to the run directory: repro/<check>-<n>
    reproduced: bool
    trigger: str  # one sentence
    batch_size: int | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"check": self.check, "engine": self.engine, "folder": self.folder, "reproduced": self.reproduced,
                "trigger": self.trigger, "batch_size": self.batch_size, **self.extra}


def write_folder(folder: Path, case: dict, report: str, replay: bool = True) -> None:
    """``case.json``, ``REPORT.md`` and (for a case that reproduced) ``replay.py``, each written atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "case.json", json.dumps(case, indent=1) + "\n")
    atomic_write_text(folder / "REPORT.md", report)
    if replay:
        shutil.copyfile(REPLAY, folder / "replay.py")
        (folder / "replay.py").chmod(0o755)


def replayable(described: dict) -> bool:
    """Whether the case folder's replay.py can rebuild this engine alone (its type said how)."""
    return described.get("replay") is not None


def replay_section(described: dict, what: str, bodies: list[dict] | None = None) -> list[str]:
    """REPORT.md's replay section: the commands the engine's type gives (and a server's requests as curl lines),
    or why there is no replay.py in the folder."""
    from gate.engines.registry import engine_type, engine_types

    kind = described.get("type")
    if not replayable(described):
        return ["## Replay", "", f"No replay: the engine's type (`{kind}`) does not say how to rebuild it alone, so "
                "this folder has no replay.py; case.json holds the prompts, the settings and the tokens.", ""]
    extra = engine_type(kind).report_lines(described) if kind in engine_types() else []
    lines = ["## Replay", "", what, "", "```sh",
             "python replay.py          # 'reproduced' (exit 1) or 'not reproduced' (exit 0)", *extra, "```", ""]
    if described["replay"] == "requests" and bodies:
        lines += ["The same requests with curl (the rows in flight together):", "", "```sh",
                  *curl_lines(described["url"], described["route"], bodies), "```", ""]
    return lines


def no_case(folder: Path, rel: str, check: str, engine: str, bs: int, why: str, say) -> Written:
    """A failing check with no minimal case: the folder says why (no replay.py: nothing to replay)."""
    write_folder(folder, {"schema": CASE_SCHEMA, "check": check, "engine": {"label": engine}, "reproduced": False,
                          "why": why}, f"# {check} of `{engine}` at batch size {bs}: no minimal case\n\n{why}.\n",
                 replay=False)
    say(f"repro: {rel}: no minimal case: {why}")
    return Written(check, engine, rel, False, f"no minimal case: {why}", bs)


def write_index(repro_dir: Path, written: list[Written], budget_s: float, seconds: float, run_id: str | None
                ) -> None:
    """``repro/index.json``: every case of the run (``run``: its id, so that a comment never lists another run's)."""
    repro_dir.mkdir(parents=True, exist_ok=True)
    doc = {"schema": CASE_SCHEMA, "run": run_id, "budget_s": budget_s, "seconds": round(seconds, 1),
           "cases": [w.to_dict() for w in written]}
    atomic_write_text(repro_dir / INDEX, json.dumps(doc, indent=1) + "\n")


def read_index(repro_dir: Path) -> dict | None:
    """The index a run's repro step wrote (None: none, or one that cannot be read: the comment then says nothing)."""
    try:
        doc = json.loads((repro_dir / INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == CASE_SCHEMA else None


def curl_lines(url: str, route: str, bodies: list[dict]) -> list[str]:
    """The requests of an http case as ``curl`` commands (the rows sent together: one per line, each in the
    background, then ``wait``)."""
    return [f"curl -sN {shlex.quote(url.rstrip('/') + route)} -H 'Content-Type: application/json' "
            f"-d {shlex.quote(json.dumps(b))} &" for b in bodies] + ["wait"]


def tokens_line(ids: list[int], decode) -> str:
    text = decode(ids) if decode else ""
    return f"`{ids}`" + (f" ({json.dumps(text)})" if text else "")


__all__ = ["CASE_SCHEMA", "INDEX", "REPLAY", "Written", "curl_lines", "no_case", "read_index", "replay_section",
           "replayable", "tokens_line", "write_folder", "write_index"]
