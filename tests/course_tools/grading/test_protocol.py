"""course_tools/grading/protocol.py: the signed lines a worker sends its parent (forgeries
refused, one line of MAC and JSON), and a gradebook row (bounded feedback, known statuses
only; a row per exercise for a submission that cannot be graded)."""

from __future__ import annotations

import os

import pytest
from grading_lab import ROOT

from course_lib.checks.core import get_exercise
from course_tools.grading import protocol
from course_tools.grading.identity import Course
from course_tools.grading.protocol import row, sign, verify, whole_submission_rows


@pytest.fixture(scope="module")
def course() -> Course:
    return Course.load(ROOT, check=False)


# --------------------------------------------------------------------------- the channel


def test_result_channel_rejects_forgeries():
    key = os.urandom(32)
    line = sign(key, {"result": {"a": 1}})
    assert verify(key, line) == {"result": {"a": 1}}
    assert verify(os.urandom(32), line) is None
    assert verify(key, line.replace(b"1", b"2")) is None
    assert verify(key, b"garbage\n") is None


def test_a_signed_line_is_one_line_of_mac_and_json():
    key = b"k" * 32
    line = sign(key, {"b": "two\nlines", "a": 1})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    mac, body = line.decode().rstrip("\n").split(" ", 1)
    assert len(mac) == 64 and body == '{"a": 1, "b": "two\\nlines"}'
    assert verify(key, b"\xff\xfe not utf-8\n") is None
    assert verify(key, line.replace(b'"a": 1', b'"a": 1,')) is None  # signed text, edited


# --------------------------------------------------------------------------- rows


def test_a_row_keeps_bounded_feedback_and_only_known_statuses():
    r = row("s", "00_setup", "00.1", 0, 1, "failed", ["x" * 10_000] * 500, "t", ["d"] * 300)
    assert len(r["feedback"]) == protocol.MAX_FEEDBACK_LINES
    assert {len(f) for f in r["feedback"]} == {protocol.MAX_FEEDBACK_LINE}
    assert len(r["diagnoses"]) == protocol.MAX_FEEDBACK_LINES
    assert list(r) == [
        *("submission", "assignment", "exercise", "points", "max_points", "status"),
        *("feedback", "title", "diagnoses"),
    ]
    with pytest.raises(AssertionError):
        row("s", "a", "e", 0, 1, "maybe", [])


def test_a_submission_that_cannot_be_graded_gets_a_row_per_exercise(course):
    rows = whole_submission_rows("s", "00_setup", course, "error", "not a notebook")
    assert [r["exercise"] for r in rows] == course.exercises["00_setup"]
    ex = get_exercise("00.1")
    assert (rows[0]["max_points"], rows[0]["title"]) == (ex.points, ex.title)
    assert all(r["status"] == "error" and r["feedback"] == ["not a notebook"] for r in rows)
    (unknown,) = whole_submission_rows("s", None, course, "error", "which one?")
    assert (unknown["assignment"], unknown["exercise"], unknown["max_points"]) == ("", "", 0)
