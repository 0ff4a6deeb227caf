"""docs/architecture.md cannot go stale: its paths exist, its diagram covers every stage and output, its layer
list is the enforced contract, and its table of writers is what the code does."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tomllib

from gate.io import rundir

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
WRITERS = {"write_json", "write_text", "atomic_write_json", "atomic_write_text", "write_png",
           "RecordLog"}  # the append-only log is opened as a RecordLog and appended to
OUTPUTS = {getattr(rundir, n): n for n in ("RESULTS", "RECORDS", "PHASES", "CHECKS", "CHECKS_MD", "SUMMARY", "PNG",
                                            "COMMENT", "VERDICT")}


def block(kind: str, after: str = "") -> str:
    text = DOC[DOC.index(after):] if after else DOC
    return re.search(rf"```{kind}\n(.*?)```", text, re.S).group(1)


def test_every_path_the_document_names_exists():
    paths = set(re.findall(r"`(gate/[\w/.-]+)`", DOC)) | set(re.findall(r"(gate/[\w/]+/)", block("mermaid")))
    assert len(paths) > 30
    missing = sorted(p for p in paths if not (ROOT / p.split(" ")[0]).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_diagram_goes_from_the_config_through_every_stage_to_the_posted_comment():
    diagram = block("mermaid")
    stages = sorted(p.name for p in (ROOT / "gate").iterdir() if (p / "__init__.py").exists()
                    and p.name not in ("selftest", "testing", "schemas"))  # tools beside the flow, not stages of it
    assert stages == ["checks", "ci", "engines", "inputs", "io", "report", "repro", "run", "stacks", "verdict"]
    shown = [s for s in stages if f"gate/{s}/" in diagram]
    assert set(stages) - set(shown) == {"io"}, "every stage but io (under all of them) is in the diagram"
    assert "specguard.yaml" in diagram and "PR comment" in diagram and "baselines/" in diagram
    assert [f for f in OUTPUTS if f not in diagram] == [], "every file of a run directory is in the diagram"


def test_the_layer_list_is_the_enforced_contract():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    assert block("text", "## Layers").split("\n")[:-1] == layers


def _writers() -> dict[str, set[str]]:
    """{file name: {module.function}} for every call of a writer whose file is a run directory's constant."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "gate").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node, scope, module=module):
            for child in ast.iter_child_nodes(node):
                inner = scope
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    inner = [*scope, child.name]
                if isinstance(child, ast.Call) and getattr(child.func, "attr", getattr(child.func, "id", None)) \
                        in WRITERS:
                    for target in child.args:  # NAME, or run_dir / NAME
                        if isinstance(target, ast.BinOp) and isinstance(target.op, ast.Div):
                            target = target.right
                        if isinstance(target, ast.Name) and target.id in OUTPUTS.values():
                            file = next(f for f, n in OUTPUTS.items() if n == target.id)
                            found.setdefault(file, set()).add(".".join([module, *scope]))
                visit(child, inner, module)

        visit(tree, [])
    return found


def test_each_output_has_the_writers_the_document_names():
    table = {}
    section = DOC[DOC.index("## One writer per file"):]
    for row in re.findall(r"^\| `([\w.]+)` \| (.*?) \| .*? \|$", section[:section.index("\n## ")], re.M):
        table[row[0]] = set(re.findall(r"`(gate[\w.]+)`", row[1]))
    assert set(table) == set(OUTPUTS), "the table lists every output of a run directory"
    found = _writers()
    assert set(found) == set(OUTPUTS), "every output of a run directory has a writer the code shows"
    for file, writers in found.items():
        assert writers == table[file], f"{file}: written by {sorted(writers)}, the document says {sorted(table[file])}"
    assert all(len(found[f]) == 1 for f in (rundir.CHECKS, rundir.SUMMARY, rundir.COMMENT, rundir.VERDICT))


