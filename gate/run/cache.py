"""Cache of reference generations, so a PR that changes only the draft does not regenerate them.

An entry is one reference batch execution (outputs and timings), stored as
JSON under ``<cache_dir>/reference/<key>.json``.  The key is a digest of
everything the reference output can depend on (``Executor.cache_key`` and
``Runner.cache_context``): the target model's content fingerprint and dtype,
the device kind and hardware, the library versions (python, torch,
transformers, specguard), the attention implementation, the engine version,
the batch's exact prompt token ids in order, token budgets and seeds, the
generation settings and the batch size.  The draft is not part of the key, by
design.  A served reference (``http.reference``) is cached only where the gate
launches it: its stack's version, launch line (the port aside) and environment
join the key, so a changed flag or release misses; a server the gate does not
start is not cached (its flags are unknown).

A damaged or foreign entry is a cache miss, never an error: the cache can only
save work.  On GitHub Actions, persist the directory with ``actions/cache``.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from pydantic import ValidationError

from gate.io.files import atomic_write_json
from gate.run.records import Execution


class ReferenceCache:
    def __init__(self, root: str | Path):
        self.dir = Path(root) / "reference"
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> Execution | None:
        try:
            rec = Execution.model_validate(json.loads(self._path(key).read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError):
            self.misses += 1
            return None
        self.hits += 1
        return rec

    def put(self, key: str, record: Execution) -> None:
        with contextlib.suppress(OSError):  # a read-only or full disk only costs us the saving
            atomic_write_json(self._path(key), record)
