"""Read a submission, recognise its assignment, and rebuild it from the course's own copy.

The notebook that is executed is the course's ``solutions/NN_topic.ipynb`` with

* each exercise's **solution cell** replaced by the learner's solution cell(s), matched by
  exercise id (cell metadata), then by nbgrader's ``grade_id``, then by the function's
  name;
* every **code cell the learner added** (a cell id and code the course's notebook does not
  have) placed after the course cell it followed in the submission, so that helpers in
  cells of their own and answers written below the placeholder count, as they do when the
  learner runs the notebook;
* each exercise's **check cell** replaced by a *harvest* cell, in the same place (so the
  definition in force there is the one checked, as in the learner's run), which runs the
  exercise's function on the inputs of the grader's cases and only records the outputs (:func:`course_tools.grading.harvest.harvest`); the verdict
  is decided later, in the grader's process.

The learner's copies of the course's own cells are not used: an edited, deleted or
duplicated check cell, a changed statement or an edited set-up cell changes nothing. The
same pass flags code for a human look (:data:`SUSPICIOUS`, copies of the course's solution,
calls to what the course's cells import from ``course_lib``) and decides exercises whose
placeholder is untouched without any kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import nbformat

from ..exercises import BEGIN_SOLUTION, END_SOLUTION
from .analysis import (
    COPY_SIMILARITY,
    MAX_PARSED_CHARS,
    course_copies,
    course_imports,
    defined_names,
    dictated,
    forbidden_uses,
    normal_code,
    read_course_functions,
    references_used,
    safe_flags,
    similarity,
    suspicious,
    without_check_calls,
)
from .cases import code_fingerprint
from .identity import Course, course_meta

MAX_SOLUTION_CHARS = MAX_PARSED_CHARS  # a solution cell the grader cannot read is missing


# --------------------------------------------------------------------------- reading


# --------------------------------------------------------------------------- rebuilding


@dataclass
class Plan:
    """The notebook to execute and what each of its cells is."""

    assignment: str
    nb: nbformat.NotebookNode
    exercises: list[str]
    # per cell: ("course", None) | ("solution", ex_id) | ("learner", None) | ("harvest", ex_id)
    roles: list[tuple[str, str | None]]
    harvest_dirs: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)
    # per exercise: where the learner's code uses what its statement forbids
    breaches: dict[str, list[str]] = field(default_factory=dict)
    fingerprint: str = ""
    targets: dict[str, str] = field(default_factory=dict)  # exercise -> its function's name

    @property
    def needs_kernel(self) -> bool:
        return any(r == "harvest" for r, _ in self.roles)


def find_solution_cells(
    nb, assignment: str, ex_id: str, target: str
) -> tuple[list, list[str], str | None]:
    """(cells, notes, missing reason) of the learner's solution cell for one exercise: the
    one cell that counts, as ``make progress`` finds it
    (:func:`course_lib.progress.find_solution_cells`, the one place that finds them). When
    several cells keep the exercise's tag (JupyterLab's Duplicate copies a cell's
    metadata), the one the check cell saw counts and the others are not run: a scratch
    copy, a leftover placeholder or a fix below the check decides nothing."""
    from course_lib.progress import find_solution_cells as find

    found = find(list(nb.cells), assignment, ex_id, target)
    notes: list[str] = []
    if not found.cells or found.chosen is None:  # (no code cells: none chosen)
        if found.kind:
            return (
                [],
                notes,
                (
                    f"the solution cell of exercise {ex_id} is no longer a code cell "
                    f"(it is {found.kind!r})"
                ),
            )
        return (
            [],
            notes,
            (
                f"no solution cell for exercise {ex_id} in the submission (the "
                f"cell was deleted or its metadata removed, and no cell defines "
                f"`{target}`)"
            ),
        )
    if found.how == "function name":
        notes.append(
            f"the solution cell had lost its exercise tag; the last cell that "
            f"defines `{target}` was used"
        )
    if len(found.cells) > 1:
        k = next(i for i, c in enumerate(found.cells) if c is found.chosen) + 1
        notes.append(
            f"the submission has {len(found.cells)} solution cells for exercise {ex_id} "
            f"(matched by {found.how}; JupyterLab's Duplicate keeps the tag): the grader ran "
            f"the one your check cell saw (the {_ordinal(k)}; the last one run before the "
            "check when the notebook saved execution counts, else the last one above the "
            "check, leaving out untouched placeholders) and not the others"
        )
    src = found.chosen.get("source", "")
    if len(src) > MAX_SOLUTION_CHARS:
        return (
            [],
            notes,
            (
                f"the solution cell of exercise {ex_id} holds {len(src)} "
                f"characters, over the {MAX_SOLUTION_CHARS} limit"
            ),
        )
    return [found.chosen], notes, None


def _ordinal(k: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(k, f"{k}th")


# --------------------------------------------------------------------------- code analysis


def solution_source(course: Course, assignment: str, ex_id: str) -> str:
    for cell in course.solution_notebook(assignment).cells:
        meta = course_meta(cell)
        if str(meta.get("exercise")) == ex_id and meta.get("role") == "solution":
            return cell.source
    return ""


# --------------------------------------------------------------------------- rebuilding


HARVEST_TEMPLATE = """\
# course-grade: record the outputs of exercise {ex_id} for the grader (it decides, not this kernel)
from course_tools.grading.harvest import harvest as _course_grade_harvest
_course_grade_harvest({ex_id!r}, globals().get({target!r}), {inputs!r}, {out!r})
del _course_grade_harvest"""

MAX_ADDED_CELLS = 500


def _code_cell(source: str, role: str, ex_id: str | None):
    cell = nbformat.v4.new_code_cell(source)
    if ex_id is not None:
        cell.metadata["course"] = {"exercise": ex_id, "role": role}
    return cell


NBGRADER_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")


def _placeholder_source(source: str, ex_id: str, nbgrader: bool = False) -> str:
    """A solution cell as handed out: the region replaced by the exercise notebook's
    placeholder, or (``nbgrader``) by the stub nbgrader's own release writes."""
    from ..exercises import placeholder

    out, inside = [], None
    for line in source.splitlines():
        if line.strip() == BEGIN_SOLUTION:
            inside = line[: len(line) - len(line.lstrip())]
        elif line.strip() == END_SOLUTION:
            ind = inside or ""
            out += [ind + s for s in NBGRADER_STUB] if nbgrader else placeholder(ex_id, ind)
            inside = None
        elif inside is None:
            out.append(line)
    return "\n".join(out)


