"""Request-rate load (``checks.traffic``): latency percentiles, goodput, speedup and the crossover rate.

Inputs are the replays of :mod:`gate.run.traffic`: per engine, rate and repeat, the same arrival trace sent to the
engine and to its reference.  Per rate and side, pooled over the repeats:

* offered and achieved request rates (saturated: completions fell below 75% of the arrivals' rate, or a replay
  hit ``max_in_flight``), output tokens/s;
* TTFT, TPOT (per request: time after the first token over the tokens after it), ITL (gaps between
  token-bearing events, pooled) and end-to-end latency, p50 and p99;
* goodput: requests per second meeting every bound of ``checks.traffic.slo``;

and per rate, for the pair: the **latency speedup**, the median over requests of (reference latency / engine
latency) of the same request in the same trace, with a bootstrap 95% CI (also per slice), the TPOT speedup and
the goodput ratio; over the rates, the **crossover rate** where the latency speedup falls below 1, overall and
per slice, interpolated linearly in log rate between the configured rates around it.

The run's own verdict lines: a failed request (either side) fails the check (the traffic could not be measured
as configured); the rest are information.  Against a baseline, :mod:`gate.verdict.judge` holds each rate's
speedup samples against the stored ones with the speedup rule (``baseline.speedup_drop``).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import numpy as np

from gate.checks.doc import (
    Percentiles,
    SpeedupCI,
    Traffic,
    TrafficCrossover,
    TrafficEngine,
    TrafficRate,
    TrafficSide,
    TrafficSlice,
    VerdictLine,
)
from gate.run.records import TrafficReplay, TrafficRequest
from gate.run.results import Results
from gate.stats import bootstrap_median_ci

# completions per second over a replay below this share of its arrivals per second: the stack did not keep up within
# the trace (or the trace spans only a few request latencies: more requests per rate tell the two apart)
SATURATED = 0.75


def rate_key(rate: float) -> str:
    return f"{rate:g}"


def _pct(xs: list[float]) -> Percentiles:
    if not xs:
        return Percentiles()
    a = np.asarray(xs, dtype=float)
    return Percentiles(p50=float(np.percentile(a, 50)), p99=float(np.percentile(a, 99)))


def latency(r: TrafficRequest) -> float | None:
    return None if r.error or r.end_s is None else max(r.end_s - r.scheduled_s, 1e-9)


def ttft(r: TrafficRequest) -> float | None:
    return None if r.error or r.first_token_s is None else max(r.first_token_s - r.scheduled_s, 0.0)


def tpot(r: TrafficRequest) -> float | None:
    if r.error or r.end_s is None or r.first_token_s is None or r.tokens < 2:
        return None
    return (r.end_s - r.first_token_s) / (r.tokens - 1)


def meets(r: TrafficRequest, slo: dict[str, float]) -> bool:
    """Every bound of the SLO holds (a failed request meets none: its figures are None)."""
    figures = {"ttft_s": ttft(r), "tpot_s": tpot(r), "e2e_s": latency(r)}
    return all(figures[k] is not None and figures[k] <= bound for k, bound in slo.items())


def _span(xs: list[float]) -> float:
    return max(xs) - min(xs) if len(xs) > 1 else 0.0


def side_stats(replays: list[TrafficReplay], slo: dict[str, float], slice_: str | None = None) -> TrafficSide:
    """One side's figures at one rate, pooled over its replays; with ``slice_``, that slice's requests only (rates
    and throughput then count its requests over the whole replays' time)."""
    if slice_ is not None:
        replays = [rep.model_copy(update={"requests": [r for r in rep.requests if r.slice == slice_]})
                   for rep in replays]
    reqs = [r for rep in replays for r in rep.requests]
    done = [r for r in reqs if not r.error and r.end_s is not None]
    failed = [r for r in reqs if r.error]
    offered, achieved, saturated = [], [], False
    for rep in replays:
        arrivals = [r.scheduled_s for r in rep.requests]
        ends = [r.end_s for r in rep.requests if not r.error and r.end_s is not None]
        if len(arrivals) > 1 and _span(arrivals) > 0:
            offered.append((len(arrivals) - 1) / _span(arrivals))
        if ends:  # completions over the replay, from its first arrival to its last token
            achieved.append(len(ends) / max(max(ends) - min(arrivals), 1e-9))
        if rep.cut_short:
            saturated = True
    off = float(np.median(offered)) if offered else None
    ach = float(np.median(achieved)) if achieved else None
    if off and ach is not None and ach < SATURATED * off:
        saturated = True
    duration = sum(rep.duration_s for rep in replays)
    good = sum(meets(r, slo) for r in reqs) / duration if slo and duration > 0 else None
    cut = next((rep.cut_short for rep in replays if rep.cut_short), None)
    return TrafficSide(
        requests=len(reqs), completed=len(done), failed=len(failed), first_error=failed[0].error if failed else None,
        offered_rps=off, achieved_rps=ach, saturated=saturated, cut_short=cut,
        output_tps=sum(r.tokens for r in done) / duration if duration > 0 else None,
        ttft=_pct([x for r in done if (x := ttft(r)) is not None]),
        tpot=_pct([x for r in done if (x := tpot(r)) is not None]),
        itl=_pct([g for r in done for g in r.gaps_s]),
        e2e=_pct([x for r in done if (x := latency(r)) is not None]),
        goodput_rps=good, max_send_lag_s=max((r.sent_s - r.scheduled_s for r in reqs), default=0.0))


def paired(engine: list[TrafficReplay], reference: list[TrafficReplay], measure) -> dict[str | None, list[float]]:
    """Per slice (and None: all), reference / engine of ``measure`` for each request both sides finished, matched
    by repeat and position in the trace (the same request at the same arrival time)."""
    refs = {rep.repeat: rep for rep in reference}
    out: dict[str | None, list[float]] = defaultdict(list)
    for rep in engine:
        other = refs.get(rep.repeat)
        if other is None:
            continue
        for a, b in zip(rep.requests, other.requests):
            x, y = measure(a), measure(b)
            if x and y and a.prompt_id == b.prompt_id:
                out[None].append(y / x)
                out[a.slice].append(y / x)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _ci(samples: list[float], resamples: int) -> SpeedupCI | None:
    return SpeedupCI.of(bootstrap_median_ci(samples, resamples)) if samples else None


def crossing(points: dict[float, float]) -> tuple[float | None, float | None]:
    """From median speedups per rate: the lowest rate below 1, and where the speedup crosses 1 between the rates
    around the first crossing (linear in log rate; None when it is below 1 already at the lowest rate)."""
    rows = sorted(points.items())
    below = [r for r, x in rows if x < 1]
    for (r1, x1), (r2, x2) in itertools.pairwise(rows):
        if x1 >= 1 > x2:
            t = (x1 - 1) / (x1 - x2)
            return below[0], math.exp(math.log(r1) + t * (math.log(r2) - math.log(r1)))
    return (below[0] if below else None), None


def crossover(points: dict[float, SpeedupCI | None]) -> TrafficCrossover:
    rows = sorted((r, ci) for r, ci in points.items() if ci is not None)
    first, interpolated = crossing({r: ci.estimate for r, ci in rows})
    clearly = [r for r, ci in rows if ci.high < 1]
    return TrafficCrossover(rate=first, clearly_below_1_from=clearly[0] if clearly else None,
                            interpolated=interpolated, below_at_lowest=bool(rows) and rows[0][1].estimate < 1,
                            seen=first is not None)


def analyze_traffic(results: Results, cfg, resamples: int = 2000) -> Traffic:
    slo = {k: v for k, v in cfg.slo.model_dump().items() if v is not None}
    groups: dict[tuple[str, float, str], list[TrafficReplay]] = defaultdict(list)
    for rep in results.traffic:
        groups[(rep.engine, rep.rate, rep.side)].append(rep)
    engines: dict[str, TrafficEngine] = {}
    for name in sorted({rep.engine for rep in results.traffic}):
        rates: dict[str, TrafficRate] = {}
        overall: dict[float, SpeedupCI | None] = {}
        per_slice: dict[str, dict[float, SpeedupCI | None]] = defaultdict(dict)
        for rate in sorted({rep.rate for rep in results.traffic if rep.engine == name}):
            eng, ref = groups[(name, rate, "engine")], groups[(name, rate, "reference")]
            base = groups.get((name, rate, "base"), [])
            e2e, first, per_token = paired(eng, ref, latency), paired(eng, ref, ttft), paired(eng, ref, tpot)
            es, rs = side_stats(eng, slo), side_stats(ref, slo)
            sp = _ci(e2e.get(None, []), resamples)
            by_slice = {s: ci for s, xs in sorted((k, v) for k, v in e2e.items() if k is not None)
                        if (ci := _ci(xs, resamples))}
            names = sorted({r.slice for rep in eng + ref for r in rep.requests})
            slices = {s: TrafficSlice(engine=side_stats(eng, slo, s), reference=side_stats(ref, slo, s),
                                      speedup=by_slice.get(s), ttft_speedup=_ci(first.get(s, []), resamples),
                                      tpot_speedup=_ci(per_token.get(s, []), resamples)) for s in names}
            rates[rate_key(rate)] = TrafficRate(
                rate=rate, engine=es, reference=rs, speedup=sp, ttft_speedup=_ci(first.get(None, []), resamples),
                tpot_speedup=_ci(per_token.get(None, []), resamples),
                itl_p50_ratio=_ratio(rs.itl.p50, es.itl.p50), itl_p99_ratio=_ratio(rs.itl.p99, es.itl.p99),
                throughput_ratio=_ratio(es.output_tps, rs.output_tps),
                goodput_ratio=_ratio(es.goodput_rps, rs.goodput_rps), by_slice=by_slice, slices=slices,
                base=side_stats(base, slo) if base else None,
                base_speedup=_ci(paired(base, ref, latency).get(None, []), resamples) if base else None)
            overall[rate] = sp
            for s, ci in by_slice.items():
                per_slice[s][rate] = ci
        engines[name] = TrafficEngine(rates=rates, crossover=crossover(overall),
                                      crossover_by_slice={s: crossover(v) for s, v in sorted(per_slice.items())})
    return Traffic(arrival=cfg.arrival, requests=cfg.requests, repeats=cfg.repeats, slo=slo, engines=engines)


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1000:.0f} ms"


