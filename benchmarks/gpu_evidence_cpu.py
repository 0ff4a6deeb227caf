"""The GPU evidence script's test mode, on the CPU: ``scripts/gpu_evidence.sh OUT --test-mode``, the same steps as on
a GPU (device cpu, float32, smaller settings), so the script is exercised where no GPU is lent.

    python benchmarks/gpu_evidence_cpu.py [--out DIR]        # default gpu-evidence-cpu/; make gpu-evidence-cpu

It holds the script to what the GPU run needs of it: ``summary.json`` and ``summary.md`` written; every step that ran
exited 0 inside its limit; the demo gate's verdict from its own checks (neutral: no baseline) with no confident
divergence; the mutant caught; neither the correct engine nor the unchanged runs failing a check.  Then it prints
the summary and the wall time.  The steps run real gates whose timing phases measure this machine, and the whole
takes minutes on 2 cores, more under load: a benchmark, not a test (docs/performance.md has its figures).  Run it
alone.  Exit 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def problems_of(summary: dict) -> list[str]:
    steps = {s["name"]: s for s in summary["steps"]}
    out = [f"{s['name']}: " + ("timed out" if s["timed_out"] else s["error"] or f"exit {s['exit_code']}")
           for s in steps.values() if not s["skipped"] and (s["exit_code"] != 0 or s["timed_out"])]
    demo = steps["demo-float32"]["verdict"]
    if demo.get("outcome") != "neutral":
        out.append(f"demo-float32: outcome {demo.get('outcome')!r}, expected 'neutral' (its own checks, no baseline)")
    if any(e.get("confident") for e in demo.get("equivalence", {}).values()):
        out.append("demo-float32: a confident divergence from the reference")
    selftest = steps["selftest-float32"]["verdict"]
    if selftest.get("escaped") or not selftest.get("caught"):
        out.append(f"selftest: not every mutant caught: {selftest}")
    if selftest.get("correct_engine", {}).get("false_alarms"):
        out.append(f"selftest: the correct engine raised {selftest['correct_engine']['false_alarms']} alarm(s)")
    if not steps["null"]["verdict"].get("passed"):
        out.append(f"null: {steps['null']['verdict']}")
    if steps["demo-bfloat16"]["skipped"] != "test mode: float32 only":
        out.append("demo-bfloat16: expected skipped in test mode")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu-evidence-cpu")
    args = p.parse_args()
    started = time.perf_counter()
    code = subprocess.call(["scripts/gpu_evidence.sh", args.out, "--test-mode"], cwd=ROOT,
                           env={**os.environ, "PYTHON": sys.executable})
    wall = time.perf_counter() - started
    out = ROOT / args.out
    try:
        summary = json.loads((out / "summary.json").read_text())
        print((out / "summary.md").read_text())
    except (OSError, ValueError) as exc:
        print(f"no summary: {exc}")
        return 1
    problems = problems_of(summary) + ([] if code == 0 else [f"the script exited {code}"])
    print(f"test mode: {wall:.0f} s wall, {len(summary['steps'])} steps; load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    print("\n".join(f"PROBLEM {p}" for p in problems) or "every check holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
