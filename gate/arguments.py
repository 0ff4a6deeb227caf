"""The command line's words and value types: every command's and option's help, by name, and the form or range of
every value the CLI takes, and the parser built from them (``gate/cli.py`` runs what it parses)."""

import argparse
import os
import re

HELP = {
    "specguard": "A merge gate for speculative decoding: checks that speculative output matches the non-speculative "
                 "reference at production batch sizes (telling bugs from float noise), reports reproducibility on "
                 "its own line, measures speedup per task slice, load level and context length, and compares all of "
                 "it with a committed baseline.",
    # commands
    "validate": "check a config and the suite it names; print every problem at once",
    "run": "generate with every engine at every batch size; write results.json (and phases.json: where the time "
           "went)",
    "merge": "combine the results.json of every shard of a run into one",
    "check": "analyse results.json (re-scoring with the target); write checks.json and checks.md; exit 1 if a check "
             "fails",
    "compare": "compare a run (results.json + checks.json) with its baseline; write verdict.json, comment.md, "
               "summary.md (no model is loaded)",
    "gate": "run, check, then compare with the baseline; exit 1 on a failed check or a regression",
    "demo": "the whole gate on the embedded demo pair and its committed baseline",
    "baseline": "refresh a baseline from an accepted run, or print its history",
    "refresh": "write baselines/<name>/<hardware>.json from a run (the old one goes to history); refused for a run "
               "that fails equivalence or distribution",
    "history": "the trend of speedup and acceptance per slice across refreshes",
    "changed": "did a change touch what the gate guards (draft, head, target, speculation, batching, suite, plug-ins, "
               "and the files the launch lines load: --config, the chat template)? prints one line per change (a "
               "config field, a launch flag, a key of a YAML or JSON file, a file); writes changed=true|false to "
               "$GITHUB_OUTPUT; exit 0 either way",
    "github": "deliver to GitHub (used by the Action): the PR comment, the refresh PR",
    "comment": "upsert this config's one PR comment (GITHUB_TOKEN, GITHUB_REPOSITORY, GITHUB_API_URL); a failure "
               "to post never changes the exit code",
    "refresh-pr": "commit the refreshed baseline files (written and pruned, one commit) through the REST API, to "
                  "the dispatched branch or to a refresh branch with a pull request",
    "selftest": "prove the checks catch deliberately broken engines and pass the correct one (on the demo pair)",
    "repro": "shrink each failing equivalence and distribution check of a run to its smallest replayable case: "
             "RUN_DIR/repro/<check>-<n>/ with case.json, replay.py and REPORT.md (the engines re-run, the reference "
             "confirming every candidate)",
    "repro --config": "the config the run was made with (its engines are rebuilt, its servers launched)",
    "repro --budget-s": "seconds for all the shrinking (default: checks.repro.budget_s from the config)",
    "selftest --every-check": "run each mutant through every stage (greedy at batch sizes 4 and 1, sampling) and "
                              "list every check that catches it; by default a mutant stops at the first stage that "
                              "catches it (--repro implies this)",
    "selftest --repro": "also shrink each caught mutant's failing checks to minimal cases, into DIR/<mutant>/",
    "plan": "what `specguard gate CONFIG` will do (batches, rows and tokens per phase, engine and batch size; "
            "reference batches already cached; the distribution check's possible confirmation pass; the devices "
            "every phase holds; each server's chunked prefill by wave and its weights plus KV cache against its "
            "memory share; the baseline it will be judged against, warned where the verdict is decided before "
            "the run) and, from the last run in the output directory on this runner or stated rates, how long "
            "each phase will take and its device-minutes, warned against the job's timeout; no weights load",
    "plan --against": "plan a paired run against this base config",
    "plan --tokens-per-s": "estimate from stated rates instead of an earlier run (fixed costs such as model load not "
                           "counted): N, every engine at every batch size; or per batch size, BS:N,BS:N,... such as "
                           "1:900,8:4000,32:9000 (log-log between stated sizes; below the smallest, its rate per row; "
                           "past the largest, held); either as ENGINE=... for one engine, the flag repeated for "
                           "several (one without ENGINE= covers the rest); the plan prints every rate it assumed",
    "plan --timeout-minutes": "the job's timeout, warned against where the estimate exceeds it (default: the "
                              "timeout-minutes of the step or job in .github/workflows that runs the specguard action "
                              "on this config, GitHub's 360 where that job sets none; the plan names the file)",
    "plan --gpu-memory": "each GPU's memory in GiB, for the memory lines: whether weights plus the KV cache each batch "
                         "size needs fit each launched server's share (default: read from torch.cuda or nvidia-smi "
                         "where this machine sees GPUs)",
    "plan --hardware-key": "the hardware key the gate's baseline is looked up under (as `gate --hardware-key`), and "
                           "the estimate from the last run in the output directory made under it, though this "
                           "machine's differs (a GPU runner's results.json and phases.json, from its artifact); "
                           "default: baseline.hardware_key, else this machine's",
    "plan --threads": "the torch CPU threads the gate will run with (its --threads): this machine's hardware key "
                      "counts them, so the baseline and the last run are looked up as that gate looks them up "
                      "(default: torch's choice)",
    "suite": "build a prompt suite",
    "import": "a suite from a JSONL sample of real requests ('prompt' or chat 'messages', at the top level or under "
              "'body'): deduplicated, stratified by slice and length, capped, validated like any suite",
    "FILE": "the request sample (JSONL)",
    "suite --out": "where the suite goes (written only when the import succeeds)",
    "--slice-field": "the request field that names its slice (default: slice; 'default' where absent)",
    "--per-slice": "at most this many prompts per slice, spread over short to long (default 16)",
    "--max-rows": "at most this many prompts in all (default 1000)",
    "--seed": "the sampling seed (default 0)",
    "--max-bytes": "refuse a sample larger than this (default 268435456: 256 MiB)",
    "exit codes": "Exit codes: 0 pass (or neutral: no baseline yet), 1 a check failed or a regression was found, "
                  "2 bad input, 3 the baseline is unusable (or missing under baseline.on_missing: stop), "
                  "130 interrupted.",
    "selftest epilog": "-v also prints each run's phases, prefixed with the mutant's (or correct-SEED's) name. "
                       "--speed instead plants slowdowns of 0/5/10/20% in the correct engine and prints how often "
                       "the speed rule flags and fails them, paired and stored; --null plants nothing and counts "
                       "what every check says of the unchanged engine (docs/checks.md)",
    "--speed": "the speed self-test: planted slowdowns, paired and stored, on this machine (about 90 s per paired run "
               "with 16 repeats on 2 CPU cores)",
    "--null": "the null self-test: the correct engine against itself, stored and paired, --runs times each; per "
              "check how often it failed and warned, with the 95%% interval, and the between-run spread here "
              "(about a minute per run with --repeats 8 on 2 CPU cores); exit 1 if any check failed",
    "--runs": "speed and null self-tests: runs per mode (and slowdown) (default 10)",
    "--repeats": "speed and null self-tests: timed repeats per cell (default 16: what a planted 10%% slowdown needs "
                 "to be flagged, docs/checks.md)",
    # arguments
    "config": "path to specguard.yaml",
    "--out": "output directory (default: output.dir from the config; specguard-out for demo)",
    "merge --out": "where the merged results.json goes",
    "check --out": "directory holding results.json (default: output.dir from the config)",
    "compare --out": "directory for the verdict and report (default: RUN_DIR)",
    "--resume": "reuse finished executions of an interrupted run",
    "--budget-minutes": "fit the run to this many wall-clock minutes of the command, what buys most first (instead "
                        "of checks.budget_minutes): equivalence at the largest batch size, the sampling test, timing "
                        "at min_repeats, then the other batch sizes; what it leaves out is said in checks.json and "
                        "the comment (docs/config.md)",
    "--plan-to": "first append what `specguard plan` says of this gate (same --out, --against, --hardware-key, "
                 "--baselines-dir and --budget-minutes) to FILE as a fenced block, then run (the Action's job "
                 "summary); a plan that fails is one line there, and never stops the gate",
    "plan --budget-minutes": "plan against this budget instead of checks.budget_minutes: what it keeps and drops, in "
                             "priority order, at the estimate's rates",
    "--no-cache": "do not read or write the reference cache",
    "--threads": "torch CPU threads, 1 to the number of cores (default: torch's choice)",
    "--hardware-key": "the key this runner's baseline is stored and looked up under (default: baseline.hardware_key, "
                      "else read off the hardware, e.g. cuda-nvidia-h100-80gb-hbm3)",
    "--run-id": "this run's id, written into results.json and verdict.json (default: a random one); `python -m "
                "gate.verdict.file OUT --run-id ID` checks that a passing verdict of this run exists",
    "--quiet": "print only the verdict",
    "--verbose": "also show the libraries' own output (weight-loading bars)",
    "--shard": "run only this shard's part (equivalence batches, whole timing cells, sampling groups), for a job "
               "matrix; combine with `merge`",
    "--timing-only": "calibration and timing alone (no outputs, no sampling): one more timing pass of a baseline, in "
                     "a process of its own (a refresh runs baseline.timing_passes of them)",
    "dirs": "the shards' output directories",
    "run_dir": "directory holding results.json and checks.json",
    "--baseline": "a baseline file, or a baseline name looked up in --baselines-dir for this run's hardware "
                  "(default: the name the run was made under: baseline.name, else the config file's name)",
    "--baselines-dir": "where baselines live (default: baseline.dir of the config, else ./baselines)",
    "--config": "a specguard.yaml: its baseline.dir is where baselines live, and its baseline name is looked up",
    "changed --config": "the config's path in the repository",
    "comment --config": "the config (its baseline name names the comment's marker)",
    "--against": "paired mode: time the base config's speculative engine (its draft and k) beside this one's, in "
                 "this job",
    "--refresh": "refresh the baseline from this run instead of comparing with it (an intended change); "
                 "equivalence and distribution must still pass",
    "--force": "accept a failing run as the baseline (needs --reason)",
    "--reason": "why this refresh is made (an intended slowdown, a new draft); recorded in the baseline and the "
                "refresh PR; required with --force",
    "--from": "the run's directory (results.json and checks.json)",
    "--dir": "where baselines live (default: baseline.dir of the config, else ./baselines)",
    "name": "the baseline's name (baseline.name, or the config file's name)",
    "--hardware": "only this hardware key",
    "--base": "the base commit (the PR's base SHA)",
    "--head": "the head commit (default HEAD)",
    "--repo": "the repository's working tree (default: the current directory)",
    "--pr": "the pull request number",
    "--when": "when to post or edit the comment",
    "--run-dir": "post RUN_DIR/comment.md (with this run's verdict)",
    "refresh-pr --run-dir": "the run the baseline was refreshed from",
    "--refused": "post the fork refusal",
    "--skipped": "post 'nothing the gate guards changed'",
    "--setup-failed": "post that the gate could not start, and why",
    "--update-only": "only edit this config's existing comment; post none (a later push that no longer touches what "
                     "the gate guards)",
    "--base-branch": "the repository's default branch (the PR targets it)",
    "--branch": "the branch the refresh was dispatched on: when it is not the default branch, the baseline is "
                "committed to it (the PR that needs it carries it); else a specguard/baseline-<name>-<hardware> "
                "branch and a PR",
    "--push-only": "push the branch, open no PR",
    "--json": "print one JSON object",
    "--seeds": "runs of the correct engine (0 to 1000): the first on the mutants' own batches and seed, each later "
               "one with another seed and batch order; default 20",
    "--samples": "sampled tokens per engine for the distribution test (default 600)",
    "--mutant": "only this mutant (repeatable; an unknown name is refused with the list, before any model loads)",
    "--dtype": "the demo pair's dtype, in every self-test (bfloat16 flips near-ties as GPUs do; default float32)",
    "selftest --device": "where the demo pair runs, in every self-test: cpu, cuda, cuda:N, mps or auto (models.device; "
                         "default cpu)",
}


