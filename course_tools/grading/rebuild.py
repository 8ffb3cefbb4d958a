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
  exercise's function on the inputs of the grader's cases and only records the outputs (:func:`course_tools.grading.results.harvest`); the verdict
  is decided later, in the grader's process.

The learner's copies of the course's own cells are not used: an edited, deleted or
duplicated check cell, a changed statement or an edited set-up cell changes nothing. The
same pass flags code for a human look (:data:`SUSPICIOUS`, copies of the course's solution,
calls to what the course's cells import from ``course_lib``) and decides exercises whose
placeholder is untouched without any kernel.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

import nbformat

from ..exercises import BEGIN_SOLUTION, END_SOLUTION, NB_VERSION, exercise_cells, validate

MAX_SOLUTION_CHARS = 1_000_000

# Patterns in a learner's solution cell that deserve a human look. They change no grade
# (the verdict is decided in the grader's process, so tampering cannot pass anything); they
# point at attempts to reach the grading machinery, the reference answers or the kernel.
SUSPICIOUS: list[tuple[str, str]] = [
    (
        r"course_lib\s*\.\s*checks|from\s+course_lib\s+import\s+[^\n]*\bchecks\b"
        r"|\bcourse_tools\b",
        "imports the course's checks or grading code",
    ),
    # no solution cell of the course needs course_lib: its modules hold the answers
    (r"\bcourse_lib\b", "uses the course's library (which implements the answers)"),
    (
        r"\b(get_exercise|all_exercises|_REGISTRY|harvest|compare_values|evaluate_case|run_case)\b",
        "uses the checking machinery",
    ),
    (r"\b\w*_reference\b|\.reference\b", "uses a reference implementation"),
    (
        r"\b(get_ipython|_ih|_oh|sys\.modules|__builtins__|builtins|importlib|ctypes|gc"
        r"|sys\._getframe|_current_frames|inspect|currentframe|f_back|f_locals|f_globals|tb_frame"
        r"|extract_stack|settrace|setprofile)\b|\bIn\s*\[|\bOut\s*\["
        r"|\b(globals|vars|locals)\s*\(",
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
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, root: Path, check: bool = True) -> Course:
        """Read solutions/; ``check`` validates every notebook's exercise format (which
        imports every chapter's checks); a worker skips that, the grader did it."""
        root = Path(root)
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
        """A fresh copy of the course's own notebook (read once, then copied)."""
        import copy

        if assignment not in self._cache:
            self._cache[assignment] = nbformat.read(
                self.notebooks[assignment], as_version=NB_VERSION
            )
        return copy.deepcopy(self._cache[assignment])


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
    cells = raw.get("cells")
    if not isinstance(cells, list):
        cells = []
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


def claimed_assignment(nb, course: Course) -> str | None:
    """The assignment the notebook's own metadata names, when the course has it."""
    meta = nb.get("metadata", {}).get("course")
    claimed = meta.get("assignment") if isinstance(meta, dict) else None
    if isinstance(claimed, str) and (claimed in course.notebooks or claimed in course.broken):
        return claimed
    return None


def expected_assignment(path: str, course: Course) -> str | None:
    """The assignment a submission was handed in *for*, from where it is: the innermost
    folder of its path whose name holds an assignment's name, else its file name (the
    exact stem, or one holding an assignment's name). None when neither says; never a guess
    from a number alone (``hw_2024_01`` names no assignment)."""
    known = sorted([*course.notebooks, *course.broken], key=len, reverse=True)
    parts = Path(str(path).replace("\\", "/")).parts
    for folder in reversed(parts[:-1]):
        hit = next((a for a in known if a in folder), None)
        if hit:
            return hit
    stem = Path(parts[-1]).stem if parts else ""
    return next((a for a in known if a in stem), None)


def identify(nb, name: str, course: Course, expected: str | None = None) -> tuple[str | None, str]:
    """(assignment, how it was found): the ``expected`` assignment (the instructor's: an
    option, the folder or the file name), else the metadata, then the file name, then the
    exercise ids."""
    if expected:
        return expected, "expected"
    claimed = claimed_assignment(nb, course)
    if claimed:
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
    # per cell: ("course", None) | ("solution", ex_id) | ("learner", None) | ("harvest", ex_id)
    roles: list[tuple[str, str | None]]
    harvest_dirs: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)
    fingerprint: str = ""

    @property
    def needs_kernel(self) -> bool:
        return any(r == "harvest" for r, _ in self.roles)


def _course_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("course")
    return meta if isinstance(meta, dict) else {}


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


def _parse(source: str):
    """The AST of a cell (IPython magics and shell lines blanked), or None."""
    lines = [
        "" if line.lstrip().startswith(("%", "!", "?")) else line for line in source.splitlines()
    ]
    try:
        return ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def defined_names(source: str) -> set[str]:
    """Names a cell binds at its top level (def, class, assignment, import)."""
    tree = _parse(source)
    if tree is None:
        # (spaces and tabs only: `\s*` after `^` may rescan every blank line)
        return set(re.findall(r"^[ \t]*def[ \t]+(\w+)[ \t]*\(", source, re.M))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add(a.asname or a.name.split(".")[0])
    return names


def _strip_docstrings(tree) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]


