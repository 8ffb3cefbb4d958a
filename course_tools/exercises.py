"""Generate ``exercises/`` from ``solutions/``: the solutions are the single source.

Run ``course-exercises`` in the course folder (or ``course-exercises --course ROOT``, or
``make exercises``) after editing a solution notebook.
``course-exercises --check`` exits 1 when anything committed is stale; the tests use it.

The exercise format (nbgrader-compatible where it costs nothing):

* each exercise has a **statement** (markdown), a **solution** cell and a **check** cell,
  tied together by cell metadata ``{"course": {"exercise": "02.1", "role": ...}}``;
* solution code sits between ``### BEGIN SOLUTION`` and ``### END SOLUTION``;
* check cells call ``check("02.1", fn)`` and may carry hidden tests between
  ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``;
* points live in one place, the exercise's declaration in ``course_lib/checks/chNN.py``;
  this tool copies them into the ``nbgrader`` metadata of both versions.

In the student version a solution region becomes a placeholder that raises
``NotImplementedError`` naming the exercise, hidden tests disappear, outputs are cleared.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

from course_lib.progress import grade_id

from .course import CourseRootError, add_course_argument, course_root

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
ROLES = ("statement", "solution", "check")
NB_VERSION = 4


class ExerciseFormatError(ValueError):
    """A solution notebook that breaks the exercise format (said precisely)."""


def placeholder(exercise_id: str, indent: str) -> list[str]:
    from course_lib.checks.core import PLACEHOLDER_MARK

    return [
        f"{indent}# Exercise {exercise_id}: your code goes here (delete the line below).",
        f'{indent}raise NotImplementedError("Exercise {exercise_id} {PLACEHOLDER_MARK}: '
        'replace this line with your code.")',
    ]


def _replace_regions(source: str, begin: str, end: str, repl, where: str) -> str:
    out: list[str] = []
    inside: str | None = None
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == begin:
            if inside is not None:
                raise ExerciseFormatError(f"{where}: nested '{begin}'")
            inside = line[: len(line) - len(line.lstrip())]
            continue
        if stripped == end:
            if inside is None:
                raise ExerciseFormatError(f"{where}: '{end}' without '{begin}'")
            out.extend(repl(inside))
            inside = None
            continue
        if inside is None:
            out.append(line)
    if inside is not None:
        raise ExerciseFormatError(f"{where}: '{begin}' is never closed by '{end}'")
    return "\n".join(out)


def exercise_cells(nb) -> dict[str, dict[str, list[int]]]:
    """{exercise id: {role: [cell indices]}} from the cells' course metadata."""
    found: dict[str, dict[str, list[int]]] = {}
    for i, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("course") or {}
        ex_id, role = meta.get("exercise"), meta.get("role")
        if ex_id is None:
            continue
        found.setdefault(str(ex_id), {}).setdefault(str(role), []).append(i)
    return found


def validate(nb, where: str) -> dict[str, dict[str, list[int]]]:
    """Check the exercise format; raise ExerciseFormatError saying what is wrong."""
    from course_lib.checks.core import get_exercise

    cells = exercise_cells(nb)
    for ex_id, roles in cells.items():
        try:
            ex = get_exercise(ex_id)
        except KeyError as err:
            raise ExerciseFormatError(f"{where}: {err.args[0]}") from None
        for role in ROLES:
            if len(roles.get(role, [])) != 1:
                raise ExerciseFormatError(
                    f"{where}: exercise {ex_id} needs exactly one {role} cell, found "
                    f"{len(roles.get(role, []))}"
                )
        sol = nb.cells[roles["solution"][0]]
        if BEGIN_SOLUTION not in sol.source:
            raise ExerciseFormatError(
                f"{where}: the solution cell of {ex_id} has no '{BEGIN_SOLUTION}'"
            )
        chk = nb.cells[roles["check"][0]]
        if f'"{ex_id}"' not in chk.source and f"'{ex_id}'" not in chk.source:
            raise ExerciseFormatError(
                f'{where}: the check cell of {ex_id} does not call check("{ex_id}", ...)'
            )
        if f"def {ex.target}" not in sol.source:
            raise ExerciseFormatError(
                f"{where}: the solution cell of {ex_id} does not define `{ex.target}`"
            )
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and BEGIN_SOLUTION in cell.source:
            meta = cell.get("metadata", {}).get("course") or {}
            if meta.get("role") != "solution":
                raise ExerciseFormatError(
                    f"{where}: cell {i} has a solution region but is "
                    "not marked as an exercise's solution cell"
                )
    return cells


