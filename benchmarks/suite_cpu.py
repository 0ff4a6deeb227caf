"""Where the test suite's CPU goes: each test's CPU seconds, its children's included (gates under `act`, launched
servers, plug-in workers), which ``--durations`` (wall time) does not show.

    PYTHONPATH=benchmarks python -m pytest -q -n auto --maxprocesses 4 --dist worksteal -p suite_cpu
    python benchmarks/suite_cpu.py [--top 40]

The first line is `make test`'s command with this file as a plug-in: each pytest worker appends one JSON line per
test (its id, wall seconds, and the CPU seconds of the worker and of the children it waited for during the test) to
``.pytest-cpu/<worker>.jsonl`` (``SPECGUARD_CPU_LOG`` names another folder; remove the folder before a new run).
The second sums them: in all, per test module, and the heaviest tests.

A child's CPU counts only once it has been waited for (``getrusage(RUSAGE_CHILDREN)``), so a server left running
past its test is missing, and an interpreter's imports count where it ran. Run it alone: another job on the same
cores inflates every figure.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time
from pathlib import Path

import pytest

LOG = Path(os.environ.get("SPECGUARD_CPU_LOG", ".pytest-cpu"))


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    wall, cpu = time.perf_counter(), _cpu()
    yield
    LOG.mkdir(exist_ok=True)
    row = {"id": item.nodeid, "wall": time.perf_counter() - wall, "cpu": _cpu() - cpu}
    with open(LOG / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=40, help="heaviest tests to list (default 40)")
    ap.add_argument("--log", type=Path, default=LOG, help=f"the plug-in's folder (default {LOG})")
    args = ap.parse_args()
    files = sorted(args.log.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no *.jsonl in {args.log}: run the suite with `-p suite_cpu` first (see --help)")
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    total = sum(r["cpu"] for r in rows)
    print(f"{len(rows)} tests, {total:.0f} CPU-s in tests ({len(files)} worker(s)), {sum(r['wall'] for r in rows):.0f}"
          " wall-s summed")
    modules: collections.Counter = collections.Counter()
    for r in rows:
        modules[r["id"].split("::")[0]] += r["cpu"]
    print("\nCPU-s by module:")
    for name, cpu in modules.most_common(20):
        print(f"{cpu:8.1f}  {cpu / total:4.0%}  {name}")
    print(f"\nthe {args.top} heaviest tests (CPU-s, wall-s):")
    for r in sorted(rows, key=lambda r: -r["cpu"])[:args.top]:
        print(f"{r['cpu']:8.1f} {r['wall']:7.1f}  {r['id']}")
    cumulative = sorted((r["cpu"] for r in rows), reverse=True)
    for share in (0.5, 0.8):
        n = next(i for i in range(len(cumulative)) if sum(cumulative[:i + 1]) >= share * total) + 1
        print(f"{share:.0%} of the CPU is in the {n} heaviest tests")


if __name__ == "__main__":
    main()
