"""The exercises with the tools instructors bring: nbgrader, and pytest-xdist on notebooks.

nbgrader is not a dependency of the course; these tests run it when it is installed (CI
installs it, see .ci/run) and skip, saying so, when it is not.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest
from grading_lab import ROOT, dump, feedback, grade, row

pytestmark = pytest.mark.slow


def _nbgrader():
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        pytest.skip("nbgrader is not installed (`pip install nbgrader`; CI installs it)")
    exe = shutil.which("nbgrader", path=str(ROOT / ".venv" / "bin")) or shutil.which("nbgrader")
    return [exe] if exe else [sys.executable, "-m", "nbgrader"]


def _validate(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_nbgrader(), "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=path.parent,
    )


def _nbgrader_release(assignment: str = "00_setup") -> dict:
    """What nbgrader's own release makes of the course's solution notebook (its
    ClearSolutions and ClearHiddenTests steps, as `nbgrader generate_assignment` runs)."""
    _nbgrader()
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    nb = nbformat.read(ROOT / "solutions" / f"{assignment}.ipynb", as_version=4)
    nb, _ = ClearSolutions().preprocess(copy.deepcopy(nb), {})
    nb, _ = ClearHiddenTests().preprocess(nb, {})
    return json.loads(nbformat.writes(nb))


def test_nbgrader_validate_fails_an_unsolved_exercise_and_passes_a_solved_one(tmp_path):
    for name, folder in (("blank.ipynb", "exercises"), ("solved.ipynb", "solutions")):
        (tmp_path / name).write_bytes((ROOT / folder / "00_setup.ipynb").read_bytes())
    blank = _validate(tmp_path / "blank.ipynb")
    assert "VALIDATION FAILED" in blank.stdout + blank.stderr, blank.stdout + blank.stderr
    assert "not implemented yet" in blank.stdout + blank.stderr
    solved = _validate(tmp_path / "solved.ipynb")
    assert "Success! Your notebook passes all the tests." in solved.stdout + solved.stderr, (
        solved.stdout + solved.stderr
    )


def test_nbgraders_own_release_is_a_blank_exercise():
    """solutions/ is a valid nbgrader source: its release puts nbgrader's placeholder in the
    solution regions and drops the hidden tests (graded below as "not started")."""
    released = _nbgrader_release()
    src = "".join("".join(c["source"]) for c in released["cells"] if c["cell_type"] == "code")
    assert "raise NotImplementedError()" in src and "BEGIN HIDDEN TESTS" not in src


def test_course_grade_reads_nbgraders_exchange(tmp_path):
    """The `submitted/<student>/<assignment>/` folder as nbgrader's exchange collects it."""
    released = _nbgrader_release()
    sub = tmp_path / "submitted"
    for student in ("alice", "bob"):
        (sub / student / "ps1").mkdir(parents=True)
    (sub / "alice" / "ps1" / "00_setup.ipynb").write_bytes(dump(released))
    (sub / "bob" / "ps1" / "00_setup.ipynb").write_bytes(dump(released))
    run = grade([sub], tmp_path / "out", "--jobs", "2")
    for student in ("alice", "bob"):
        r = row(run, f"submitted/{student}/ps1/00_setup.ipynb")
        assert r["status"] == "missing", feedback(run, r["submission"])
        assert "not implemented yet" in feedback(run, r["submission"])


# Prints the --dist that configuration settled on, then stops before xdist starts its
# workers (its own sessionstart runs last): they would only import the course again.
# Loaded (-p) before the plugins pytest finds installed, it also spares nbval's import of
# nbformat the grammar jsonschema's optional rfc3987_syntax compiles (see the grader's
# worker.py): seconds of CPU per run, for a check nothing here uses.
PRINT_DIST = """
import sys

sys.modules.setdefault("rfc3987_syntax", None)

import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    print("DIST=" + str(getattr(session.config.option, "dist", "no")), flush=True)
    pytest.exit("printed the --dist", returncode=0)
"""


def test_pytest_n_keeps_each_notebook_on_one_worker(tmp_path):
    """`pytest -n 2 --nbval-lax notebooks`, as anyone would type it: xdist must hand out
    whole files (a notebook's cells share one kernel), unless --dist says otherwise."""
    pytest.importorskip("xdist")
    (tmp_path / "print_dist.py").write_text(PRINT_DIST)

    def dist(*args: str) -> str:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "print_dist",
                "-p",
                "no:cacheprovider",
                "--co",
                "-q",
                *args,
                "notebooks/00_setup.ipynb",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(tmp_path)},
        )
        found = [line for line in proc.stdout.splitlines() if line.startswith("DIST=")]
        assert found, proc.stdout[-2000:] + proc.stderr[-2000:]
        return found[0][5:]

    assert dist("-n", "2", "--nbval-lax") == "loadfile"
    assert dist("-n", "2", "--dist", "load", "--nbval-lax") == "load"  # asked for: kept
    assert dist("-p", "no:xdist", "--nbval-lax") == "no"  # without xdist: no error
