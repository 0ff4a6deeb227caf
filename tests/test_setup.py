"""action/setup.py on a runner's interpreter: light-only installs, version checks that name both versions,
no shadowing of the runner's own packages, and a failed setup that still leaves the comment importable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "action"))
import setup  # noqa: E402


def run_setup(python: Path, mode: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    out = tmp_path / f"output-{mode}"
    out.write_text("")
    env = {**os.environ, "MODE": mode, "GITHUB_OUTPUT": str(out), "RUNNER_TOOL_CACHE": str(tmp_path / "cache"),
           "PIP_NO_INDEX": "1"}
    proc = subprocess.run([str(python), str(ROOT / "action" / "setup.py")], capture_output=True, text=True, env=env)
    values = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    return proc, values


def test_changed_mode_needs_only_the_light_dependencies(light_python, tmp_path):
    proc, out = run_setup(light_python, "changed", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installing" not in proc.stdout and out["pythonpath"].split(os.pathsep)[0] == str(ROOT)


def test_check_mode_without_torch_fails_clearly_and_keeps_the_comment_importable(light_python, tmp_path):
    proc, out = run_setup(light_python, "check", tmp_path)
    assert proc.returncode == 2
    assert "torch is not installed" in out["error"] and "never installs torch" in out["error"]
    # the PR comment step can still run, with this pythonpath, in this interpreter
    env = {**os.environ, "PYTHONPATH": out["pythonpath"]}
    probe = subprocess.run([str(light_python), "-m", "gate", "github", "comment", "--help"], capture_output=True,
                           text=True, env=env)
    assert probe.returncode == 0 and "--setup-failed" in probe.stdout, probe.stderr


def test_a_version_outside_the_range_names_both_versions():
    import yaml

    assert setup.problem("pyyaml>=1") is None
    assert setup.problem("pyyaml>=999") == f"pyyaml {yaml.__version__} is installed, but specguard needs pyyaml>=999"
    assert setup.problem("no-such-dist-xyz>=1") == "no-such-dist-xyz is not installed (specguard needs " \
                                                   "no-such-dist-xyz>=1)"


def test_what_pip_brings_along_never_shadows_the_runners_own_packages(tmp_path):
    cache = tmp_path / "cache"
    for name, version in (("pyyaml", "6.0"), ("brand_new_dep", "1.0")):
        info = cache / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        pkg = "yaml" if name == "pyyaml" else name
        (cache / pkg).mkdir()
        (cache / pkg / "__init__.py").write_text("")
        (info / "RECORD").write_text(f"{pkg}/__init__.py,,\n{info.name}/RECORD,,\n")
    removed = setup.unshadow(cache, requested={"brand-new-dep"})
    assert removed == ["pyyaml"]  # the runner has pyyaml: its own copy stays in use
    assert not (cache / "yaml").exists() and (cache / "brand_new_dep" / "__init__.py").is_file()
