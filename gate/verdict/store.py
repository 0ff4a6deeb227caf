"""Where baselines live and how a run's baseline is written: ``baselines/<name>/<hardware key>.json`` with its
history beside it (:class:`BaselineStore`), the one the judge is given (:func:`lookup`, :class:`Stored`, named as
the repository names it); the refresh of it from a checked run is :func:`gate.verdict.refresh.write_baseline`
(atomic, read back)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from gate.errors import BaselineError, Problem
from gate.inputs.config import repository_root
from gate.io.files import atomic_write_json
from gate.verdict.baseline import Baseline, load_baseline


def baselines_root(flag: str | None, config_path: str | None = None, loaded=None) -> Path:
    """The one rule every command uses for where baselines live: the command's own flag, else ``baseline.dir``
    of the config (given, or ``--config``), else ``./baselines``."""
    if flag:
        return Path(flag)
    if loaded is None and config_path:
        from gate.inputs.config import load_config

        loaded = load_config(config_path)
    if loaded is not None:
        return loaded.resolve_path(loaded.config.baseline.dir)
    return Path("baselines")


class BaselineStore:
    """``<root>/<name>/<hardware key>.json``, with history beside it."""

    def __init__(self, root: str | Path, name: str, keep: int = 20):
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise BaselineError(Problem("baseline", f"invalid baseline name {name!r}",
                                        hint="use 1-64 characters from [A-Za-z0-9_.-]"))
        self.root = Path(root)
        self.name = name
        self.keep = keep

    @property
    def dir(self) -> Path:
        return self.root / self.name

    def path_for(self, hardware_key: str) -> Path:
        return self.dir / f"{hardware_key}.json"

    def available(self) -> list[Path]:
        return sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []

    def find(self, hardware_key: str) -> Path | None:
        """This hardware key's baseline, or None.  Never another key's: which one would be chance (file times
        after a checkout are arbitrary); :meth:`others` names them instead."""
        exact = self.path_for(hardware_key)
        return exact if exact.is_file() else None

    def others(self, hardware_key: str) -> list[str]:
        """The hardware keys that do have a baseline of this name, besides ``hardware_key``."""
        return [p.stem for p in self.available() if p.stem != hardware_key]

    def write(self, baseline: Baseline) -> Path:
        """Atomically replace this hardware's baseline; the previous one goes to history first."""
        target = self.path_for(baseline.hardware_key)
        if target.is_file():
            previous = target.read_text(encoding="utf-8")
            try:
                stamp = json.loads(previous).get("created_utc", "unknown")
            except ValueError:
                stamp = "unreadable"
            hist = self.history_dir(baseline.hardware_key)
            from gate.io.files import atomic_write_text

            atomic_write_text(hist / f"{re.sub(r'[^0-9A-Za-z]', '', stamp)}.json", previous)
            for old in sorted(hist.glob("*.json"))[: max(0, len(list(hist.glob("*.json"))) - self.keep)]:
                old.unlink(missing_ok=True)
        atomic_write_json(target, baseline)
        return target

    def history_dir(self, hardware_key: str) -> Path:
        return self.dir / "history" / hardware_key

    def history(self, hardware_key: str | None = None) -> list[Baseline]:
        """Every stored baseline of this name (history and current), oldest first."""
        paths = []
        keys = [hardware_key] if hardware_key else sorted({p.stem for p in self.available()}
                                                           | {d.name for d in (self.dir / "history").glob("*")
                                                              if d.is_dir()})
        for key in keys:
            paths += sorted(self.history_dir(key).glob("*.json"))
            if self.path_for(key).is_file():
                paths.append(self.path_for(key))
        docs = [load_baseline(p) for p in paths]
        return sorted(docs, key=lambda b: (b.hardware_key, b.created_utc))


@dataclass(frozen=True)
class Stored:
    """What the judge is given of the stored side: the baseline for the run's hardware key (None: there is none),
    where it is or would be (as the repository names it: :func:`shown_path`), whether it was measured on this
    hardware, the keys that do have one, and the name."""

    baseline: Baseline | None
    path: str
    name: str
    same_hardware: bool = True
    others: tuple[str, ...] = ()


def is_baseline_file(name: str) -> bool:
    """``--baseline`` names a file (a path) rather than a baseline looked up by name."""
    return name.endswith(".json") or Path(name).is_file()


def lookup(root: Path, name: str, hardware_key: str, given: str | None = None, keep: int = 20) -> Stored:
    """The stored baseline a run is judged against: ``given`` when it is a file (``--baseline PATH``), else the one
    named ``given or name`` for this hardware key only (never another key's: which one would be chance; they are
    named instead).  Another k or suite is no reason to refuse it (:class:`gate.verdict.baseline.Comparability`);
    only an unusable baseline is (exit 3: :func:`load_baseline`)."""
    if given and is_baseline_file(given):
        baseline = load_baseline(given)
        return Stored(baseline, shown_path(Path(given)), name, baseline.hardware_key == hardware_key)
    store = BaselineStore(root, given or name, keep)
    path = store.find(hardware_key)
    if path is None:
        return Stored(None, shown_path(store.path_for(hardware_key)), name, True, tuple(store.others(hardware_key)))
    return Stored(load_baseline(path), shown_path(path), name)


def shown_path(path: Path) -> str:
    """A baseline file as a reader of the PR knows it, never a runner's absolute path: relative to the repository
    that holds it (the nearest folder above with ``.git``), else from its baselines folder on
    (``…/baselines/<name>/<hardware>.json``: not a path a link can be made of)."""
    path = Path(path).absolute()
    root = repository_root(path.parent)
    if root is not None and path.is_relative_to(root.absolute()):
        return path.relative_to(root.absolute()).as_posix()
    return "…/" + Path(*path.parts[-3:]).as_posix()


__all__ = ["BaselineStore", "Stored", "baselines_root", "is_baseline_file", "lookup", "shown_path"]
