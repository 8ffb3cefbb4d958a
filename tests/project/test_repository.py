"""Repository invariants: clean notebooks, one dependency list, lint, layout."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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