def typed(check, expected: str):
    """An argparse type from a predicate (every value the CLI takes has a stated form or range)."""
    def parse(text: str):
        value = check(text)
        if value is None:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    return parse


def count(low: int, high: int, what: str = ""):
    return typed(lambda t: int(t) if re.fullmatch(r"[+-]?\d+", t.strip()) and low <= int(t) <= high else None,
                  f"a whole number from {low} to {high}{what}")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# more threads than cores only spin against each other (5000 held two cores for minutes; 100000 segfaulted libgomp)
threads = count(1, max(cores(), 1), " (this machine's cores)")
seconds = typed(lambda t: (lambda v: v if v is not None and 0 <= v <= 86400 else None)(
    float(t) if re.fullmatch(r"\d+(\.\d*)?|\.\d+", t.strip()) else None), "seconds from 0 to 86400")
def _positive(high: float, what: str):
    return typed(lambda t: (lambda v: v if v is not None and 0 < v <= high else None)(
        float(t) if re.fullmatch(r"\d+(\.\d*)?|\.\d+", t.strip()) else None), what)


def _stated_rate(text: str):
    from gate.run.rates import parse

    return parse(text)


tokens_per_s = typed(_stated_rate, "a rate above 0 tokens per second (N), or one per batch size (BS:N,BS:N,..., "
                                   "such as 1:900,8:4000,32:9000), optionally for one engine (ENGINE=...)")
