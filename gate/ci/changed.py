"""``specguard changed``: did this pull request touch what the gate guards?

The gate guards the draft model (or head), the target model, the suite and the speculation and batching settings,
and what the servers it launches load.  A PR changed them when:

* the config differs **semantically** between the merge base and the head:
  both versions are parsed and validated, so a reformatted file or an edited
  comment is no change, while another ``num_draft_tokens``, batch size list,
  dtype, model path or revision is (the ``output`` section is ignored: where
  files go is not what the gate measures); a launch line is compared flag by
  flag, so reordering it or writing ``--flag=value`` is no change;
* a file was added, modified, deleted or moved (``--no-renames``: a move lists
  both paths) under a local model directory the config names (either version),
  the head (``speculation.head``), the suite file (and ``suite.chat_template``), the baseline directory
  (``baseline.dir``: a hand-edited baseline must not merge ungated), a plug-in engine's module, its package and
  the local modules it imports (found statically, transitively), or a path
  matched by the config's ``watch:`` list (gitignore-style globs: ``*`` stays
  inside one directory, ``**`` crosses them);
* a file or folder a ``launch:`` line makes its server load changed (:func:`launch_loaded`): a vLLM ``--config``
  file, a chat template, a tokenizer, the draft, the head or the served model, where the path is in the repository
  (from its root, where the Action runs the gate and so its servers, else from the config's folder); the line's
  own ``--config`` file is read from each commit to find what it names in turn;
* the config is new.

Each change is said on one line, at field level (:mod:`gate.inputs.launch_diff`): a config field
(``speculation.num_draft_tokens: 4 → 5``), a launch flag (``engines[0].http.server.launch: --max-num-batched-tokens
2048 → 4096``), a key of a YAML or JSON file (``vllm.yaml: max-num-batched-tokens 2048 → 4096``; a file whose
document is unchanged, only its comments or layout, is no change), or a file that changed.  All of it is the PR's
text: each line is printed inert (no control characters, one line, at most 600 characters), and nothing of the PR
runs.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pathspec

import gate.engines.types  # noqa: F401  (registers the built-in engine types: each commit's config is read)
from gate.errors import GitError, Problem, SpecguardError
from gate.inputs.config import BUILTIN_PREFIX, Config, parse_config
from gate.inputs.launch import files_from
from gate.inputs.launch_diff import config_changes, file_changes, inert, loaded_files

IGNORED_SECTIONS = ("output",)
MAX_IMPORTED_MODULES = 500  # a bound on the static import walk of plug-in modules
MAX_REASONS = 50  # lines printed
MAX_FIELDS_PER_FILE = 20  # a YAML or JSON file's changed keys listed before "… and N more"


@dataclass
class Change:
    changed: bool
    reasons: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What ``specguard changed`` prints."""
        if not self.changed:
            return ["unchanged: no draft, target, speculation or batching change; the gate can be skipped"]
        shown = [f"  - {inert(r)}" for r in self.reasons[:MAX_REASONS]]
        more = [f"  - … and {len(self.reasons) - MAX_REASONS} more"] if len(self.reasons) > MAX_REASONS else []
        return [f"changed: the gate guards what this change touched ({len(self.reasons)} reason(s)):", *shown, *more]


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["git failed"])[0]
        raise GitError(Problem("git", f"git {' '.join(args)}: {first}",
                               hint="check out with `fetch-depth: 0` so both commits are present"))
    return proc.stdout


MAX_LINKS = 16  # symbolic links followed while resolving one path (a loop is cut here)