def crossover_sentence(c: TrafficCrossover, highest: float) -> str:
    if c.below_at_lowest:
        return f"speculation is slower already at the lowest rate, {c.rate:g} req/s"
    if not c.seen:
        return f"speculation pays at every rate up to {highest:g} req/s"
    where = f"about {c.interpolated:.2g} req/s" if c.interpolated else f"{c.rate:g} req/s"
    return f"speculation stops paying at {where} (below 1x from {c.rate:g} req/s)"


def verdicts_for(t: Traffic) -> list[VerdictLine]:
    out = []
    for name, e in t.engines.items():
        for key, row in e.rates.items():
            for side, s in (("engine", row.engine), ("reference", row.reference), ("base", row.base)):
                if s is not None and s.failed:
                    who = {"engine": name, "reference": f"the reference of {name}", "base": f"the base of {name}"}[side]
                    out.append(VerdictLine.of("traffic", name, "fail",
                                              f"{s.failed} of {s.requests} requests to {who} failed at {key} req/s "
                                              f"({s.first_error}): the load could not be measured as configured"))
            sp = row.speedup
            if sp is not None:
                out.append(VerdictLine.of(
                    "traffic", name, "info",
                    f"at {key} req/s: latency {sp.estimate:.2f}x (95% CI {sp.low:.2f}-{sp.high:.2f}, n={sp.n}); "
                    f"TTFT p99 {_ms(row.engine.ttft.p99)} (without speculation {_ms(row.reference.ttft.p99)}), "
                    f"TPOT p99 {_ms(row.engine.tpot.p99)} ({_ms(row.reference.tpot.p99)})"
                    + ("; saturated" if row.engine.saturated or row.reference.saturated else "")))
        if e.rates:
            highest = max(r.rate for r in e.rates.values())
            out.append(VerdictLine.of("traffic", name, "info", crossover_sentence(e.crossover, highest)))
    return out


def run(results: Results, ctx) -> tuple[Traffic | None, list[VerdictLine]]:
    cfg = ctx.config.checks.traffic
    if cfg is None or not results.traffic:
        return None, []
    analysis = analyze_traffic(results, cfg, ctx.config.checks.speedup.bootstrap_resamples)
    return analysis, verdicts_for(analysis)


__all__ = ["analyze_traffic", "crossing", "crossover", "crossover_sentence", "latency", "rate_key", "run", "side_stats",
           "tpot", "ttft", "verdicts_for"]
