"""Sustained request-rate load (``checks.traffic``): open-loop arrival traces replayed to a serving stack.

A wave (the timing phase) sends N requests together and waits for all of them; production traffic arrives at a
rate, and requests join while others are mid-generation, which is where continuous batching and speculation
interact.  Here, per configured rate:

* an **arrival trace** is drawn once per repeat: ``requests`` arrival times (Poisson: exponential gaps, or
  constant: evenly spaced) and the suite prompt each one carries (a seeded shuffle of the whole suite, so every
  slice is in the mix, as in production);
* the trace is **replayed open-loop** to the engine under test and to its reference (the same stack without
  speculation), in ABBA order across repeats, so the two are compared on identical traffic: a request is sent at
  its arrival time whether or not earlier ones have finished;
* each request records when it was sent, its first token, the gaps between token bursts (arrivals less than
  ``BURST_S`` apart are one burst) and its last token; a replay that would hold more than ``max_in_flight``
  requests at once stops sending (``cut_short``): the stack is saturated at that rate.

Each finished replay is appended to ``records.jsonl`` at once (a crash keeps the finished ones; ``--resume``
reuses them).  The analysis (percentiles, goodput, speedup, crossover rate) is :mod:`gate.checks.traffic`.

The clock and the sender are parameters, so the replay itself is exercised with a fake clock and a simulated
stack in the fast tests (gate/testing/traffic.py).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from gate.run.records import TrafficReplay, TrafficRequest

ROUND = 6  # digits kept of each time: a microsecond, far below what is measured
# Token arrivals closer than this are one burst (ITL counts the gaps between bursts): a server that streams a
# verified run token by token (llama-server) sends its tokens microseconds apart, which are not inter-token
# latencies a user sees; one that sends the run as one chunk (vLLM) gives the same gaps.
BURST_S = 0.001


@dataclass(frozen=True)
class Arrival:
    at_s: float  # from the replay's start
    prompt: object  # a gate.run.plan.PromptInfo (id, slice, prompt_ids, max_new_tokens)
    seed: int  # the request's sampling seed


@dataclass
class Sent:
    """What a sender reports for one request: clock readings (the replay's clock), or the error that ended it."""

    sent: float
    token_times: list[float]
    tokens: int
    error: str | None = None


class Clock(Protocol):
    def now(self) -> float: ...
    def sleep_until(self, t: float) -> None: ...


class WallClock:
    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        while (left := t - time.perf_counter()) > 0:
            time.sleep(min(left, 0.05))


def arrival_times(rate: float, n: int, kind: str, seed: int) -> list[float]:
    """``n`` arrival times at ``rate`` requests per second: Poisson (exponential gaps) or constant, from 0."""
    if kind == "constant":
        return [i / rate for i in range(n)]
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def trace_seed(seed: int, rate_index: int, repeat: int) -> int:
    return (seed * 1_000_003 + rate_index * 7919 + repeat) % (1 << 63)


def make_trace(prompts: Sequence, rate: float, n: int, kind: str, seed: int) -> list[Arrival]:
    """One replay's arrivals: times at ``rate`` and the prompts they carry, a seeded shuffle of the suite (cycled
    when ``n`` is larger), so both sides of a pair get the same requests in the same order at the same times."""
    rng = random.Random(seed ^ 0x5EED)
    order: list = []
    while len(order) < n:
        block = list(prompts)
        rng.shuffle(block)
        order += block
    return [Arrival(round(t, ROUND), order[i], seed * 131 + i)
            for i, t in enumerate(arrival_times(rate, n, kind, seed))]


def replay(trace: Sequence[Arrival], send: Callable[[Arrival], Sent], clock: Clock | None = None,
           max_in_flight: int = 256, abort: Callable[[], None] = lambda: None
           ) -> tuple[list[TrafficRequest], float, str | None]:
    """Send each arrival at its time (open loop), each on its own thread; wait for all; return the requests' records
    (in trace order), the replay's duration and why it stopped sending early (None when it sent them all).

    Interrupted (Ctrl-C, or the runner's SIGTERM), it stops at once: requests not yet sent are dropped, ``abort``
    cuts off the ones in flight (:meth:`gate.engines.http.HttpEngine.cancel`: at their next chunk), and the
    interrupt goes on up."""
    clock = clock or WallClock()
    in_flight = 0
    lock = threading.Lock()
    cut_short = None

    def run(a: Arrival) -> Sent:
        nonlocal in_flight
        try:
            return send(a)
        except Exception as exc:  # a sender that raises fails its request, never the replay
            return Sent(clock.now(), [], 0, f"{type(exc).__name__}: {exc}"[:300])
        finally:
            with lock:
                in_flight -= 1

    start = clock.now()
    futures = []
    pool = ThreadPoolExecutor(max_workers=max(1, min(max_in_flight, len(trace))), thread_name_prefix="traffic")
    try:
        for a in trace:
            clock.sleep_until(start + a.at_s)
            with lock:
                if in_flight >= max_in_flight:
                    cut_short = (f"{max_in_flight} requests were still in flight at {a.at_s:.2f} s "
                                 f"(checks.traffic.max_in_flight): the stack cannot keep up with this rate")
                    break
                in_flight += 1
            futures.append((a, pool.submit(run, a)))
        results = [(a, f.result()) for a, f in futures]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        abort()
        raise
    pool.shutdown(wait=True)
    end = start
    out = []
    for a, s in results:
        times = [t - start for t in s.token_times]
        if times:
            end = max(end, start + times[-1])
        gaps = [round(b - a_, ROUND) for a_, b in itertools.pairwise(times) if b - a_ >= BURST_S]
        out.append(TrafficRequest(
            prompt_id=a.prompt.id, slice=a.prompt.slice, scheduled_s=a.at_s,
            sent_s=round(max(0.0, s.sent - start), ROUND),
            first_token_s=round(times[0], ROUND) if times else None, end_s=round(times[-1], ROUND) if times else None,
            tokens=s.tokens, gaps_s=gaps, error=s.error))
    return out, round(max(0.0, end - start), ROUND), cut_short


def http_sender(engine, settings) -> Callable[[Arrival], Sent]:
    """A sender for an http engine (:meth:`gate.engines.http.HttpEngine.stream`), on the wall clock; each request
    carries its own seed (``Arrival.seed``), ``settings`` the rest."""
    from gate.engines.base import Request

    engine.cancelled.clear()

    def send(a: Arrival) -> Sent:
        p = a.prompt
        req = Request(tuple(p.prompt_ids), p.max_new_tokens, a.seed, p.id, p.messages)
        sent = time.perf_counter()
        try:
            seq, sent, times = engine.stream(req, settings)
        except Exception as exc:
            return Sent(sent, [], 0, str(getattr(exc, "message", None) or exc)[:300])
        return Sent(sent, times, len(seq.token_ids))

    return send


def replay_record(engine: str, side: str, rate: float, repeat: int, arrival: str, seed: int,
                  outcome: tuple[list[TrafficRequest], float, str | None]) -> TrafficReplay:
    requests_, duration, cut = outcome
    return TrafficReplay(engine=engine, side=side, rate=rate, repeat=repeat, arrival=arrival, seed=seed,
                         duration_s=duration, requests=requests_, cut_short=cut)


def sides(repeat: int, base: bool = False) -> tuple[str, ...]:
    """The order of a repeat's replays, rotated each repeat so that a drift of the runner weighs on every side
    alike: ABBA for the engine and its reference; with paired mode's base, each side goes first in turn."""
    order = ("engine", "reference", "base") if base else ("engine", "reference")
    k = repeat % len(order)
    return order[k:] + order[:k]


__all__ = ["Arrival", "Sent", "WallClock", "arrival_times", "http_sender", "make_trace", "replay", "replay_record",
           "sides", "trace_seed"]
