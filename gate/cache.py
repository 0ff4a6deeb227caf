"""Cache of reference generations, so a PR that changes only the draft does not regenerate them.

An entry is one reference batch execution (outputs and timings), stored as
JSON under ``<cache_dir>/reference/<key>.json``.  The key is a digest of
everything the reference output depends on: the target model's content
fingerprint and dtype, device and hardware, the batch's prompt token ids, token
budgets and seeds, generation settings, batch size, attention implementation
and the engine version (see ``Runner._reference_key``).  The draft is not part
of the key, by design.

A damaged entry is a cache miss, never an error: the cache can only save work.
On GitHub Actions, persist the directory with ``actions/cache``.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from gate.results import atomic_write_json


class ReferenceCache:
    def __init__(self, root: str | Path):
        self.dir = Path(root) / "reference"
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def get(self, key: str) -> dict | None:
        try:
            rec = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            self.misses += 1
            return None
        if not isinstance(rec, dict) or rec.get("kind") != "execution" or "sequences" not in rec:
            self.misses += 1
            return None
        self.hits += 1
        return rec

    def put(self, key: str, record: dict) -> None:
        with contextlib.suppress(OSError):  # a read-only or full disk only costs us the saving
            atomic_write_json(self._path(key), record)
