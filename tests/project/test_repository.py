"""Repository invariants: clean notebooks, one dependency list, lint, layout."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from course_tools.links import load_toml

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIRS = ("notebooks", "solutions", "exercises")


def all_notebooks() -> list[Path]:
    return sorted(p for d in NOTEBOOK_DIRS for p in (ROOT / d).glob("*.ipynb"))


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_notebook_has_no_outputs(path: Path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    dirty = [
        i
        for i, c in enumerate(nb["cells"])
        if c.get("outputs") or c.get("execution_count") is not None
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} carry outputs or execution counts; clear "
        "them before committing (Edit > Clear Outputs of All Cells)."
    )


def test_layout_of_the_design_exists():
    for name in (
        "README.md",
        "Makefile",
        "pyproject.toml",
        "environment.yml",
        ".ci/run",
        "course_lib",
        "course_tools",
        "notebooks",
        "solutions",
        "exercises",
        "tests",
        "benchmarks",
    ):
        assert (ROOT / name).exists(), f"{name} is missing from the course layout"


def test_every_lecture_follows_the_naming_scheme():
    for p in all_notebooks():
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", p.name), f"bad notebook name {p}"


def test_every_exercise_notebook_has_a_lecture():
    lectures = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    for p in (ROOT / "solutions").glob("*.ipynb"):
        assert p.name in lectures, f"solutions/{p.name} has no lecture notebooks/{p.name}"


def _requirement_names(specs: list[str]) -> set[str]:
    names = set()
    for spec in specs:
        spec = spec.split(";")[0].strip()
        if not spec or spec.startswith("-"):
            continue
        name = re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].lower().replace("_", "-")
        names.add({"pytorch": "torch"}.get(name, name))
    return names


def test_environment_yml_and_pyproject_name_the_same_packages():
    import yaml

    project = load_toml(ROOT / "pyproject.toml")["project"]
    # Binder and conda give learners the learner's dependencies only, as `make lab` does
    py_names = _requirement_names(project["dependencies"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text(encoding="utf-8"))
    conda_specs, pip_specs = [], []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip_specs += dep.get("pip", [])
        else:
            conda_specs.append(dep)
    env_names = _requirement_names(conda_specs + pip_specs) - {"python", "pip"}
    assert py_names - env_names == set(), (
        f"in pyproject.toml but not environment.yml: {sorted(py_names - env_names)}"
    )
    assert env_names - py_names == set(), (
        f"in environment.yml but not pyproject.toml: {sorted(env_names - py_names)}"
    )


def test_dependency_ranges_stay_open():
    project = load_toml(ROOT / "pyproject.toml")["project"]
    for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
        assert "==" not in spec.split(";")[0], (
            f"exact pin {spec!r}: the course's ranges stay open for users"
        )


def test_ruff_is_clean():
    """`make lint`: ruff's lint rules and its formatter, over the whole tree."""
    ruff = Path(sys.executable).with_name("ruff")
    cmd = [str(ruff)] if ruff.exists() else [sys.executable, "-m", "ruff"]
    for args in (["check", "."], ["format", "--check", "."]):
        proc = subprocess.run(cmd + args, cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, (
            f"`ruff {' '.join(args)}` found problems (run "
            f"`.venv/bin/ruff format .` for the second):\n"
            f"{proc.stdout}{proc.stderr}"
        )


# --------------------------------------------------------------------------- figures in docs


def test_the_course_maps_run_times_match_the_recorded_ones():
    """README's *runs in* column against benchmarks/results/notebook_times*.json: it fails
    when they drift far apart (after re-measuring: `python -m course_tools.plan --write`)."""
    from course_tools import plan

    _, chapters = plan.course_map(ROOT)
    measured = plan.measured(ROOT)
    lectures = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert [Path(c.lecture).name for c in chapters] == lectures, "the map lists every lecture"
    for c in chapters:
        assert c.lecture in measured, f"{c.lecture} has no recorded time in benchmarks/results"
        assert c.runs_in_s is not None, f"the course map gives no 'runs in' for {c.number}"
        got, want = c.runs_in_s, measured[c.lecture]
        assert abs(got - want) <= max(15.0, 0.5 * want), (
            f"README says chapter {c.number} runs in {got:.0f} s, recorded {want:.0f} s: "
            "run `python -m course_tools.plan --write`"
        )


def test_the_readme_totals_are_the_maps_sum():
    from course_tools import plan

    _, chapters = plan.course_map(ROOT)
    lec = plan._hm(sum(c.lecture_min for c in chapters))
    ex = plan._hm(sum(c.exercise_min for c in chapters))
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"about {lec} of lectures and {ex} of exercises" in text, (lec, ex)


def test_chapter_counts_in_the_docs_are_the_courses():
    n = len(list((ROOT / "notebooks").glob("*.ipynb")))
    words = {"nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
    for doc in ("README.md", "CONTRIBUTING.md", "docs/instructors.md"):
        text = " ".join((ROOT / doc).read_text(encoding="utf-8").split())
        for m in re.finditer(r"(?<!had )\b(\d+|nine|ten|eleven|twelve) chapters\b", text):
            count = int(m.group(1)) if m.group(1).isdigit() else words[m.group(1)]
            assert count == n, f"{doc}: '{m.group(0)}', but the course has {n} chapters"


# --------------------------------------------------------------------------- control characters

# A control character (Unicode category Cc) is a line feed or nothing. A form feed or a tab in a
# non-raw docstring is what "\frac" and "\theta" become; a carriage return is a Windows editor's.
# Tabs stay where the format needs them: a Makefile's recipes.
TABS_ALLOWED = {
    "Makefile",
}


def _tracked_files() -> list[str]:
    proc = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip("not a git checkout: no list of tracked files")
    return sorted(p for p in proc.stdout.split("\0") if p and (ROOT / p).is_file())


def _strings(value):
    """Every string in a parsed JSON document (a notebook's sources and metadata)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _docstrings(source: str) -> list[tuple[int, str]]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # the file's own characters are still scanned
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((getattr(node, "lineno", 1), doc))
    return out


def control_characters(rel: str, text: str) -> list[str]:
    """``"path:line: U+000C"`` for each line holding a control character other than a line
    feed (or a tab, where :data:`TABS_ALLOWED`). JSON files (notebooks) are read as JSON: their
    escaped ``\\u000c`` is a form feed in a cell's source. A Python file's docstrings are also
    read as Python reads them: ``\\frac`` in a docstring that is not raw is a form feed."""
    allowed = {"\n"} | ({"\t"} if rel in TABS_ALLOWED else set())
    if rel.endswith((".ipynb", ".json")):
        chunks = [(f"{rel} (a JSON string)", s) for s in _strings(json.loads(text))]
    elif rel.endswith(".py"):  # the file, then each docstring as Python reads it
        chunks = [(rel, text)]
        chunks += [(f"{rel} (docstring of line {n})", d) for n, d in _docstrings(text)]
    else:
        chunks = [(rel, text)]
    bad = []
    for where, chunk in chunks:
        for lineno, line in enumerate(chunk.split("\n"), 1):
            found = sorted({c for c in line if unicodedata.category(c) == "Cc"} - allowed)
            if found:
                codes = ", ".join(f"U+{ord(c):04X}" for c in found)
                bad.append(f"{where}:{lineno}: {codes}")
    return bad


def test_no_control_characters_in_tracked_text_files():
    bad = []
    for rel in _tracked_files():
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file (the shipped checkpoints)
            continue
        bad += control_characters(rel, text)
    assert not bad, (
        "control characters in tracked files (in Python, a docstring with backslashes "
        'wants r"""; a tab wants spaces):\n' + "\n".join(bad[:40])
    )


