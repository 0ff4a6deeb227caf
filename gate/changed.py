"""``specguard changed``: did this pull request touch what the gate guards?

The gate guards the draft model, the target model and the speculation and
batching settings.  A PR changed them when:

* the config differs **semantically** between the merge base and the head:
  both versions are parsed and validated, so a reformatted file or an edited
  comment is no change, while another ``num_draft_tokens``, batch size list,
  dtype, model path or revision is (the ``output`` section is ignored: where
  files go is not what the gate measures);
* a file was added, modified, deleted or moved (``--no-renames``: a move lists
  both paths) under a local model directory the config names (either version),
  the suite file, the baseline directory (``baseline.dir``: a hand-edited
  baseline must not merge ungated), a plug-in engine's module, its package and
  the local modules it imports (found statically, transitively), or a path
  matched by the config's ``watch:`` list (gitignore-style globs: ``*`` stays
  inside one directory, ``**`` crosses them);
* the config is new.

Config and files are both compared at the **merge base** of base and head, so
commits that landed on the base branch after the PR branched are not counted
as the PR's change.

This module imports nothing heavy (no torch, transformers or numpy): it runs in
the Action's cheap ``changed`` job on a hosted runner with only the light
dependencies (``action/setup.py``'s ``LIGHT``).

Why not a ``paths:`` filter on the workflow: a workflow skipped by ``paths:``
leaves a required check "pending" forever.  Instead the job always runs, asks
this command (seconds, no model loaded), and with no relevant change finishes
green as ``skipped``.
"""

from __future__ import annotations

import ast
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pathspec

from gate.config import BUILTIN_PREFIX, Config, parse_config
from gate.errors import Problem, SpecguardError

IGNORED_SECTIONS = ("output",)
MAX_IMPORTED_MODULES = 500  # a bound on the static import walk of plug-in modules


class GitError(SpecguardError):
    """git could not answer (a missing commit: check out with fetch-depth: 0)."""


@dataclass
class Change:
    changed: bool
    reasons: list[str] = field(default_factory=list)


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["git failed"])[0]
        raise GitError(Problem("git", f"git {' '.join(args)}: {first}",
                               hint="check out with `fetch-depth: 0` so both commits are present"))
    return proc.stdout


