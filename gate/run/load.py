"""What else the runner was doing while the gate timed: load average, other processes' CPU time, CPU steal, clock
changes and, on NVIDIA GPUs, other processes on the devices and their SM clocks.  Recorded in ``results.json``
(``runner_load``) so that a speed verdict the run cannot resolve names its likely cause
(:func:`likely_cause`, docs/baselines.md).

Every reading is optional and failure-tolerant: a reading this machine does not offer (no ``/proc``, no
``nvidia-smi``, a container that hides the host) is left out, never an error.  From ``/proc/stat`` the CPU time
of the whole machine between two snapshots; from ``/proc/<pid>/stat`` that of this process and its descendants
(the gate, its engine workers, the servers it launched); their difference is what other processes used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from gate.io.documents import Document, omitted_when_none

PROC = Path("/proc")
HIGH_OTHER_CORES = 0.25  # other processes used a quarter of a core or more while the gate timed
HIGH_STEAL = 0.05  # the hypervisor took 5% or more of the CPU time
CLOCK_DROP = 0.10  # a CPU or GPU clock 10% lower at the end than at the start


class GpuLoad(Document):
    """One GPU as ``nvidia-smi`` saw it at the start and the end of timing."""

    index: int
    sm_clock_mhz: list[float] = Field(default_factory=list)  # [start, end]
    max_sm_clock_mhz: float | None = omitted_when_none()
    utilization: list[float] = Field(default_factory=list)  # [start, end], percent
    other_processes: int = 0  # compute processes on it that are not this run's


class RunnerLoad(Document):
    """The runner while the gate timed (``results.json``'s ``runner_load``); every field optional."""

    seconds: float  # the timing phase's wall time the readings cover
    cores: int | None = None
    load_average: list[float] | None = omitted_when_none()  # 1-minute load average at the start and the end
    other_cpu_cores: float | None = omitted_when_none()  # CPU time of other processes / seconds: cores' worth
    own_cpu_cores: float | None = omitted_when_none()  # this run's processes, the same way
    steal: float | None = omitted_when_none()  # share of the machine's CPU time taken by the hypervisor
    cpu_mhz: list[float] | None = omitted_when_none()  # the mean CPU clock at the start and the end
    gpus: list[GpuLoad] = Field(default_factory=list, exclude_if=lambda v: not v)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cpu_times() -> tuple[int, int, int] | None:
    """The machine's (busy, total, steal) jiffies from /proc/stat."""
    text = _read(PROC / "stat")
    if not text or not text.startswith("cpu "):
        return None
    try:
        v = [int(x) for x in text.split("\n", 1)[0].split()[1:]]
        user, nice, system, idle, iowait, irq, softirq = v[:7]
        steal = v[7] if len(v) > 7 else 0
    except ValueError:
        return None
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait + steal, steal


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU jiffies: utime, stime, and those of its children that exited and were waited for)."""
    out = {}
    try:
        pids = [p.name for p in PROC.iterdir() if p.name.isdigit()]
    except OSError:
        return out
    for pid in pids:
        text = _read(PROC / pid / "stat")
        if not text:
            continue
        try:
            rest = text[text.rindex(")") + 2:].split()  # the name may hold spaces
            out[int(pid)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
        except (ValueError, IndexError):
            continue
    return out


def _tree(procs: dict[int, tuple[int, int]]) -> set[int]:
    """This process and its descendants (the gate, its engine workers, the servers it launched)."""
    mine, frontier = {os.getpid()}, {os.getpid()}
    while frontier:
        frontier = {p for p, (pp, _) in procs.items() if pp in frontier and p not in mine}
        mine |= frontier
    return mine


def _own_jiffies(procs: dict[int, tuple[int, int]]) -> int | None:
    if os.getpid() not in procs:
        return None
    return sum(procs[p][1] for p in _tree(procs))


def _cpu_mhz() -> float | None:
    freqs = []
    for f in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        text = _read(f)
        if text and text.strip().isdigit():
            freqs.append(int(text) / 1000)
    if not freqs:
        text = _read(PROC / "cpuinfo") or ""
        freqs = [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")
                 and line.split(":")[1].strip().replace(".", "", 1).isdigit()]
    return sum(freqs) / len(freqs) if freqs else None


def _smi(*args: str) -> list[list[str]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [[x.strip() for x in line.split(",")] for line in out.stdout.splitlines() if line.strip()]


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _gpus(own: set[int]) -> dict[int, dict] | None:
    rows = _smi("--query-gpu=index,uuid,clocks.sm,clocks.max.sm,utilization.gpu")
    if rows is None:
        return None
    gpus, by_uuid = {}, {}
    for row in rows:
        if len(row) < 5 or not row[0].isdigit():
            continue
        i = int(row[0])
        by_uuid[row[1]] = i
        gpus[i] = {"sm": _num(row[2]), "max": _num(row[3]), "util": _num(row[4]), "others": 0}
    for row in _smi("--query-compute-apps=gpu_uuid,pid") or []:
        if len(row) >= 2 and row[0] in by_uuid and row[1].isdigit() and int(row[1]) not in own:
            gpus[by_uuid[row[0]]]["others"] += 1
    return gpus


@dataclass
class Snapshot:
    """The runner at one moment: what :func:`between` turns into a :class:`RunnerLoad`."""

    wall: float
    load1: float | None
    cpu: tuple[int, int, int] | None
    own: int | None
    mhz: float | None
    gpus: dict[int, dict] | None = field(default=None)

    @classmethod
    def take(cls) -> Snapshot:
        try:
            load1 = os.getloadavg()[0]
        except OSError:
            load1 = None
        procs = _processes()
        return cls(wall=time.monotonic(), load1=load1, cpu=_cpu_times(), own=_own_jiffies(procs), mhz=_cpu_mhz(),
                   gpus=_gpus(_tree(procs)))


def between(start: Snapshot, end: Snapshot) -> RunnerLoad:
    """The runner's load from ``start`` to ``end``."""
    seconds = max(end.wall - start.wall, 1e-9)
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out = RunnerLoad(seconds=round(seconds, 3), cores=os.cpu_count())
    if start.load1 is not None and end.load1 is not None:
        out.load_average = [round(start.load1, 2), round(end.load1, 2)]
    if start.cpu and end.cpu:
        busy, total, steal = (b - a for a, b in zip(start.cpu, end.cpu))
        if total > 0:
            out.steal = round(steal / total, 4)
        if start.own is not None and end.own is not None:
            own = end.own - start.own
            out.own_cpu_cores = round(own / tick / seconds, 3)
            out.other_cpu_cores = round(max(0.0, (busy - own) / tick / seconds), 3)
    if start.mhz and end.mhz:
        out.cpu_mhz = [round(start.mhz), round(end.mhz)]
    if start.gpus and end.gpus:
        out.gpus = [GpuLoad(index=i, sm_clock_mhz=[x for x in (start.gpus[i]["sm"], g["sm"]) if x is not None],
                            max_sm_clock_mhz=g["max"],
                            utilization=[x for x in (start.gpus[i]["util"], g["util"]) if x is not None],
                            other_processes=max(start.gpus[i]["others"], g["others"]))
                    for i, g in sorted(end.gpus.items()) if i in start.gpus]
    return out