_ENDS_BLOCK = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _live(body: list) -> list:
    """A block without the statements that do nothing: ``pass``, bare constants, the
    branches of ``if False``/``while 0``, and whatever follows a return, raise, break or
    continue."""
    out = []
    for stmt in body:
        if isinstance(stmt, ast.Pass) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        ):
            continue
        if isinstance(stmt, (ast.If, ast.While)) and isinstance(stmt.test, ast.Constant):
            if not stmt.test.value:
                out += stmt.orelse
                continue
            if isinstance(stmt, ast.If):
                out += stmt.body
                continue
        out.append(stmt)
        if isinstance(stmt, _ENDS_BLOCK):
            break
    return out


def _remove_dead_code(tree) -> None:
    """Strip, in place, what changes nothing the code computes: docstrings, the statements
    of :func:`_live`, and assignments to plain names that nothing ever reads (repeated
    until none is left). Iterative (``ast.walk``), whatever the depth of the tree."""
    _strip_docstrings(tree)
    for _ in range(10):
        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    kept = _live(block)
                    setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
        read = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        removed = False
        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if not (isinstance(block, list) and block and isinstance(block[0], ast.stmt)):
                    continue
                kept = [st for st in block if not _unread_assignment(st, read)]
                if len(kept) != len(block):
                    removed = True
                    setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
        if not removed:
            break


def _unread_assignment(stmt, read: set[str]) -> bool:
    """``x = …`` or ``x: T = …`` (plain names only) where no code reads ``x``."""
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    else:
        return False
    return all(isinstance(t, ast.Name) and t.id not in read for t in targets)


MAX_TOKENS = 50_000  # a cell longer than this is compared by its first tokens only


