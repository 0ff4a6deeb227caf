"""GPU evidence (issue 53, item 5): the demo gate, the self-test's mutants and a few unchanged runs on one CUDA GPU,
every result in one folder, within 9 minutes.

    scripts/gpu_evidence.sh [OUT] [--test-mode]            # what `make gpu-evidence` runs
    python scripts/gpu_evidence.py --out OUT [--test-mode] [--budget-s S] [--wheels DIR]

For a machine with one CUDA GPU whose Python has torch, transformers, scipy, pyyaml, jinja2 and requests and reaches
no network. Each step is a subprocess with its own time limit, exit code and logs (``OUT/logs/<step>.stdout`` and
``.stderr``); a step that fails or runs out of time loses none of the others' results:

1. ``wheels``: the pure-Python dependencies such a machine lacks (pydantic and its own: ``make gpu-wheels`` fetches
   them into ``.whl/`` where pip works), installed with ``--no-index`` into ``OUT/site``, only when pydantic 2 is
   not importable there;
2. ``install``: ``pip install --no-deps -e .`` where the ``specguard`` distribution is not installed (every step runs
   ``python -m gate`` from the checkout all the same, so a refused install costs nothing);
3. ``environment`` and ``nvidia-smi``: the card, torch, CUDA and every dependency's version;
4. ``demo-float32`` and ``demo-bfloat16``: ``specguard gate`` on configs derived from ``gate/demo/specguard.yaml``
   (written to ``OUT/configs/``: ``models.device: cuda`` and the dtype; no flag of the CLI sets them) with an empty
   baselines folder, so the verdict is the run's own checks: in bfloat16 the GPU's near-tie flips must be judged
   noise (``near_tie``), not bugs (``confident``);
5. ``selftest-bfloat16``: ``specguard selftest --every-check --device cuda --dtype bfloat16``: every mutant caught
   (with every check that catches it), the correct engine without alarm;
6. ``null``: ``specguard selftest --null --device cuda --dtype bfloat16``, a few unchanged runs counted per check.

``OUT/summary.json`` and ``OUT/summary.md`` (the card, torch, each step's command, wall time, exit code and
verdict) are rewritten after every step, so even a killed driver leaves the finished steps' summary. A step's limit
is its own, shortened so that every later step keeps at least its floor before the deadline (``--budget-s``, 540 s:
the whole run, install included); a step that cannot get its floor is skipped and says so. On its limit a step gets
SIGTERM (the gate keeps finished work) and, 10 s later, SIGKILL; the self-tests' progress lines in its stderr
still count the mutants and runs it finished.

``--test-mode`` runs the same steps on the CPU (device cpu, float32, smaller settings) so the script is exercised
where there is no GPU: ``python benchmarks/gpu_evidence_cpu.py`` (docs/performance.md). Exit 0 when every step
that ran exited 0, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "gate" / "demo" / "specguard.yaml"
BUDGET_S = 540.0  # 9 minutes, the whole run
SUMMARY_S = 5.0  # kept back from the deadline for the last summary
GRACE_S = 10.0  # SIGTERM, then this long before SIGKILL (inside the step's limit)
SCHEMA = "specguard.gpu-evidence/1"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1"}
# every runtime dependency of pyproject.toml, by import name: the probe says which the machine lacks
IMPORTS = ("torch", "transformers", "yaml", "jinja2", "requests", "prometheus_client", "pydantic", "numpy", "scipy",
           "pathspec", "rich", "huggingface_hub")
PROBE = """\
import importlib, json, platform, sys
out = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
       "modules": {}}
for name in sys.argv[1:]:
    try:
        out["modules"][name] = getattr(importlib.import_module(name), "__version__", "?")
    except Exception as exc:
        out["modules"][name] = "missing: " + type(exc).__name__ + ": " + str(exc)
