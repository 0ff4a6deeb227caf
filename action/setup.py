"""Make specguard importable by the runner's own Python, without touching its torch.

Run by action.yml with the interpreter from the ``python`` input.  Self-hosted
GPU runners keep state and bring their own CUDA build of torch, so:

* specguard itself is used from the action's checkout (``PYTHONPATH``); nothing
  is built, so it works with no network;
* dependencies the interpreter already has **at a version specguard accepts**
  are used as they are; only the missing or too-old ones (never torch) are
  installed, into a directory reused by later jobs, keyed by the action's
  content and the interpreter.  What pip brings along beside them that the
  runner already has is removed from that directory, so it never shadows the
  runner's own packages;
* the light dependencies (``LIGHT``: what ``specguard changed`` and the PR
  comment import: no torch, transformers or numpy) are installed first, in
  every mode, so a job whose setup fails can still say why on the PR;
* ``mode: changed`` needs only those, for a cheap job on a GitHub-hosted runner.

Writes ``pythonpath=...`` (the Action, its dependency cache, then the runner's own PYTHONPATH),
``own-pythonpath=...`` (the first two: what servers the gate launches do not inherit) and, on failure,
``error=...`` to $GITHUB_OUTPUT.  A
virtualenv is not used: a venv made from a venv's interpreter cannot see that
venv's packages (the runner's torch), and a venv with its own torch is what must
not happen.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

try:
    from packaging.requirements import Requirement
except ImportError:  # pip always carries a copy
    from pip._vendor.packaging.requirements import Requirement

ACTION = Path(__file__).resolve().parent.parent
LIGHT = ("pyyaml", "pydantic", "pathspec", "requests", "jinja2")  # `changed` and the PR comment


def requirements() -> list[str]:
    text = (ACTION / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is not None:
        return list(tomllib.loads(text)["project"]["dependencies"])
    block = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    return re.findall(r'"([^"]+)"', block)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(req: str) -> str | None:
    """The runner's version of a requirement's distribution, or None."""
    try:
        return importlib.metadata.version(Requirement(req).name)
    except importlib.metadata.PackageNotFoundError:
        return None


def problem(req: str) -> str | None:
    """Why the runner's copy of ``req`` will not do (missing, or a version outside the range), else None."""
    r = Requirement(req)
    version = installed(req)
    if version is None:
        return f"{r.name} is not installed (specguard needs {r.name}{r.specifier})"
    if r.specifier and not r.specifier.contains(version, prereleases=True):
        return f"{r.name} {version} is installed, but specguard needs {r.name}{r.specifier}"
    return None


def key() -> str:
    h = hashlib.sha256()
    h.update(sys.executable.encode())
    h.update(sys.version.encode())
    for path in sorted((ACTION / "gate").rglob("*.py")) + [ACTION / "pyproject.toml"]:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def unshadow(cache: Path, requested: set[str]) -> list[str]:
    """Remove from ``cache`` what pip brought along that the runner already has: the runner's copy stays in use."""
    removed = []
    for info in sorted(cache.glob("*.dist-info")):
        name = info.name.split("-")[0]
        if _norm(name) in requested or installed(name) is None:
            continue
        record = info / "RECORD"
        if record.is_file():
            for line in record.read_text(encoding="utf-8").splitlines():
                rel = line.split(",", 1)[0]
                target = (cache / rel).resolve()
                if rel and cache.resolve() in target.parents and target.is_file():
                    target.unlink()
        shutil.rmtree(info, ignore_errors=True)
        removed.append(name)
    for d in sorted(cache.iterdir(), reverse=True):  # packages emptied by the removal
        if d.is_dir() and not any(p.is_file() for p in d.rglob("*")):
            shutil.rmtree(d, ignore_errors=True)
    return removed


def write_outputs(**values: str) -> None:
    out = os.environ.get("GITHUB_OUTPUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            for k, v in values.items():
                fh.write(f"{k}={' '.join(v.split())}\n")


def install(reqs: list[str], cache: Path, extra: list[str]) -> str | None:
    """pip-install ``reqs`` into ``cache``; an error message, or None."""
    cache.mkdir(parents=True, exist_ok=True)
    names = " ".join(reqs)
    print(f"installing {names} into {cache}")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--upgrade", "--target", str(cache),
                           *reqs, *extra])
    if proc.returncode != 0:
        return (f"could not install {names} (pip exit {proc.returncode}); on a runner without internet, preinstall "
                "them or pass pip options in `extra-install-args`")
    removed = unshadow(cache, {_norm(Requirement(r).name) for r in reqs})
    if removed:
        print(f"kept the runner's own {', '.join(removed)} (not shadowed)")
    return None


def ensure(group: list[str], cache: Path, extra: list[str]) -> str | None:
    """Install what of ``group`` the runner lacks (or has too old) into ``cache``, once per set; an error or None."""
    todo = [r for r in group if problem(r)]
    for r in todo:
        print(problem(r))
    done = cache / f".complete-{hashlib.sha256(' '.join(todo).encode()).hexdigest()[:8]}"
    if not todo or done.is_file():
        return None
    error = install(todo, cache, extra)
    if error is None:
        done.write_text(" ".join(todo) + "\n")
    return error


def main() -> int:
    mode = os.environ.get("MODE", "check")
    extra = shlex.split(os.environ.get("EXTRA_INSTALL_ARGS", ""))
    reqs = {Requirement(r).name.lower(): r for r in requirements()}
    light = [reqs[n] for n in LIGHT]
    heavy = [r for n, r in reqs.items() if n not in LIGHT and n != "torch"]
    cache = Path(os.environ.get("RUNNER_TOOL_CACHE") or Path.home() / ".cache") / "specguard" / key()
    error = ensure(light, cache, extra)  # first, so that even a failed setup can post its reason on the PR
    if error is None and mode != "changed":
        why = problem(reqs["torch"])
        if why:
            error = (f"{sys.executable}: {why}. Install the runner's own build (for example the CUDA wheel matching "
                     "its driver) into that interpreter, or point the `python` input at one that has it; specguard "
                     "never installs torch itself")
        else:
            error = ensure(heavy, cache, extra)
    own = [str(ACTION)] + ([str(cache)] if cache.is_dir() else [])
    runner = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in own]
    # The gate's steps: specguard first, then the runner's own PYTHONPATH.  own-pythonpath: what servers the gate
    # launches must not inherit (a `vllm serve` importing specguard's copy of transformers).
    write_outputs(pythonpath=os.pathsep.join(own + runner), **{"own-pythonpath": os.pathsep.join(own)})
    if error:
        print(f"::error title=specguard::{error}")
        write_outputs(error=error)
        return 2
    print(f"specguard from {ACTION} with {sys.executable} ({sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
