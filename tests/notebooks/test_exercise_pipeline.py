"""exercises/ as committed: fresh (generated from solutions/), and friendly when blank.

The generator itself (course_tools/exercises.py) is tested in
tests/course_tools/test_exercises.py."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from course_tools import exercises as gen

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


def test_committed_exercises_are_fresh(capsys):
    stale = gen.generate(ROOT, check=True)
    assert stale == [], f"stale: {stale}. Run `make exercises` and commit the result."


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
