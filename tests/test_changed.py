"""`specguard changed`: semantic config comparison and the files the gate reads, on real git repositories."""

from __future__ import annotations

import os
import subprocess

import pytest

from gate.cli import main

CONFIG = """\
version: 1
models:
  target: {path: models/target, dtype: bfloat16}
  draft: {path: models/draft, revision: null}
speculation: {num_draft_tokens: 4}
batching: {batch_sizes: [1, 8]}
suite: {path: suites/prompts.jsonl}
engines:
  - {type: plugin, name: inhouse, callable: "serving.spec:generate"}
watch: ["kernels/*.cu"]
"""


def git(repo, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def write(repo, files):
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "c")
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture()
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    base = write(tmp_path, {"specguard.yaml": CONFIG, "README.md": "x", "models/draft/config.json": "{}",
                            "serving/spec.py": "", "kernels/a.cu": "", "suites/prompts.jsonl": ""})
    return tmp_path, base


def changed(repo, base, capsys, monkeypatch, tmp_path):
    out = tmp_path / "github_output"
    out.write_text("")
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    assert main(["changed", "--repo", str(repo), "--base", base]) == 0
    text = capsys.readouterr().out
    return out.read_text().strip(), text


@pytest.mark.parametrize("files", [
    {"README.md": "docs only"},
    {"specguard.yaml": "# a comment\n" + CONFIG.replace("{num_draft_tokens: 4}", "{ num_draft_tokens:  4 }")},
    {"specguard.yaml": CONFIG.replace("  draft: {path: models/draft, revision: null}",
                                      "  draft:\n    path: models/draft")},
    {"specguard.yaml": CONFIG.replace("dir: out", "dir: elsewhere") + "output: {dir: elsewhere}\n"},
])
def test_no_relevant_change(repo, capsys, monkeypatch, tmp_path, files):
    root, base = repo
    write(root, files)
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=false", text


@pytest.mark.parametrize("files,reason", [
    ({"specguard.yaml": CONFIG.replace("num_draft_tokens: 4", "num_draft_tokens: 5")},
     "speculation.num_draft_tokens: 4 → 5"),
    ({"specguard.yaml": CONFIG.replace("[1, 8]", "[1, 8, 32]")}, "batching.batch_sizes: [1, 8] → [1, 8, 32]"),
    ({"specguard.yaml": CONFIG.replace("dtype: bfloat16", "dtype: float16")}, "models.target.dtype"),
    ({"specguard.yaml": CONFIG.replace("revision: null", "revision: v2")}, "models.draft.revision: unset → v2"),
    ({"specguard.yaml": CONFIG.replace("models/draft,", "models/draft2,")}, "models.draft.path"),
    ({"models/draft/model.safetensors": "new weights"}, "models/draft/model.safetensors changed"),
    ({"serving/spec.py": "changed = True"}, "serving/spec.py changed"),
    ({"suites/prompts.jsonl": "{}"}, "suites/prompts.jsonl changed"),
    ({"kernels/b.cu": "x"}, "kernels/b.cu changed (watch: kernels/*.cu)"),
])
def test_relevant_changes_name_what_changed(repo, capsys, monkeypatch, tmp_path, files, reason):
    root, base = repo
    write(root, files)
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=true" and reason in text, text


def test_a_new_config_is_a_change_and_a_missing_commit_is_a_clear_error(repo, capsys, monkeypatch, tmp_path):
    root, _ = repo
    git(root, "rm", "-q", "specguard.yaml")
    git(root, "commit", "-qm", "rm")
    old = git(root, "rev-parse", "HEAD")
    write(root, {"specguard.yaml": CONFIG})
    out, text = changed(root, old, capsys, monkeypatch, tmp_path)
    assert out == "changed=true" and "the config is new" in text
    assert main(["changed", "--repo", str(root), "--base", "0" * 40]) == 2
    assert "fetch-depth: 0" in capsys.readouterr().err


# --- what the trigger used to miss (issue 18) ---------------------------------------------------------------


def test_a_file_moved_out_of_the_draft_directory_is_a_change(repo, capsys, monkeypatch, tmp_path):
    root, base = repo
    git(root, "mv", "models/draft/config.json", "elsewhere.json")
    git(root, "commit", "-qm", "move")
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=true" and "models/draft/config.json changed" in text, text


