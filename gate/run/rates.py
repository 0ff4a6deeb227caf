"""Stated generation rates for ``specguard plan --tokens-per-s``: one rate, or one per batch size, per engine.

A rate is the tokens per second an engine generates at a batch size, every row of the batch together.  Speculation's
advantage falls as the batch grows, so one number for every engine and batch size misprices the larger ones; the
flag therefore takes ``N`` (every batch size), ``BS:N,BS:N,...`` (those batch sizes), and either prefixed with
``ENGINE=`` (that engine alone; repeat the flag for several).  Between two stated batch sizes the rate is
interpolated on a log-log line (a power law, which the usual rise-and-flatten curve follows closely); below the
smallest stated batch size each row runs at that size's rate per row (the total shrinks in proportion); past the
largest, the rate stays at the largest's (no further gain is assumed).  Both ends err towards a longer estimate.
Every rate the estimate takes from a line rather than a stated point is said, with how it was found.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_POINT = re.compile(r"(\d{1,6}):(\d+(?:\.\d*)?|\.\d+)")
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_ENGINE = re.compile(r"([A-Za-z0-9_.-]{1,100})=(.*)")
MAX_RATE = 1e9

EXPECTED = ("a rate above 0 tokens per second (N), or one per batch size (BS:N,BS:N,..., such as 1:900,8:4000,32:9000),"
            " optionally for one engine (ENGINE=..., the flag repeated for several)")


@dataclass(frozen=True)
class StatedRate:
    """One ``--tokens-per-s`` value: an engine's (None: every engine not named) rates by batch size (batch size 0:
    one rate for every batch size)."""

    engine: str | None
    points: tuple[tuple[int, float], ...]  # (batch size, tokens per second), by batch size

    @property
    def flat(self) -> bool:
        return self.points[0][0] == 0

    def text(self) -> str:
        said = f"{self.points[0][1]:g}" if self.flat else ",".join(f"{b}:{r:g}" for b, r in self.points)
        return f"{self.engine}={said}" if self.engine else said


def parse(text: str) -> StatedRate | None:
    """A ``--tokens-per-s`` value, or None where it is not one (the CLI's argparse type says what it expected)."""
    text = text.strip()
    engine = None
    if m := _ENGINE.fullmatch(text):
        engine, text = m[1], m[2].strip()
    if _NUMBER.fullmatch(text):
        points = [(0, float(text))]
    else:
        parts = [_POINT.fullmatch(p.strip()) for p in text.split(",")]
        if not text or not all(parts):
            return None
        points = [(int(m[1]), float(m[2])) for m in parts]
        sizes = [b for b, _ in points]
        if min(sizes) < 1 or len(set(sizes)) < len(sizes):
            return None
    if not all(0 < r <= MAX_RATE for _, r in points):
        return None
    return StatedRate(engine, tuple(sorted(points)))


def at(points: tuple[tuple[int, float], ...], batch_size: int) -> tuple[float, str]:
    """(tokens per second at ``batch_size``, how it was found: "" where it was stated)."""
    if points[0][0] == 0:
        return points[0][1], ""
    given = dict(points)
    if batch_size in given:
        return given[batch_size], ""
    (b0, r0), (bn, rn) = points[0], points[-1]
    if batch_size < b0:
        return r0 * batch_size / b0, f"bs {b0}'s rate per row"
    if batch_size > bn:
        return rn, f"held at bs {bn}'s, the largest stated"
    lo, hi = max(p for p in points if p[0] < batch_size), min(p for p in points if p[0] > batch_size)
    t = (math.log(batch_size) - math.log(lo[0])) / (math.log(hi[0]) - math.log(lo[0]))
    return math.exp(math.log(lo[1]) + t * (math.log(hi[1]) - math.log(lo[1]))), \
        f"log-log between bs {lo[0]} and bs {hi[0]}"


class Rates:
    """The stated rates of every engine: its own where a value names it, else the value that names none."""

    def __init__(self, stated: list[StatedRate]):
        self.stated = stated
        self.by_engine = {s.engine: s for s in stated}

    def problems(self, engines: list[str]) -> list[str]:
        """What is wrong with the values for a plan of ``engines``: an engine named twice or not in the plan, or
        an engine with no rate at all."""
        out = []
        seen: dict[str | None, int] = {}
        for s in self.stated:
            seen[s.engine] = seen.get(s.engine, 0) + 1
        for name, n in seen.items():
            if n > 1:
                out.append(f"{'every engine' if name is None else name!r} is given {n} rates: give one value each")
        unknown = [s.engine for s in self.stated if s.engine is not None and s.engine not in engines]
        if unknown:
            out.append(f"no engine named {', '.join(map(repr, unknown))} in this plan; its engines are "
                       f"{', '.join(engines)}")
        if None not in self.by_engine:
            missing = [e for e in engines if e not in self.by_engine]
            if missing:
                out.append(f"no rate for {', '.join(missing)}: give one for every engine (N, or BS:N,...), or one "
                           "without ENGINE= for the rest")
        return out

    def of(self, engine: str) -> StatedRate:
        return self.by_engine.get(engine) or self.by_engine[None]

    def tokens_per_s(self, engine: str, batch_size: int) -> float:
        return at(self.of(engine).points, batch_size)[0]

    def assumption(self, cells: list[tuple[str, int]]) -> str:
        """The stated rates in words, and each rate of ``cells`` (engine, batch size) read off a line between or
        beyond the stated points."""
        if len(self.stated) == 1 and self.stated[0].engine is None and self.stated[0].flat:
            said = f"every engine generates {self.stated[0].points[0][1]:g} tokens per second at every batch size"
        else:
            said = "tokens per second stated: " + "; ".join(
                f"{s.engine or ('every other engine' if len(self.stated) > 1 else 'every engine')} "
                + (f"{s.points[0][1]:g} at every batch size" if s.flat else
                   ", ".join(f"{r:g} at bs {b}" for b, r in s.points))
                for s in sorted(self.stated, key=lambda s: s.engine is None))
        derived = []
        for engine, bs in sorted(set(cells)):
            rate, how = at(self.of(engine).points, bs)
            if how:
                derived.append(f"{engine} bs {bs}: {rate:.0f} ({how})")
        return said + (f"; read off the line: {', '.join(derived)}" if derived else "")


__all__ = ["EXPECTED", "Rates", "StatedRate", "at", "parse"]