try:
    import torch
    out["torch"], out["torch_cuda"] = torch.__version__, torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    if out["cuda_available"]:
        out["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        out["bf16_supported"] = torch.cuda.is_bf16_supported()
        out["cudnn"] = torch.backends.cudnn.version()
    out["cpu_threads"] = torch.get_num_threads()
except Exception as exc:
    out["torch_error"] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Settings:
    """What the steps run with: the GPU's, or the CPU test mode's smaller ones."""

    device: str
    dtypes: tuple[str, ...]  # the demo gate's, one step each
    selftest_dtype: str
    selftest: tuple[str, ...]  # `specguard selftest` arguments beyond --device and --dtype
    null: tuple[str, ...]  # `specguard selftest --null` arguments beyond those
    demo: dict  # config overrides, dotted path -> value
    threads: tuple[str, ...]
    limits: dict[str, tuple[float, float]]  # step -> (limit, floor) in seconds


GPU = Settings(
    device="cuda", dtypes=("float32", "bfloat16"), selftest_dtype="bfloat16",
    selftest=("--seeds", "2", "--samples", "600"), null=("--runs", "3", "--repeats", "8", "--samples", "600"),
    demo={}, threads=(),
    limits={"wheels": (40, 10), "install": (60, 10), "environment": (60, 15), "nvidia-smi": (20, 5),
            "demo-float32": (100, 45), "demo-bfloat16": (100, 45), "selftest-bfloat16": (130, 45),
            "null": (120, 45)})
TEST = Settings(
    device="cpu", dtypes=("float32",), selftest_dtype="float32",
    selftest=("--seeds", "1", "--samples", "100", "--mutant", "accept-off-by-one"),
    null=("--runs", "1", "--repeats", "2", "--samples", "100"),
    demo={"suite.slices": ["code", "prose", "questions"], "suite.max_prompts_per_slice": 1,
          "batching.batch_sizes": [1, 2], "batching.compositions": 1,
          "generation.max_new_tokens": 16, "generation.sampling.batch_sizes": [2],
          "checks.distribution.num_samples": 200, "checks.distribution.power_trials": 0,
          "checks.speedup.time_budget_s": 1, "checks.speedup.max_repeats": 2, "checks.speedup.min_repeats": 2,
          "checks.speedup.max_batches_per_cell": 1, "checks.speedup.context_buckets": [1024],
          "checks.speedup.calibration_trials": 3},
    threads=("--threads", "1"),  # one: on 2 shared cores two torch threads spin against other work
    limits={"wheels": (40, 10), "install": (60, 10), "environment": (60, 15), "nvidia-smi": (20, 5),
            "demo-float32": (300, 60), "selftest-float32": (300, 60), "null": (480, 60)})
TEST_BUDGET_S = 1200.0  # 2 shared CPU cores: the test mode's own budget


@dataclass(frozen=True)
class Step:
    name: str
    argv: list[str]
    what: str  # a sentence for the summary
    kind: str = "plain"  # how its verdict is read: plain, environment, nvidia-smi, demo, selftest, null
    run_dir: str | None = None  # a gate step's output folder, relative to OUT
    skip: str | None = None  # why it does not run


@dataclass
class Outcome:
    name: str
    what: str
    command: str
    limit_s: float | None = None
    exit_code: int | None = None
    timed_out: bool = False
    wall_s: float | None = None
    skipped: str | None = None
    error: str | None = None  # the step could not start
    stdout: str | None = None
    stderr: str | None = None
    verdict: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.skipped is not None or self.exit_code == 0


# ---- the steps ------------------------------------------------------------------------------------------------

def set_dotted(doc: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        doc = doc.setdefault(key, {})
    doc[last] = value


def demo_config(out: Path, settings: Settings, dtype: str) -> Path:
    """gate/demo/specguard.yaml on this device in this dtype (and the test mode's smaller settings), as a file in
    OUT/configs/: the CLI sets neither models.device nor the dtype."""
    import yaml

    doc = yaml.safe_load(DEMO.read_text())
    overrides = {"models.device": settings.device, "models.target.dtype": dtype, "models.draft.dtype": dtype,
                 "output.dir": str(out / f"demo-{dtype}"), "output.cache_dir": None, **settings.demo}
    for dotted, value in overrides.items():
        set_dotted(doc, dotted, value)
    path = out / "configs" / f"demo-{dtype}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# derived from gate/demo/specguard.yaml by scripts/gpu_evidence.py: {json.dumps(overrides)}\n"
                    + yaml.safe_dump(doc, sort_keys=False))
    return path


def has(python: str, code: str) -> bool:
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=60, cwd=ROOT).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def plan(out: Path, settings: Settings, python: str, wheels: Path, test_mode: bool) -> list[Step]:
    gate = [python, "-m", "gate"]
    steps = []
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    pydantic2 = has(python, "import pydantic, sys; sys.exit(int(pydantic.VERSION.split('.')[0]) < 2)")
    steps.append(Step("wheels", [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                                 "--no-cache-dir", "--upgrade", "--target", str(out / "site"), *map(str, found)],
                      "the dependencies this Python lacks, from the carried wheels (no network)",
                      skip="pydantic 2 is importable here" if pydantic2 else
                      None if found else f"pydantic 2 is missing and {wheels} holds no wheels (make gpu-wheels)"))
    installed = has(python, "import importlib.metadata as m; m.version('specguard')")
    steps.append(Step("install", [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e",
                                  str(ROOT)], "the project, as `pip install --no-deps -e .`",
                      skip="the specguard distribution is installed here" if installed else None))
    steps.append(Step("environment", [python, "-c", PROBE, *IMPORTS],
                      "the Python, torch, CUDA and the card, as torch sees them", kind="environment"))
    steps.append(Step("nvidia-smi", ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit,"
                                     "clocks.max.sm,temperature.gpu,utilization.gpu", "--format=csv"],
                      "the card, as the driver sees it", kind="nvidia-smi",
                      skip="test mode: no GPU" if test_mode else None))
    for dtype in GPU.dtypes:
        name = f"demo-{dtype}"
        if dtype not in settings.dtypes:
            steps.append(Step(name, [], f"the demo gate in {dtype}", skip="test mode: float32 only"))
            continue
        config = demo_config(out, settings, dtype)
        steps.append(Step(name, [*gate, "gate", str(config), "--out", str(out / name), "--no-cache",
                                 "--baselines-dir", str(out / "baselines"), *settings.threads],
                          f"the demo gate on {settings.device} in {dtype}, judged by its own checks (no baseline)",
                          kind="demo", run_dir=name))
    dtype = settings.selftest_dtype
    # --every-check: each mutant's every failing check, to set beside the fp32 table in docs/checks.md
    steps.append(Step(f"selftest-{dtype}", [*gate, "selftest", "--json", "--every-check", "--device", settings.device,
                                            "--dtype", dtype, *settings.selftest, *settings.threads],
                      f"the self-test's mutants and the correct engine on {settings.device} in {dtype}",
                      kind="selftest"))
    steps.append(Step("null", [*gate, "selftest", "--null", "--json", "--device", settings.device, "--dtype", dtype,
                               *settings.null, *settings.threads],
                      f"unchanged runs, stored and paired, counted per check on {settings.device} in {dtype}",
                      kind="null"))
    return steps