def _entry(repo: Path, rev: str, path: str) -> tuple[str, str] | None:
    """(mode, object id) of a path in a commit's tree, or None."""
    proc = subprocess.run(["git", "-C", str(repo), "ls-tree", "-z", rev, "--", path], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout:
        return None
    meta = proc.stdout.split("\t", 1)[0].split()
    return (meta[0], meta[2]) if len(meta) == 3 else None


def resolve(repo: Path, rev: str, path: str) -> str | None:
    """``path`` in the commit with every symbolic link on the way followed (as ``open`` would on a checkout), as a
    repository-relative path; None when it leads outside the repository, loops, or is not there."""
    parts = _norm(path).split("/")
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        here = "/".join([*done, part])
        entry = _entry(repo, rev, here)
        if entry is None:
            return None
        if entry[0] == "120000":  # a symbolic link: its blob is the target
            hops += 1
            target = _blob(repo, entry[1])
            if hops > MAX_LINKS or target is None or target.startswith("/"):
                return None
            joined = _norm("/".join([*done, target]), strict=True)
            if joined is None:
                return None  # above the repository root
            parts = [p for p in joined.split("/") if p] + parts
            done = []
            continue
        done.append(part)
    return "/".join(done)


def _blob(repo: Path, oid: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", oid], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def _show(repo: Path, rev: str, path: str) -> str | None:
    real = resolve(repo, rev, path)
    if real is None:
        return None
    proc = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{real}"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def _exists(repo: Path, rev: str, path: str) -> bool:
    real = resolve(repo, rev, path)
    return real is not None and _entry(repo, rev, real) is not None


def _config_at(repo: Path, rev: str, path: str) -> tuple[Config | None, str | None]:
    """(validated config, error) of the config file at a commit; (None, None) when it is not there."""
    text = _show(repo, rev, path)
    if text is None:
        return None, None
    try:
        with files_from(_reader(repo, rev, path)):  # its launch lines' --config files as they are at that commit
            return parse_config(text, repo / path).config, None
    except SpecguardError as exc:
        return None, "; ".join(str(p) for p in exc.problems[:3])


def _repo_relative(cfg: Config, config_path: str) -> list[tuple[str, str]]:
    """(repository-relative path, the field naming it) of each directory and file the config reads: local model
    dirs, the head, the suite (and its chat template), the baselines."""
    base = PurePosixPath(config_path).parent
    named = (("models.target.path", cfg.models.target.path),
             ("models.draft.path", cfg.models.draft.path if cfg.models.draft else None),
             ("speculation.head", cfg.speculation.head), ("suite.path", cfg.suite.path),
             ("suite.chat_template", cfg.suite.chat_template), ("baseline.dir", cfg.baseline.dir))
    return [(_norm(str(base / path)), name) for name, path in named
            if path is not None and not path.startswith((BUILTIN_PREFIX, "/", "~"))]


def _in_repo(repo: Path, rev: str, path: str, config_path: str) -> str | None:
    """Where a path a launch line names is in the commit: from the repository root (where the Action runs the gate,
    and so its servers), else from the config's folder; None for an absolute path, a hub id or a url."""
    if not path or path.startswith(("/", "~")) or "://" in path:
        return None
    for cand in (_norm(path, strict=True), _norm(str(PurePosixPath(config_path).parent / path), strict=True)):
        real = resolve(repo, rev, cand) if cand else None
        if real:
            return real
    return None


def _reader(repo: Path, rev: str, config_path: str) -> Callable[[str], str | None]:
    """Reads a file a launch line names as it is at ``rev`` (None: not in the repository there)."""
    def read(path: str) -> str | None:
        real = _in_repo(repo, rev, path, config_path)
        return _show(repo, rev, real) if real else None

    return read


def launch_loaded(repo: Path, rev: str, cfg: Config, config_path: str) -> list[tuple[str, str, bool]]:
    """(repository path, what loads it, whether it is a vLLM ``--config`` file) of each file or folder in the
    repository that a launch line at ``rev`` makes its server load (gate/inputs/launch_diff.py: a ``--config``
    file, a chat template, the draft, the head, the served model), the line's files read from the commit."""
    read = _reader(repo, rev, config_path)
    out = []
    for i, engine in enumerate(cfg.engines):
        preset = engine.launch_preset
        for where, ep in engine.endpoints():
            for item in loaded_files(preset, list(ep.launch or []), read):
                real = _in_repo(repo, rev, item.path, config_path)
                if real:
                    out.append((real, f"engines[{i}].{where}.launch {item.what}", item.config_file))
    return out


def _file_reasons(repo: Path, revs: tuple[str, str], path: str, why: str, config_file: bool) -> list[str]:
    """What changed in a file the gate reads: key by key for YAML and JSON ([] where only comments or formatting
    moved), else that it changed."""
    moved = file_changes(path, *(_show(repo, rev, path) for rev in revs), config_file=config_file) \
        if config_file or path.lower().endswith((".yaml", ".yml", ".json")) else None
    if moved is None:
        return [f"{path} changed ({why})"]
    out = [f"{m.line()} ({why})" for m in moved[:MAX_FIELDS_PER_FILE]]
    if len(moved) > MAX_FIELDS_PER_FILE:
        out.append(f"{path}: … and {len(moved) - MAX_FIELDS_PER_FILE} more key(s) ({why})")
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


def _pyproject_roots(repo: Path, rev: str) -> list[str]:
    """Where pyproject.toml says the repository's packages live: setuptools' ``package-dir`` and
    ``packages.find.where``, Poetry's ``packages[].from``, Hatch's wheel ``packages``."""
    text = _show(repo, rev, "pyproject.toml")
    if text is None:
        return []
    try:
        import tomllib
    except ImportError:  # Python 3.10: the fixed roots (and "src") still apply, and an unfound module fails closed
        return []
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError):
        return []
    tool = doc.get("tool") if isinstance(doc.get("tool"), dict) else {}
    st = tool.get("setuptools") if isinstance(tool.get("setuptools"), dict) else {}
    out: list = []
    if isinstance(st.get("package-dir"), dict):
        out += list(st["package-dir"].values())
    find = (st.get("packages") or {}).get("find") if isinstance(st.get("packages"), dict) else None
    if isinstance(find, dict) and isinstance(find.get("where"), list):
        out += find["where"]
    poetry = tool.get("poetry") if isinstance(tool.get("poetry"), dict) else {}
    for pkg in poetry.get("packages") or [] if isinstance(poetry.get("packages"), list) else []:
        if isinstance(pkg, dict) and isinstance(pkg.get("from"), str):
            out.append(pkg["from"])
    wheel = ((tool.get("hatch") or {}).get("build") or {}).get("targets", {}).get("wheel", {}) \
        if isinstance(tool.get("hatch"), dict) else {}
    for pkg in wheel.get("packages") or [] if isinstance(wheel, dict) else []:
        if isinstance(pkg, str):
            out.append(str(PurePosixPath(pkg).parent))
    return [_norm(p) for p in out if isinstance(p, str)]


def import_roots(repo: Path, rev: str, cfg: Config, config_path: str) -> list[str]:
    """Repository-relative folders a plug-in's modules can come from: the runtime's own roots
    (:meth:`gate.inputs.config.LoadedConfig.import_roots`: ``engines[].pythonpath``, the config's folder, the repository
    root), plus where the repository's packaging puts its packages (``src/``, pyproject.toml), for a plug-in
    installed from this repository (``pip install -e .``)."""
    here = PurePosixPath(config_path).parent
    roots = [_norm(str(here / p)) for e in cfg.engines for p in e.import_paths()
             if not p.startswith(("/", "~", BUILTIN_PREFIX)) and _norm(str(here / p), strict=True) is not None]
    roots += [_norm(str(here)), "", "src", *_pyproject_roots(repo, rev)]
    return list(dict.fromkeys(roots))


def plugin_files(repo: Path, rev: str, cfg: Config, config_path: str) -> tuple[list[str], list[str]]:
    """Files a plug-in engine runs at ``rev``: its module, its package's directory and the local modules it
    imports, transitively; and the plug-in modules found nowhere under the import roots (:func:`import_roots`).
    Imports are found statically (no code runs); only modules inside the repository count."""
    roots = import_roots(repo, rev, cfg, config_path)
    named = [m for e in cfg.engines for m in e.modules()]
    missing = [m for m in dict.fromkeys(named) if not _module_files(repo, rev, m, roots)]
    todo = list(named)
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
    return sorted(files), missing


def _norm(p: str, strict: bool = False):
    """A repository-relative path with ``.`` and ``..`` worked out; with ``strict``, None when it climbs above the
    root (else it stops there)."""
    parts: list[str] = []
    for part in PurePosixPath(p).parts:
        if part == "..":
            if parts:
                parts.pop()
            elif strict:
                return None
        elif part not in (".", "/"):
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
    named = _norm(config_path)
    for rev in (base, head):
        _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    fork_point = merge_base(repo, base, head)
    # A config reached through a symbolic link is read, and its relative paths resolved, where the link leads (as
    # the gate's own load does); a link out of the repository cannot be read from a commit.
    config_path = resolve(repo, head, named) or named
    if _entry(repo, head, named) is not None and resolve(repo, head, named) is None:
        raise SpecguardError(Problem(named, f"the config at {head} is a symbolic link that leads outside the "
                                            "repository (or loops)", hint="commit the config itself, or a link "
                                                                          "to a file inside the repository"))
    head_cfg, head_err = _config_at(repo, head, config_path)
    if head_err:
        raise SpecguardError(Problem(config_path, f"the config at {head} is invalid: {head_err}",
                                     hint="fix it: the gate cannot run on it"))
    if head_cfg is None:
        raise SpecguardError(Problem(config_path, f"no config at {head}", hint="pass --config with its path"))
    base_cfg, base_err = _config_at(repo, fork_point, resolve(repo, fork_point, named) or named)
    if base_cfg is None:
        why = f"the config is invalid at {fork_point}" if base_err else f"the config is new (not at {fork_point})"
        return Change(True, [why])
    reasons = [m.line() for m in config_changes(base_cfg.model_dump(mode="json"), head_cfg.model_dump(mode="json"),
                                                IGNORED_SECTIONS)]
    files = [f for f in _git(repo, "diff", "--name-only", "--no-renames", fork_point, head).splitlines() if f]
    # path -> (what names it, a vLLM --config file): what the config names, then what its launch lines load
    watched: dict[str, tuple[str, bool]] = {}
    for cfg in (base_cfg, head_cfg):
        for path, name in _repo_relative(cfg, config_path):
            watched.setdefault(path, (name, False))
    for rev, cfg in ((fork_point, base_cfg), (head, head_cfg)):
        for path, what, config_file in launch_loaded(repo, rev, cfg, config_path):
            watched.setdefault(path, (what, config_file))
    for rev, cfg in ((fork_point, base_cfg), (head, head_cfg)):
        found, missing = plugin_files(repo, rev, cfg, config_path)
        for w in found:
            watched.setdefault(w, ("run by a plug-in engine", False))
        if rev == head:  # fail closed: a plug-in whose code cannot be found may have changed
            for module in missing:
                where = ", ".join(f"{r}/" if r else "the repository root" for r in import_roots(repo, rev, cfg,
                                                                                                config_path))
                reasons.append(f"the plug-in module {module!r} is not in the repository at {rev[:12]} under its "
                               f"import roots ({where}): its changes cannot be seen, so the gate runs (add its "
                               "folder to engines[].pythonpath, or name an installed plug-in with entrypoint:)")
    patterns = sorted(set(base_cfg.watch) | set(head_cfg.watch))
    spec = _globs(patterns)
    for f in files:
        hit = max((w for w in watched if _under(f, w)), key=len, default=None)  # the nearest watched folder
        if hit:
            why, config_file = watched[hit]
            said = _file_reasons(repo, (fork_point, head), f, why if f == hit else f"{why}: {hit}",
                                 config_file and f == hit)
            reasons += said
            if said:
                continue
        if spec.match_file(f) or any(_under(f, p) for p in patterns):
            pat = next((p for p in patterns if _globs([p]).match_file(f) or _under(f, p)), patterns[0])
            reasons.append(f"{f} changed (watch: {pat})")
    return Change(bool(reasons), reasons)
