"""Where a model's files are and their content fingerprint, without torch: ``baseline refresh`` and the other
commands that only ask whether a run belongs to a config (:mod:`gate.inputs.identity`) need no model loaded, and an
import of torch costs a second of CPU in every such process."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gate.errors import ModelError, Problem
from gate.inputs.config import LoadedConfig, ModelSpec


def model_location(loaded: LoadedConfig, spec: ModelSpec) -> str:
    """A local model directory, or a hub id.  A path that names a local folder (``./x``, ``models/x`` where
    ``models/`` exists) and is not there is an error, never a download of whatever the hub holds under that name."""
    from gate.inputs.paths import looks_like_local_path

    p = loaded.resolve_path(spec.path)
    if p.is_dir():
        return str(p)
    if looks_like_local_path(spec.path, loaded):
        role = "target" if spec is loaded.config.models.target else "draft"
        raise ModelError(Problem(str(loaded.source), f"model directory {str(p)!r} does not exist",
                                 field=f"models.{role}.path", hint="point it at a directory holding config.json and "
                                                                   "weights, or at a hub id such as 'org/name'"))
    return spec.path


_FINGERPRINTS: dict[tuple, str] = {}  # (dtype, directory, every file's name, size and mtime) -> content hash


def fingerprint_model(location: str, spec: ModelSpec, dtype) -> str:
    """A content hash of the model: every file in its directory, and the load dtype (a ``torch.dtype``, or its
    ``str()`` such as ``"torch.float32"``: the same hash).

    For a local directory every file is hashed (about a second per GB), custom code
    included, so editing it changes the key.  A directory whose files (names, sizes,
    mtimes) are unchanged is hashed once per process: ``check`` compares fingerprints
    before loading the models, then loads them.  For a hub id, the id and revision
    stand in for the content.
    """
    path = Path(location)
    if not path.is_dir():
        return hashlib.sha256(f"{dtype}{location}@{spec.revision or 'main'}".encode()).hexdigest()[:16]
    # Every file the loader may read: config, weights, tokenizer, and custom code (*.py) too.
    files = sorted(p for p in path.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(path).parts))
    key = (str(dtype), str(path.resolve()),
           tuple((str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    if key not in _FINGERPRINTS:
        h = hashlib.sha256()
        h.update(str(dtype).encode())
        for f in files:
            h.update(str(f.relative_to(path)).encode())
            with f.open("rb") as fh:
                h.update(hashlib.file_digest(fh, "sha256").digest())
        _FINGERPRINTS[key] = h.hexdigest()[:16]
    return _FINGERPRINTS[key]


def dtype_text(dtype: str, device: str) -> str | None:
    """``str()`` of the torch dtype a model of config dtype ``dtype`` loads in on config device ``device``, when it
    is known without importing torch: an explicit dtype on ``auto`` or ``cpu`` (neither can fail to resolve).  None:
    ask :func:`gate.inputs.models.resolve_dtype` (``auto`` depends on the GPU; a named GPU device must exist)."""
    if dtype == "auto" or device not in ("auto", "cpu"):
        return None
    return f"torch.{dtype}"
