"""The stage layers are enforced, not remembered: pyproject.toml's import-linter contracts hold, and they bite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    # A fresh interpreter in `root`, so that `gate` is the package under `root` and no cache is shared.
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=300)


def test_the_layer_contracts_hold():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 kept, 0 broken" in run.stdout


def test_an_upward_import_breaks_the_contracts(tmp_path):
    shutil.copytree(ROOT / "gate", tmp_path / "gate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    files = tmp_path / "gate" / "io" / "files.py"
    files.write_text(files.read_text() + "\nimport gate.pipeline  # planted: io reaching up to the pipeline\n")
    ci = tmp_path / "gate" / "ci" / "changed.py"
    ci.write_text(ci.read_text() + "\nimport torch  # planted: the hosted-runner stage needing torch\n")
    run = lint_imports(tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "stages import only the stages below them BROKEN" in run.stdout
    assert "gate.ci runs on a hosted runner: no torch, transformers, numpy or scipy BROKEN" in run.stdout
    assert "gate.io.files -> gate.pipeline" in run.stdout
