"""The grader's modules import one way: each only modules listed before it in
``course_tools.grading.LAYERS`` (function-level imports included), so there is no import
cycle and a reader can follow a submission from the command line down."""

from __future__ import annotations

import ast
from pathlib import Path

from course_tools import grading

PACKAGE = Path(grading.__file__).parent


def grader_imports(source: str) -> set[str]:
    """The grader's modules that ``source`` imports, at any depth in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import x
                found.update(a.name for a in node.names)
            elif node.level == 0 and (node.module or "").startswith("course_tools.grading."):
                found.add(node.module.split(".")[2])
            elif node.level == 0 and node.module == "course_tools.grading":
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("course_tools.grading."):
                    found.add(a.name.split(".")[2])
    return found


def upward_imports(sources: dict[str, str], layers: tuple[str, ...]) -> list[str]:
    """Every import of a module at or above the importer's own layer."""
    bad = []
    for name, source in sources.items():
        for imported in sorted(grader_imports(source)):
            if imported in layers and layers.index(imported) >= layers.index(name):
                bad.append(f"{name} imports {imported}, which comes after it in LAYERS")
    return bad


def test_every_module_of_the_grader_has_its_layer():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == set(grading.LAYERS), (
        f"modules missing from LAYERS: {sorted(modules - set(grading.LAYERS))}; "
        f"listed but absent: {sorted(set(grading.LAYERS) - modules)}"
    )


def test_no_module_of_the_grader_imports_upward():
    sources = {
        p.stem: p.read_text(encoding="utf-8") for p in PACKAGE.glob("*.py") if p.stem != "__init__"
    }
    bad = upward_imports(sources, grading.LAYERS)
    assert not bad, "the grader's imports go one way (course_tools/grading/__init__.py): " + (
        "; ".join(bad)
    )


def test_the_check_finds_a_cycle_and_a_late_function_level_import():
    layers = ("low", "high")
    assert upward_imports({"low": "from .high import x\n", "high": "from .low import y\n"}, layers)
    late = "def f():\n    from course_tools.grading.high import x\n"
    assert upward_imports({"low": late, "high": ""}, layers) == [
        "low imports high, which comes after it in LAYERS"
    ]
    assert upward_imports({"low": "import os\n", "high": "from . import low\n"}, layers) == []
