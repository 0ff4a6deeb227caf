"""The public matrix of what the gate found on real serving stacks (issue 47, item 5): one small JSON summary per
real run, committed under ``docs/runs/``, and ``docs/stacks.md`` generated from them.

    python scripts/stacks.py summarize RUN_DIR --stack "vLLM-CPU" --out docs/runs/NAME.json \\
        --command "the command that made RUN_DIR" [--recount-z Z] [--date YYYY-MM-DD] [--version V]
    python scripts/stacks.py render            # docs/stacks.md from docs/runs/manifest.json and the summaries
    python scripts/stacks.py render --check    # exit 1 where docs/stacks.md is not what the summaries give

A summary holds no weights and no runner path: the stack and its version as results.json recorded them, the
method and k, the dtype, the hardware key, the batch sizes, the greedy verdict per batch size, the sampling verdict
(smallest p-value, calibrated and asymptotic, and an independent recount's z where one was made), the speedup per
batch size (or why it was not judged), the first minimal case's trigger sentence, and the command that made it.
``docs/runs/manifest.json`` lists the rows the matrix promises; a row whose summary is missing is an error that
names it, never a silent gap.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "runs"
OUT = ROOT / "docs" / "stacks.md"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"{path}: missing: summarize a run directory that `specguard gate` (or run + check) "
                         "wrote") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path}: not JSON ({exc})") from None


def _by_bs(rows: dict) -> list[tuple[str, dict]]:
    return sorted(rows.items(), key=lambda kv: int(kv[0]))


def summarize(run_dir: Path, stack: str, command: str, recount_z: float | None = None,
              date: str | None = None, version: str | None = None) -> dict:
    """The row's facts, from a run directory's results.json and checks.json (and its minimal cases)."""
    results = _read(run_dir / "results.json")
    checks = _read(run_dir / "checks.json")
    config = results.get("config") or {}
    spec = config.get("speculation") or {}
    stacks = results["fingerprint"].get("stacks") or {}
    engine = next((name for name in stacks if name != "reference"), next(iter(stacks), None))
    greedy = {bs: {"identical": row["exact_match"], "confident_divergences": row["divergences"]["confident"],
                   "confident_inconsistencies": row.get("confident_inconsistencies")}
              for rows in (checks.get("equivalence") or {}).values() for bs, row in _by_bs(rows)}
    dist = checks.get("distribution") or {}
    sampling = {}
    for rows in (dist.get("engines") or {}).values():
        for bs, row in _by_bs(rows):
            if row.get("control") or not row.get("pvalues"):
                continue
            sampling[bs] = {"n": row["n"], "rejected": row["rejected"], "tests": dist.get("tests"),
                            "smallest_p": min(row["pvalues"].values()),
                            "smallest_p_asymptotic": min((row.get("asymptotic") or row["pvalues"]).values()),
                            "recount_z": recount_z, **({"outside": row["outside"]} if row.get("outside") else {}),
                            **({"not_judged": row["not_judged"]} if row.get("not_judged") else {})}
    speed = {}
    not_judged = None
    for figures in ((checks.get("speedup") or {}).get("engines") or {}).values():
        not_judged = not_judged or figures.get("neighbours")
        for bs, row in _by_bs(figures["load_curve"]):
            s = row["speedup"]
            speed[bs] = {"speedup": s["estimate"], "low": s["low"], "high": s["high"],
                         "mean_accepted_length": row.get("mean_accepted_length")}
    index = run_dir / "repro" / "index.json"
    cases = _read(index).get("cases", []) if index.exists() else []
    failing = [v for v in checks.get("verdicts", []) if v.get("status") == "fail"]
    recorded = (stacks.get(engine) or {}).get("version")
    if recorded and version and version != recorded:
        raise SystemExit(f"--version {version!r}, but {run_dir / 'results.json'} recorded {recorded!r}")
    return {"stack": stack, "version": recorded or version, "version_recorded": bool(recorded),
            "method": spec.get("method") or "draft_model", "k": spec.get("num_draft_tokens"),
            "dtype": ((config.get("models") or {}).get("target") or {}).get("dtype"),
            "hardware": results["fingerprint"].get("hardware_key"),
            "batch_sizes": results["settings"].get("batch_sizes"), "status": results.get("status"),
            "greedy": greedy, "sampling": sampling, "speedup": speed, "speedup_not_judged": not_judged,
            **_served_as(config),
            "failed_checks": sorted({v["check"] for v in failing}),
            "minimal_case": cases[0].get("trigger") if cases else None,
            "command": command, "date": date or datetime.date.today().isoformat()}


def _served_as(config: dict) -> dict:
    """How the run asked, where it is not the matrix's default: the sampling temperature and truncation (T = 1, no
    truncation), the chat route (completions), and where the target was loaded (here, unless
    ``models.local_weights`` kept it on the servers: then the reference server's served logprobs were judged)."""
    sampling = (config.get("generation") or {}).get("sampling") or {}
    cut = {k: sampling[k] for k in ("temperature", "top_k", "top_p", "min_p") if k in sampling}
    out = {"sampling_settings": cut} if cut and cut != {"temperature": 1.0} else {}
    local = (config.get("models") or {}).get("local_weights", True)
    if local is not True:
        out["local_weights"] = local
        out["score_logprobs"] = next((e["http"]["score_logprobs"] for e in config.get("engines") or []
                                      if "score_logprobs" in (e.get("http") or {})), 20)
    if any(((e.get("http") or {}).get("route") == "chat") for e in config.get("engines") or []):
        out["route"] = "chat"
    return out


def _greedy(s: dict) -> str:
    return "<br>".join(f"bs {bs}: {g['identical']:.0%} identical, {g['confident_divergences']} confident"
                       for bs, g in _by_bs(s["greedy"])) or "not run"


def _sampling(s: dict) -> str:
    out = []
    how = s.get("sampling_settings")
    if s.get("local_weights") is not None and s["sampling"]:
        top = s.get("score_logprobs", 20)
        out.append("target on the servers only (local_weights: "
                   f"{str(s['local_weights']).lower()}), judged from the reference server's "
                   f"{'every' if top == 'all' else f'top {top}'} logprobs")
    if how and s["sampling"]:
        out.append(", ".join(f"T={v:g}" if k == "temperature" else f"{k} {v:g}" for k, v in how.items()) + ":")
    for bs, x in _by_bs(s["sampling"]):
        text = f"bs {bs}: {'❌ rejected' if x['rejected'] else '✅ consistent'} (n={x['n']}, p={x['smallest_p']:.2g}"
        if x.get("outside"):
            text += f"; {x['outside']} tokens outside the truncation"
        if x.get("smallest_p_asymptotic") is not None and x["smallest_p_asymptotic"] != x["smallest_p"]:
            text += f", asymptotic {x['smallest_p_asymptotic']:.2g}"
        if x.get("recount_z") is not None:
            text += f"; independent recount z {x['recount_z']:+.1f}"
        if x.get("not_judged"):
            text += f"; {x['not_judged']} not judged: outside the served top logprobs"
        out.append(text + ")")
    return "<br>".join(out) or "not sampled"


def _speed(s: dict) -> str:
    cells = "<br>".join(f"bs {bs}: {c['speedup']:.2f}x ({c['low']:.2f}–{c['high']:.2f})"
                        for bs, c in _by_bs(s["speedup"])) or "not timed"
    return cells + ("<br>not judged: servers interfered" if s.get("speedup_not_judged") else "")


def _escape(text: str) -> str:
    return text.replace("|", "&#124;").replace("\n", " ")


def row(s: dict) -> str:
    k = f" (k={s['k']})" if s.get("k") else ""
    found = ", ".join(s["failed_checks"]) + " failed" if s["failed_checks"] else "nothing failed"
    if s.get("minimal_case"):
        found += f": {s['minimal_case']}"
    version = s.get("version") or "version not recorded"
    if s.get("version") and not s.get("version_recorded", True):
        version += ", named when summarized: the run does not record it"
    route = ", chat route" if s.get("route") == "chat" else ""
    cells = [f"{s['stack']} ({version})", f"{s['method']}{k}{route}", str(s["dtype"]),
             s["hardware"], _greedy(s), _sampling(s), _speed(s), found, s["date"], f"`{s['command']}`"]
    return "| " + " | ".join(_escape(c) for c in cells) + " |"


def render(runs: Path = RUNS) -> str:
    manifest = _read(runs / "manifest.json")
    missing = [r["summary"] for r in manifest["rows"] if not (runs / r["summary"]).is_file()]
    if missing:
        raise SystemExit(f"{runs}: no summary for {', '.join(missing)} (promised by {runs / 'manifest.json'}): run "
                         "the stack, then `python scripts/stacks.py summarize RUN_DIR --stack NAME --command CMD "
                         f"--out {runs}/NAME.json`, or drop the row from the manifest")
    lines = ["# What the gate found on real serving stacks", "",
             "Generated by `python scripts/stacks.py render` (`make stacks`) from the committed summaries of real "
             "runs in [runs/](runs/) (one JSON per run, no weights), listed in `runs/manifest.json`. Greedy: the "
             "share of sequences identical to the non-speculative reference, and confident divergences (bugs, not "
             "float noise). Sampling: the distribution check's verdict (at T = 1 with no truncation unless the cell "
             "names the temperature and top_k/top_p/min_p) with its smallest p-value "
             "(calibrated, and its normal approximation where it differs), and an independent recount's z where "
             "one was made. Speedup: per batch size, 95% interval; where the gate's neighbour probe found the "
             "launched servers slowing each other, it is shown but was not judged. The setups, the commands and "
             "the evidence outside the gate are in [serving.md](serving.md).", "",
             "| stack (version) | method | dtype | hardware | greedy | sampling | speedup | what failed | date | "
             "command |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [row(_read(runs / r["summary"])) for r in manifest["rows"]]
    notes = [f"- {r['note']}" for r in manifest["rows"] if r.get("note")] + \
        [f"- {n}" for n in manifest.get("not_yet", [])]
    if notes:
        lines += ["", "Notes:", "", *notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summarize", help="one run directory's summary JSON")
    s.add_argument("run_dir", type=Path)
    s.add_argument("--stack", required=True, help="the stack's name as the matrix shows it (e.g. vLLM-CPU)")
    s.add_argument("--command", required=True, help="the command that made the run directory")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--recount-z", type=float, help="an independent recount's z (scripts/vllm_demo.py recount)")
    s.add_argument("--date", help="the run's date (default: today)")
    s.add_argument("--version", help="the stack's version where results.json records none (a plug-in engine)")
    r = sub.add_parser("render", help="docs/stacks.md from the summaries")
    r.add_argument("--runs", type=Path, default=RUNS)
    r.add_argument("--out", type=Path, default=OUT)
    r.add_argument("--check", action="store_true", help="exit 1 where the file is not what the summaries give")
    args = ap.parse_args(argv)
    if args.cmd == "summarize":
        summary = summarize(args.run_dir, args.stack, args.command, args.recount_z, args.date,
                            args.version)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
        print(args.out)
        return
    text = render(args.runs)
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            sys.exit(f"{args.out} is not what {args.runs} gives: run `make stacks`")
        return
    args.out.write_text(text)
    print(args.out)


if __name__ == "__main__":
    main()