def test_modules_a_plugin_imports_are_watched(repo, capsys, monkeypatch, tmp_path):
    root, _ = repo
    base = write(root, {"serving/spec.py": "from . import kernels\nimport helpers.math\n",
                        "serving/kernels.py": "", "serving/unrelated.py": "",
                        "helpers/__init__.py": "", "helpers/math.py": "", "helpers/other.py": ""})
    write(root, {"helpers/math.py": "X = 2"})
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=true" and "helpers/math.py changed (run by a plug-in engine" in text, text
    base = write(root, {"serving/kernels.py": "Y = 1"})  # a relative import
    assert "serving/kernels.py changed" in changed(root, git(root, "rev-parse", "HEAD~1"), capsys, monkeypatch,
                                                   tmp_path)[1]
    write(root, {"README.md": "more docs"})
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=false", text


def test_a_hand_edited_baseline_is_a_change(repo, capsys, monkeypatch, tmp_path):
    root, base = repo
    write(root, {"baselines/specguard/cuda-h100.json": "{}"})
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=true" and "baselines/specguard/cuda-h100.json changed" in text, text


def test_an_edited_chat_template_is_a_change(repo, capsys, monkeypatch, tmp_path):
    root, base = repo
    cfg = CONFIG.replace("suite: {path: suites/prompts.jsonl}",
                         "suite: {path: suites/prompts.jsonl, chat_template: suites/chat.jinja}")
    base = write(root, {"specguard.yaml": cfg, "suites/chat.jinja": "{{ messages }}"})
    write(root, {"suites/chat.jinja": "{{ messages }}{% if add_generation_prompt %}A:{% endif %}"})
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=true" and "suites/chat.jinja changed" in text, text


def test_config_and_files_are_compared_at_the_merge_base(repo, capsys, monkeypatch, tmp_path):
    """main moved on (k changed there) after the PR branched; the PR itself only edits the README."""
    root, _ = repo
    git(root, "checkout", "-qb", "feature")
    write(root, {"README.md": "docs only"})
    git(root, "checkout", "-q", "-")
    main_tip = write(root, {"specguard.yaml": CONFIG.replace("num_draft_tokens: 4", "num_draft_tokens: 6"),
                            "models/draft/model.safetensors": "w"})
    git(root, "checkout", "-q", "feature")
    out, text = changed(root, main_tip, capsys, monkeypatch, tmp_path)
    assert out == "changed=false", text


@pytest.mark.parametrize("path,hit", [("kernels/b.cu", True), ("kernels/deep/b.cu", False),
                                      ("ops/x/y/attn.cu", True), ("ops/attn.cu", True)])
def test_watch_globs_have_gitignore_semantics(repo, capsys, monkeypatch, tmp_path, path, hit):
    root, _ = repo
    base = write(root, {"specguard.yaml": CONFIG.replace('watch: ["kernels/*.cu"]',
                                                         'watch: ["kernels/*.cu", "ops/**/attn.cu"]')})
    write(root, {path: "x"})
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == f"changed={'true' if hit else 'false'}", text


def test_changed_imports_nothing_heavy(repo, tmp_path):
    """The hosted `changed` job has no torch, transformers or numpy: the command must not import them."""
    import sys

    root, base = repo
    write(root, {"serving/spec.py": "x = 1"})
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers', 'numpy', 'scipy'):\n"
        "            raise ImportError(f'{name} is not installed on a hosted runner')\n"
        "sys.meta_path.insert(0, Refuse())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(os.getcwd())])}
    proc = subprocess.run([sys.executable, "-m", "gate", "changed", "--repo", str(root), "--base", base],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "serving/spec.py changed" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("layout", ["src", "pyproject", "pythonpath"])
def test_a_plugin_outside_the_fixed_roots_is_watched_where_it_lives(tmp_path, capsys, monkeypatch, layout):
    """Issue 30 item 4: a plug-in in a src layout (`mypkg.spec`, the package under src/ or where pyproject.toml
    puts it, or a folder named in engines[].pythonpath) was edited and `changed` said "unchanged"."""
    folder = {"src": "src", "pyproject": "lib/python", "pythonpath": "engines"}[layout]
    cfg = CONFIG.replace('callable: "serving.spec:generate"', 'callable: "mypkg.spec:generate"'
                         + (", pythonpath: [engines]" if layout == "pythonpath" else ""))
    files = {"specguard.yaml": cfg, f"{folder}/mypkg/__init__.py": "", f"{folder}/mypkg/spec.py": "x = 1\n",
             f"{folder}/mypkg/kernels.py": ""}
    if layout == "pyproject":
        files["pyproject.toml"] = '[tool.setuptools.packages.find]\nwhere = ["lib/python"]\n'
    root = tmp_path / "r"
    root.mkdir()
    git(root, "init", "-q")
    base = write(root, files)
    write(root, {f"{folder}/mypkg/kernels.py": "y = 2\n"})
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=true" and f"{folder}/mypkg/kernels.py changed (run by a plug-in engine" in text, text


def test_a_plugin_module_found_nowhere_fails_closed_with_the_reason(repo, capsys, monkeypatch, tmp_path):
    root, _ = repo
    base = write(root, {"specguard.yaml": CONFIG.replace("serving.spec", "elsewhere.spec")})
    write(root, {"README.md": "docs only"})
    out, text = changed(root, base, capsys, monkeypatch, tmp_path)
    assert out == "changed=true", text
    assert "the plug-in module 'elsewhere.spec' is not in the repository" in text and "pythonpath" in text


def test_a_config_reached_through_a_symlink_is_read_where_it_leads(tmp_path, capsys, monkeypatch):
    """Issue 30 item 11: `changed` read a symlinked config's link text as YAML (exit 2)."""
    out_dir, tmp_path = tmp_path, tmp_path / "r"
    tmp_path.mkdir()
    git(tmp_path, "init", "-q")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "real.yaml").write_text(CONFIG.replace("models/", "../models/").replace(
        "suites/", "../suites/").replace("kernels/", "../kernels/"))
    (tmp_path / "specguard.yaml").symlink_to("configs/real.yaml")
    base = write(tmp_path, {"README.md": "x", "models/draft/config.json": "{}", "serving/spec.py": "",
                            "suites/prompts.jsonl": ""})
    write(tmp_path, {"README.md": "docs only"})
    out, text = changed(tmp_path, base, capsys, monkeypatch, out_dir)
    assert out == "changed=false", text
    write(tmp_path, {"models/draft/config.json": '{"x": 1}'})
    out, text = changed(tmp_path, base, capsys, monkeypatch, out_dir)
    assert out == "changed=true" and "models/draft/config.json: x unset → 1 (models.draft.path: models/draft)" \
        in text, text
    (tmp_path / "specguard.yaml").unlink()
    (tmp_path / "specguard.yaml").symlink_to("../../outside.yaml")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "link out")
    assert main(["changed", "--repo", str(tmp_path), "--base", base]) == 2
    assert "a symbolic link that leads outside the repository" in capsys.readouterr().err
