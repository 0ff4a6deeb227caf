"""Progress of a run: phase lines in CI logs, live bars with an ETA on a terminal.

The runner reports ``start(phase, total)`` and ``advance()``; where the work is
adaptive (timing repeats, sampling passes) the total is an estimate that grows
when more is needed.  :class:`Lines` prints one line per phase (stderr), which is
what CI logs want; :class:`Bars` draws rich progress bars with elapsed time and
ETA when stderr is a terminal; :class:`Silent` prints nothing (``-q``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class Silent:
    def start(self, phase: str, total: int | None = None) -> None:
        pass

    def grow(self, extra: int) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class Lines(Silent):
    """One line per phase, and notes (skips, failures) as they come."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say

    def start(self, phase: str, total: int | None = None) -> None:
        self.say(phase + (f" ({total} batches)" if total else ""))

    def note(self, text: str) -> None:
        self.say(text)


class Bars(Silent):
    """rich progress bars, one per phase, with elapsed time and ETA."""

    def __init__(self):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=Console(file=sys.stderr), transient=False)
        self.progress.start()
        self.task = None

    def start(self, phase: str, total: int | None = None) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[-1].total)
        self.task = self.progress.add_task(phase, total=total or 1)

    def grow(self, extra: int) -> None:
        if self.task is not None:
            self.progress.update(self.task, total=self.progress.tasks[-1].total + extra)

    def advance(self, n: int = 1) -> None:
        if self.task is not None:
            self.progress.advance(self.task, n)

    def note(self, text: str) -> None:
        self.progress.console.print(text, highlight=False, markup=False)

    def close(self) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[-1].total)
        self.progress.stop()


def for_terminal(say: Callable[[str], None], quiet: bool = False):
    if quiet:
        return Silent()
    if sys.stderr.isatty():
        return Bars()
    return Lines(say)
