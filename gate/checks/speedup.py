"""Speedup that holds up: per slice, per load level and per context length, with confidence intervals.

Inputs are the interleaved timing executions of ``specguard run`` (phase
``timing``).  Each (batch, repeat) gives one paired sample per speculative
engine: ``reference wall time / engine wall time`` for the same prompts, same
batch, measured back to back.  From those:

* per **cell** (slice x load x context bucket) and engine: median speedup with
  a bootstrap 95% CI, throughput (tokens/s), per-token latency, acceptance rate,
  mean accepted length, acceptance per draft position, and why the repeats
  stopped (``precision``, ``budget``, ``max_repeats``);
* the **load curve**: pooled speedup per batch size, and the crossover load
  where it falls below 1 (or that none was seen);
* per **context bucket** and per **slice**, pooled;
* **expected vs measured**: Leviathan et al.'s expectation from the measured
  acceptance, k and cost ratio c (``gate.stats.expected_speedup``); their ratio
  is the implementation's efficiency.  The paper assumes a (k+1)-token
  verification costs one decode step; the calibration also measures what it
  really costs (``verify_ratio``), and the expectation with that cost is
  reported beside it: where the two differ, the batch is compute-bound;
* **memory**: peak per engine and load (CUDA ``max_memory_allocated``, or peak RSS on CPU);
* the **worst slice** and its gap to the mean of slices;
* the share of engine time spent realigning ragged rows.

Mean accepted length under greedy decoding is deterministic (no timing noise),
which makes it the sharpest regression signal; it is reported per cell for the
baseline comparison.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict

from gate.engines.base import SpecCounters
from gate.stats import alpha_from_mean_accepted, bootstrap_median_ci, expected_speedup

REFERENCE = "reference"


def _pairs(doc: dict) -> dict:
    """{(engine, bs, batch, repeat): (ref_exec, engine_exec)} for timing executions."""
    by_key: dict = defaultdict(dict)
    for ex in doc["executions"]:
        if ex["phase"] == "timing":
            by_key[(ex["batch_size"], ex["batch"], ex["repeat"])][ex["engine"]] = ex
    out = {}
    for (bs, batch, rep), engines in by_key.items():
        ref = engines.get(REFERENCE)
        if ref is None:
            continue
        for name, ex in engines.items():
            if name != REFERENCE:
                out[(name, bs, batch, rep)] = (ref, ex)
    return out


def _tokens(ex: dict) -> int:
    return sum(len(s["token_ids"]) for s in ex["sequences"])


def _latency(ex: dict) -> float | None:
    vals = [s["per_token_s"] for s in ex["sequences"] if not s.get("filler") and s.get("per_token_s")]
    return statistics.median(vals) if vals else None


def _counters(execs: list[dict]) -> SpecCounters | None:
    total, seen = SpecCounters(), False
    for ex in execs:
        for s in ex["sequences"]:
            if s.get("counters") and not s.get("filler"):
                total.add(SpecCounters.from_dict(s["counters"]))
                seen = True
    return total if seen else None


def _block(samples: list[tuple[dict, dict]], k: int, calib: dict | None, resamples: int) -> dict:
    """Statistics over paired (reference, engine) executions."""
    ratios = [ref["wall_s"] / ex["wall_s"] for ref, ex in samples if ex["wall_s"] > 0]
    ci = bootstrap_median_ci(ratios, resamples)
    first = [ex for _, ex in samples if ex["repeat"] == 0]  # counters are identical across greedy repeats
    counters = _counters(first)
    ref_tps = [_tokens(r) / r["wall_s"] for r, _ in samples if r["wall_s"] > 0]
    eng_tps = [_tokens(e) / e["wall_s"] for _, e in samples if e["wall_s"] > 0]
    ref_lat = [x for x in (_latency(r) for r, _ in samples) if x]
    eng_lat = [x for x in (_latency(e) for _, e in samples) if x]
    row = {
        "samples": len(ratios),
        "speedup": ci.to_dict(),
        "throughput_tok_s": {"reference": statistics.median(ref_tps) if ref_tps else None,
                             "engine": statistics.median(eng_tps) if eng_tps else None},
        "per_token_latency_s": {"reference": statistics.median(ref_lat) if ref_lat else None,
                                "engine": statistics.median(eng_lat) if eng_lat else None},
        "realign_share": (sum(e["realign_s"] for _, e in samples) / sum(e["wall_s"] for _, e in samples))
        if samples and sum(e["wall_s"] for _, e in samples) else None,
    }
    if counters is not None and counters.num_target_forwards:
        mal = counters.mean_accepted_length
        row.update({
            "acceptance_rate": counters.acceptance_rate,
            "mean_accepted_length": mal,
            "acceptance_per_pos": counters.acceptance_per_pos(),
        })
        if calib and mal is not None:
            alpha = alpha_from_mean_accepted(mal, k)
            c = calib["cost_ratio"]
            expected = expected_speedup(alpha, k, c)
            row["expected"] = {"alpha_effective": alpha, "cost_ratio": c, "speedup": expected,
                               "efficiency": ci.estimate / expected if expected else None}
            verify = calib.get("verify_ratio")
            if verify:
                # The same model with the measured cost of a (k+1)-token verification
                # instead of the paper's assumption that it costs one decode step.
                row["expected"]["verify_ratio"] = verify
                row["expected"]["speedup_with_verify_cost"] = mal / (verify + c * k)
    return row


def analyze_speedup(doc: dict, resamples: int = 2000) -> dict:
    k = doc["settings"]["num_draft_tokens"]
    calib = doc.get("calibration", {})
    pairs = _pairs(doc)
    engines = sorted({key[0] for key in pairs})
    out: dict = {"engines": {}, "protocol": doc.get("timing", {}), "calibration": calib}
    for engine in engines:
        mine = {key: v for key, v in pairs.items() if key[0] == engine}
        sizes = sorted({key[1] for key in mine})

        def select(pred, mine=mine):
            return [v for key, v in sorted(mine.items()) if pred(key, v[1])]

        def calib_at(bs):
            return calib.get(str(bs))

        cells: dict = {}
        for bs in sizes:
            for slc, bucket in sorted({(v[1]["slice"], v[1]["bucket"]) for key, v in mine.items() if key[1] == bs}):
                s = select(lambda key, ex, bs=bs, slc=slc, bucket=bucket:
                           key[1] == bs and ex["slice"] == slc and ex["bucket"] == bucket)
                stop = out["protocol"].get(str(bs), {}).get(f"{slc}|{bucket}", {})
                cells[f"{slc}|{bs}|{bucket}"] = {"slice": slc, "batch_size": bs, "bucket": bucket,
                                                 "stopped_by": stop.get("stopped_by"), "repeats": stop.get("repeats"),
                                                 **_block(s, k, calib_at(bs), resamples)}
        load = {str(bs): _block(select(lambda key, ex, bs=bs: key[1] == bs), k, calib_at(bs), resamples)
                for bs in sizes}
        for bs, row in load.items():
            cells_at = out["protocol"].get(bs, {}).values()
            reps = [c["repeats"] for c in cells_at]
            row["repeats"] = {"min": min(reps), "max": max(reps),
                              "stopped_by": sorted({c["stopped_by"] for c in cells_at})} if reps else None
        buckets = sorted({v[1]["bucket"] for v in mine.values()}, key=_bucket_order)
        by_bucket = {b: {str(bs): _block(select(lambda key, ex, b=b, bs=bs: ex["bucket"] == b and key[1] == bs),
                                         k, calib_at(bs), resamples)
                         for bs in sizes if any(key[1] == bs and v[1]["bucket"] == b for key, v in mine.items())}
                     for b in buckets}
        slices = sorted({v[1]["slice"] for v in mine.values()})
        by_slice = {s: {str(bs): _block(select(lambda key, ex, s=s, bs=bs: ex["slice"] == s and key[1] == bs),
                                        k, calib_at(bs), resamples)
                        for bs in sizes if any(key[1] == bs and v[1]["slice"] == s for key, v in mine.items())}
                    for s in slices}
        out["engines"][engine] = {
            "cells": cells, "load_curve": load, "by_bucket": by_bucket, "by_slice": by_slice,
            "crossover": _crossover(load), "worst_slice": _worst_slice(by_slice),
            "crossover_by_slice": {s: _crossover(rows) for s, rows in by_slice.items()},
            "memory": _memory(doc, engine),
        }
    return out


def _bucket_order(name: str) -> int:
    return int(name.split("-")[0].rstrip("+"))


def _crossover(load: dict) -> dict:
    """The smallest load whose speedup is below 1 (median, and clearly: CI upper bound < 1)."""
    below = [int(bs) for bs, row in load.items() if row["speedup"]["estimate"] < 1]
    clearly = [int(bs) for bs, row in load.items() if row["speedup"]["high"] < 1]
    trend = [load[bs]["speedup"]["estimate"] for bs in sorted(load, key=int)]
    return {
        "batch_size": min(below) if below else None,
        "clearly_below_1_from": min(clearly) if clearly else None,
        "seen": bool(below),
        "shrinks_with_load": all(b <= a for a, b in itertools.pairwise(trend)) if len(trend) > 1 else None,
    }


def _worst_slice(by_slice: dict) -> dict:
    out = {}
    sizes = sorted({bs for rows in by_slice.values() for bs in rows}, key=int)
    for bs in sizes:
        meds = {s: rows[bs]["speedup"]["estimate"] for s, rows in by_slice.items() if bs in rows}
        if not meds:
            continue
        worst = min(meds, key=meds.get)
        mean = statistics.mean(meds.values())
        out[bs] = {"slice": worst, "speedup": meds[worst], "mean_of_slices": mean,
                   "gap_to_mean": meds[worst] - mean, "relative_gap": (meds[worst] - mean) / mean if mean else None}
    return out


def _memory(doc: dict, engine: str) -> dict:
    out: dict = defaultdict(dict)
    for ex in doc["executions"]:
        if ex["phase"] == "timing" and ex["engine"] in (engine, REFERENCE) and ex.get("peak_memory_bytes"):
            row = out[str(ex["batch_size"])]
            key = "engine" if ex["engine"] == engine else "reference"
            row[key] = max(row.get(key, 0), ex["peak_memory_bytes"])
    return dict(out)


def speedup_verdicts(analysis: dict, min_speedup: float | None, add) -> None:
    for engine, e in analysis["engines"].items():
        for bs, row in e["load_curve"].items():
            sp = row["speedup"]
            text = (f"{sp['estimate']:.2f}x (95% CI {sp['low']:.2f}-{sp['high']:.2f}, n={sp['n']})"
                    if sp["n"] > 1 else f"{sp['estimate']:.2f}x (one sample)")
            if min_speedup is not None and sp["high"] < min_speedup:
                add("speedup", engine, "fail", f"{text} is clearly below min_speedup {min_speedup}", int(bs))
            elif min_speedup is not None and sp["estimate"] < min_speedup:
                add("speedup", engine, "warn", f"{text}: median below min_speedup {min_speedup}, "
                                               "but within noise", int(bs))
            else:
                add("speedup", engine, "info" if min_speedup is None else "pass", text, int(bs))
        cross = e["crossover"]
        if cross["seen"]:
            add("speedup", engine, "info", f"speculation stops paying off at batch size {cross['batch_size']}")
        worst = e["worst_slice"]
        for bs, w in worst.items():
            if w["relative_gap"] is not None and w["relative_gap"] < -0.1:
                add("speedup", engine, "info", f"worst slice '{w['slice']}': {w['speedup']:.2f}x, "
                                               f"{-w['relative_gap']:.0%} below the mean of slices", int(bs))