minutes = _positive(100_000, "minutes above 0")
budget_minutes = _positive(10_000, "minutes above 0 and at most 10000")
gib = _positive(100_000, "GiB above 0")
device = typed(lambda t: t if re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", t) else None,
               "auto, cpu, cuda, cuda:N or mps")
hardware_key = typed(lambda t: t if re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,99}", t) else None,
                       "1-100 characters from [a-z0-9_.-]")
run_id = typed(lambda t: t if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", t) else None,
                 "letters, digits, '.', '_' or '-' (at most 128)")
MAX_SHARDS = 256  # a GitHub Actions job matrix holds at most 256 jobs
shard = typed(lambda t: (lambda m: (int(m[1]), int(m[2])) if m and 0 <= int(m[1]) < int(m[2]) <= MAX_SHARDS
                         else None)(re.fullmatch(r"(\d{1,4})/(\d{1,4})", t.strip())),
              f"INDEX/COUNT with 0 <= INDEX < COUNT <= {MAX_SHARDS} (a job matrix holds at most {MAX_SHARDS} jobs), "
              "such as 0/4")


def parser(commands) -> argparse.ArgumentParser:
    """The ``specguard`` parser; ``commands``: what runs each command (gate.cli's ``cmd_*`` functions)."""
    from gate import __version__

    p = argparse.ArgumentParser(prog="specguard", description=HELP["specguard"], epilog=HELP["exit codes"])
    p.add_argument("--version", action="version", version=f"specguard {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(parent, name: str, fn, **kw):
        q = parent.add_parser(name, help=HELP[name], **kw)
        q.set_defaults(fn=fn, parser=q)
        return q

    def arg(q, *names, **kw):
        q.add_argument(*names, **{"help": HELP.get(names[-1]), **kw})

    def talk(q):
        for short, name in (("-q", "--quiet"), ("-v", "--verbose")):
            arg(q, short, name, action="store_true")

    def generating(q, config: bool = True):
        if config:
            arg(q, "config")
        arg(q, "--out")
        for name in ("--resume", "--no-cache"):
            arg(q, name, action="store_true")
        arg(q, "--threads", type=threads)
        arg(q, "--hardware-key", type=hardware_key, metavar="KEY")
        arg(q, "--run-id", type=run_id)
        arg(q, "--budget-minutes", type=budget_minutes, metavar="N")
        talk(q)

    arg(command(sub, "validate", commands.cmd_validate), "config")
    r = command(sub, "run", commands.cmd_run)
    generating(r)
    arg(r, "--shard", type=shard, metavar="INDEX/COUNT")
    arg(r, "--timing-only", action="store_true")
    mg = command(sub, "merge", commands.cmd_merge)
    arg(mg, "dirs", nargs="+", metavar="SHARD_DIR")
    arg(mg, "--out", required=True, help=HELP["merge --out"])
    c = command(sub, "check", commands.cmd_check)
    for name, kw in (("config", {}), ("--out", {"help": HELP["check --out"]}), ("--threads", {"type": threads})):
        arg(c, name, **kw)
    talk(c)
    rp = command(sub, "repro", commands.cmd_repro)
    arg(rp, "run_dir", metavar="RUN_DIR")
    arg(rp, "--config", required=True, help=HELP["repro --config"])
    arg(rp, "--budget-s", type=seconds, metavar="S", help=HELP["repro --budget-s"])
    arg(rp, "--threads", type=threads)
    talk(rp)
    m = command(sub, "compare", commands.cmd_compare)
    arg(m, "run_dir", metavar="RUN_DIR")
    for name in ("--baseline", "--baselines-dir", "--config"):
        arg(m, name)
    arg(m, "--out", help=HELP["compare --out"])
    talk(m)
    for name, fn in (("gate", commands.cmd_gate), ("demo", commands.cmd_demo)):
        g = command(sub, name, fn)
        generating(g, config=name == "gate")
        arg(g, "--baselines-dir")
        if name == "gate":
            arg(g, "--against", metavar="BASE.yaml")
            for name in ("--refresh", "--force", "--reason"):
                arg(g, name, **({} if name == "--reason" else {"action": "store_true"}))
            arg(g, "--plan-to", metavar="FILE")
        else:
            g.set_defaults(against=None, refresh=False, force=False, reason=None, plan_to=None)
    bsub = command(sub, "baseline", None).add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    br = command(bsub, "refresh", commands.cmd_baseline_refresh)
    arg(br, "config")
    arg(br, "--from", dest="from_dir", required=True, metavar="RUN_DIR", help=HELP["--from"])
    for name in ("--force", "--reason", "--dir"):
        arg(br, name, **({"action": "store_true"} if name == "--force" else {}))
    bh = command(bsub, "history", commands.cmd_baseline_history)
    for name in ("name", "--dir", "--config", "--hardware"):
        arg(bh, name)
    ch = command(sub, "changed", commands.cmd_changed)
    arg(ch, "--base", required=True, metavar="REV")
    arg(ch, "--head", default="HEAD", metavar="REV")
    arg(ch, "--config", default="specguard.yaml", help=HELP["changed --config"])
    arg(ch, "--repo", default=".")
    ghsub = command(sub, "github", None).add_subparsers(dest="github_command", required=True, metavar="ACTION")
    gc = command(ghsub, "comment", commands.cmd_github_comment)
    arg(gc, "--pr", type=count(1, 1 << 31), required=True)
    arg(gc, "--when", choices=("always", "on-change", "on-failure", "never"), default="always")
    arg(gc, "--config", help=HELP["comment --config"])
    what = gc.add_mutually_exclusive_group(required=True)
    for name, kw in (("--run-dir", {}), ("--refused", {"action": "store_true"}),
                     ("--skipped", {"action": "store_true"}), ("--setup-failed", {"metavar": "WHY"})):
        arg(what, name, **kw)
    arg(gc, "--update-only", action="store_true")
    gr = command(ghsub, "refresh-pr", commands.cmd_github_refresh_pr)
    arg(gr, "config")
    arg(gr, "--run-dir", required=True, help=HELP["refresh-pr --run-dir"])
    arg(gr, "--base-branch", required=True)
    for name in ("--branch", "--push-only", "--dir", "--repo"):
        arg(gr, name, **({"action": "store_true"} if name == "--push-only" else
                         {"default": "."} if name == "--repo" else {}))
    s = command(sub, "selftest", commands.cmd_selftest, epilog=HELP["selftest epilog"])
    for name in ("--json", "--speed", "--null"):
        arg(s, name, action="store_true")
    arg(s, "--seeds", type=count(0, 1000), default=20)
    arg(s, "--samples", type=count(100, 1_000_000), default=600)
    arg(s, "--mutant", action="append")
    arg(s, "--dtype", choices=("float32", "bfloat16"), default="float32")
    arg(s, "--device", type=device, default="cpu", help=HELP["selftest --device"])
    arg(s, "--repro", metavar="DIR", help=HELP["selftest --repro"])
    arg(s, "--every-check", action="store_true", help=HELP["selftest --every-check"])
    for name, low, default in (("--runs", 1, 10), ("--repeats", 2, 16)):
        arg(s, name, type=count(low, 1000), default=default)
    arg(s, "--threads", type=threads)
    talk(s)
    si = command(command(sub, "suite", None).add_subparsers(dest="suite_command", required=True, metavar="ACTION"),
                 "import", commands.cmd_suite_import)
    for name, kw in (("file", {"metavar": "FILE", "help": HELP["FILE"]}), ("--slice-field", {"default": "slice"}),
                     ("--out", {"required": True, "help": HELP["suite --out"]})):
        arg(si, name, **kw)
    for name, low, high, default in (("--per-slice", 1, 100_000, 16), ("--max-rows", 1, 1_000_000, 1000),
                                     ("--seed", 0, 1 << 31, 0), ("--max-bytes", 1, 1 << 40, 256 << 20)):
        arg(si, name, type=count(low, high), default=default)
    pl = command(sub, "plan", commands.cmd_plan)
    for name, kw in (("config", {}), ("--out", {"help": HELP["check --out"]}), ("--json", {"action": "store_true"}),
                     ("--against", {"metavar": "BASE.yaml", "help": HELP["plan --against"]}),
                     ("--tokens-per-s", {"type": tokens_per_s, "metavar": "RATE", "action": "append",
                                         "help": HELP["plan --tokens-per-s"]}),
                     ("--timeout-minutes", {"type": minutes, "metavar": "N", "help": HELP["plan --timeout-minutes"]}),
                     ("--budget-minutes", {"type": budget_minutes, "metavar": "N",
                                           "help": HELP["plan --budget-minutes"]}),
                     ("--gpu-memory", {"type": gib, "metavar": "GIB", "help": HELP["plan --gpu-memory"]}),
                     ("--hardware-key", {"type": hardware_key, "metavar": "KEY",
                                         "help": HELP["plan --hardware-key"]}),
                     ("--threads", {"type": threads, "help": HELP["plan --threads"]}),
                     ("--baselines-dir", {"help": HELP["--baselines-dir"]})):
        arg(pl, name, **kw)
    return p
