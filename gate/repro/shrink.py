"""Delta debugging of a failing batch: the smallest case that still fails, every candidate confirmed by re-running.

The engine under test is re-run on each candidate case, and the reference (through ``fails``) says whether it
still fails.  A candidate counts as failing only when it fails on ``replays`` runs in a row (default two), so float
noise or a flaky engine cannot make a "minimal" case that does not reproduce.  The steps, each starting from the
smallest failing case found so far:

1. **rows**: which of the batch's co-scheduled prompts must share the batch (ddmin, Zeller and Hildebrandt, 2002:
   halves, then finer chunks; each chunk alone, then each complement), in their order in the batch; the batch
   size is what remains;
2. **tokens**: the fewest new tokens, first exactly up to the failing position, else bisected;
3. **prompt length**: each prompt (longest first) cut to its first ``L`` tokens, ``L`` bisected while it still
   fails; then the tokens again (a shorter prompt can move the failure earlier).

Bisection assumes a shorter case that passes has no shorter one that fails; that need not hold, so the result is
a small failing case, 1-minimal in its rows (no single row can be dropped), not the smallest one that exists.  The
budget is checked before every run: when it is spent the smallest case confirmed so far is returned, and the log
says where it stopped.  Nothing here knows what an engine or a failure is (``gate.repro.probe`` does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

F = TypeVar("F")  # what a failing run found (gate.repro.probe.Finding): it has a ``position``


@dataclass(frozen=True)
class Case:
    """One batch as the engine gets it: each row's prompt token ids, in order, and the token budget."""

    prompts: tuple[tuple[int, ...], ...]
    names: tuple[str, ...]  # each row's prompt id in the suite (a cut prompt keeps its name)
    max_new_tokens: int
    seeds: tuple[int, ...] = ()  # each row's sampling seed (a sampled case; empty: greedy)

    @property
    def batch_size(self) -> int:
        return len(self.prompts)

    def rows(self, keep: list[int]) -> Case:
        return replace(self, prompts=tuple(self.prompts[i] for i in keep), names=tuple(self.names[i] for i in keep),
                       seeds=tuple(self.seeds[i] for i in keep) if self.seeds else ())

    def cut(self, row: int, length: int) -> Case:
        prompts = list(self.prompts)
        prompts[row] = prompts[row][:length]
        return replace(self, prompts=tuple(prompts))

    def describe(self) -> str:
        lengths = ", ".join(str(len(p)) for p in self.prompts)
        return f"{self.batch_size} row(s) of {lengths} prompt tokens, {self.max_new_tokens} new tokens"


@dataclass
class Step:
    """One candidate tried: which step, what was tried, whether it failed on every replay."""

    step: str
    tried: str
    failed: bool
    seconds: float

    def line(self) -> str:
        return f"{self.step}: {self.tried}: {'still fails' if self.failed else 'passes'} ({self.seconds:.1f} s)"


class OutOfBudget(Exception):
    pass


@dataclass
class Shrunk(Generic[F]):
    case: Case
    finding: F
    log: list[Step] = field(default_factory=list)
    stopped: str | None = None  # why shrinking stopped early (the budget), None: every step ran
    runs: int = 0  # engine runs, replays included


class Shrinker(Generic[F]):
    """``fails(case)``: run the engine on ``case`` once; what it found, or None when it passed."""

    def __init__(self, fails: Callable[[Case], F | None], budget_s: float, replays: int = 2,
                 clock: Callable[[], float] = time.monotonic, say: Callable[[str], None] = lambda m: None):
        self.fails = fails
        self.replays = replays
        self.clock = clock
        self.deadline = clock() + budget_s
        self.say = say
        self.log: list[Step] = []
        self.runs = 0

    def confirmed(self, case: Case, step: str, tried: str) -> F | None:
        """What ``case`` fails with on every one of ``replays`` runs in a row, else None (the first pass ends it)."""
        started = self.clock()
        found = None
        for _ in range(self.replays):
            if self.clock() > self.deadline:
                raise OutOfBudget
            self.runs += 1
            found = self.fails(case)
            if found is None:
                break
        entry = Step(step, tried, found is not None, self.clock() - started)
        self.log.append(entry)
        self.say(entry.line())
        return found

    def shrink(self, case: Case, finding: F) -> Shrunk[F]:
        """The smallest failing case from ``case`` (which failed with ``finding``)."""
        best = Shrunk(case, finding)
        try:
            self._rows(best)
            self._tokens(best)
            self._lengths(best)
            self._tokens(best)  # a shorter prompt can move the failure earlier
        except OutOfBudget:
            best.stopped = f"the budget ran out after {self.runs} engine runs: the case is the smallest confirmed " \
                           "so far, not shrunk further"
        best.log, best.runs = self.log, self.runs
        return best

    def _try(self, best: Shrunk[F], candidate: Case, step: str, tried: str) -> bool:
        found = self.confirmed(candidate, step, f"{tried} ({candidate.describe()})")
        if found is not None:
            best.case, best.finding = candidate, found
        return found is not None

    def _rows(self, best: Shrunk[F]) -> None:
        keep = list(range(best.case.batch_size))
        whole = best.case
        n = 2
        while len(keep) >= 2:
            chunks = _split(keep, n)
            reduced = False
            for chunk in chunks:
                if self._try(best, whole.rows(chunk), "rows", f"rows {_rows(chunk)} alone"):
                    keep, n, reduced = chunk, 2, True
                    break
            if not reduced and n > 2:
                for chunk in chunks:
                    rest = [i for i in keep if i not in chunk]
                    if self._try(best, whole.rows(rest), "rows", f"without rows {_rows(chunk)}"):
                        keep, n, reduced = rest, max(n - 1, 2), True
                        break
            if not reduced:
                if n >= len(keep):
                    break
                n = min(len(keep), 2 * n)

    def _tokens(self, best: Shrunk[F]) -> None:
        position = getattr(best.finding, "position", None)
        hi = best.case.max_new_tokens
        if position is None or position + 1 >= hi:
            return
        lo = position + 1
        if self._try(best, replace(best.case, max_new_tokens=lo), "tokens", f"{lo} new tokens (up to the failure)"):
            return
        while hi - lo > 1:  # lo passes, hi fails
            mid = (lo + hi) // 2
            if self._try(best, replace(best.case, max_new_tokens=mid), "tokens", f"{mid} new tokens"):
                hi = mid
            else:
                lo = mid

    def _lengths(self, best: Shrunk[F]) -> None:
        for row in sorted(range(best.case.batch_size), key=lambda r: -len(best.case.prompts[r])):
            hi, lo = len(best.case.prompts[row]), 0  # hi fails; lo = 0 is no prompt at all
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._try(best, best.case.cut(row, mid), "prompt length",
                             f"row {row}'s prompt cut to its first {mid} of {len(best.case.prompts[row])} tokens"):
                    hi = mid
                else:
                    lo = mid


def _split(items: list[int], n: int) -> list[list[int]]:
    """``items`` in ``n`` contiguous chunks of near-equal size (order kept)."""
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


def _rows(rows: list[int]) -> str:
    return ", ".join(str(r) for r in rows)


__all__ = ["Case", "OutOfBudget", "Shrinker", "Shrunk", "Step"]