def get_exercise(ex_id: str):
    """The exercise (imported on first use: the checks load every chapter's references)."""
    from course_lib.checks.core import get_exercise as lookup

    return lookup(ex_id)


def rebuild(
    submission_nb,
    assignment: str,
    course: Course,
    harvest_dirs: dict[str, str],
    inputs: dict[str, str] | None = None,
    library=None,
) -> Plan:
    """The notebook to run: the course's copy with the learner's code spliced in.

    The learner's code is every solution cell (matched by exercise id, nbgrader grade_id
    or, failing both, the function's name) and every code cell the learner *added*, each
    placed after the course cell it follows in the submission; the learner's copies of the
    course's own cells (same cell id, or the same code; never its solution cells) are not
    used: the course's are. Each exercise's harvest cell goes where its check cell was:
    the grader checks the definition in force when the check cell runs, wherever the
    learner wrote it, as a top-to-bottom run of the notebook does. ``inputs`` maps exercises to
    the files of their cases' inputs (see :mod:`course_tools.grading.harvest`).

    The stages: where the course's cells are (:class:`_CoursePositions`), the learner's
    solution cells (:func:`_learner_solutions`) and added cells (:func:`_added_cells`),
    the cells in running order (:func:`_running_order`), the exercises never started
    (:func:`_unstarted`), the flags (:func:`_flag`), where each harvest goes
    (:func:`_harvest_positions`) and the notebook itself (:func:`_emit`).
    """
    inputs = inputs or {e: "" for e in harvest_dirs}
    base = course.solution_notebook(assignment)
    plan = Plan(
        assignment,
        nbformat.v4.new_notebook(metadata=base.metadata),
        list(course.exercises[assignment]),
        [],
        dict(harvest_dirs),
        dict(inputs),
    )
    plan.targets = {e: course.card(e).target for e in plan.exercises}
    where = _CoursePositions.of(base, plan.exercises)
    solution_of = _learner_solutions(submission_nb, plan)
    solutions, after = _added_cells(submission_nb, solution_of, where, plan)
    order = _running_order(base, plan, solutions, after)
    reference = {e: solution_source(course, assignment, e) for e in plan.exercises}
    unstarted = _unstarted(order, plan, solutions, reference)
    _, trouble = safe_flags(
        lambda: _flag(
            plan,
            order,
            solutions,
            reference,
            unstarted,
            course_imports(base.cells),
            library
            if library is not None
            else read_course_functions(None, course.root / "course_lib"),
        )
    )
    plan.notes.setdefault("*", []).extend(trouble)
    learner_sources = [
        src for role, _, src in order if role in ("solution", "learner") and isinstance(src, str)
    ]
    plan.fingerprint = code_fingerprint(learner_sources)
    _emit(plan, order, _harvest_positions(order, plan, unstarted))
    for ex_id in sorted(unstarted):
        plan.missing[ex_id] = (
            f"not implemented yet: `{plan.targets[ex_id]}` still raises NotImplementedError "
            "(the placeholder line)"
        )
    return plan


