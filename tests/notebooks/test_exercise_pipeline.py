"""exercises/ is generated from solutions/: fresh, idempotent, and friendly when blank."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from course_tools import exercises as gen

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def test_committed_exercises_are_fresh(capsys):
    stale = gen.generate(ROOT, check=True)
    assert stale == [], f"stale: {stale}. Run `make exercises` and commit the result."


def test_check_mode_exits_non_zero_when_stale(tmp_path):
    root = _copy_course(tmp_path)
    victim = next((root / "exercises").glob("*.ipynb"))
    victim.write_text(victim.read_text().replace("not implemented yet", "edited by hand"))
    assert gen.main(["--check", "--root", str(root)]) == 1
    assert gen.main(["--root", str(root)]) == 0  # regenerates
    assert gen.main(["--check", "--root", str(root)]) == 0


def _copy_course(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    for d in ("solutions", "exercises"):
        shutil.copytree(ROOT / d, root / d)
    return root


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


# ----------------------------------------------------------------------- the transformation


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


# ----------------------------------------------------------------------- blank notebooks run


def _text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}")
    return "".join(parts)


@pytest.mark.slow
@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_blank_exercise_notebook_runs_and_every_check_says_not_implemented(path: Path):
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    roles = gen.exercise_cells(nb)
    assert roles, f"{path.name} has no exercises"
    check_cells = {i for r in roles.values() for i in r["check"]}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if i in check_cells:
            assert "not implemented yet" in _text(cell), (
                f"{path.name} cell {i}: the check of a blank exercise must say 'not "
                f"implemented yet', got: {_text(cell)[:300]!r}"
            )
            assert not errors, f"{path.name} cell {i}: a blank check must not raise"
        else:
            assert not errors, (
                f"{path.name} cell {i} fails in the blank notebook (does it "
                f"use the learner's answer?): {_text(cell)[-500:]}"
            )
