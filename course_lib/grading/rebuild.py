"""Read a submission, recognise its assignment, and rebuild it from the course's own copy.

The notebook that is executed is the course's ``solutions/NN_topic.ipynb`` with

* each exercise's **solution cell** replaced by the learner's solution cell(s), matched by
  exercise id (cell metadata), then by nbgrader's ``grade_id``, then by the function's
  name: only these cells come from the submission;
* each exercise's **check cell** replaced by a *harvest* cell that runs the learner's
  function on the visible and hidden cases drawn from the grader's secret seed and only
  records the outputs (:func:`course_lib.checks.core.harvest`); the verdict is decided
  later, in the grader's process.

So an edited, deleted or duplicated check cell, a changed statement or an extra cell in
the submission changes nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .generate import NB_VERSION, course_root, exercise_cells, validate

MAX_SOLUTION_CHARS = 1_000_000

# Patterns in a learner's solution cell that deserve a human look. They change no grade
# (the verdict is decided in the grader's process, so tampering cannot pass anything); they
# point at attempts to reach the grading machinery, the reference answers or the kernel.
SUSPICIOUS: list[tuple[str, str]] = [
    (
        r"course_lib\s*\.\s*(checks|grading)|from\s+course_lib\s+import\s+[^\n]*\b(checks|grading)\b"
        r"|from\s+course_lib\.(checks|grading)",
        "imports the course's checks or grading code",
    ),
    # no solution cell of the course needs course_lib: its modules hold the answers
    (r"\bcourse_lib\b", "uses the course's library (which implements the answers)"),
    (
        r"\b(get_exercise|all_exercises|_REGISTRY|harvest|compare_values|evaluate_case|run_case)\b",
        "uses the checking machinery",
    ),
    (r"\w*_reference\b|\.reference\b", "uses a reference implementation"),
    (
        r"\b(get_ipython|_ih|_oh|sys\.modules|__builtins__|builtins|importlib|ctypes|gc"
        r"|sys\._getframe|_current_frames|inspect|currentframe|f_back|f_locals|f_globals|tb_frame"
        r"|extract_stack|settrace|setprofile)\b|\bIn\s*\[|\bOut\s*\[",
        "inspects or patches the interpreter",
    ),
    (
        r"\bos\.(_exit|kill|killpg|fork|system|exec\w*)\b|\bsubprocess\b|\bsignal\.|\bsys\.exit\b",
        "manipulates processes",
    ),
    (r"(?<![.\w])(exec|eval|compile|__import__)\s*\(", "runs code built at run time"),
    (
        r"\bsolutions\b|\.ipynb\b|ipynb|\.grader-seed|__file__|/proc/|\bopen\s*\(|read_text"
        r"|read_bytes|\bos\.(listdir|walk|scandir)|\bglob\b",
        "reads files (notebooks, the course's solutions or the grader's)",
    ),
]


class SubmissionError(Exception):
    """A submission that cannot be graded at all; ``status`` is error or missing."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Course:
    """The course's own copies: ``solutions/<assignment>.ipynb`` and their exercises."""

    root: Path
    notebooks: dict[str, Path] = field(default_factory=dict)
    exercises: dict[str, list[str]] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # assignment -> what is wrong

    @classmethod
    def load(cls, root: Path | None = None, check: bool = True) -> Course:
        """Read solutions/; ``check`` validates every notebook's exercise format (which
        imports every chapter's checks); a worker skips that, the grader did it."""
        root = Path(root) if root else course_root()
        course = cls(root)
        for path in sorted((root / "solutions").glob("*.ipynb")):
            try:
                nb = nbformat.read(path, as_version=NB_VERSION)
                cells = validate(nb, str(path)) if check else exercise_cells(nb)
            except Exception as err:  # one broken chapter must not stop the others
                course.broken[path.stem] = f"{type(err).__name__}: {err}"
                continue
            order = sorted(cells, key=lambda e: cells[e]["solution"][0])
            course.notebooks[path.stem] = path
            course.exercises[path.stem] = order
        return course

    def solution_notebook(self, assignment: str):
        return nbformat.read(self.notebooks[assignment], as_version=NB_VERSION)


# --------------------------------------------------------------------------- reading


