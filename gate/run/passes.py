"""A baseline's further timing passes: ``specguard run CONFIG --timing-only`` in a process of its own, after the
refresh's run, into ``RUN_DIR/passes/<i>/``.

One run's timing sees its own repeats only; a cell's speedup also moves between runs (another process: memory
layout, allocator state, thread placement).  A refresh that times each cell in ``baseline.timing_passes`` separate
processes lets the baseline carry that spread (:mod:`gate.verdict.noise`).  A pass runs no model outputs, no
sampling and no re-scoring: calibration and the timing phase alone, the same cells, batches and repeats' rules.
Servers the refresh launched stay up and are timed again (the pass launches none of its own).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from gate.errors import Problem, SpecguardError

PASSES_DIR = "passes"
SERVERS_UP = "SPECGUARD_SERVERS_UP"  # set for a pass: the servers its parent launched are up; launch none
# The child imports the installed gate, never a `gate` in the working directory (a model repository's own).
CHILD = "import sys; sys.path.pop(0); from gate.entry import entry; entry()"


def passes_dir(run_dir: Path) -> Path:
    return Path(run_dir) / PASSES_DIR


def clear(run_dir: Path) -> None:
    """A new run's directory holds no pass of an earlier run."""
    shutil.rmtree(passes_dir(run_dir), ignore_errors=True)


def run_passes(config: str, run_dir: Path, count: int, threads: int | None, hardware_key: str | None,
               say: Callable[[str], None]) -> list[Path]:
    """``count`` further timing passes of the run in ``run_dir``, one after the other, each in its own process;
    the directories written.  A pass that fails stops the refresh (exit 2, naming its log)."""
    done = []
    for i in range(1, count + 1):
        out = passes_dir(run_dir) / str(i)
        out.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-c", CHILD, "run", config, "--timing-only", "--out", str(out), "-q"]
        if threads:
            argv += ["--threads", str(threads)]
        if hardware_key:
            argv += ["--hardware-key", hardware_key]
        say(f"timing pass {i + 1} of {count + 1}, in a process of its own (the baseline's between-run spread)")
        log = out / "pass.log"
        with open(log, "wb") as f:
            code = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                  env={**os.environ, SERVERS_UP: "1"}, check=False).returncode
        if code != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise SpecguardError(Problem(str(log), f"timing pass {i + 1} exited {code}: {' / '.join(tail)[:400]}",
                                         hint="fix what it says, or set baseline.timing_passes: 1 (the baseline then "
                                              "uses baseline.between_run_sd alone)"))
        done.append(out)
    return done


def load_passes(run_dir: Path, main, say: Callable[[str], None] = lambda m: None) -> list:
    """The passes in ``run_dir/passes/`` made with the main run's setup (config, suite, models, hardware key); any
    other is named and left out."""
    from gate.run.results import load_results

    kept = []
    for d in sorted(passes_dir(run_dir).glob("*"), key=lambda p: (len(p.name), p.name)):
        if not (d / "results.json").is_file():
            continue
        r = load_results(d / "results.json")
        a, b = r.fingerprint, main.fingerprint
        same = (a.config == b.config and a.suite.fingerprint == b.suite.fingerprint
                and a.hardware_key == b.hardware_key
                and {k: m.fingerprint for k, m in a.models.items()} == {k: m.fingerprint for k, m in b.models.items()})
        if same and r.status == "complete":
            kept.append(r)
        else:
            say(f"{d} left out: " + ("not complete" if same else "made with another config, suite, model or "
                                     "hardware key than the run"))
    return kept


__all__ = ["PASSES_DIR", "SERVERS_UP", "clear", "load_passes", "passes_dir", "run_passes"]
