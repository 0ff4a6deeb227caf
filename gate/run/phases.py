"""Where a command's time went: seconds per named phase (``phases.json``, :class:`gate.io.documents.PhasesDoc`)."""

from __future__ import annotations

import time
from contextlib import contextmanager


class Phases:
    """Where a run's time went: seconds per named phase, and the wall time they add up to.

    Users pay for runner minutes; this says which setting to turn down.
    """

    def __init__(self, started: float | None = None):
        self.started = time.perf_counter() if started is None else started
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def wall(self) -> float:
        return time.perf_counter() - self.started

    def table(self) -> list[tuple[str, float, float]]:
        """(phase, seconds, share of the wall time), largest first."""
        wall = self.wall()
        return [(k, v, v / wall if wall else 0.0) for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1])]

    def to_dict(self) -> dict:
        """The fields of ``phases.json`` (:class:`gate.io.documents.PhasesDoc` adds its schema)."""
        return {"wall_s": self.wall(), "seconds": dict(self.seconds)}

    def render(self) -> str:
        wall = self.wall()
        table = self.table()
        rows = [f"  {name:<34} {s:8.1f} s  {share:6.1%}" for name, s, share in table if s >= 0.05]
        small = [s for _, s, _ in table if s < 0.05]
        if small:  # phases that cost nothing here (a server start for in-process engines): one line, not many
            rows.append(f"  {f'{len(small)} more phases, each < 0.05 s':<34} {sum(small):8.1f} s  "
                        f"{sum(small) / wall if wall else 0:6.1%}")
        covered = sum(self.seconds.values())
        return "\n".join([f"where the time went ({wall:.1f} s):", *rows,
                          f"  {'(not in a named phase)':<34} {max(0.0, wall - covered):8.1f} s  "
                          f"{max(0.0, wall - covered) / wall if wall else 0:6.1%}"])
