"""The Action and this repo's workflows pass zizmor's offline audit (template injection, permissions, pinning)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def zizmor() -> str:
    exe = Path(sys.executable).parent / "zizmor"
    return str(exe) if exe.exists() else (shutil.which("zizmor") or "zizmor")


def test_zizmor_offline_finds_nothing():
    proc = subprocess.run([zizmor(), "--offline", "action.yml", ".github/workflows"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_action_passes_inputs_through_env_only():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step["name"]


def test_ci_calls_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