def _nbgrader_meta(role: str, ex, assignment: str) -> dict:
    base = {
        "schema_version": 3,
        "grade_id": grade_id(assignment, ex.id, role),
        "task": False,
    }
    if role == "solution":
        return {**base, "solution": True, "grade": False, "locked": False}
    if role == "check":
        return {**base, "solution": False, "grade": True, "locked": True, "points": ex.points}
    return {**base, "solution": False, "grade": False, "locked": True}


def normalise(nb, assignment: str):
    """Clear outputs, fill nbgrader metadata from the registry, set notebook metadata."""
    from course_lib.checks.core import get_exercise

    nb = copy.deepcopy(nb)
    nb.metadata["course"] = {"assignment": assignment}
    nb.metadata.setdefault(
        "kernelspec", {"display_name": "Python 3", "language": "python", "name": "python3"}
    )
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        meta = cell.metadata.get("course") or {}
        if "exercise" in meta:
            ex = get_exercise(str(meta["exercise"]))
            cell.metadata["nbgrader"] = _nbgrader_meta(meta["role"], ex, assignment)
    return nb


def to_exercise(solution_nb, assignment: str):
    """The student version of a (validated) solution notebook."""
    nb = normalise(solution_nb, assignment)
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("course") or {}
        where = f"{assignment} cell {i}"
        if cell.cell_type != "code":
            continue
        if meta.get("role") == "solution":
            ex_id = meta["exercise"]
            cell.source = _replace_regions(
                cell.source,
                BEGIN_SOLUTION,
                END_SOLUTION,
                lambda ind, e=ex_id: placeholder(e, ind),
                where,
            )
        if BEGIN_HIDDEN in cell.source:
            cell.source = _replace_regions(
                cell.source, BEGIN_HIDDEN, END_HIDDEN, lambda ind: [], where
            ).rstrip("\n")
    return nb


def _dump(nb) -> str:
    text = nbformat.writes(nb, version=NB_VERSION)
    return text if text.endswith("\n") else text + "\n"


def generate(
    root: Path, check: bool = False, out=sys.stdout, only: list[Path] | None = None
) -> list[str]:
    """Regenerate (or, with check=True, verify) exercises/ and solutions' metadata.

    ``only`` limits the work to some solution notebooks. Returns the files that were
    (or would be) changed.
    """
    root = Path(root).resolve()
    sol_dir, ex_dir = root / "solutions", root / "exercises"
    changed: list[str] = []
    expected_ex: set[str] = set()
    paths = sorted(sol_dir.glob("*.ipynb")) if not only else [Path(p).resolve() for p in only]
    for path in paths:
        assignment = path.stem
        text = path.read_text(encoding="utf-8")
        nb = nbformat.reads(text, as_version=NB_VERSION)
        validate(nb, str(path.relative_to(root)))
        sol_text = _dump(normalise(nb, assignment))
        ex_text = _dump(to_exercise(nb, assignment))
        target = ex_dir / path.name
        expected_ex.add(path.name)
        for dest, new in ((path, sol_text), (target, ex_text)):
            old = dest.read_text(encoding="utf-8") if dest.exists() else None
            if old != new:
                changed.append(str(dest.relative_to(root)))
                if not check:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_text(new, encoding="utf-8")
    strays = sorted(ex_dir.glob("*.ipynb")) if ex_dir.exists() and not only else []
    for stray in strays:
        if stray.name not in expected_ex:
            changed.append(str(stray.relative_to(root)))
            if not check:
                stray.unlink()
    verb = "stale" if check else "updated"
    for c in changed:
        print(f"{verb}: {c}", file=out)
    if not changed:
        print("exercises are up to date", file=out)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="course-exercises",
        description="Regenerate exercises/ from solutions/ (the single source).",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if exercises/ or solutions' metadata are stale",
    )
    add_course_argument(parser)
    parser.add_argument(
        "notebooks",
        nargs="*",
        type=Path,
        help="only these solution notebooks (default: all of solutions/)",
    )
    args = parser.parse_args(argv)
    try:
        root = course_root(args.course)
        changed = generate(root, check=args.check, only=args.notebooks or None)
    except (CourseRootError, ExerciseFormatError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check and changed:
        print("run `make exercises` and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
