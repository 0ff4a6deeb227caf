"""Clocks that are honest on accelerators, and peak-memory probes.

CUDA kernels run asynchronously, so a wall-clock reading is only meaningful
after the device has finished the queued work: :class:`Clock` synchronises
before every reading.  Peak memory is ``max_memory_allocated`` on CUDA and the
process's peak resident set size (VmHWM, reset through ``/proc/self/clear_refs``)
on CPU.
"""

from __future__ import annotations

import contextlib
import resource
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where CUDA is used: a plug-in worker may never load it
    import torch


class Clock:
    def __init__(self, device: torch.device):
        self.device = device

    def sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def now(self) -> float:
        self.sync()
        return time.perf_counter()


class Stopwatch:
    """Accumulates the time spent inside ``with watch:`` blocks."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.total = 0.0

    @contextmanager
    def __call__(self):
        start = self.clock.now()
        try:
            yield
        finally:
            self.total += self.clock.now() - start


_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(device)
        return
    with contextlib.suppress(OSError):
        _CLEAR_REFS.write_text("5")  # Linux: reset the peak RSS (VmHWM) to the current RSS


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated(device))
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def free_accelerator_memory() -> None:
    """Give CUDA's cached blocks back after an out-of-memory failure, before the next (smaller) batch."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # best effort: the failure is recorded either way
        pass