def shown(argv: list[str]) -> str:
    """A command as the summary writes it: the probe's source by name ($PROBE: scripts/gpu_evidence.py)."""
    return " ".join('"$PROBE"' if a == PROBE else shlex.quote(a) for a in argv)


def run_step(step: Step, out: Path, limit: float, env: dict) -> Outcome:
    """Run one step in its own process group: SIGTERM at ``limit - GRACE_S``, SIGKILL at ``limit``."""
    logs = out / "logs"
    result = Outcome(step.name, step.what, shown(step.argv), limit_s=round(limit, 1),
                     stdout=f"logs/{step.name}.stdout", stderr=f"logs/{step.name}.stderr")
    started = time.monotonic()
    with open(logs / f"{step.name}.stdout", "wb") as so, open(logs / f"{step.name}.stderr", "wb") as se:
        try:
            proc = subprocess.Popen(step.argv, stdout=so, stderr=se, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
                                    start_new_session=True)
        except OSError as exc:
            result.error, result.wall_s = f"{type(exc).__name__}: {exc}", 0.0
            return result
        try:
            result.exit_code = proc.wait(timeout=max(limit - GRACE_S, 1.0))
        except subprocess.TimeoutExpired:
            result.timed_out = True
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                result.exit_code = proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                result.exit_code = proc.wait()
    result.wall_s = round(time.monotonic() - started, 1)
    return result