def test_the_checks_the_document_names_are_the_list_that_runs():
    """The prose claim: which module lists the checks, which checks, in which order, each a module of its name."""
    from gate.checks import analysis

    text = DOC[DOC.index("## The checks"):]
    text = text[:text.index("\n## ")]
    module = re.search(r"`(gate/checks/\w+\.py)` lists them", text).group(1)
    assert module == "gate/checks/analysis.py" and hasattr(analysis, "CHECKS")
    named = re.findall(r"`(\w+)`", text.split("lists them, in the order they run:")[1].split(".")[0])
    assert named == [name for name, _ in analysis.CHECKS]
    assert all(check.__name__ == f"gate.checks.{name}" for name, check in analysis.CHECKS), \
        "each check is the module of its name"
    package = (ROOT / "gate" / "checks" / "__init__.py").read_text(encoding="utf-8")
    listed = re.findall(r"^\* ``(\w+)``", package, re.M)
    assert listed == named, "gate/checks/__init__.py lists the same checks"


def test_no_private_name_is_imported_across_modules():
    """`from gate.x import _name` couples a module to another's internals: a name used elsewhere is public."""
    found = []
    for path in (ROOT / "gate").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gate"):
                found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, found


def test_the_pipeline_only_sequences_and_no_module_grows_into_a_god_module():
    """Issue 39: pipeline.py had 699 lines (paired engines, servers, baselines, refresh delivery) and
    inputs/config.py 855.  The pipeline sequences stages; each stage's work lives in its stage."""
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / "gate").rglob("*.py")}
    assert sizes["gate/pipeline.py"] <= 300, sizes["gate/pipeline.py"]
    assert sizes["gate/cli.py"] <= 300, "the command line parses and maps exit codes (issue 47, item 7)"
    assert not {p: n for p, n in sizes.items() if n > 600}


def test_no_module_imports_itself_through_others():
    """Issue 47, item 7: gate/engines/plugin.py and gate/engines/types/plugin.py imported each other (one inside a
    function).  Every import counts, those inside functions too: no two modules of the gate reach each other."""
    import grimp

    graph = grimp.build_graph("gate")
    cycles = {tuple(sorted({a, b})) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
              if graph.chain_exists(importer=b, imported=a)}
    assert not cycles, sorted(cycles)


# Every import by name inside gate/ (importlib.import_module), and why it may be one: loading the user's code, or a
# registry package loading its own built-in modules (each registers itself)
BY_NAME = {
    "gate.engines.contract": "user code: a plug-in's callable",
    "gate.repro.replay": "user code: a minimal case's callable, from its own pythonpath",
    "gate.engines.types": "a registry: every module of gate/engines/types/",
    "gate.stacks": "a registry: every module of gate/stacks/",
}


def _imports_by_name() -> set[str]:
    """The modules of the gate that import a module by name (importlib.import_module, __import__)."""
    found = set()
    for path in (ROOT / "gate").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "import_module"
                                               or getattr(node.func, "id", None) == "__import__"):
                found.add(module)
    return found


def test_every_import_by_name_is_user_code_or_a_registry_and_the_cycle_test_sees_it():
    """Issue 54, item 6: gate/inputs/config.py imported gate.engines.types by name, a loop (the config layer
    reaching up into the engines) that the contracts and grimp could not see.  Now each import by name is listed
    with its reason, a registry's loads join the import graph, and the graph has no loop."""
    import pkgutil

    import grimp

    assert _imports_by_name() == set(BY_NAME), sorted(_imports_by_name() - set(BY_NAME))
    graph = grimp.build_graph("gate")
    for package in ("gate.engines.types", "gate.stacks"):
        for m in pkgutil.iter_modules([str(ROOT / package.replace(".", "/"))]):
            graph.add_import(importer=package, imported=f"{package}.{m.name}")
    loops = {tuple(sorted({a, b})) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
             if graph.chain_exists(importer=b, imported=a)}
    assert not loops, sorted(loops)


def test_the_minimal_cases_name_no_engine_type():
    """Issue 47, item 7: how a case describes and replays its engine is the engine type's (EngineType.case_engine,
    case_batch, report_lines); gate/repro, replay.py included, never compares with a type's name."""
    from gate.engines import engine_types

    names = set(engine_types())
    found = [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
             for path in (ROOT / "gate" / "repro").glob("*.py")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and node.value in names]
    assert not found, found
