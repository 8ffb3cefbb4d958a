"""What a submission is: its notebook read safely (:func:`parse_notebook`), and which of the
course's assignments it is (:func:`identify`); the course's own copies (:class:`Course`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..exercises import NB_VERSION, exercise_cells, validate


class SubmissionError(Exception):
    """A submission that cannot be graded at all; ``status`` is error or missing."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Card:
    """What the grader needs of an exercise before it judges one: its function's name, its
    points and title. The grader reads them from the checks once and hands them to each
    worker, which then plans a notebook without importing any chapter's checks (and torch
    with them) unless it has something to judge."""

    target: str
    points: float
    title: str


@dataclass
class Course:
    """The course's own copies: ``solutions/<assignment>.ipynb`` and their exercises."""

    root: Path
    notebooks: dict[str, Path] = field(default_factory=dict)
    exercises: dict[str, list[str]] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # assignment -> what is wrong
    cards: dict[str, Card] = field(default_factory=dict)  # exercise -> Card
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

    def card(self, exercise_id: str) -> Card:
        """The exercise's :class:`Card` (read from its checks the first time it is asked)."""
        if exercise_id not in self.cards:
            from course_lib.checks.core import get_exercise

            ex = get_exercise(exercise_id)
            self.cards[exercise_id] = Card(ex.target, ex.points, ex.title)
        return self.cards[exercise_id]

    def cards_json(self) -> dict[str, list]:
        """Every exercise's card, as a worker's job carries them (one whose checks cannot be
        imported here is left out: the worker then reads it, or says why it cannot)."""
        out = {}
        for e in (e for ids in self.exercises.values() for e in ids):
            try:
                card = self.card(e)
            except Exception:  # (a chapter's checks that do not import: not this run's end)
                continue
            out[e] = [card.target, card.points, card.title]
        return out

    def take_cards(self, data: object) -> None:
        """The cards of :meth:`cards_json` (anything malformed is read from the checks)."""
        for e, card in (data or {}).items() if isinstance(data, dict) else ():
            if isinstance(card, list) and len(card) == 3:
                self.cards[str(e)] = Card(str(card[0]), float(card[1]), str(card[2]))

    def solution_notebook(self, assignment: str):
        """A fresh copy of the course's own notebook (read once, then copied)."""
        import copy

        if assignment not in self._cache:
            self._cache[assignment] = nbformat.read(
                self.notebooks[assignment], as_version=NB_VERSION
            )
        return copy.deepcopy(self._cache[assignment])


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


def course_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("course")
    return meta if isinstance(meta, dict) else {}
