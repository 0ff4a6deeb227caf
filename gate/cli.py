"""The ``specguard`` command line.

Exit codes: 0 pass, 1 a check failed (or the run is incomplete), 2 bad input
(config, suite, model, results), 130 interrupted (finished work is kept; rerun
with ``--resume``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gate import __version__
from gate.errors import SpecguardError

DEMO_CONFIG = Path(__file__).resolve().parent / "demo" / "specguard.yaml"

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _threads(args) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def cmd_validate(args) -> int:
    from gate.config import check_paths, load_config
    from gate.suite import suite_for

    problems, suite = [], None
    try:
        loaded = load_config(args.config)
    except SpecguardError as exc:
        problems += exc.problems
        loaded = None
    problems += check_paths(args.config)
    if loaded is not None and not any(p.field == "suite.path" for p in problems):
        try:
            suite = suite_for(loaded)
        except SpecguardError as exc:
            problems += exc.problems
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        print(f"{len(problems)} problem(s) found", file=sys.stderr)
        return EXIT_USAGE
    print(f"{args.config}: OK ({len(suite.prompts)} prompts in {len(suite.slices)} slices: "
          f"{', '.join(suite.slices)})")
    return EXIT_OK


def _out_dir(args, loaded) -> Path:
    return Path(args.out) if args.out else loaded.resolve_path(loaded.config.output.dir)


def _run(args):
    """Load everything and run the engines; returns (exit code, loaded config, model pair, out dir)."""
    from gate.cache import ReferenceCache
    from gate.config import load_config
    from gate.engines import build_engine, build_reference
    from gate.models import load_pair
    from gate.runner import Runner
    from gate.suite import suite_for

    _threads(args)
    loaded = load_config(args.config)
    suite = suite_for(loaded)
    _say(f"loading models: target {loaded.config.models.target.path}, draft {loaded.config.models.draft.path}")
    pair = load_pair(loaded)
    engines = [build_engine(e, pair, loaded) for e in loaded.config.engines]
    out = _out_dir(args, loaded)
    cache_dir = loaded.config.output.cache_dir
    cache = None if (args.no_cache or not cache_dir) else ReferenceCache(loaded.resolve_path(cache_dir))
    runner = Runner(loaded, pair, suite, build_reference(pair), engines, out, log=_say, cache=cache)
    results = runner.run(resume=args.resume)
    n = len(results.executions)
    if results.status == "interrupted":
        where = results.stopped_at.model_dump(exclude_none=True) if results.stopped_at else {}
        _say(f"interrupted at {where}; {n} finished executions kept in {out / 'records.jsonl'}. "
             "Rerun with --resume to continue.")
        return EXIT_INTERRUPTED, loaded, pair, out
    reused = len(results.cache.get("reused", []))
    _say(f"wrote {out / 'results.json'} ({n} executions"
         + (f", {reused} reused from the reference cache" if reused else "") + ")")
    return EXIT_OK, loaded, pair, out


def _check(loaded, pair, out: Path) -> int:
    from gate.checks import run_checks
    from gate.results import atomic_write_json, atomic_write_text, load_results
    from gate.summary import render_text

    results = load_results(out)
    checks = run_checks(results, pair, loaded.config, say=_say)
    atomic_write_json(out / "checks.json", checks)
    text = render_text(results, checks)
    atomic_write_text(out / "summary.md", text)
    print(text)
    _say(f"wrote {out / 'checks.json'} and {out / 'summary.md'}")
    failed = [v for v in checks["verdicts"] if v["status"] == "fail"]
    return EXIT_FAIL if failed or results.status != "complete" else EXIT_OK


def cmd_run(args) -> int:
    return _run(args)[0]


def cmd_check(args) -> int:
    from gate.config import load_config
    from gate.models import load_pair

    _threads(args)
    loaded = load_config(args.config)
    return _check(loaded, load_pair(loaded), _out_dir(args, loaded))


def cmd_gate(args) -> int:
    code, loaded, pair, out = _run(args)
    return code if code != EXIT_OK else _check(loaded, pair, out)


def cmd_demo(args) -> int:
    args.config = str(DEMO_CONFIG)
    args.out = args.out or "specguard-out"
    return cmd_gate(args)


def cmd_selftest(args) -> int:
    from gate.selftest import selftest

    _threads(args)
    mutants = args.mutant or None
    report = selftest(seeds=args.seeds, samples=args.samples, mutants=mutants, say=_say)
    if args.json:
        print(json.dumps({"mutants": [{k: m[k] for k in ("name", "caught", "caught_by")}
                                      for m in report["mutants"]],
                          "correct_engine": {k: report["correct_engine"][k]
                                             for k in ("passed", "false_alarms", "runs")}}))
    else:
        for m in report["mutants"]:
            print(f"{'caught ' if m['caught'] else 'ESCAPED'} {m['name']:<26} {', '.join(m['caught_by'])}")
        c = report["correct_engine"]
        print(f"correct engine: {c['false_alarms']} false alarm(s) in {c['runs']} run(s)")
    return EXIT_OK if report["passed"] else EXIT_FAIL


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specguard",
        description="A merge gate for speculative decoding: checks that speculative output matches the "
                    "non-speculative reference at production batch sizes (telling bugs from float noise), "
                    "reports reproducibility on its own line, and measures speedup per task slice, load "
                    "level and context length.",
        epilog="Exit codes: 0 pass, 1 a check failed or the run is incomplete, 2 bad input, 130 interrupted.",
    )
    p.add_argument("--version", action="version", version=f"specguard {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = sub.add_parser("validate", help="check a config and the suite it names; print every problem at once")
    v.add_argument("config", help="path to specguard.yaml")
    v.set_defaults(fn=cmd_validate)

    def generation_args(q, config: bool = True):
        if config:
            q.add_argument("config", help="path to specguard.yaml")
        q.add_argument("--out", help="output directory (default: output.dir from the config; "
                                     "specguard-out for demo)")
        q.add_argument("--resume", action="store_true", help="reuse finished executions of an interrupted run")
        q.add_argument("--no-cache", action="store_true", help="do not read or write the reference cache")
        q.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")

    r = sub.add_parser("run", help="generate with every engine at every batch size; write results.json")
    generation_args(r)
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser("check", help="analyse results.json (re-scoring with the target); write checks.json "
                                     "and summary.md; exit 1 if a check fails")
    c.add_argument("config", help="path to specguard.yaml")
    c.add_argument("--out", help="directory holding results.json (default: output.dir from the config)")
    c.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    c.set_defaults(fn=cmd_check)

    g = sub.add_parser("gate", help="run, then check; exit 1 if a check fails")
    generation_args(g)
    g.set_defaults(fn=cmd_gate)

    d = sub.add_parser("demo", help="the whole gate on the embedded demo pair and the default suite")
    generation_args(d, config=False)
    d.set_defaults(fn=cmd_demo)

    s = sub.add_parser("selftest", help="prove the checks catch deliberately broken engines and pass the "
                                        "correct one (on the demo pair)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--seeds", type=int, default=20, help="runs of the correct engine (seed and batch order "
                                                         "vary); default 20")
    s.add_argument("--samples", type=int, default=600, help="sampled tokens per engine for the distribution "
                                                            "test (default 600)")
    s.add_argument("--mutant", action="append", help="only this mutant (repeatable)")
    s.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    s.set_defaults(fn=cmd_selftest)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except SpecguardError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
