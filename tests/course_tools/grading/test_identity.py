"""course_tools/grading/identity.py: reading a submitted notebook safely (what it cannot
read, and why), recognising its assignment (metadata, exercise ids, file and folder names,
the instructor's expectation), and the course's own copies (nothing runs)."""

from __future__ import annotations

import pytest
from grading_lab import ROOT, dump, notebook, notebook_v3, strip_course_metadata

from course_tools.grading.identity import (
    Course,
    SubmissionError,
    assignment_from_name,
    claimed_assignment,
    expected_assignment,
    identify,
    parse_notebook,
)


def _nb() -> dict:
    return notebook("00_setup")


def _dump(nb: dict) -> bytes:
    return dump(nb)


@pytest.fixture(scope="module")
def course() -> Course:
    return Course.load(ROOT, check=False)


# --------------------------------------------------------------------------- reading


def test_parse_notebook_rejects_what_it_cannot_read():
    for data in (b"{", b"[]", b'{"cells": [], "nbformat": 9}', b"\xff\xfe"):
        with pytest.raises(SubmissionError):
            parse_notebook(data)
    nb, notes = parse_notebook(notebook_v3("x = 1"))
    assert nb.nbformat == 4 and notes


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\xff\xfe", "not UTF-8 text"),
        (b'{"cells": [', "invalid JSON at line 1"),
        (b'{"nbformat": 4}', "no list of cells"),
        (b'{"cells": [], "nbformat": true}', "nbformat is True, expected 4"),
        (b'{"cells": [], "nbformat": "4"}', "nbformat is '4', expected 4"),
        (b'{"cells": [], "nbformat": 5}', "notebook format 5 is newer"),
        (b"[" * 100_000 + b"]" * 100_000, "not a notebook"),  # nested too deeply to read
    ],
)
def test_an_unreadable_notebook_says_why(data, reason):
    with pytest.raises(SubmissionError) as err:
        parse_notebook(data)
    assert err.value.status == "error" and reason in err.value.reason


def test_a_byte_order_mark_and_missing_metadata_are_forgiven():
    nb = _nb()
    del nb["metadata"]
    for c in nb["cells"]:
        c["metadata"] = None
    parsed, notes = parse_notebook(b"\xef\xbb\xbf" + _dump(nb))
    assert notes == [] and parsed.metadata == {} and len(parsed.cells) == len(nb["cells"])


def test_a_notebook_without_any_metadata_is_read():
    nb = _nb()
    del nb["metadata"]
    for c in nb["cells"]:
        c.pop("metadata", None)
    parsed, _ = parse_notebook(_dump(nb))
    assert identify(parsed, "00_setup.ipynb", Course.load(ROOT)) == ("00_setup", "file name")
    lists = _nb()  # sources as lists of lines, as Jupyter writes them
    for c in lists["cells"]:
        c["source"] = c["source"].splitlines(True) if isinstance(c["source"], str) else c["source"]
    parsed, _ = parse_notebook(_dump(lists))
    assert all(isinstance(c.source, str) for c in parsed.cells)


# --------------------------------------------------------------------------- the assignment


def test_identify_by_metadata_name_and_ids():
    course = Course.load(ROOT)
    nb, _ = parse_notebook((ROOT / "solutions/00_setup.ipynb").read_bytes())
    assert identify(nb, "whatever.ipynb", course) == ("00_setup", "metadata")
    bare, _ = parse_notebook(_dump(strip_course_metadata(_nb())))
    assert identify(bare, "bob-00_setup (1).ipynb", course)[0] == "00_setup"
    assert identify(bare, "homework.ipynb", course) == (None, "")


def test_the_instructors_expectation_wins_over_the_metadata(course):
    nb, _ = parse_notebook((ROOT / "solutions/00_setup.ipynb").read_bytes())
    assert identify(nb, "x.ipynb", course, expected="02_qkv_attention") == (
        "02_qkv_attention",
        "expected",
    )
    assert claimed_assignment(nb, course) == "00_setup"
    nb.metadata["course"]["assignment"] = "99_not_in_this_course"
    assert claimed_assignment(nb, course) is None


def test_exercise_ids_name_an_assignment_when_nothing_else_does(course):
    nb, _ = parse_notebook(_dump(_nb()))
    nb.metadata.pop("course")
    assert identify(nb, "homework.ipynb", course) == ("00_setup", "exercise ids")


@pytest.mark.parametrize(
    "name, assignment",
    [
        ("02_qkv_attention.ipynb", "02_qkv_attention"),  # the stem
        ("alice-02_qkv_attention (1).ipynb", "02_qkv_attention"),  # inside the name
        ("02_qkv_attention_exercises.ipynb", "02_qkv_attention"),  # a work/ copy
        ("hw02.ipynb", "02_qkv_attention"),  # its chapter number
        ("hw_02_and_03.ipynb", None),  # two chapter numbers: no guess
        ("homework.ipynb", None),
        ("2024_02.ipynb", "02_qkv_attention"),
        ("hw_2024.ipynb", None),  # four digits: a year, not a chapter
    ],
)
def test_an_assignment_from_a_file_name(course, name, assignment):
    assert assignment_from_name(name, course) == assignment


def test_a_broken_chapter_still_names_its_submissions():
    broken = Course(ROOT, broken={"07_tiny_gpt": "ValueError: bad cell"})
    assert assignment_from_name("07_tiny_gpt.ipynb", broken) == "07_tiny_gpt"


@pytest.mark.parametrize(
    "path, assignment",
    [
        ("class/02_qkv_attention/alice.ipynb", "02_qkv_attention"),  # the folder says
        ("02_qkv_attention/alice/00_setup.ipynb", "02_qkv_attention"),  # the innermost wins
        ("hw/alice/00_setup.ipynb", "00_setup"),  # else the file name
        ("hw_2024_01/alice/notebook.ipynb", None),  # never a guess from a number
        ("class\\00_setup\\x.ipynb", "00_setup"),  # a Windows path in an archive
    ],
)
def test_the_assignment_a_submission_was_handed_in_for(course, path, assignment):
    assert expected_assignment(path, course) == assignment


# --------------------------------------------------------------------------- the course


def test_a_course_records_its_broken_notebooks_and_keeps_the_others(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "00_setup.ipynb").write_bytes(
        (ROOT / "solutions" / "00_setup.ipynb").read_bytes()
    )
    (tmp_path / "solutions" / "01_broken.ipynb").write_text("{")
    course = Course.load(tmp_path)
    assert list(course.notebooks) == ["00_setup"] and course.exercises == {"00_setup": ["00.1"]}
    assert list(course.broken) == ["01_broken"] and "Error" in course.broken["01_broken"]


def test_the_courses_notebook_is_a_fresh_copy_each_time(course):
    first = course.solution_notebook("00_setup")
    first.cells.clear()
    assert len(course.solution_notebook("00_setup").cells) > 0
