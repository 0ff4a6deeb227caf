"""Every built-in mutant's minimal cases (gate.repro), and each case's replay against the mutant and the correct engine.

    python benchmarks/repro_mutants.py [--out DIR] [--budget-s 120] [--mutant NAME ...]

Runs ``specguard selftest --seeds 0 --repro DIR`` (each mutant through the self-test's run and checks, its failing
checks shrunk within the budget), then, for each case folder, ``python replay.py`` (must print "reproduced") and
``python replay.py --engine speculative`` (the correct engine: must print "not reproduced"), and prints one table
row per case: the check, the case's size against the run's failing batch, the engine runs and seconds the
shrinking took, and both replays.  docs/checks.md ("Minimal cases") records a run of it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def replay(folder: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "replay.py", *args], cwd=folder, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    # replay.py exits 1 where it reproduces, 0 where not (2, 3: it could not say)
    return lines[-1].split(":")[0] if lines and proc.returncode in (0, 1) else f"error ({proc.returncode})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="where the cases go (default: a temporary folder)")
    ap.add_argument("--budget-s", type=float, default=120.0, help="per mutant")
    ap.add_argument("--mutant", action="append", help="only these (default: all)")
    ap.add_argument("--samples", type=int, default=600)
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="specguard-repro-"))
    cmd = [sys.executable, "-m", "gate", "selftest", "--seeds", "0", "--samples", str(args.samples), "--repro",
           str(out), "--threads", "2"] + [x for m in args.mutant or [] for x in ("--mutant", m)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(f"selftest --repro: exit {proc.returncode} in {time.perf_counter() - started:.0f} s; cases in {out}")
    print("| mutant | check | case | from the run's batch | engine runs | replay: mutant | replay: correct engine |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for mutant_dir in sorted(p for p in out.iterdir() if (p / "index.json").is_file()):
        index = json.loads((mutant_dir / "index.json").read_text())
        for c in index["cases"]:
            folder = mutant_dir / Path(c["folder"]).name
            case = json.loads((folder / "case.json").read_text())
            if not c["reproduced"]:
                print(f"| {mutant_dir.name} | {c['check']} | no case: {c['trigger']} | | | | |")
                bad += 1
                continue
            if c["check"] == "equivalence":
                now = (f"{len(case['prompts'])} row(s) of {'/'.join(str(len(p)) for p in case['prompts'])} tokens, "
                       f"{case['settings']['max_new_tokens']} new")
                was = case["shrunk_from"]
                before = (f"{was['batch_size']} rows of {'/'.join(map(str, was['prompt_lengths']))}, "
                          f"{was['max_new_tokens']} new")
                runs = case["runs"]
            else:
                now = f"z = {case['count']['engine']['z']} (control {case['count']['control']['z']})"
                before = f"rejects from {case['smallest_rejecting_tokens']} tokens"
                runs = "–"
            mine, correct = replay(folder), replay(folder, "--engine", "speculative")
            bad += mine != "reproduced" or correct != "not reproduced"
            print(f"| {mutant_dir.name} | {c['check']} | {now} | {before} | {runs} | {mine} | {correct} |")
    print(f"total {time.perf_counter() - started:.0f} s; {bad} case(s) that did not replay as they should")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
