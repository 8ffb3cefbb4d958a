"""benchmarks/notebook_times.py: its selection, the budgets it shares with `make test`, a real
run on the smallest notebook, and recorded results that cover the whole course."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("notebooks", "solutions", "exercises")


def _script():
    return load_script("benchmarks/notebook_times.py")


def test_only_selects_by_glob():
    select = _script().select
    paths = ["notebooks/06_a.ipynb", "notebooks/07_b.ipynb", "solutions/07_b.ipynb"]
    assert select(paths, None) == paths
    assert select(paths, ["notebooks/0[78]_*"]) == ["notebooks/07_b.ipynb"]
    assert select(paths, ["*/07_*", "notebooks/06_*"]) == paths


def test_a_run_writes_the_budget_it_ran(tmp_path, monkeypatch):
    monkeypatch.delenv("COURSE_BUDGET", raising=False)
    out = tmp_path / "times.json"
    _script().main(["--only", "exercises/00_*", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["course_budget"] == "ci"
    (row,) = report["notebooks"]
    assert row["notebook"] == "exercises/00_setup.ipynb"
    assert row["seconds"] > 0 and row["budget_s"] == 60.0
    with pytest.raises(SystemExit):  # a glob that matches nothing is a usage error
        _script().main(["--only", "nowhere/*", "--out", str(out)])


@pytest.mark.parametrize(
    "name, budget, folders",
    [
        ("notebook_times.json", "ci", FOLDERS),
        ("notebook_times_full.json", "full", ("notebooks",)),
    ],
)
def test_recorded_times_cover_the_course(name, budget, folders):
    """The recorded times name every notebook of the course (a new chapter is timed when it
    lands); the full budget covers the lectures that train (07-09)."""
    report = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
    assert report["course_budget"] == budget
    timed = {row["notebook"] for row in report["notebooks"]}
    want = {
        f"{folder}/{p.name}"
        for folder in folders
        for p in (ROOT / folder).glob("*.ipynb")
        if budget == "ci" or p.name[:3] in ("07_", "08_", "09_")
    }
    assert want <= timed, f"not timed in {name}: {sorted(want - timed)}"
