"""JSON Schemas of the documents the gate writes, shipped in the package and versioned with them.

Each ``<name>.schema.json`` here is generated from the pydantic types that define
the document (``python scripts/make_schemas.py``); a test fails when one is stale,
and every document the gate writes in the tests is validated against its schema.

======== ========================= =================================
name     document                  schema id (the ``schema`` field)
======== ========================= =================================
results  ``results.json``          ``specguard.results/4``
checks   ``checks.json``           ``specguard.checks/2``
baseline ``baselines/<name>/*.json`` ``specguard.baseline/1``
verdict  ``verdict.json``          ``specguard.verdict/3``
phases   ``phases.json``           ``specguard.phases/1``
======== ========================= =================================
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMAS = ("results", "checks", "baseline", "verdict", "phases")
HERE = Path(__file__).resolve().parent


def _model(name: str):
    if name == "results":
        from gate.run.results import Results as model
    elif name == "checks":
        from gate.checks.doc import ChecksDoc as model
    elif name == "baseline":
        from gate.verdict.baseline import Baseline as model
    elif name == "verdict":
        from gate.verdict.doc import VerdictDoc as model
    elif name == "phases":
        from gate.io.documents import PhasesDoc as model
    else:
        raise KeyError(name)
    return model


def generate(name: str) -> dict:
    schema = _model(name).model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://specguard.dev/schemas/{name}.schema.json"
    return schema


def load(name: str) -> dict:
    return json.loads((HERE / f"{name}.schema.json").read_text(encoding="utf-8"))
