"""An interpreter like a GitHub-hosted runner's: Python with only the light dependencies (action/setup.py's LIGHT
and what they need), and no torch, transformers or numpy.

Built in seconds without network: a bare venv whose site-packages links to the test environment's own copies
of just those distributions (and their metadata, so version checks see them)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "action"))
from setup import LIGHT  # noqa: E402

HEAVY = ("torch", "transformers", "numpy", "scipy")


def _closure(names) -> set[str]:
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        for req in importlib.metadata.requires(name) or []:
            if "extra ==" in req:
                continue
            todo.append(re.split(r"[<>=!~ \[;(]", req, maxsplit=1)[0])
    return seen


def make(where: Path) -> Path:
    """A venv at ``where`` with the light dependencies only; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next(where.glob("lib/python*/site-packages"))
    for name in sorted(_closure([*LIGHT, "pip"])):  # a hosted runner's Python has pip
        dist = importlib.metadata.distribution(name)
        assert not any(h in name for h in HEAVY), name
        tops = {str(f).split("/", 1)[0] for f in dist.files or []}
        for top in tops:
            src = Path(dist.locate_file(top))
            if top.endswith(".pth") or top.startswith(("..", "__pycache__")) or not src.exists():
                continue
            dest = site / top
            if not dest.exists():
                dest.symlink_to(src)
    python = where / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import yaml, pydantic, pathspec, requests, jinja2\n"
                            "import importlib.util as u\n"
                            f"assert not any(u.find_spec(m) for m in {HEAVY!r})"], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    return python
