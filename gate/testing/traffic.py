"""A simulated continuous-batching stack on a fake clock: the stand-in server of the request-rate tests.

:func:`gate.run.traffic.replay` sends each arrival on its own thread at its time on a clock; with
:class:`FakeClock` that time is virtual, and :class:`SimulatedStack` answers each request from a discrete-event
model of a serving stack instead of a model: continuous batching (requests join at the next step boundary), a
step cost that grows with the batch, and with speculation k draft steps plus a (k+1)-token verification that
emit the expected accepted run ``(1 - a^(k+1)) / (1 - a)`` tokens per step.  So speculation pays at low load
(fewer, costlier steps) and stops paying at high load (the verification's k+1 tokens per sequence dominate),
with a crossover rate the tests can predict, in milliseconds of real time and no weights.

The stack sees every request of a replay before it answers any (a send blocks until the trace's last arrival
is in), which the open-loop driver allows: it never waits on a response before sending the next request.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from gate.run.traffic import Arrival, Sent


class FakeClock:
    """Virtual seconds: ``sleep_until`` moves time forward at once."""

    def __init__(self):
        self.t = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self.t

    def sleep_until(self, t: float) -> None:
        with self._lock:
            self.t = max(self.t, t)


@dataclass
class StackModel:
    base_s: float = 0.010  # fixed cost of a target forward (weights read once per step)
    per_token_s: float = 0.001  # per token processed in a target forward, per sequence
    prefill_per_token_s: float = 0.0002
    draft_base_s: float = 0.001
    draft_per_token_s: float = 0.0002
    k: int = 4
    acceptance: float = 0.8
    speculative: bool = True
    slowdown: float = 1.0  # every cost times this (a regression to plant)

    @property
    def tokens_per_step(self) -> float:
        if not self.speculative:
            return 1.0
        a = self.acceptance
        return float(self.k + 1) if a >= 1 else (1 - a ** (self.k + 1)) / (1 - a)

    def step_s(self, batch: int, prefill_tokens: int) -> float:
        if self.speculative:
            cost = (self.k * (self.draft_base_s + self.draft_per_token_s * batch)
                    + self.base_s + self.per_token_s * batch * (self.k + 1))
        else:
            cost = self.base_s + self.per_token_s * batch
        return (cost + self.prefill_per_token_s * prefill_tokens) * self.slowdown


class SimulatedStack:
    """One replay's stand-in server: give it the trace's length, then use :meth:`send` as the replay's sender."""

    def __init__(self, model: StackModel, clock: FakeClock, expected: int):
        self.model, self.clock, self.expected = model, clock, expected
        self._arrivals: list[Arrival] = []
        self._lock = threading.Condition()
        self._answers: dict[int, Sent] | None = None

    def send(self, a: Arrival) -> Sent:
        with self._lock:
            self._arrivals.append(a)
            if len(self._arrivals) == self.expected:
                self._answers = self._simulate(sorted(self._arrivals, key=lambda x: x.at_s))
                self._lock.notify_all()
            while self._answers is None:
                if not self._lock.wait(timeout=30):
                    raise RuntimeError(f"the simulated stack got {len(self._arrivals)} of {self.expected} requests")
            return self._answers[id(a)]

    def _simulate(self, arrivals: list[Arrival]) -> dict[int, Sent]:
        m = self.model
        t, i = 0.0, 0
        active: list[dict] = []
        out: dict[int, Sent] = {}
        while i < len(arrivals) or active:
            if not active and i < len(arrivals):
                t = max(t, arrivals[i].at_s)
            joining = []
            while i < len(arrivals) and arrivals[i].at_s <= t:
                a = arrivals[i]
                joining.append({"a": a, "left": a.prompt.max_new_tokens, "carry": 0.0, "times": [], "new": True})
                i += 1
            active += joining
            t += m.step_s(len(active), sum(len(j["a"].prompt.prompt_ids) for j in joining))
            for r in active:
                if r["new"]:  # the prefill step gives the first token
                    n, r["new"] = 1, False
                else:
                    r["carry"] += m.tokens_per_step
                    n = int(r["carry"])
                    r["carry"] -= n
                n = min(n, r["left"])
                r["left"] -= n
                r["times"] += [t] * n
            for r in [r for r in active if r["left"] <= 0]:
                active.remove(r)
                out[id(r["a"])] = Sent(r["a"].at_s, r["times"], len(r["times"]))
        return out


__all__ = ["FakeClock", "SimulatedStack", "StackModel"]
