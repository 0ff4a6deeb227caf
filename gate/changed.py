"""``specguard changed``: did this pull request touch what the gate guards?

The gate guards the draft model, the target model and the speculation and
batching settings.  A PR changed them when:

* the config differs **semantically** between the two commits: both versions
  are parsed and validated, so a reformatted file or an edited comment is no
  change, while another ``num_draft_tokens``, batch size list, dtype, model
  path or revision is (the ``output`` section is ignored: where files go is
  not what the gate measures);
* a file changed under a local model directory the config names (either
  version), or the suite file, or a plug-in engine's module inside the
  repository, or a path matched by the config's ``watch:`` list;
* the config is new.

Why not a ``paths:`` filter on the workflow: a workflow skipped by ``paths:``
leaves a required check "pending" forever.  Instead the job always runs, asks
this command (seconds, no model loaded), and with no relevant change finishes
green as ``skipped``.
"""

from __future__ import annotations

import fnmatch
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gate.config import BUILTIN_PREFIX, Config, parse_config
from gate.errors import Problem, SpecguardError

IGNORED_SECTIONS = ("output",)


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


def _local_dirs(cfg: Config, config_path: str) -> list[str]:
    """Repository-relative directories and files the config reads: local model dirs, the suite, plug-in modules."""
    base = PurePosixPath(config_path).parent
    out = []
    for spec in (cfg.models.target, cfg.models.draft):
        if not spec.path.startswith(BUILTIN_PREFIX) and not spec.path.startswith(("/", "~")):
            out.append(str(base / spec.path))
    if not cfg.suite.path.startswith(BUILTIN_PREFIX) and not cfg.suite.path.startswith(("/", "~")):
        out.append(str(base / cfg.suite.path))
    for e in cfg.engines:
        if e.callable and not e.callable.startswith("entrypoint:"):
            module = e.callable.split(":", 1)[0].replace(".", "/")
            out += [f"{module}.py", f"{module}/"]
    return [_norm(p) for p in out]


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
    return path == target or path.startswith(target + "/")


def detect(repo: Path, config_path: str, base: str, head: str = "HEAD") -> Change:
    repo = Path(repo)
    config_path = _norm(config_path)
    for rev in (base, head):
        _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    head_cfg, head_err = _config_at(repo, head, config_path)
    if head_err:
        raise SpecguardError(Problem(config_path, f"the config at {head} is invalid: {head_err}",
                                     hint="fix it: the gate cannot run on it"))
    if head_cfg is None:
        raise SpecguardError(Problem(config_path, f"no config at {head}", hint="pass --config with its path"))
    base_cfg, base_err = _config_at(repo, base, config_path)
    if base_cfg is None:
        why = f"the config is invalid at {base}" if base_err else f"the config is new (not at {base})"
        return Change(True, [why])
    reasons = []
    a = {k: v for k, v in _flatten(base_cfg.model_dump(mode="json")).items() if k.split(".")[0] not in IGNORED_SECTIONS}
    b = {k: v for k, v in _flatten(head_cfg.model_dump(mode="json")).items() if k.split(".")[0] not in IGNORED_SECTIONS}
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            reasons.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    files = [f for f in _git(repo, "diff", "--name-only", f"{base}...{head}").splitlines() if f]
    watched = sorted(set(_local_dirs(base_cfg, config_path) + _local_dirs(head_cfg, config_path)))
    patterns = sorted(set(base_cfg.watch) | set(head_cfg.watch))
    for f in files:
        hit = next((w for w in watched if _under(f, w)), None)
        if hit:
            reasons.append(f"{f} changed (read by the gate: {hit})")
            continue
        pat = next((p for p in patterns if fnmatch.fnmatch(f, p) or _under(f, p)), None)
        if pat:
            reasons.append(f"{f} changed (watch: {pat})")
    return Change(bool(reasons), reasons)
