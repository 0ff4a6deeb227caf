"""The suite itself: no test can pass vacuously.  A test must assert something: an ``assert``, a
``pytest.raises``/``pytest.warns``, a library's ``assert_*`` (``np.testing.assert_allclose``,
``torch.testing.assert_close``), or a call to a helper (in its module, or a tests/ module it imports) that
asserts.  An AST scan, no test is run."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _asserting(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("raises", "warns", "fail") \
                and isinstance(node.value, ast.Name) and node.value.id == "pytest":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr.startswith("assert_") and isinstance(node.func.value, ast.Attribute) \
                and node.func.value.attr == "testing":
            return True
    return False


def _called(fn: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


def _functions(tree: ast.Module) -> dict[str, ast.AST]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def asserting_helpers() -> set[str]:
    """Names of functions in tests/ that assert, directly or through other such functions (a fixpoint)."""
    funcs: dict[str, list[ast.AST]] = {}
    for path in TESTS.glob("*.py"):
        for name, fn in _functions(ast.parse(path.read_text(encoding="utf-8"))).items():
            funcs.setdefault(name, []).append(fn)
    good = {name for name, fns in funcs.items() if any(_asserting(f) for f in fns)}
    while True:
        more = {name for name, fns in funcs.items() if name not in good
                and any(_called(f) & good for f in fns)}
        if not more:
            return good
        good |= more


def vacuous_tests() -> list[str]:
    helpers = asserting_helpers()
    found = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            fns = [node] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
                [n for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else []
            for fn in fns:
                if fn.name.startswith("test") and not _asserting(fn) and not (_called(fn) & helpers):
                    found.append(f"{path.name}::{fn.name}")
    return found


def test_every_test_asserts_something():
    assert vacuous_tests() == []


def test_the_scan_catches_a_test_without_an_assert(tmp_path):
    tree = ast.parse("def test_nothing():\n    x = 1\n\ndef test_raises():\n    with pytest.raises(ValueError):\n"
                     "        int('x')\n\ndef test_close():\n    np.testing.assert_allclose(1, 1)\n\n"
                     "def test_mine():\n    assert_ok(1)\n")
    fns = _functions(tree)
    assert not _asserting(fns["test_nothing"]) and _asserting(fns["test_raises"]) and _asserting(fns["test_close"])
    assert not _asserting(fns["test_mine"])  # a name that merely starts with assert_ proves nothing on its own


def test_the_tier_guard_knows_what_is_slow():
    """tests/conftest.py fails a test outside the slow tier that starts one of these (see `make test-fast`)."""
    from conftest import _heavy

    py = "/usr/bin/python3"
    assert _heavy([py, "-m", "gate", "gate", "c.yaml"]) and _heavy([py, "-m", "gate", "selftest"])
    assert _heavy([py, "-m", "gate", "run", "c.yaml"]) and _heavy(["/venv/bin/specguard", "demo"])
    assert _heavy([py, "-m", "gate.engines.worker", "3", "4"]) and _heavy(["/opt/act/act", "pull_request"])
    from gate.engines.plugin import WORKER_MAIN

    assert _heavy([py, "-c", WORKER_MAIN, "3", "4"]), "the worker as the gate starts it"
    assert not _heavy([py, "-m", "gate", "compare", "out"]) and not _heavy([py, "-m", "gate", "validate", "c.yaml"])
    assert not _heavy(["git", "init"]) and not _heavy("bash")


def test_every_third_party_import_of_gate_is_declared_in_pyproject():
    """Issue 30 item 7: `rich` was imported by gate/ but not declared (it arrived through transformers).  Every
    module gate/ imports that is neither the standard library nor gate itself belongs to a distribution named in
    pyproject.toml's dependencies or an extra."""
    import importlib.metadata
    import re
    import sys

    import tomllib

    root = TESTS.parent
    imported: dict[str, str] = {}
    for path in sorted((root / "gate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "gate":
                    imported.setdefault(top, str(path.relative_to(root)))
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    declared = {norm(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) for r in requirements}
    provides = importlib.metadata.packages_distributions()
    missing = {module: where for module, where in imported.items()
               if not {norm(d) for d in provides.get(module, [module])} & declared}
    assert imported and not missing, f"imported by gate/ but not declared in pyproject.toml: {missing}"
