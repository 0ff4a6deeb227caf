"""``specguard merge``: combine the results of a sharded run into one results.json.

Each shard (``specguard run --shard i/n`` on its own runner) writes its own results.  Merging is a union of
executions by :class:`~gate.run.records.JobKey`; it refuses shards of different runs (fingerprint, settings,
shard count), naming what differs, and says which shards are missing.  ``check`` and ``compare`` then take
the merged file unchanged.
"""

from __future__ import annotations

from pathlib import Path

from gate.errors import MergeError, Problem
from gate.run.results import Results, load_results


def merge(dirs: list[Path]) -> Results:
    shards = [(Path(d), load_results(d)) for d in dirs]
    if not shards:
        raise MergeError(Problem("specguard merge", "no shard directories given"))
    first_dir, first = shards[0]
    problems = []
    counts = set()
    seen: dict[int, Path] = {}
    for d, r in shards:
        differs = r.fingerprint.differences(first.fingerprint)
        if r.fingerprint.models != first.fingerprint.models and not any(x.startswith(("target", "draft"))
                                                                       for x in differs):
            differs.append("models")
        if r.settings != first.settings:
            fields = [k for k in type(r.settings).model_fields if getattr(r.settings, k) != getattr(first.settings, k)]
            differs.append("settings." + ", settings.".join(fields))
        if differs:
            problems.append(Problem(str(d / "results.json"), f"not a shard of the same run as {first_dir}: "
                                    + "; ".join(differs), field="fingerprint",
                                    hint="merge only the shards of one `specguard run --shard i/n` matrix"))
        if r.shard is None:
            problems.append(Problem(str(d / "results.json"), "not a shard (run without --shard)", field="shard"))
            continue
        i, n = r.shard
        counts.add(n)
        if i in seen:
            problems.append(Problem(str(d / "results.json"), f"shard {i}/{n} given twice (also {seen[i]})",
                                    field="shard"))
        seen[i] = d
    if len(counts) > 1:
        problems.append(Problem("specguard merge", f"shards of different counts: {sorted(counts)}", field="shard"))
    if problems:
        raise MergeError(problems)
    n = counts.pop()
    missing = sorted(set(range(n)) - set(seen))
    if missing:
        raise MergeError(Problem("specguard merge", f"shards {missing} of {n} are missing", field="shard",
                                 hint="pass every shard's directory"))
    executions, keys = [], set()
    timing: dict = {}
    calibration, calibrated, reused, skipped, traffic = {}, [], [], [], []
    status = "complete"
    for _, r in sorted(shards, key=lambda x: x[1].shard[0]):
        for ex in r.executions:
            if ex.key not in keys:
                keys.add(ex.key)
                executions.append(ex)
        for bs, cells in r.timing.items():
            timing.setdefault(bs, {}).update(cells)
        if r.calibration:
            calibration, calibrated = r.calibration, r.calibrated_engines
        traffic += r.traffic  # request-rate replays run on shard 0 only
        reused += r.cache.get("reused", [])
        skipped += [s for s in r.skipped if s not in skipped]
        if r.status != "complete":
            status = r.status
    batches = [b for _, r in shards for b in r.batches]
    return first.model_copy(update={"executions": executions, "timing": timing, "calibration": calibration,
                                    "calibrated_engines": calibrated, "cache": {"reused": reused},
                                    "skipped": skipped, "status": status, "stopped_at": None, "shard": None,
                                    "batches": batches, "phases": {}, "traffic": traffic})


def write_merged(dirs: list[Path], out) -> Results:
    """The shards' results as one run of its own (its own id), written to ``out`` (a :class:`gate.io.rundir.RunDir`)
    after an earlier run's outputs there are cleared; the merged results."""
    import uuid

    from gate.io.rundir import JUDGED, RESULTS, RUN

    merged = merge(dirs).model_copy(update={"run_id": uuid.uuid4().hex})
    out.clear(JUDGED + RUN)
    out.write_json(RESULTS, merged)
    return merged