def _show(repo: Path, rev: str, path: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def _exists(repo: Path, rev: str, path: str) -> bool:
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{rev}:{path}"], capture_output=True)
    return proc.returncode == 0


def _flatten(d, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = d
    return out


def _config_at(repo: Path, rev: str, path: str) -> tuple[Config | None, str | None]:
    """(validated config, error) of the config file at a commit; (None, None) when it is not there."""
    text = _show(repo, rev, path)
    if text is None:
        return None, None
    try:
        return parse_config(text, repo / path).config, None
    except SpecguardError as exc:
        return None, "; ".join(str(p) for p in exc.problems[:3])


def _repo_relative(cfg: Config, config_path: str) -> list[str]:
    """Repository-relative directories and files the config reads: local model dirs, the suite, the baselines."""
    base = PurePosixPath(config_path).parent
    out = []
    for path in (cfg.models.target.path, cfg.models.draft.path, cfg.suite.path, cfg.baseline.dir):
        if not path.startswith(BUILTIN_PREFIX) and not path.startswith(("/", "~")):
            out.append(_norm(str(base / path)))
    return out


def _module_files(repo: Path, rev: str, module: str, roots: list[str]) -> list[str]:
    """The repository files a dotted module name can be at, under any import root: ``a/b.py``, ``a/b/__init__.py``."""
    rel = module.replace(".", "/")
    out = []
    for root in roots:
        for cand in (f"{rel}.py", f"{rel}/__init__.py"):
            path = _norm(f"{root}/{cand}" if root else cand)
            if _exists(repo, rev, path):
                out.append(path)
    return out


def _imports(source: str, module: str, is_package: bool) -> set[str]:
    """Dotted names a module imports (absolute, and relative ones resolved against ``module``)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                stem = ".".join(p for p in [*parts, node.module or ""] if p)
            else:
                stem = node.module or ""
            if stem:
                names.add(stem)
                names.update(f"{stem}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def plugin_files(repo: Path, rev: str, cfg: Config, config_path: str) -> list[str]:
    """Files a plug-in engine runs at ``rev``: its module, its package's directory and the local modules it
    imports, transitively.  Imports are found statically (no code runs); only modules inside the repository
    count.  Import roots: the repository root and the config's directory."""
    roots = sorted({"", _norm(str(PurePosixPath(config_path).parent))})
    todo = [e.callable.split(":", 1)[0] for e in cfg.engines
            if e.callable and not e.callable.startswith("entrypoint:")]
    seen: set[str] = set()
    files: set[str] = set()
    while todo and len(seen) < MAX_IMPORTED_MODULES:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for path in _module_files(repo, rev, module, roots):
            files.add(path)
            top = module.split(".", 1)[0]
            files.update(p.rsplit("/", 1)[0] + "/" for p in _module_files(repo, rev, top, roots)
                         if p.endswith("/__init__.py"))
            text = _show(repo, rev, path) or ""
            todo += sorted(_imports(text, module, path.endswith("/__init__.py")) - seen)
    return sorted(files)


def _norm(p: str) -> str:
    parts: list[str] = []
    for part in PurePosixPath(p).parts:
        if part == "..":
            if parts:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _under(path: str, target: str) -> bool:
    target = target.rstrip("/")
    return bool(target) and (path == target or path.startswith(target + "/"))


def _globs(patterns: list[str]) -> pathspec.PathSpec:
    """gitignore semantics (``*`` within a directory, ``**`` across); pathspec < 1.0 names them gitwildmatch."""
    try:
        return pathspec.PathSpec.from_lines("gitignore", patterns)
    except LookupError:
        return pathspec.PathSpec.from_lines("gitwildmatch", patterns)


def merge_base(repo: Path, base: str, head: str) -> str:
    """Where the PR branched from the base; the base itself when the two share no history."""
    proc = subprocess.run(["git", "-C", str(repo), "merge-base", base, head], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else base


def detect(repo: Path, config_path: str, base: str, head: str = "HEAD") -> Change:
    repo = Path(repo)
    config_path = _norm(config_path)
    for rev in (base, head):
        _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    fork_point = merge_base(repo, base, head)
    head_cfg, head_err = _config_at(repo, head, config_path)
    if head_err:
        raise SpecguardError(Problem(config_path, f"the config at {head} is invalid: {head_err}",
                                     hint="fix it: the gate cannot run on it"))
    if head_cfg is None:
        raise SpecguardError(Problem(config_path, f"no config at {head}", hint="pass --config with its path"))
    base_cfg, base_err = _config_at(repo, fork_point, config_path)
    if base_cfg is None:
        why = f"the config is invalid at {fork_point}" if base_err else f"the config is new (not at {fork_point})"
        return Change(True, [why])
    reasons = []
    a = {k: v for k, v in _flatten(base_cfg.model_dump(mode="json")).items() if k.split(".")[0] not in IGNORED_SECTIONS}
    b = {k: v for k, v in _flatten(head_cfg.model_dump(mode="json")).items() if k.split(".")[0] not in IGNORED_SECTIONS}
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            reasons.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    files = [f for f in _git(repo, "diff", "--name-only", "--no-renames", fork_point, head).splitlines() if f]
    watched = {w: "read by the gate" for w in _repo_relative(base_cfg, config_path) + _repo_relative(head_cfg,
                                                                                                        config_path)}
    for rev, cfg in ((fork_point, base_cfg), (head, head_cfg)):
        for w in plugin_files(repo, rev, cfg, config_path):
            watched.setdefault(w, "run by a plug-in engine")
    patterns = sorted(set(base_cfg.watch) | set(head_cfg.watch))
    spec = _globs(patterns)
    for f in files:
        hit = next((w for w in sorted(watched) if _under(f, w)), None)
        if hit:
            reasons.append(f"{f} changed ({watched[hit]}: {hit})")
            continue
        if spec.match_file(f) or any(_under(f, p) for p in patterns):
            pat = next((p for p in patterns if _globs([p]).match_file(f) or _under(f, p)), patterns[0])
            reasons.append(f"{f} changed (watch: {pat})")
    return Change(bool(reasons), reasons)