@pytest.mark.parametrize(
    "rel, text, caught",
    [
        ("a.py", 'r"""\\frac{a}{b}"""\n', False),
        ("a.py", '"""\x0crac{a}{b} and \theta"""\n', True),
        ("a.py", '"""\\frac{a}{b}"""\n', True),  # clean source, a form feed once parsed
        ("a.md", "line\r\n", True),
        ("a.py", "x = 1\t# a tab\n", True),
        ("Makefile", "all:\n\techo hi\n", False),
        ("a.ipynb", json.dumps({"cells": [{"source": ["\x08eta"]}]}), True),
        ("a.ipynb", json.dumps({"cells": [{"source": ["\\beta"]}]}), False),
    ],
)
def test_the_control_character_scan(rel, text, caught):
    assert bool(control_characters(rel, text)) is caught


def test_chapter_00_states_the_python_and_torch_pyproject_requires():
    """Chapter 00 said PyTorch >= 2.1 while pyproject.toml required 2.7."""
    import json
    import re

    from course_tools.links import load_toml

    project = load_toml(ROOT / "pyproject.toml")["project"]
    torch_min = next(
        re.search(r">=\s*([\d.]+)", d).group(1)
        for d in project["dependencies"]
        if d.startswith("torch")
    )
    python_min = re.search(r">=\s*([\d.]+)", project["requires-python"]).group(1)
    nb = json.loads((ROOT / "notebooks" / "00_setup.ipynb").read_text(encoding="utf-8"))
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert f"PyTorch ≥ {torch_min}" in text and f"Python ≥ {python_min}" in text