def record(start: Snapshot | None) -> RunnerLoad | None:
    """The load since ``start`` (None when no snapshot was taken, or any reading failed outright)."""
    if start is None:
        return None
    try:
        return between(start, Snapshot.take())
    except Exception:  # never let a reading of the machine fail a run
        return None


def snapshot() -> Snapshot | None:
    try:
        return Snapshot.take()
    except Exception:
        return None


def likely_cause(load: RunnerLoad | None) -> str | None:
    """What the readings name as the likely cause of noisy timing, in a few words (None: nothing stood out)."""
    if load is None:
        return None
    parts = []
    if load.other_cpu_cores is not None and load.other_cpu_cores >= HIGH_OTHER_CORES:
        parts.append(f"other processes used {load.other_cpu_cores:.1f} of {load.cores or '?'} cores while the gate "
                     "timed")
    if load.load_average and load.cores and max(load.load_average) > load.cores:
        parts.append(f"load average {max(load.load_average):.1f} on {load.cores} cores")
    if load.steal is not None and load.steal >= HIGH_STEAL:
        parts.append(f"the hypervisor took {load.steal:.0%} of the CPU time (steal)")
    if load.cpu_mhz and len(load.cpu_mhz) == 2 and load.cpu_mhz[1] < (1 - CLOCK_DROP) * load.cpu_mhz[0]:
        parts.append(f"the CPU clock fell {load.cpu_mhz[0]:.0f} → {load.cpu_mhz[1]:.0f} MHz")
    for g in load.gpus:
        if g.other_processes:
            parts.append(f"{g.other_processes} other process{'es' if g.other_processes > 1 else ''} on GPU {g.index}")
        if len(g.sm_clock_mhz) == 2 and g.sm_clock_mhz[1] < (1 - CLOCK_DROP) * g.sm_clock_mhz[0]:
            parts.append(f"GPU {g.index}'s SM clock fell {g.sm_clock_mhz[0]:.0f} → {g.sm_clock_mhz[1]:.0f} MHz")
    return "; ".join(parts) or None


__all__ = ["GpuLoad", "RunnerLoad", "Snapshot", "between", "likely_cause", "record", "snapshot"]
