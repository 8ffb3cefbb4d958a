"""CI runs the lowest and the highest Python the course supports: the hosted workflow's
matrix and the project's own CI (.ci/run, then .ci/other-pythons) name exactly those."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from course_tools.links import load_toml

ROOT = Path(__file__).resolve().parents[2]


def supported() -> tuple[str, str]:
    """(requires-python's floor, the highest Python the classifiers name)."""
    project = load_toml(ROOT / "pyproject.toml")["project"]
    floor = re.fullmatch(r">=\s*(3\.\d+)", project["requires-python"]).group(1)
    named = [
        c.rsplit(" :: ", 1)[1]
        for c in project.get("classifiers", [])
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert floor in named, f"the classifiers name every supported Python, {floor} included"
    highest = max(named, key=lambda v: tuple(map(int, v.split("."))))
    minors = sorted(int(v.split(".")[1]) for v in named)
    assert minors == list(range(minors[0], minors[-1] + 1)), "no gap between the classifiers"
    return floor, highest


TLJH_PYTHON = "3.12"  # The Littlest JupyterHub's user environment


def tested() -> list[str]:
    """The lowest and highest supported Python, and The Littlest JupyterHub's."""
    floor, highest = supported()
    return sorted({floor, TLJH_PYTHON, highest}, key=lambda v: tuple(map(int, v.split("."))))


def test_the_hosted_ci_runs_the_whole_suite_on_the_lowest_and_highest_python():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    test = workflow["jobs"]["test"]
    assert test["strategy"]["matrix"]["python-version"] == tested()
    steps = {s.get("name", s.get("uses")): s for s in test["steps"]}
    assert steps["actions/setup-python@v5"]["with"]["python-version"] == (
        "${{ matrix.python-version }}"
    )
    assert "download.pytorch.org/whl/cpu" in steps[".ci/run"]["env"]["TORCH_INDEX"]


def test_the_projects_ci_runs_the_other_pythons_after_the_suite():
    run = (ROOT / ".ci" / "run").read_text()
    assert run.index('make test PYTHON="$PYTHON"') < run.index("bash .ci/other-pythons")
    other = (ROOT / ".ci" / "other-pythons").read_text()
    default = re.search(r'VERSIONS=\$\{COURSE_OTHER_PYTHONS-"([^"]+)"\}', other).group(1)
    assert default.split() == tested()


def test_the_torch_free_tests_exist():
    listed = [
        line.strip()
        for line in (ROOT / ".ci" / "torch-free-tests").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert listed and all((ROOT / p).is_file() for p in listed), listed
    assert "tests/tools/test_bootstrap.py" in listed  # the learner's first command