def canonical_tokens(source: str) -> list[str]:
    """The code as a token list that ignores names, comments, docstrings, dead code and
    layout: every name the code binds (arguments, variables, helper functions) becomes
    ``v0``, ``v1``, … in order of first appearance; names it only reads (``np``, ``torch``)
    are kept. Identifiers are read as Python reads them (NFKC: full-width letters are
    ASCII). An explicit stack, not recursion: any depth of expression is walked."""
    tree = _parse(source)
    if tree is None:
        return []
    _remove_dead_code(tree)
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    rename: dict[str, str] = {}

    def name(n: str) -> str:
        if n not in bound:
            return n
        return rename.setdefault(n, f"v{len(rename)}")

    out: list[str] = []
    stack = [tree]
    while stack and len(out) < MAX_TOKENS:
        node = stack.pop()
        out.append(type(node).__name__)
        if isinstance(node, ast.Name):
            out.append(name(node.id))
        elif isinstance(node, ast.arg):
            out.append(name(node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(name(node.name))
        elif isinstance(node, ast.Attribute):
            out.append("." + node.attr)
        elif isinstance(node, ast.Constant):
            out.append(repr(node.value)[:40])
        elif isinstance(node, ast.keyword):
            out.append(f"{node.arg}=")
        children = [
            c
            for c in ast.iter_child_nodes(node)
            if not isinstance(c, (ast.Load, ast.Store, ast.Del))
        ]
        stack.extend(reversed(children))  # pre-order, children left to right
    return out


# A solution region this small is what the statement dictates: everyone writes it the same.
COPY_MIN_STATEMENTS = 4
COPY_MIN_NODES = 60
COPY_SIMILARITY = 0.95


def solution_region(source: str) -> str:
    """The code between the solution markers (what the learner writes)."""
    out, inside = [], False
    for line in source.splitlines():
        if line.strip() == BEGIN_SOLUTION:
            inside = True
        elif line.strip() == END_SOLUTION:
            inside = False
        elif inside:
            out.append(line)
    return textwrap.dedent("\n".join(out))


def dictated(reference_cell: str) -> bool:
    """True when the course's solution region is too small to tell a copy from an honest
    answer (a one-liner, or a few lines the statement spells out)."""
    tree = _parse(solution_region(reference_cell))
    if tree is None:
        return True
    statements = sum(isinstance(n, ast.stmt) for n in ast.walk(tree))
    nodes = sum(1 for _ in ast.walk(tree))
    return statements < COPY_MIN_STATEMENTS or nodes < COPY_MIN_NODES


def similarity(a: str, b: str) -> float:
    """How alike two cells are once names and layout are set aside (0 to 1)."""
    ta, tb = canonical_tokens(a), canonical_tokens(b)
    if not ta or not tb:
        return 0.0
    upper = 2 * min(len(ta), len(tb)) / (len(ta) + len(tb))  # what the lengths allow
    if upper < COPY_SIMILARITY:  # (no quadratic comparison of a long cell with a short one)
        return upper
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()


def course_imports(cells) -> dict[str, str]:
    """{name: what it is} for the names the course's own cells import from course_lib
    (modules: ``R`` → ``course_lib.rnn``; functions: ``apply_rope`` → its module)."""
    found: dict[str, str] = {}
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        tree = _parse(cell.get("source", ""))
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_lib"):
                for a in node.names:
                    found[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("course_lib"):
                        found[a.asname or a.name.split(".")[0]] = a.name
    for harmless in ("env", "check"):
        found.pop(harmless, None)
    return found


def references_used(source: str, names: dict[str, str]) -> set[str]:
    """The course-imported names (``R.rnn_forward``, ``apply_rope``) a cell reads."""
    tree = _parse(source)
    if tree is None:
        return {n for n in names if re.search(rf"\b{re.escape(n)}\b", source)}
    used: set[str] = set()
    attrs = set()
    for node in ast.walk(tree):
        base, attr = _named_attribute(node)
        if base is not None and base.id in names:
            used.add(f"{base.id}.{attr}")
            attrs.add(id(base))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and node.id in names
            and isinstance(node.ctx, ast.Load)
            and id(node) not in attrs
        ):
            used.add(node.id)
    return used


# Attributes that lead from any function or module to everything it can see.
REACHING_ATTRIBUTES = frozenset(
    {
        "__globals__",
        "__dict__",
        "__closure__",
        "__code__",
        "__builtins__",
        "__subclasses__",
        "__wrapped__",
        "__func__",
        "__self__",
        "__getattribute__",
        "f_globals",
        "f_locals",
        "co_consts",
        "__loader__",
        "__spec__",
    }
)
_BY_NAME = ("getattr", "setattr", "delattr", "hasattr", "vars", "globals", "locals")


def _named_attribute(node):
    """(the name, the attribute) of ``R.f``, ``getattr(R, "f")`` or ``R.__dict__["f"]``,
    else (None, None)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value, node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[0], ast.Name)
        and _constant(node.args[1])
    ):
        return node.args[0], str(node.args[1].value)
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "__dict__"
        and isinstance(node.value.value, ast.Name)
        and _constant(node.slice)
    ):
        return node.value.value, str(node.slice.value)
    return None, None


def suspicious(source: str) -> list[str]:
    """Learner-code patterns worth a human look (see SUSPICIOUS), read as Python reads the
    code: NFKC-normalised (full-width letters are ASCII to Python), plus what only the
    syntax tree shows (:func:`reaching`). The patterns are linear in the source's length."""
    import unicodedata

    text = unicodedata.normalize("NFKC", source)
    found = []
    for pattern, what in SUSPICIOUS:
        m = re.search(pattern, text)
        if m:
            found.append(f"{what} (`{m.group(0).strip()[:60]}`)")
    return found + reaching(text)


def reaching(source: str) -> list[str]:
    """Attribute chains that reach past a name: ``f.__globals__``, ``m.__dict__[…]``, and
    ``getattr``/``vars``/subscripts whose attribute or key is built at run time."""
    tree = _parse(source)
    if tree is None:
        return []
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in REACHING_ATTRIBUTES:
            found.setdefault(
                "reach", f"reaches past a name through `{node.attr}` (`{_show(node)}`)"
            )
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in _BY_NAME and len(node.args) > 1 and not _constant(node.args[1]):
                found.setdefault(
                    "built",
                    f"looks up an attribute by a name built at run time (`{_show(node)}`)",
                )
        elif isinstance(node, ast.Subscript) and not _constant(node.slice):
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr in REACHING_ATTRIBUTES:
                found.setdefault(
                    "built",
                    f"looks up a key built at run time in `{base.attr}` (`{_show(node)}`)",
                )
    return list(found.values())


def _constant(node: object) -> TypeGuard[ast.Constant]:
    return isinstance(node, ast.Constant)


def _show(node) -> str:
    try:
        return ast.unparse(node)[:60]
    except Exception:  # (unparse recurses: a deep expression is not shown)
        return type(node).__name__


def safe_flags(analysis):
    """``(analysis(), [])``, or, when the analysis of the learner's code fails (a tree too
    deep, memory), ``([], [a note])``: a failed analysis skips the flag, never the grade."""
    try:
        return analysis(), []
    except Exception as err:  # RecursionError, MemoryError, anything: the flag only
        return [], [
            f"the copy and pattern checks could not read this code ({type(err).__name__}); "
            "they were skipped"
        ]


def _normal(source: str) -> str:
    """Code without comments, blank lines and spacing."""
    lines = [re.sub(r"\s+", "", line.split("#", 1)[0]) for line in source.splitlines()]
    return "\n".join(line for line in lines if line)


def _solution_source(course: Course, assignment: str, ex_id: str) -> str:
    for cell in course.solution_notebook(assignment).cells:
        meta = _course_meta(cell)
        if str(meta.get("exercise")) == ex_id and meta.get("role") == "solution":
            return cell.source
    return ""


# --------------------------------------------------------------------------- rebuilding


HARVEST_TEMPLATE = """\
# course-grade: record the outputs of exercise {ex_id} for the grader (it decides, not this kernel)
from course_tools.grading.results import harvest as _course_grade_harvest
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
) -> Plan:
    """The notebook to run: the course's copy with the learner's code spliced in.

    The learner's code is every solution cell (matched by exercise id, nbgrader grade_id
    or, failing both, the function's name) and every code cell the learner *added*, each
    placed after the course cell it follows in the submission; the learner's copies of the
    course's own cells (same cell id, or the same code; never its solution cells) are not
    used: the course's are. Each exercise's harvest cell goes where its check cell was:
    the grader checks the definition in force when the check cell runs, wherever the
    learner wrote it, as a top-to-bottom run of the notebook does. ``inputs`` maps exercises to
    the files of their cases' inputs (see :mod:`course_tools.grading.results`).

    The stages: where the course's cells are (:class:`_CoursePositions`), the learner's
    solution cells (:func:`_learner_solutions`) and added cells (:func:`_added_cells`),
    the cells in running order (:func:`_running_order`), the exercises never started
    (:func:`_unstarted`), the flags (:func:`_flag`), where each harvest goes
    (:func:`_harvest_positions`) and the notebook itself (:func:`_emit`).
    """
    from .results import code_fingerprint

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
    where = _CoursePositions.of(base, plan.exercises)
    solution_of = _learner_solutions(submission_nb, plan)
    solutions, after = _added_cells(submission_nb, solution_of, where, plan)
    order = _running_order(base, plan, solutions, after)
    reference = {e: _solution_source(course, assignment, e) for e in plan.exercises}
    unstarted = _unstarted(order, plan, solutions, reference)
    _, trouble = safe_flags(
        lambda: _flag(plan, order, solutions, reference, unstarted, course_imports(base.cells))
    )
    plan.notes.setdefault("*", []).extend(trouble)
    learner_sources = [
        src for role, _, src in order if role in ("solution", "learner") and isinstance(src, str)
    ]
    plan.fingerprint = code_fingerprint(learner_sources)
    _emit(plan, order, _harvest_positions(order, plan, unstarted))
    for ex_id in sorted(unstarted):
        ex = get_exercise(ex_id)
        plan.missing[ex_id] = (
            f"not implemented yet: `{ex.target}` still raises NotImplementedError "
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

    @classmethod
    def of(cls, base, exercises: list[str]) -> _CoursePositions:
        where = cls({}, {}, {}, {})
        for k, cell in enumerate(base.cells):
            meta = _course_meta(cell)
            ex_id, role = meta.get("exercise"), meta.get("role")
            solution = role == "solution" and str(ex_id) in exercises
            # A learner's cell that matches the course's *solution* cell is the learner's
            # answer (the course's own, perhaps), never a copy of a course cell to drop.
            if cell.get("id") and not solution:
                where.by_id[cell["id"]] = k
            if cell.cell_type == "code" and not solution:
                where.by_code.setdefault(_normal(cell.source), k)
            if ex_id is not None and str(ex_id) in exercises:
                if role == "solution":
                    where.solution[str(ex_id)] = k
                elif role == "check":
                    where.check[str(ex_id)] = k
        return where


def _learner_solutions(submission_nb, plan: Plan) -> dict[int, str]:
    """{id(cell): exercise} for the learner's solution cells; notes and missing ones are
    recorded in ``plan``."""
    solution_of: dict[int, str] = {}
    for ex_id in plan.exercises:
        ex = get_exercise(ex_id)
        cells, notes, missing = find_solution_cells(
            submission_nb, plan.assignment, ex_id, ex.target
        )
        plan.notes[ex_id] = notes
        if missing:
            plan.missing[ex_id] = missing
        for c in cells:
            solution_of[id(c)] = ex_id
    return solution_of


def _added_cells(submission_nb, solution_of, where: _CoursePositions, plan: Plan):
    """Walk the submission: each exercise's solution sources, and every cell the learner
    added anchored after the course cell before it ({course position: [(role, ex, src)]})."""
    after: dict[int, list[tuple[str, str | None, str]]] = {}
    solutions: dict[str, list[str]] = {e: [] for e in plan.exercises}
    anchor = -1
    added = 0
    for cell in submission_nb.cells:
        meta = _course_meta(cell)
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
            continue
        pos = where.by_id.get(cell.get("id", ""))
        if pos is None:
            pos = where.by_code.get(_normal(cell.get("source", "")))
        if pos is not None:
            anchor = pos
            continue
        if nbg.get("grade") or nbg.get("locked") or not cell.get("source", "").strip():
            continue  # nbgrader's test and read-only cells are the course's
        added += 1
        if added > MAX_ADDED_CELLS:
            continue
        after.setdefault(anchor, []).append(("learner", None, cell.get("source", "")))
    if added > MAX_ADDED_CELLS:
        plan.notes.setdefault("*", []).append(
            f"the notebook has {added} cells added by the learner; only the first "
            f"{MAX_ADDED_CELLS} were run"
        )
    return solutions, after


def _running_order(base, plan: Plan, solutions, after) -> list[tuple[str, str | None, object]]:
    """The rebuilt cells in order: (role, exercise, source or the course's cell)."""
    order: list[tuple[str, str | None, object]] = []
    order += after.get(-1, [])
    for k, cell in enumerate(base.cells):
        meta = _course_meta(cell)
        ex_id, role = meta.get("exercise"), meta.get("role")
        ex_id = str(ex_id) if ex_id is not None else None
        if cell.cell_type == "code" and role == "solution" and ex_id in plan.exercises:
            for src in solutions[ex_id]:
                order.append(("solution", ex_id, src))
        elif cell.cell_type == "code" and role == "check" and ex_id in plan.exercises:
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
        ex = get_exercise(ex_id)
        if ex_id in plan.missing or not solutions[ex_id]:
            continue
        blanks = {
            _normal(_placeholder_source(reference[ex_id], ex_id, nbgrader))
            for nbgrader in (False, True)
        }
        check = next(
            (i for i, (r, e, _) in enumerate(order) if r == "check" and e == ex_id),
            None,
        )
        if check is None:
            continue
        defs = [
            i
            for i, (role, e, src) in enumerate(order[:check])
            if (role == "learner" or (role == "solution" and e == ex_id))
            and ex.target in defined_names(src)
        ]
        if not defs:
            continue
        last = order[defs[-1]]
        if last[0] == "solution" and _normal(last[2]) in blanks:
            unstarted.add(ex_id)
            if any(order[i][0] == "learner" for i in defs):
                plan.notes[ex_id].append(
                    f"`{ex.target}` is defined in a cell you added above the exercise, but "
                    "the exercise's own cell, which still holds the placeholder, runs after "
                    "it and replaces it: delete the placeholder line (or move your code into "
                    "that cell)"
                )
    return unstarted


def _flag(plan: Plan, order, solutions, reference, unstarted, imported) -> None:
    """Flags for a human look: suspicious code, copies, the course's implementations."""
    for ex_id in plan.exercises:
        ex = get_exercise(ex_id)
        mine = list(solutions[ex_id]) + [
            src for role, _, src in order if role == "learner" and ex.target in defined_names(src)
        ]
        flags = sorted({f for s in solutions[ex_id] for f in suspicious(s)})
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


def _harvest_positions(order, plan: Plan, unstarted) -> dict[int, list[str]]:
    """{position in ``order``: exercises harvested right after it}: at the check cell, so
    the grader checks the definition in force when the check cell runs, as a top-to-bottom
    run of the notebook does; a later redefinition gets a note."""
    harvest_at: dict[int, list[str]] = {}
    for idx, (role, ex_id, _) in enumerate(order):
        if role != "check" or ex_id in plan.missing or ex_id in unstarted:
            continue
        harvest_at.setdefault(idx, []).append(ex_id)
        target = get_exercise(ex_id).target
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
    targets = {e: get_exercise(e).target for e in plan.exercises}
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
