"""Make specguard importable by the runner's own Python, without touching its torch.

Run by action.yml with the interpreter from the ``python`` input.  Self-hosted
GPU runners keep state and bring their own CUDA build of torch, so:

* specguard itself is used from the action's checkout (``PYTHONPATH``); nothing
  is built, so it works with no network;
* dependencies the interpreter already has are used as they are; only the
  missing ones (never torch) are installed, into a directory reused by later
  jobs, keyed by the action's content and the interpreter;
* ``mode: changed`` needs only pyyaml and pydantic (no torch at all), for a
  cheap job on a GitHub-hosted runner.

Prints ``pythonpath=...`` for $GITHUB_OUTPUT.  A virtualenv is not used: a
venv made from a venv's interpreter cannot see that venv's packages (the
runner's torch), and a venv with its own torch is what must not happen.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

ACTION = Path(__file__).resolve().parent.parent
LIGHT = ("pyyaml", "pydantic")  # what `specguard changed` imports


def requirements() -> list[str]:
    text = (ACTION / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is not None:
        return list(tomllib.loads(text)["project"]["dependencies"])
    block = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    return re.findall(r'"([^"]+)"', block)


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0].strip()


def _present(req: str) -> bool:
    try:
        importlib.metadata.version(_name(req))
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def key() -> str:
    h = hashlib.sha256()
    h.update(sys.executable.encode())
    h.update(sys.version.encode())
    for path in sorted((ACTION / "gate").rglob("*.py")) + [ACTION / "pyproject.toml"]:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def main() -> int:
    mode = os.environ.get("MODE", "check")
    extra = shlex.split(os.environ.get("EXTRA_INSTALL_ARGS", ""))
    wanted = [r for r in requirements() if _name(r).lower() != "torch"]
    if mode == "changed":
        wanted = [r for r in wanted if _name(r).lower() in LIGHT]
    elif not _present("torch"):
        print(f"::error title=specguard::{sys.executable} has no torch. Install the runner's own build "
              "(for example the CUDA wheel matching its driver) into that interpreter, or point the `python` input "
              "at one that has it; specguard never installs torch itself.")
        return 2
    cache = Path(os.environ.get("RUNNER_TOOL_CACHE") or Path.home() / ".cache") / "specguard" / key()
    missing = [r for r in wanted if not _present(r)]
    done = cache / ".complete"
    if missing and not done.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(cache), *missing, *extra]
        print("installing " + " ".join(missing) + f" into {cache}")
        proc = subprocess.run(cmd)
        if proc.returncode != 0:
            print(f"::error title=specguard::could not install {' '.join(missing)} (pip exit {proc.returncode}); "
                  "on a runner without internet, preinstall them or pass pip options in `extra-install-args`")
            return 2
        done.write_text(" ".join(missing) + "\n")
    parts = [str(ACTION)] + ([str(cache)] if missing or done.is_file() else [])
    print(f"specguard from {ACTION} with {sys.executable} ({sys.version.split()[0]})")
    out = os.environ.get("GITHUB_OUTPUT")
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(f"pythonpath={os.pathsep.join(parts)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