@dataclass
class _CoursePositions:
    """Where the course's cells are: by cell id, by normalised code, and each exercise's
    solution and check cell."""

    by_id: dict[str, int]
    by_code: dict[str, int]
    solution: dict[str, int]
    check: dict[str, int]
    check_source: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, base, exercises: list[str]) -> _CoursePositions:
        where = cls({}, {}, {}, {})
        for k, cell in enumerate(base.cells):
            meta = course_meta(cell)
            ex_id, role = meta.get("exercise"), meta.get("role")
            solution = role == "solution" and str(ex_id) in exercises
            # A learner's cell that matches the course's *solution* cell is the learner's
            # answer (the course's own, perhaps), never a copy of a course cell to drop.
            if cell.get("id") and not solution:
                where.by_id[cell["id"]] = k
            if cell.cell_type == "code" and not solution:
                where.by_code.setdefault(normal_code(cell.source), k)
            if ex_id is not None and str(ex_id) in exercises:
                if role == "solution":
                    where.solution[str(ex_id)] = k
                elif role == "check":
                    where.check[str(ex_id)] = k
                    where.check_source[str(ex_id)] = cell.source
        return where


def _learner_solutions(submission_nb, plan: Plan) -> dict[int, str]:
    """{id(cell): exercise} for the learner's solution cells; notes and missing ones are
    recorded in ``plan``."""
    solution_of: dict[int, str] = {}
    for ex_id in plan.exercises:
        cells, notes, missing = find_solution_cells(
            submission_nb, plan.assignment, ex_id, plan.targets[ex_id]
        )
        plan.notes[ex_id] = notes
        if missing:
            plan.missing[ex_id] = missing
        for c in cells:
            solution_of[id(c)] = ex_id
    return solution_of


def _added_cells(submission_nb, solution_of, where: _CoursePositions, plan: Plan):
    """Walk the submission: each exercise's solution sources, and every cell the learner
    added anchored after the course cell before it ({course position: [(role, ex, src)]});
    code typed into a check cell goes before that check (at ``-2 - position``).

    What the notebook showed is what is graded: a learner cell that runs an exercise's check
    again (``check("02.1", …)``, which the grader's harvest replaces), or one below the check
    that defines the exercise's function and ran before the check cell last did (execution
    counts), is followed by a ``("rerun", ex, "")`` mark: the harvest goes after the last
    one, where the learner's last check run saw the function."""
    after: dict[int, list[tuple[str, str | None, str]]] = {}
    targets = plan.targets
    check_count: dict[str, int] = {}
    solutions: dict[str, list[str]] = {e: [] for e in plan.exercises}
    anchor = -1
    added = 0
    for cell in submission_nb.cells:
        meta = course_meta(cell)
        if id(cell) in solution_of:
            ex_id = solution_of[id(cell)]
            solutions[ex_id].append(cell.get("source", ""))
            anchor = where.solution[ex_id]
            continue
        if cell.get("cell_type") != "code":
            pos = where.by_id.get(cell.get("id", ""))
            anchor = pos if pos is not None else anchor
            continue
        ex_id, role = meta.get("exercise"), meta.get("role")
        nbg = cell.get("metadata", {}).get("nbgrader") or {}
        if role in ("check", "statement", "solution"):
            pos = (where.check if role == "check" else where.solution).get(str(ex_id))
            anchor = pos if pos is not None else anchor
            if role == "check" and pos is not None:
                _typed_in_check(cell, str(ex_id), pos, where, after, plan, check_count)
            continue
        if len(cell.get("source", "")) > MAX_PARSED_CHARS:  # not read, so not run either
            plan.notes.setdefault("*", []).append(
                f"a cell you added holds {len(cell['source'])} characters, more than the "
                f"{MAX_PARSED_CHARS} the grader reads in one cell: it was not run"
            )
            continue
        pos = where.by_id.get(cell.get("id", ""))
        if pos is None:
            pos = where.by_code.get(normal_code(cell.get("source", "")))
        if pos is not None:
            anchor = pos
            continue
        if nbg.get("grade") or nbg.get("locked") or not cell.get("source", "").strip():
            continue  # nbgrader's test and read-only cells are the course's
        added += 1
        if added > MAX_ADDED_CELLS:
            continue
        source, called = without_check_calls(cell.get("source", ""))
        after.setdefault(anchor, []).append(("learner", None, source))
        count = cell.get("execution_count")
        for e in plan.exercises:
            seen = isinstance(count, int) and count < check_count.get(e, -1)
            if e in called or (seen and targets[e] in defined_names(source)):
                after[anchor].append(("rerun", e, ""))
    if added > MAX_ADDED_CELLS:
        plan.notes.setdefault("*", []).append(
            f"the notebook has {added} cells added by the learner; only the first "
            f"{MAX_ADDED_CELLS} were run"
        )
    return solutions, after