# ---- reading each step's verdict --------------------------------------------------------------------------------

def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _last_json_line(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def demo_verdict(run_dir: Path) -> dict:
    """The gate's own verdict, and per batch size how the speculative outputs differ from the reference: near-tie
    flips (float noise, allowed) against confident divergences (bugs)."""
    verdict, checks = _json(run_dir / "verdict.json"), _json(run_dir / "checks.json")
    phases, results = _json(run_dir / "phases.json"), _json(run_dir / "results.json")
    out: dict = {}
    if verdict:
        out.update(outcome=verdict.get("outcome"), headline=verdict.get("headline"),
                   hardware_key=verdict.get("hardware_key"),
                   checks=[f"{c['check']}{' bs ' + str(c['batch_size']) if c.get('batch_size') else ''}: "
                           f"{c['status']} ({c.get('why', '')})" for c in verdict.get("checks", [])])
    if checks:
        out["equivalence"] = {
            f"{engine} bs {bs}": {"sequences": row.get("sequences"), "exact_match": row.get("exact_match"),
                                  **{k: row.get("divergences", {}).get(k) for k in ("near_tie", "confident", "length",
                                                                                    "unclassified")}}
            for engine, by_bs in (checks.get("equivalence") or {}).items() for bs, row in by_bs.items()}
        out["speedup"] = [f"bs {v['batch_size']}: {v['why']}" for v in checks.get("verdicts", [])
                          if v.get("check") == "speedup" and v.get("status") == "info"]
        out["noise_floor"] = [f"bs {v['batch_size']}: {v['why']}" for v in checks.get("verdicts", [])
                              if v.get("check") == "noise_floor"]
    if phases:
        out["gate_wall_s"] = round(phases.get("wall_s", 0.0), 1)
    if results:
        fp = results.get("fingerprint", {})
        out.update(status=results.get("status"), hardware=fp.get("hardware"), libraries=fp.get("libraries"),
                   dtype=fp.get("models", {}).get("target", {}).get("dtype"))
    if not out:
        out["missing"] = f"{run_dir.name}/ holds no verdict.json, checks.json or results.json"
    return out


def selftest_verdict(stdout: str, stderr: str) -> dict:
    report = _last_json_line(stdout)
    if report:
        caught = [m for m in report["mutants"] if m["caught"]]
        return {"mutants": len(report["mutants"]), "caught": len(caught),
                "escaped": [m["name"] for m in report["mutants"] if not m["caught"]],
                "caught_by": {m["name"]: m["caught_by"] for m in report["mutants"]},
                "correct_engine": report["correct_engine"]}
    # cut short: the progress lines say what it finished
    lines = stderr.splitlines()
    return {"partial": True, "mutants_done": [ln for ln in lines if ln.startswith("mutant ")],
            "correct_runs_done": [ln for ln in lines if ln.startswith("correct ")]}


def null_verdict(stdout: str, stderr: str) -> dict:
    report = _last_json_line(stdout)
    if report:
        failed = [r for r in report["rows"] if r.get("failed")]
        return {"passed": report["passed"], "seconds": round(report["seconds"], 1), "runs": len(report["runs"]),
                "between_run_sd": report["between_sd"], "between_run_df": report["between_df"],
                "failed": [f"{r['mode']} {r['check']}: {r['failed']} of {r['runs']}" for r in failed],
                "speed_cells_marked": [f"{r['mode']}: {r['marked']} of {r['cells']}" for r in report["rows"]
                                       if "cells" in r],
                "distribution_groups": report["distribution_groups"]}
    return {"partial": True, "runs_done": [ln for ln in stderr.splitlines()
                                           if ln.startswith(("stored run", "paired run"))]}


def read_verdict(step: Step, result: Outcome, out: Path) -> dict:
    def text(rel: str | None) -> str:
        try:
            return (out / rel).read_text(errors="replace") if rel else ""
        except OSError:
            return ""

    stdout, stderr = text(result.stdout), text(result.stderr)
    if step.kind == "environment":
        return _last_json_line(stdout) or {"missing": "the probe printed no JSON"}
    if step.kind == "nvidia-smi":
        rows = [r for r in stdout.splitlines() if r.strip()]
        return {"header": rows[0], "cards": rows[1:]} if len(rows) > 1 else {}
    if step.kind == "demo":
        return demo_verdict(out / step.run_dir)
    if step.kind == "selftest":
        return selftest_verdict(stdout, stderr)
    if step.kind == "null":
        return null_verdict(stdout, stderr)
    return {}


# ---- the summary ------------------------------------------------------------------------------------------------

def card_of(results: list[Outcome]) -> str:
    by = {r.name: r.verdict for r in results}
    smi = by.get("nvidia-smi", {}).get("cards")
    if smi:
        return smi[0].split(",")[0].strip()
    devices = by.get("environment", {}).get("devices")
    return devices[0] if devices else "none seen (no CUDA device: nvidia-smi and torch.cuda found none)"


def headline(result: Outcome) -> str:
    v = result.verdict
    if result.skipped:
        return f"skipped: {result.skipped}"
    if result.error:
        return f"did not start: {result.error}"
    said = "timed out; " if result.timed_out else ""
    if "outcome" in v:
        eq = v.get("equivalence", {})
        flips = sum(r.get("near_tie") or 0 for r in eq.values())
        confident = sum(r.get("confident") or 0 for r in eq.values())
        return (f"{said}{v['outcome']}: {v.get('headline')}; divergences from the reference: {flips} near-tie "
                f"(noise), {confident} confident (bugs)")
    if "mutants" in v:
        escaped = f", escaped: {', '.join(v['escaped'])}" if v["escaped"] else ""
        ce = v["correct_engine"]
        return (f"{said}{v['caught']} of {v['mutants']} mutants caught{escaped}; correct engine: "
                f"{ce['false_alarms']} false alarm(s) in {ce['runs']} run(s)")
    if "passed" in v:
        return (f"{said}{'no check failed' if v['passed'] else 'FAILED: ' + '; '.join(v['failed'])} in {v['runs']} "
                f"unchanged run(s); speed cells marked: {', '.join(v['speed_cells_marked'])}"
                + (f"; between-run spread {v['between_run_sd']:.1%}" if v.get("between_run_sd") is not None else ""))
    if "modules" in v:
        missing = sorted(k for k, m in v["modules"].items() if str(m).startswith("missing"))
        cuda = f"CUDA {v.get('torch_cuda')}, {', '.join(v.get('devices', [])) or 'no CUDA device'}"
        return (f"{said}Python {v.get('python')}, torch {v.get('torch')}, {cuda}; "
                + (f"missing: {', '.join(missing)}" if missing else f"all {len(v['modules'])} dependencies import"))
    if "cards" in v:
        return f"{said}{'; '.join(v['cards'])}"
    if "gate_wall_s" in v:  # a gate cut short: how far it got
        return f"{said}exit {result.exit_code}, no verdict; the gate's phases took {v['gate_wall_s']} s"
    if v.get("partial"):
        done = v.get("mutants_done", []) + v.get("correct_runs_done", []) + v.get("runs_done", [])
        return f"{said}cut short after {len(done)} progress line(s) (in its stderr log)"
    return f"{said}exit {result.exit_code}"


def write_summary(out: Path, meta: dict, results: list[Outcome]) -> None:
    env = next((r.verdict for r in results if r.name == "environment"), {})
    doc = {"schema": SCHEMA, **meta, "card": card_of(results), "torch": env.get("torch"),
           "torch_cuda": env.get("torch_cuda"), "python": env.get("python"),
           "missing_modules": sorted(k for k, v in env.get("modules", {}).items() if str(v).startswith("missing")),
           "passed": all(r.ok for r in results), "steps": [asdict(r) for r in results]}
    (out / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = [f"# GPU evidence ({'TEST MODE on the CPU: no GPU figures' if meta['test_mode'] else 'GPU'})", "",
          f"- card: **{doc['card']}**",
          f"- torch {doc['torch']} (CUDA {doc['torch_cuda']}), Python {doc['python']}"
          + (f"; missing modules: {', '.join(doc['missing_modules'])}" if doc["missing_modules"] else ""),
          f"- started {meta['started_utc']}, {meta.get('wall_s', '…')} s of a {meta['budget_s']:.0f} s budget; "
          f"device {meta['device']}; commit {meta['commit']}",
          f"- command: `{meta['command']}`", "",
          "| step | exit | wall (limit) | verdict |", "|---|---|---|---|"]
    for r in results:
        wall = "–" if r.wall_s is None else f"{r.wall_s:.0f} s ({r.limit_s:.0f} s)"
        code = "–" if r.exit_code is None else str(r.exit_code)
        md.append(f"| {r.name} | {code} | {wall} | {headline(r).replace('|', '/')} |")
    md += ["", "Commands (each step's logs: `logs/<step>.stdout`, `logs/<step>.stderr`):", ""]
    md += [f"- {r.name}: `{r.command}`" for r in results if r.command]
    for r in results:
        if r.verdict.get("equivalence"):
            md += ["", f"## {r.name}", "", "| cell | sequences | identical | near-tie flips | confident | length |",
                   "|---|---|---|---|---|---|"]
            md += [f"| {cell} | {e['sequences']} | {e['exact_match']:.0%} | {e['near_tie']} | {e['confident']} | "
                   f"{e['length']} |" for cell, e in r.verdict["equivalence"].items()]
            md += ["", *[f"- {line}" for line in r.verdict.get("checks", [])],
                   *[f"- speedup {line}" for line in r.verdict.get("speedup", [])]]
    (out / "summary.md").write_text("\n".join(md) + "\n")


def commit() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("SPECGUARD_EVIDENCE_OUT", "gpu-evidence"))
    p.add_argument("--test-mode", action="store_true", help="the same steps on the CPU, float32, smaller settings")
    p.add_argument("--budget-s", type=float, default=None,
                   help=f"seconds for the whole run (default $SPECGUARD_EVIDENCE_BUDGET_S, else {BUDGET_S:.0f}; "
                        f"{TEST_BUDGET_S:.0f} in test mode)")
    p.add_argument("--wheels", default=str(ROOT / ".whl"), help="wheels to install where pydantic 2 is missing")
    p.add_argument("--started", type=float, default=None, help="epoch seconds the budget counts from (the caller's)")
    args = p.parse_args(argv)
    started = args.started or time.time()
    budget = args.budget_s or float(os.environ.get("SPECGUARD_EVIDENCE_BUDGET_S", 0)) or (
        TEST_BUDGET_S if args.test_mode else BUDGET_S)
    deadline = time.monotonic() + budget - (time.time() - started) - SUMMARY_S
    settings = TEST if args.test_mode else GPU
    out = Path(args.out).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **OFFLINE}
    site = out / "site"
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    meta = {"test_mode": args.test_mode, "device": settings.device, "budget_s": budget, "commit": commit(),
            "started_utc": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"),
            "command": shlex.join([Path(sys.executable).name, "scripts/gpu_evidence.py", *(argv or sys.argv[1:])])}
    steps = plan(out, settings, sys.executable, Path(args.wheels), args.test_mode)
    results: list[Outcome] = []
    for i, step in enumerate(steps):
        limit, floor = settings.limits.get(step.name, (60.0, 10.0))
        later = sum(settings.limits.get(s.name, (0, 10))[1] for s in steps[i + 1:] if not s.skip)
        limit = min(limit, deadline - time.monotonic() - later)
        if step.skip or limit < floor:
            why = step.skip or f"out of time: {max(limit, 0):.0f} s left for it, it needs {floor:.0f} s"
            result = Outcome(step.name, step.what, shown(step.argv), skipped=why)
        else:
            print(f"[gpu-evidence] {step.name}: {shown(step.argv)} (limit {limit:.0f} s)", flush=True)
            result = run_step(step, out, limit, env)
            result.verdict = read_verdict(step, result, out)
        results.append(result)
        print(f"[gpu-evidence] {step.name}: {headline(result)}", flush=True)
        meta["wall_s"] = round(time.time() - started, 1)
        write_summary(out, meta, results)
    print(f"[gpu-evidence] {meta['wall_s']} s; {out / 'summary.md'}", flush=True)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
