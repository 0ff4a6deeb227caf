"""The paths a config names, checked on its raw YAML (so that ``validate`` reports them even when the schema
failed): model directories (config.json, weights, or a hub id in the offline cache) and the suite file."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from gate.errors import ConfigError, Problem
from gate.inputs.config import BUILTIN_PREFIX, Config, LoadedConfig, SuiteConfig
from gate.inputs.config_errors import dotted
from gate.inputs.yaml_text import line_index, load_yaml, screen_yaml
from gate.io.files import read_input


def read_raw(source: Path) -> tuple[str, Any]:
    """The config's text and raw YAML tree, or ("", None) when it cannot be read (load_config reports why)."""
    try:
        text = read_input(source, ConfigError, "config file", "")  # never blocks on a FIFO
        screen_yaml(text, str(source))
        return text, load_yaml(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ConfigError):
        return "", None


def check_paths(source: str | Path) -> list[Problem]:
    """Problems with the paths a config names (model directories, suite file).

    Works on the raw YAML, so it also runs when schema validation failed:
    ``specguard validate`` reports every problem at once.
    """
    source = Path(source)
    text, raw = read_raw(source)
    if not isinstance(raw, dict):
        return []
    lines = line_index(text)
    base = LoadedConfig(config=Config.model_construct(), source=source.resolve(), raw=raw)
    problems = []
    models = raw.get("models") if isinstance(raw.get("models"), dict) else {}
    weights = models.get("local_weights", True)
    for role in ("target", "draft"):
        spec = models.get(role) if isinstance(models.get(role), dict) else {}
        value = spec.get("path")
        if not isinstance(value, str) or not value.strip():
            continue
        where = ("models", role, "path")
        p = base.resolve_path(value)
        looks_local = looks_like_local_path(value, base)
        at = dict(field=dotted(where), line=lines.get(where))
        if p.exists() and not p.is_dir():
            problems.append(Problem(str(source), f"{str(p)!r} is a file, not a model directory",
                                    hint="point it at the directory that holds config.json and the weights", **at))
        elif looks_local and not p.is_dir():
            why = "" if not is_hub_id(value) or value.startswith((".", "/", "~")) else \
                f" (its first folder, {value.split('/')[0]}/, is here, so this is a local path, not a hub id)"
            problems.append(Problem(str(source), f"model directory {str(p)!r} does not exist{why}",
                                    hint="point it at a directory holding config.json and weights, "
                                         "or at a hub id such as 'org/name'", **at))
        elif p.is_dir() and not (p / "config.json").is_file():
            problems.append(Problem(str(source), f"{str(p)!r} has no config.json",
                                    hint="is this a transformers model directory?", **at))
        elif p.is_dir() and (weights is True or (weights == "draft" and role == "draft")) \
                and not any(next(p.glob(pattern), None) for pattern in WEIGHT_FILES):
            problems.append(Problem(str(source), f"{str(p)!r} holds no weights ({', '.join(WEIGHT_FILES)})",
                                    hint="are the weights in Git LFS and not pulled (check out with lfs: true)? "
                                         "or set models.local_weights: false when the models run behind servers",
                                    **at))
        elif not p.is_dir() and os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True", "YES", "yes"):
            revision = spec.get("revision") if isinstance(spec.get("revision"), str) else None
            if not hub_cached(value, revision):
                problems.append(Problem(str(source), f"{value!r} is not a local directory, and as a hub id it is "
                                        "not in the local Hugging Face cache (HF_HUB_OFFLINE=1)",
                                        hint="download it first, or point the path at a local directory", **at))
    suite = raw.get("suite") if isinstance(raw.get("suite"), dict) else {}
    value = suite.get("path", SuiteConfig().path)
    if isinstance(value, str) and not base.resolve_path(value).is_file():
        where = ("suite", "path")
        found = base.resolve_path(value)
        what = "is not a regular file (a FIFO, socket, device or directory)" if found.exists() else "does not exist"
        problems.append(Problem(str(source), f"suite file {str(found)!r} {what}",
                                field=dotted(where), line=lines.get(where),
                                hint="use a JSONL file, or leave the default suite"))
    return problems


def hub_cached(repo_id: str, revision: str | None = None) -> bool:
    """Whether a hub model's config.json is in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on it
        return True
    found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    return isinstance(found, str)


def model_notes(source: str | Path) -> list[str]:
    """What validate should say about model paths that are not errors: a bare name is taken as a hub id."""
    source = Path(source)
    _, raw = read_raw(source)
    notes = []
    models = raw.get("models") if isinstance(raw, dict) and isinstance(raw.get("models"), dict) else {}
    base = LoadedConfig(config=Config.model_construct(), source=source.resolve(), raw={})
    for role in ("target", "draft"):
        spec = models.get(role) if isinstance(models.get(role), dict) else {}
        value = spec.get("path")
        if isinstance(value, str) and not looks_like_local_path(value, base) \
                and not base.resolve_path(value).is_dir():
            notes.append(f"models.{role}.path: {value!r} is not a local directory; treating it as a hub id "
                         f"(revision {spec.get('revision') or 'main'})")
    return notes


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.safetensors.index.json", "*.bin.index.json")


def looks_like_local_path(value: str, loaded: LoadedConfig) -> bool:
    """A model path that names a local folder: the package's own, explicitly relative or absolute, not a hub id
    in form, or a hub id in form whose first folder exists beside the config (``models/x`` where ``models/``
    is there: a missing local model must be an error, never an attempt at the hub)."""
    if value.startswith((BUILTIN_PREFIX, ".", "/", "~")) or not is_hub_id(value):
        return True
    return "/" in value and loaded.resolve_path(value.split("/")[0]).is_dir()


def is_hub_id(value: str) -> bool:
    return re.fullmatch(r"[\w][\w.-]*(/[\w][\w.-]*)?", value) is not None and "--" not in value


__all__ = ["WEIGHT_FILES", "check_paths", "hub_cached", "is_hub_id", "looks_like_local_path", "model_notes",
           "read_raw"]