def _typed_in_check(cell, ex_id: str, pos: int, where, after, plan: Plan, counts) -> None:
    """Code a learner typed into the check cell of ``ex_id`` (a definition above the check
    call, say) runs where they ran it: just before the check (``after[-2 - pos]``)."""
    if isinstance(cell.get("execution_count"), int):
        counts[ex_id] = cell["execution_count"]
    typed, _ = without_check_calls(cell.get("source", ""))
    course, _ = without_check_calls(where.check_source.get(ex_id, ""))
    if normal_code(typed) and normal_code(typed) != normal_code(course):
        after.setdefault(-2 - pos, []).append(("learner", None, typed))
        plan.notes.setdefault(ex_id, []).append(
            "you wrote code in the check cell: the grader ran it there, just before the "
            "check, as your notebook did"
        )


def _running_order(base, plan: Plan, solutions, after) -> list[tuple[str, str | None, object]]:
    """The rebuilt cells in order: (role, exercise, source or the course's cell)."""
    order: list[tuple[str, str | None, object]] = []
    order += after.get(-1, [])
    for k, cell in enumerate(base.cells):
        meta = course_meta(cell)
        ex_id, role = meta.get("exercise"), meta.get("role")
        ex_id = str(ex_id) if ex_id is not None else None
        if cell.cell_type == "code" and role == "solution" and ex_id in plan.exercises:
            for src in solutions[ex_id]:
                order.append(("solution", ex_id, src))
        elif cell.cell_type == "code" and role == "check" and ex_id in plan.exercises:
            order += after.get(-2 - k, [])  # code the learner typed into the check cell
            order.append(("check", ex_id, ""))
        else:
            order.append(("course", None, cell))
        order += after.get(k, [])
    return order


def _unstarted(order, plan: Plan, solutions, reference) -> set[str]:
    """The exercises nobody started: the definition in force when the check cell runs (the
    last one above it, in running order) is the untouched placeholder. A definition the
    learner wrote above the placeholder, which replaces it, gets a note saying so."""
    unstarted: set[str] = set()
    for ex_id in plan.exercises:
        target = plan.targets[ex_id]
        if ex_id in plan.missing or not solutions[ex_id]:
            continue
        blanks = {
            normal_code(_placeholder_source(reference[ex_id], ex_id, nbgrader))
            for nbgrader in (False, True)
        }
        check = _check_at(order, ex_id)
        if check is None:
            continue
        defs = [
            i
            for i, (role, e, src) in enumerate(order[:check])
            if (role == "learner" or (role == "solution" and e == ex_id))
            and target in defined_names(src)
        ]
        if not defs:
            continue
        last = order[defs[-1]]
        if last[0] == "solution" and normal_code(last[2]) in blanks:
            unstarted.add(ex_id)
            if any(order[i][0] == "learner" for i in defs):
                plan.notes[ex_id].append(
                    f"`{target}` is defined in a cell you added above the exercise, but "
                    "the exercise's own cell, which still holds the placeholder, runs after "
                    "it and replaces it: delete the placeholder line (or move your code into "
                    "that cell)"
                )
    return unstarted


