"""docs/config.md against the config's schema (issue 48, item 8): every field the code accepts is on the page,
and every field the page names is one the code accepts."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pydantic

from gate.engines.types.hf_assisted import HFAssistedEngineConfig
from gate.engines.types.http import HttpEngineConfig
from gate.engines.types.plugin import PluginEngineConfig
from gate.engines.types.speculative import SpeculativeEngineConfig
from gate.inputs.config import Config

DOC = (Path(__file__).resolve().parent.parent / "docs" / "config.md").read_text()
ENGINE_SECTIONS = (SpeculativeEngineConfig, HFAssistedEngineConfig, PluginEngineConfig, HttpEngineConfig)


def fields(model: type[pydantic.BaseModel], prefix: str = "") -> set[str]:
    """Every dotted field path of a config model, nested models included."""
    out = set()
    for name, f in model.model_fields.items():
        path = f"{prefix}{name}"
        out.add(path)
        for t in (f.annotation, *typing.get_args(f.annotation)):
            for u in (t, *typing.get_args(t)):
                if isinstance(u, type) and issubclass(u, pydantic.BaseModel):
                    out |= fields(u, path + ".")
    return out


def section(top: str) -> str:
    """The page's ``## `top` `` section."""
    match = re.search(rf"^## `{re.escape(top)}`\n(.*?)(?=^## |\Z)", DOC, re.S | re.M)
    assert match, f"docs/config.md has no section for {top}"
    return match.group(1)


def documented(path: str, text: str) -> bool:
    """Named in backticks in full (a section: by its own fields), or its last part (`leaf`, `.leaf`) inside its
    section."""
    leaf = path.rsplit(".", 1)[-1]
    if f"`{path}`" in DOC or f"`{path} " in DOC or f"`{path}." in DOC:
        return True
    return re.search(rf"`\.?{re.escape(leaf)}[`: ]", text) is not None


def test_every_config_field_is_on_the_reference_page():
    top = {p for p in fields(Config) if "." not in p}
    missing = sorted(p for p in top if f"| `{p}` |" not in DOC)  # the top-level table
    nested = {p for p in fields(Config) if "." in p and not p.startswith("engines")}
    missing += sorted(p for p in nested if not documented(p, section(p.split(".")[0])))
    engines = section("engines")
    engine_fields = set().union(*(fields(m) for m in ENGINE_SECTIONS))
    missing += sorted(f"engines[].{p}" for p in engine_fields if not documented(p, engines))
    assert not missing, f"fields docs/config.md does not name: {missing}"


def test_every_dotted_field_the_page_names_is_in_the_schema():
    known = fields(Config) | {f"engines[].{p}" for m in ENGINE_SECTIONS for p in fields(m)}
    top = {p.split(".")[0] for p in fields(Config)}
    keys = "|".join(sorted(top))
    named = set(re.findall(rf"`((?:{keys})(?:\[\])?\.[a-z_][a-z0-9_.]*)`", DOC))
    files = {"checks.json"}  # a file the page names, not a field
    unknown = sorted(n for n in named - files if n not in known and n.replace("engines[].", "engines.") not in known)
    assert not unknown, f"docs/config.md names fields the schema does not have: {unknown}"


ROLE = re.compile(r":(class|func|meth|mod|data|attr):`~?([A-Za-z_][\w.]*)`")


def _resolves(module, role: str, name: str) -> bool:
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):  # an absolute dotted name
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            for p in parts[i:]:
                obj = getattr(obj, p)
            return True
        except (ImportError, AttributeError):
            pass
    if role == "mod":
        return False
    obj = module
    try:  # a name in the module itself
        for p in parts:
            obj = getattr(obj, p)
        return True
    except AttributeError:  # a method or attribute of one of its classes
        return len(parts) == 1 and any(hasattr(c, parts[0]) for c in vars(module).values() if isinstance(c, type))


def test_every_cross_reference_in_the_packages_docstrings_names_something_that_exists():
    """A maintainer reads the docstrings first (issue 48, item 8): :class:/:func:/:meth: names that moved away are
    found here, not by the next reader."""
    import importlib

    root = Path(__file__).resolve().parent.parent
    broken = []
    for path in sorted((root / "gate").rglob("*.py")):
        if path.name == "__main__.py":  # importing it runs the CLI
            continue
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(name)
        broken += [f"{path.relative_to(root)}: :{role}:`{ref}`" for role, ref in ROLE.findall(path.read_text())
                   if not _resolves(module, role, ref)]
    assert not broken, broken