def parse_notebook(data: bytes) -> tuple[nbformat.NotebookNode, list[str]]:
    """The notebook in ``data`` as nbformat 4, with notes; SubmissionError when impossible."""
    notes: list[str] = []
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise SubmissionError(
            "error", f"not a notebook: the file is not UTF-8 text ({err})"
        ) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise SubmissionError(
            "error",
            f"not a notebook: invalid JSON at line {err.lineno}, "
            f"column {err.colno} ({err.msg}). The file was "
            "probably damaged or saved by another program.",
        ) from None
    except RecursionError:
        raise SubmissionError("error", "not a notebook: the JSON is nested too deeply") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cells", raw.get("worksheets")), list):
        raise SubmissionError("error", "not a notebook: the JSON has no list of cells")
    version = raw.get("nbformat")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SubmissionError(
            "error", f"unknown notebook format: nbformat is {version!r}, expected 4"
        )
    if version > NB_VERSION:
        raise SubmissionError(
            "error",
            f"notebook format {version} is newer than this grader "
            f"reads ({NB_VERSION}); save it with Jupyter 4+ as "
            "nbformat 4",
        )
    # Some tools drop empty metadata; nbformat refuses a notebook or cell without it.
    cells = raw.get("cells") if isinstance(raw.get("cells"), list) else []
    for part in [raw, *cells]:
        if isinstance(part, dict) and not isinstance(part.get("metadata"), dict):
            part["metadata"] = {}
    text = json.dumps(raw)
    try:
        nb = nbformat.reads(text, as_version=NB_VERSION)
    except Exception as err:
        raise SubmissionError(
            "error", f"an old or broken notebook (nbformat {version}) that could not be read: {err}"
        ) from None
    if version < NB_VERSION:
        notes.append(
            f"the notebook was in the old format nbformat {version} and was "
            f"converted to {NB_VERSION}; its exercise cells may have lost their tags"
        )
    for i, cell in enumerate(nb.get("cells", [])):
        if not isinstance(cell, dict) or not isinstance(cell.get("source", ""), str):
            raise SubmissionError("error", f"not a notebook: cell {i} is malformed")
        cell.setdefault("metadata", {})
        if not isinstance(cell["metadata"], dict):
            cell["metadata"] = {}
    if not isinstance(nb.get("metadata"), dict):
        nb["metadata"] = {}
    return nb, notes


def assignment_from_name(name: str, course: Course) -> str | None:
    """Guess the assignment from a file name: exact stem, a stem inside it, or its NN."""
    stem = Path(name).stem
    known = [*course.notebooks, *course.broken]
    if stem in known:
        return stem
    inside = [a for a in known if a in name]
    if inside:
        return max(inside, key=len)
    numbers = set(re.findall(r"(?<!\d)(\d\d)(?!\d)", stem))
    hits = [a for a in known if a[:2] in numbers]
    return hits[0] if len(hits) == 1 else None


def identify(nb, name: str, course: Course) -> tuple[str | None, str]:
    """(assignment, how it was found): metadata, then file name, then exercise ids."""
    meta = nb.get("metadata", {}).get("course")
    claimed = meta.get("assignment") if isinstance(meta, dict) else None
    if isinstance(claimed, str) and (claimed in course.notebooks or claimed in course.broken):
        return claimed, "metadata"
    by_name = assignment_from_name(name, course)
    if by_name:
        return by_name, "file name"
    ids = set(exercise_cells(nb))
    hits = [a for a, exs in course.exercises.items() if ids & set(exs)]
    if len(hits) == 1:
        return hits[0], "exercise ids"
    return None, ""


# --------------------------------------------------------------------------- rebuilding


@dataclass
class Plan:
    """The notebook to execute and what each of its cells is."""

    assignment: str
    nb: nbformat.NotebookNode
    exercises: list[str]
    # per cell: ("course", None) | ("solution", ex_id) | ("harvest", ex_id)
    roles: list[tuple[str, str | None]]
    harvest_dirs: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)


def _course_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("course")
    return meta if isinstance(meta, dict) else {}


