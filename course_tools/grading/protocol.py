"""What the grader's processes say to each other and write down: the statuses, the size
bounds, a gradebook row (:class:`Row`), a submission's result (:class:`Result`) and the
signed lines a worker sends its parent (:func:`sign`, :func:`verify`).

The lowest layer of :mod:`course_tools.grading`: it imports nothing of the grader's."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import TypedDict

STATUSES = ("passed", "failed", "error", "timeout", "missing")
MAX_RESULT_BYTES = 256 * 2**20  # what the grader reads of one exercise's recorded outputs
MAX_RECORD_BYTES = 16 * 2**20  # its .json: names and small values (arrays are in the .npz)
MAX_FEEDBACK_LINES = 200  # what a row keeps of its feedback: lines, and characters each
MAX_FEEDBACK_LINE = 5000
EXPORTS = ("lms", "gradescope")  # the gradebook exports ``--export`` can write


def exercise_key(ex_id: str) -> tuple:
    """Sort key of an exercise id: "00.2" before "00.10"; any other key ("*", "") sorts
    too, before the ids."""
    return tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in (ex_id or "").split("."))


class Row(TypedDict):
    """One exercise of one submission, as the gradebook keeps it."""

    submission: str
    assignment: str
    exercise: str  # "" for a submission that could not be graded at all
    points: float
    max_points: float
    status: str  # one of STATUSES
    feedback: list[str]  # what the learner reads
    title: str
    # the keys of the checks' own diagnoses ("02.1/unscaled"), made in the grader's process
    # from the recorded outputs, never text from the learner's kernel
    diagnoses: list[str]


class Result(TypedDict, total=False):
    """One submission's whole result: its rows, notes for the learner, flags for a human
    look (per exercise, ``"*"`` for the whole notebook) and the seconds it took."""

    submission: str
    assignment: str
    rows: list[Row]
    notes: list[str]
    flags: dict[str, list[str]]
    seconds: float


def row(
    submission: str,
    assignment: str,
    exercise: str,
    points: float,
    max_points: float,
    status: str,
    feedback: list[str],
    title: str = "",
    diagnoses: list[str] | None = None,
) -> Row:
    """One gradebook row; ``diagnoses``: the checks' own diagnoses of a failure (made in
    the grader's process, see :class:`course_tools.grading.scoring.Verdict`)."""
    assert status in STATUSES, status
    feedback = [str(f)[:MAX_FEEDBACK_LINE] for f in list(feedback)[:MAX_FEEDBACK_LINES]]
    return Row(
        submission=submission,
        assignment=assignment,
        exercise=exercise,
        points=points,
        max_points=max_points,
        status=status,
        feedback=list(feedback),
        title=title,
        diagnoses=[str(d)[:MAX_FEEDBACK_LINE] for d in (diagnoses or [])[:MAX_FEEDBACK_LINES]],
    )


def whole_submission_rows(
    sub_id: str, assignment: str | None, course, status: str, reason: str
) -> list[Row]:
    """Rows for a submission that could not be graded at all: one per exercise if its
    assignment is known, else a single row with an empty exercise."""
    if assignment and assignment in course.exercises:
        rows = []
        for ex_id in course.exercises[assignment]:
            card = course.card(ex_id)
            rows.append(
                row(sub_id, assignment, ex_id, 0, card.points, status, [reason], card.title)
            )
        return rows
    return [row(sub_id, assignment or "", "", 0, 0, status, [reason])]


def sign(key: bytes, payload: dict) -> bytes:
    """``payload`` as one line: its HMAC-SHA256 under ``key``, a space, its JSON."""
    body = json.dumps(payload, sort_keys=True)
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    return f"{mac} {body}\n".encode()


def verify(key: bytes, line: bytes) -> dict | None:
    """The payload of a correctly signed line, else None."""
    try:
        mac, body = line.decode().rstrip("\n").split(" ", 1)
    except (UnicodeDecodeError, ValueError):
        return None
    good = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, good):
        return None
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return None
