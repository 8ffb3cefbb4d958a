"""course_tools/exercises.py (``course-exercises``): exercises/ generated from solutions/,
the exercise format it validates, the placeholder, the nbgrader metadata, and the command."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import nbformat
import pytest
from scripts import ROOT

from course_tools import exercises as gen

SOLUTION = """import numpy as np


def softmax(x):
    ### BEGIN SOLUTION
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
    ### END SOLUTION
"""
CHECK = """check("00.1", softmax)
### BEGIN HIDDEN TESTS
check("00.1", softmax, hidden=True)
### END HIDDEN TESTS"""


def _copy_course(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    for d in ("solutions", "exercises"):
        shutil.copytree(ROOT / d, root / d)
    return root


def _exercise_nb(solution_src: str, check_src: str, ex_id: str = "00.1"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("statement"),
        nbformat.v4.new_code_cell(solution_src),
        nbformat.v4.new_code_cell(
            check_src,
            outputs=[nbformat.v4.new_output("stream", text="old output")],
            execution_count=3,
        ),
    ]
    for cell, role in zip(nb.cells, ("statement", "solution", "check")):
        cell.metadata["course"] = {"exercise": ex_id, "role": role}
    return nb


def _tiny_course(tmp_path: Path) -> Path:
    """A course of one tiny solution notebook (chapter 00's exercise, nothing else)."""
    root = tmp_path / "tiny"
    (root / "solutions").mkdir(parents=True)
    nbformat.write(_exercise_nb(SOLUTION, CHECK), root / "solutions" / "00_setup.ipynb")
    return root


# --------------------------------------------------------------------------- the transformation


def test_solution_becomes_a_placeholder_and_hidden_tests_vanish():
    nb = _exercise_nb(SOLUTION, CHECK)
    gen.validate(nb, "t")
    out = gen.to_exercise(nb, "00_setup")
    sol, chk = out.cells[1].source, out.cells[2].source
    assert "np.exp" not in sol and "BEGIN SOLUTION" not in sol
    assert '    raise NotImplementedError("Exercise 00.1' in sol  # keeps the indentation
    assert "def softmax(x):" in sol
    assert chk == 'check("00.1", softmax)'
    assert out.cells[2].outputs == [] and out.cells[2].execution_count is None
    assert out.cells[2].metadata["nbgrader"]["points"] == 1
    assert out.cells[2].metadata["nbgrader"]["grade"] is True
    assert out.cells[1].metadata["nbgrader"]["solution"] is True
    assert out.metadata["course"]["assignment"] == "00_setup"
    # The placeholder is valid Python and raises the friendly error when called.
    ns: dict = {}
    exec(sol, ns)
    with pytest.raises(NotImplementedError, match="Exercise 00.1 is not implemented yet"):
        ns["softmax"](None)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda nb: nb.cells.pop(2), "exactly one check cell"),
        (
            lambda nb: nb.cells.append(
                nbformat.v4.new_code_cell(
                    "check('00.1', softmax)",
                    metadata={"course": {"exercise": "00.1", "role": "check"}},
                )
            ),
            "exactly one check cell",
        ),
        (
            lambda nb: setattr(
                nb.cells[1], "source", SOLUTION.replace("    ### END SOLUTION\n", "")
            ),
            "never closed",
        ),
        (
            lambda nb: setattr(nb.cells[1], "source", SOLUTION.replace("def softmax", "def soft")),
            "does not define `softmax`",
        ),
        (
            lambda nb: [c.metadata["course"].update(exercise="42.7") for c in nb.cells],
            "unknown exercise",
        ),
    ],
)
def test_format_errors_are_named(mutate, message):
    nb = _exercise_nb(SOLUTION, CHECK)
    mutate(nb)
    with pytest.raises(gen.ExerciseFormatError, match=message):
        gen.validate(nb, "t")
        gen.to_exercise(nb, "t")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda nb: setattr(nb.cells[1], "source", "def softmax(x):\n    return x\n"),
         "has no '### BEGIN SOLUTION'"),
        (lambda nb: setattr(nb.cells[2], "source", "check(softmax)"),
         'does not call check("00.1", ...)'),
        (lambda nb: nb.cells.append(nbformat.v4.new_code_cell(SOLUTION)),
         "cell 3 has a solution region but is not marked"),
        (lambda nb: nb.cells[0].metadata["course"].update(role="statment"),
         "exactly one statement cell, found 0"),
    ],
)  # fmt: skip
def test_more_format_errors_are_named_with_the_place(mutate, message):
    nb = _exercise_nb(SOLUTION, CHECK)
    mutate(nb)
    with pytest.raises(gen.ExerciseFormatError, match=r"^solutions/x\.ipynb: ") as err:
        gen.validate(nb, "solutions/x.ipynb")
    assert message in str(err.value)


def test_a_check_cell_may_name_its_exercise_in_single_quotes():
    nb = _exercise_nb(SOLUTION, "check('00.1', softmax)")
    assert gen.validate(nb, "t") == {"00.1": {"statement": [0], "solution": [1], "check": [2]}}


@pytest.mark.parametrize(
    "source, message",
    [
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "nested"),
        ("x = 1\n### END SOLUTION", "without '### BEGIN SOLUTION'"),
    ],
)
def test_badly_nested_regions_are_refused(source, message):
    with pytest.raises(gen.ExerciseFormatError, match=message):
        gen._replace_regions(source, gen.BEGIN_SOLUTION, gen.END_SOLUTION, lambda ind: [], "w")