def _flag(plan: Plan, order, solutions, reference, unstarted, imported, library) -> None:
    """Flags for a human look: suspicious code, copies, the course's implementations."""
    for ex_id in plan.exercises:
        target = plan.targets[ex_id]
        mine = list(solutions[ex_id]) + [
            src for role, _, src in order if role == "learner" and target in defined_names(src)
        ]
        flags = sorted({f for s in solutions[ex_id] for f in suspicious(s)})
        started = ex_id not in unstarted and ex_id not in plan.missing
        for copy in course_copies(mine, target, library) if started else ():
            flags.append(f"{copy}: the course's own code, not the learner's")
        rules = get_exercise(ex_id).rules if started else ()  # (a blank imports no checks)
        forbidden = frozenset().union(*(r.names for r in rules))
        breaches = forbidden_uses(mine, target, forbidden)
        if breaches:
            plan.breaches[ex_id] = breaches
            flags.append("breaks the statement's rules: uses " + ", ".join(breaches[:5]))
        ref = reference[ex_id]
        if ref and ex_id not in unstarted and not dictated(ref):
            best = max((similarity(s, ref) for s in mine), default=0.0)
            if best >= COPY_SIMILARITY:
                flags.append(
                    "the solution matches the course's own solution once names and layout "
                    f"are set aside ({best:.0%} alike)"
                )
        allowed = references_used(ref, imported) if ref else set()
        used = sorted({u for s in mine for u in references_used(s, imported)} - allowed)
        for u in used:
            what = imported.get(u.split(".")[0], u)
            flags.append(
                f"calls `{u}`, which the course's own cells import from course_lib "
                f"({what}): the course's implementation, not the learner's"
            )
        if flags:
            plan.flags[ex_id] = flags
    extra = sorted({f for role, _, src in order if role == "learner" for f in suspicious(src)})
    if extra:
        plan.flags["*"] = [f"a cell the learner added {f}" for f in extra]


def _check_at(order, ex_id: str) -> int | None:
    """Where the check of ``ex_id`` counts: its check cell, or the last learner cell after
    which the learner's notebook ran that check again (a ``rerun`` mark), if later."""
    at = [i for i, (r, e, _) in enumerate(order) if r in ("check", "rerun") and e == ex_id]
    checks = [i for i in at if order[i][0] == "check"]
    return max(at) if checks else None


def _harvest_positions(order, plan: Plan, unstarted) -> dict[int, list[str]]:
    """{position in ``order``: exercises harvested right after it}: where the check counts
    (:func:`_check_at`), so the grader checks the definition the learner's last check run
    saw, as their notebook showed; a later redefinition gets a note."""
    harvest_at: dict[int, list[str]] = {}
    for ex_id in plan.exercises:
        idx = _check_at(order, ex_id)
        if idx is None or ex_id in plan.missing or ex_id in unstarted:
            continue
        harvest_at.setdefault(idx, []).append(ex_id)
        target = plan.targets[ex_id]
        if order[idx][0] == "rerun":
            plan.notes[ex_id].append(
                f"your notebook ran the check of {ex_id} again after a cell below it "
                f"defined `{target}`: the grader checked that definition, as your check did"
            )
        if any(r == "learner" and target in defined_names(src) for r, _e, src in order[idx + 1 :]):
            plan.notes[ex_id].append(
                f"`{target}` is defined again in a cell you added after the check; the "
                "grader checked the definition in force when the check cell runs, as "
                "running the notebook from the top does (move that cell above the check if "
                "it holds your answer)"
            )
    return harvest_at


def _emit(plan: Plan, order, harvest_at) -> None:
    """The notebook to run, its cells' roles, each harvest cell where it goes."""
    targets = plan.targets
    for idx, (role, ex_id, item) in enumerate(order):
        if role == "course":
            cell = item
            if cell.cell_type == "code":
                cell = nbformat.v4.new_code_cell(cell.source, metadata=cell.metadata)
            plan.nb.cells.append(cell)
            plan.roles.append(("course", None))
        elif role in ("solution", "learner"):
            if role == "learner":  # a cell that defines an exercise's function belongs to it
                names = defined_names(item)
                ex_id = next((e for e in plan.exercises if targets[e] in names), None)
            plan.nb.cells.append(_code_cell(item, role, ex_id))
            plan.roles.append((role, ex_id))
        for h in harvest_at.get(idx, []):
            src = HARVEST_TEMPLATE.format(
                ex_id=h,
                target=targets[h],
                inputs=str(plan.inputs.get(h, "")),
                out=str(plan.harvest_dirs[h]),
            )
            plan.nb.cells.append(_code_cell(src, "harvest", h))
            plan.roles.append(("harvest", h))