def find_solution_cells(
    nb, assignment: str, ex_id: str, target: str
) -> tuple[list[str], list[str], str | None]:
    """(sources, notes, missing reason) of the learner's solution cell(s) for one exercise."""
    notes: list[str] = []
    cells = [
        c
        for c in nb.cells
        if str(_course_meta(c).get("exercise")) == ex_id
        and _course_meta(c).get("role") == "solution"
    ]
    how = "exercise id"
    if not cells:
        grade_id = f"{assignment}-{ex_id}-solution".replace(".", "_")
        cells = [
            c
            for c in nb.cells
            if (c.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == grade_id
        ]
        how = "nbgrader grade_id"
    if not cells:
        pattern = re.compile(rf"^\s*def\s+{re.escape(target)}\s*\(", re.M)
        cells = [
            c
            for c in nb.cells
            if c.get("cell_type") == "code"
            and _course_meta(c).get("role") not in ("check", "statement")
            and pattern.search(c.get("source", ""))
        ][-1:]
        how = "function name"
        if cells:
            notes.append(
                f"the solution cell had lost its exercise tag; the last cell that "
                f"defines `{target}` was used"
            )
    if not cells:
        return (
            [],
            notes,
            (
                f"no solution cell for exercise {ex_id} in the submission (the "
                f"cell was deleted or its metadata removed, and no cell defines "
                f"`{target}`)"
            ),
        )
    code = [c for c in cells if c.get("cell_type") == "code"]
    if not code:
        return (
            [],
            notes,
            (
                f"the solution cell of exercise {ex_id} is no longer a code cell "
                f"(it is {cells[0].get('cell_type')!r})"
            ),
        )
    if len(code) > 1:
        notes.append(
            f"the submission has {len(code)} solution cells for exercise {ex_id} "
            f"(matched by {how}); they were run in order, as a top-to-bottom run "
            "would, so the last definition counts"
        )
    sources = []
    for c in code:
        src = c.get("source", "")
        if len(src) > MAX_SOLUTION_CHARS:
            return (
                [],
                notes,
                (
                    f"the solution cell of exercise {ex_id} holds {len(src)} "
                    f"characters, over the {MAX_SOLUTION_CHARS} limit"
                ),
            )
        sources.append(src)
    return sources, notes, None


def _normal(source: str) -> str:
    """Code without comments, blank lines and spacing: what a copy keeps."""
    lines = [re.sub(r"\s+", "", line.split("#", 1)[0]) for line in source.splitlines()]
    return "\n".join(line for line in lines if line)


def _solution_source(course: Course, assignment: str, ex_id: str) -> str:
    for cell in course.solution_notebook(assignment).cells:
        meta = _course_meta(cell)
        if str(meta.get("exercise")) == ex_id and meta.get("role") == "solution":
            return cell.source
    return ""


def suspicious(source: str) -> list[str]:
    """Learner-code patterns worth a human look (see SUSPICIOUS)."""
    found = []
    for pattern, what in SUSPICIOUS:
        m = re.search(pattern, source)
        if m:
            found.append(f"{what} (`{m.group(0).strip()[:60]}`)")
    return found


HARVEST_TEMPLATE = """\
# course-grade: record the outputs of exercise {ex_id} for the grader (it decides, not this kernel)
from course_lib.checks.core import harvest as _course_grade_harvest
_course_grade_harvest({ex_id!r}, globals().get({target!r}), {seed}, {out!r})
del _course_grade_harvest"""


def _code_cell(source: str, role: str, ex_id: str | None):
    cell = nbformat.v4.new_code_cell(source)
    if ex_id is not None:
        cell.metadata["course"] = {"exercise": ex_id, "role": role}
    return cell


def rebuild(
    submission_nb, assignment: str, course: Course, seed: int, harvest_dirs: dict[str, str]
) -> Plan:
    """The notebook to run: the course's copy with the learner's solution cells spliced in."""
    from course_lib.checks.core import get_exercise

    base = course.solution_notebook(assignment)
    plan = Plan(
        assignment,
        nbformat.v4.new_notebook(metadata=base.metadata),
        list(course.exercises[assignment]),
        [],
        dict(harvest_dirs),
    )
    found: dict[str, list[str]] = {}
    for ex_id in plan.exercises:
        ex = get_exercise(ex_id)
        sources, notes, missing = find_solution_cells(submission_nb, assignment, ex_id, ex.target)
        plan.notes[ex_id] = notes
        if missing:
            plan.missing[ex_id] = missing
        found[ex_id] = sources
        flags = sorted({f for s in sources for f in suspicious(s)})
        reference = _solution_source(course, assignment, ex_id)
        if reference and any(_normal(s) == _normal(reference) for s in sources):
            flags.append("the solution cell is identical to the course's own solution")
        if flags:
            plan.flags[ex_id] = flags
    for cell in base.cells:
        meta = _course_meta(cell)
        ex_id, role = meta.get("exercise"), meta.get("role")
        ex_id = str(ex_id) if ex_id is not None else None
        if cell.cell_type != "code":
            plan.nb.cells.append(cell)
            plan.roles.append(("course", None))
        elif role == "solution" and ex_id in plan.exercises:
            for src in found[ex_id]:
                plan.nb.cells.append(_code_cell(src, "solution", ex_id))
                plan.roles.append(("solution", ex_id))
        elif role == "check" and ex_id in plan.exercises:
            if ex_id in plan.missing:
                continue
            target = get_exercise(ex_id).target
            src = HARVEST_TEMPLATE.format(
                ex_id=ex_id, target=target, seed=int(seed), out=str(harvest_dirs[ex_id])
            )
            plan.nb.cells.append(_code_cell(src, "harvest", ex_id))
            plan.roles.append(("harvest", ex_id))
        else:
            cell = nbformat.v4.new_code_cell(cell.source, metadata=cell.metadata)
            plan.nb.cells.append(cell)
            plan.roles.append(("course", None))
    return plan