def test_the_placeholder_keeps_the_indentation_and_names_the_exercise():
    lines = gen.placeholder("02.4", "        ")
    assert lines[0] == "        # Exercise 02.4: your code goes here (delete the line below)."
    assert lines[1].startswith('        raise NotImplementedError("Exercise 02.4 ')


def test_hidden_tests_go_from_any_code_cell():
    nb = _exercise_nb(SOLUTION, CHECK)
    nb.cells.append(
        nbformat.v4.new_code_cell("x = 1\n### BEGIN HIDDEN TESTS\nsecret()\n### END HIDDEN TESTS\n")
    )
    out = gen.to_exercise(nb, "00_setup")
    assert out.cells[3].source == "x = 1" and "secret" not in out.cells[3].source


def test_normalise_fills_nbgrader_metadata_from_the_registry():
    nb = _exercise_nb(SOLUTION, CHECK)
    out = gen.normalise(nb, "00_setup")
    statement, solution, check = (c.metadata["nbgrader"] for c in out.cells)
    assert statement == {"schema_version": 3, "grade_id": statement["grade_id"], "task": False,
                         "solution": False, "grade": False, "locked": True}  # fmt: skip
    assert (solution["solution"], solution["locked"]) == (True, False)
    assert (check["grade"], check["locked"], check["points"]) == (True, True, 1)
    assert len({statement["grade_id"], solution["grade_id"], check["grade_id"]}) == 3
    assert out.metadata["kernelspec"]["name"] == "python3"
    assert "nbgrader" not in nb.cells[0].metadata  # the input is not changed
    assert gen.exercise_cells(out) == {"00.1": {"statement": [0], "solution": [1], "check": [2]}}


# --------------------------------------------------------------------------- generate()


def test_a_tiny_solution_notebook_becomes_its_exercise_notebook(tmp_path):
    root = _tiny_course(tmp_path)
    said = io.StringIO()
    changed = gen.generate(root, out=said)
    assert changed == ["solutions/00_setup.ipynb", "exercises/00_setup.ipynb"]
    assert said.getvalue().splitlines() == [f"updated: {c}" for c in changed]
    ex = nbformat.read(root / "exercises" / "00_setup.ipynb", as_version=4)
    assert 'raise NotImplementedError("Exercise 00.1' in ex.cells[1].source
    assert "HIDDEN" not in ex.cells[2].source and ex.cells[2].outputs == []
    sol = nbformat.read(root / "solutions" / "00_setup.ipynb", as_version=4)
    assert "### BEGIN SOLUTION" in sol.cells[1].source and sol.cells[2].outputs == []
    assert gen.generate(root, check=True, out=said) == []
    assert said.getvalue().endswith("exercises are up to date\n")


def test_only_the_named_notebooks_are_generated(tmp_path):
    root = _tiny_course(tmp_path)
    nbformat.write(_exercise_nb(SOLUTION, CHECK), root / "solutions" / "00_other.ipynb")
    (root / "exercises").mkdir()
    (root / "exercises" / "99_kept.ipynb").write_text("{}")  # not a stray when `only`
    only = [root / "solutions" / "00_other.ipynb"]
    assert gen.generate(root, only=only, out=io.StringIO()) == [
        "solutions/00_other.ipynb",
        "exercises/00_other.ipynb",
    ]
    assert not (root / "exercises" / "00_setup.ipynb").exists()
    assert (root / "exercises" / "99_kept.ipynb").exists()


def test_check_mode_exits_non_zero_when_stale(tmp_path):
    root = _copy_course(tmp_path)
    victim = next((root / "exercises").glob("*.ipynb"))
    victim.write_text(victim.read_text().replace("not implemented yet", "edited by hand"))
    assert gen.main(["--check", "--root", str(root)]) == 1
    assert gen.main(["--root", str(root)]) == 0  # regenerates
    assert gen.main(["--check", "--root", str(root)]) == 0


def test_generator_is_idempotent(tmp_path):
    root = _copy_course(tmp_path)
    shutil.rmtree(root / "exercises")
    first = gen.generate(root)
    assert first, "a first run must write the exercises"
    snapshot = {p.name: p.read_text() for p in (root / "exercises").glob("*.ipynb")}
    assert gen.generate(root) == []
    assert snapshot == {p.name: p.read_text() for p in (root / "exercises").glob("*.ipynb")}


def test_stray_exercise_notebooks_are_removed(tmp_path):
    root = _copy_course(tmp_path)
    (root / "exercises" / "99_gone.ipynb").write_text("{}")
    assert "exercises/99_gone.ipynb" in gen.generate(root)
    assert not (root / "exercises" / "99_gone.ipynb").exists()


# --------------------------------------------------------------------------- the command


def test_the_command_says_what_is_wrong_and_exits_2(tmp_path, capsys):
    assert gen.main(["--course", str(tmp_path)]) == 2
    assert "error:" in capsys.readouterr().err
    root = _tiny_course(tmp_path)
    nb = _exercise_nb(SOLUTION.replace("def softmax", "def soft"), CHECK)
    nbformat.write(nb, root / "solutions" / "00_setup.ipynb")
    assert gen.main(["--course", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: solutions/00_setup.ipynb: ") and "does not define" in err


def test_check_mode_changes_nothing(tmp_path, capsys):
    root = _tiny_course(tmp_path)
    before = (root / "solutions" / "00_setup.ipynb").read_bytes()
    assert gen.main(["--check", "--course", str(root)]) == 1
    assert "run `make exercises` and commit the result" in capsys.readouterr().err
    assert (root / "solutions" / "00_setup.ipynb").read_bytes() == before
    assert not (root / "exercises").exists()
