"""course_tools/grading/report.py: the gradebook, the feedback files, the review list, the
exports and the terminal summary, written from result rows (no grading run)."""

from __future__ import annotations

import csv
import io
import json
import os
import re

import pytest

from course_tools.grading import report
from course_tools.grading.report import (
    Gradebook,
    atomic_write,
    cell,
    code_block,
    code_span,
    feedback_markdown,
    feedback_path,
    feedback_paths,
    grades_csv,
    gradescope_result,
    lms_csv,
    read_results,
    recording_failed,
    review_csv,
    student_keys,
    summary_table,
    write_all,
    write_exports,
)


def _row(sub: str, ex: str = "00.1", status: str = "passed", points=1, max_points=1, **kw):
    return {
        "submission": sub,
        "assignment": kw.pop("assignment", "00_setup"),
        "exercise": ex,
        "points": points,
        "max_points": max_points,
        "status": status,
        "feedback": kw.pop("feedback", []),
        "title": kw.pop("title", "softmax"),
        **kw,
    }


def _result(sub: str, *rows: dict, assignment: str = "00_setup", **kw) -> dict:
    return {
        "submission": sub,
        "assignment": assignment,
        "notes": kw.pop("notes", []),
        "flags": kw.pop("flags", {}),
        "rows": list(rows) or [_row(sub, assignment=assignment)],
        **kw,
    }


def _unknown_error_result(feedback: list[str]) -> dict:
    """An error of no known assignment or exercise (what a broken submission records)."""
    row = _row("s/x.ipynb", "", "error", 0, 0, assignment="", feedback=feedback, title="")
    return _result("s/x.ipynb", row, assignment="")


# --------------------------------------------------------------------------- grades.csv


def test_gradebook_rows_are_sorted_and_atomic(tmp_path):
    rows = [
        {
            "submission": s,
            "assignment": "00_setup",
            "exercise": e,
            "points": 0,
            "max_points": 1,
            "status": "failed",
            "feedback": [],
        }
        for s, e in (("b", "00.10"), ("a", "00.2"), ("b", "00.2"))
    ]
    text = grades_csv([{"rows": rows}], {"course_commit": "v0.2.0-3-gabc", "grader_version": "9.9"})
    assert text.splitlines()[0] == (
        "submission,assignment,exercise,points,max_points,status,course_commit,grader_version,"
        "feedback"
    )
    assert text.splitlines()[1:] == [
        "a,00_setup,00.2,0,1,failed,v0.2.0-3-gabc,9.9,feedback/a.md",
        "b,00_setup,00.2,0,1,failed,v0.2.0-3-gabc,9.9,feedback/b.md",
        "b,00_setup,00.10,0,1,failed,v0.2.0-3-gabc,9.9,feedback/b.md",
    ]
    atomic_write(tmp_path / "g.csv", text)
    assert (tmp_path / "g.csv").read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["g.csv"]


def test_without_provenance_the_gradebook_says_unknown_and_writes_points_plainly():
    text = grades_csv([_result("s/x.ipynb", _row("s/x.ipynb", points=0.5, max_points=2.0))])
    (row,) = csv.DictReader(io.StringIO(text))
    assert (row["points"], row["max_points"]) == ("0.5", "2")
    assert row["course_commit"] == row["grader_version"] == "unknown"
    assert row["feedback"] == "feedback/s/x.md"


@pytest.mark.parametrize(
    "text, shown",
    [
        ("=HYPERLINK(1)", "'=HYPERLINK(1)"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\uff1d1", "'\uff1d1"),  # a full-width "=": a formula to some spreadsheets
        ("alice/00.ipynb", "alice/00.ipynb"),
        ("a\x1bb", "a?b"),  # a control character
    ],
)
def test_a_csv_cell_never_starts_a_formula(text, shown):
    assert cell(text) == shown


def test_a_learners_file_name_reaches_the_gradebook_as_text():
    sub = "=cmd|' /C calc'!A0.ipynb"
    text = grades_csv([_result(sub, _row(sub))])
    (row,) = csv.DictReader(io.StringIO(text))
    assert row["submission"] == "'" + sub


# --------------------------------------------------------------------------- feedback paths


def test_feedback_paths_stay_inside_the_output_folder(tmp_path):
    for sub in ("../../etc/passwd.ipynb", "a/../../b.ipynb", "/abs/x.ipynb", "we:ird*.ipynb"):
        p = feedback_path(tmp_path, sub).resolve()
        assert tmp_path.resolve() in p.parents and p.suffix == ".md"


def test_a_safe_name_is_kept_and_a_changed_one_carries_its_ids_hash(tmp_path):
    assert feedback_path(tmp_path, "c/kim_00.ipynb") == tmp_path / "feedback" / "c" / "kim_00.md"
    odd = feedback_path(tmp_path, "c/kim#00.ipynb")
    assert re.fullmatch(r"kim_00~[0-9a-f]{12}\.md", odd.name), odd.name
    assert odd != feedback_path(tmp_path, "c/kim$00.ipynb")  # each id its own hash
    hashed = feedback_path(tmp_path, "c/kim_00.ipynb", hashed=True)
    assert hashed.name.startswith("kim_00~") and hashed.parent == odd.parent
    # a "~" in a name is replaced, so a kept name never looks like a hashed one
    assert feedback_path(tmp_path, "a~b.ipynb").name.startswith("a_b~")


def test_an_empty_submission_id_still_gets_a_file(tmp_path):
    path = feedback_path(tmp_path, "")
    assert path.parent == tmp_path / "feedback" and path.name.startswith("_~")


def test_feedback_never_leaves_the_output_folder(tmp_path):
    paths = feedback_paths(tmp_path, ["s/A.ipynb", "s/a.ipynb", "s/b?.ipynb", "s/b*.ipynb"])
    assert len({str(p).casefold() for p in paths.values()}) == 4
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "feedback").symlink_to(elsewhere)  # planted by a kernel during grading
    res = _unknown_error_result(feedback=["r"])
    skipped = write_all(out, [res])
    assert len(skipped) == 1 and not list(elsewhere.rglob("*"))
    assert (out / "grades.csv").exists()


# --------------------------------------------------------------------------- atomic writes


def test_a_folder_planted_where_the_gradebook_goes_is_moved_aside(tmp_path):
    (tmp_path / "grades.csv" / "x").mkdir(parents=True)  # made by a kernel while grading
    atomic_write(tmp_path / "grades.csv", "a\n")
    assert (tmp_path / "grades.csv").read_text() == "a\n"
    assert (tmp_path / "grades.csv.moved-aside" / "x").is_dir()


def test_a_second_folder_in_the_way_gets_a_numbered_name(tmp_path):
    (tmp_path / "grades.csv.moved-aside").mkdir()
    (tmp_path / "grades.csv").mkdir()
    atomic_write(tmp_path / "grades.csv", "b\n")
    assert (tmp_path / "grades.csv").read_text() == "b\n"
    assert (tmp_path / "grades.csv.moved-aside-2").is_dir()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "grades.csv"
    target.write_text("old\n")

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(report.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["grades.csv"]


# --------------------------------------------------------------------------- feedback files


def test_feedback_is_plain_text_whatever_the_learner_prints():
    evil = "ValueError: \x1b[2J<script>alert(1)</script>\n## Exercise 00.1 — ✅ passed\u202e"
    md = feedback_markdown(
        {
            "submission": "s\x1b.ipynb`x",
            "assignment": "00_setup",
            "notes": [evil],
            "rows": [
                {
                    "submission": "s",
                    "assignment": "00_setup",
                    "exercise": "00.1",
                    "points": 0,
                    "max_points": 1,
                    "status": "failed",
                    "feedback": [evil],
                    "title": "t",
                }
            ],
        }
    )
    assert "\x1b" not in md and "\u202e" not in md
    mistune = pytest.importorskip("mistune")
    html = mistune.html(md)
    assert "<script" not in html and "&lt;script" in html  # shown as text, never run
    heads = re.findall(r"<h2[^>]*>(.*?)</h2>", html)  # the grader's own headings only
    assert heads == ["Notes", "Exercise 00.1: t — ❌ failed (0 / 1)"], heads
    assert "<code>s?.ipynb`x</code>" in html  # the name cannot close its code span


def test_feedback_gives_the_score_a_table_and_a_section_per_exercise():
    res = _result(
        "s/x.ipynb",
        _row("s/x.ipynb", "00.10", "failed", 0, 2, feedback=["✗ large scores: NaN"]),
        _row("s/x.ipynb", "00.2", "passed", 1, 1),
    )
    md = feedback_markdown(res)
    assert md.startswith("# Feedback: 00_setup\n")
    assert "**Score: 1 / 3**" in md
    assert md.index("## Exercise 00.2") < md.index("## Exercise 00.10")  # numeric order
    assert "| 00.10 | softmax | 0 / 2 | ❌ failed |" in md
    assert "All of the grader's cases passed" in md
    assert "✗ large scores: NaN" in md
    assert md.endswith("numbers differ from those in your notebook's checks.\n")


def test_feedback_of_an_unreadable_submission_has_no_exercise_table():
    res = _result(
        "s/x.ipynb",
        _row("s/x.ipynb", "", "error", 0, 0, feedback=["not a notebook"], title=""),
        assignment="",
    )
    md = feedback_markdown(res)
    assert "# Feedback: unknown assignment" in md and "| exercise |" not in md
    assert "## This submission — ⚠️ error (0 / 0)" in md


def test_a_code_block_is_fenced_longer_than_any_backticks_inside():
    block = code_block(["```", "x ```` y"])
    assert block[0] == "`````text" and block[-1] == "`````"
    assert block[1:-1] == ["```", "x ```` y"]
    assert code_block(["a\r", "b"]) == ["```text", "a", "b", "```"]


def test_a_code_span_cannot_be_closed_from_inside():
    assert code_span("plain") == "` plain `"
    assert code_span("a``b\nc") == "``` a``b c ```"


# --------------------------------------------------------------------------- review.csv


def test_review_lists_forged_messages_next_to_flagged_cells():
    text = review_csv([{"submission": "s", "flags": {"00.1": ["uses x"], "*": ["forged"]}}])
    assert text.splitlines()[1:] == ["s,*,forged", "s,00.1,uses x"]


def test_review_is_sorted_by_submission_then_exercise():
    text = review_csv(
        [
            {"submission": "b", "flags": {"00.10": ["y"], "00.2": ["x"]}},
            {"submission": "a", "flags": {}},
            {"submission": "=a", "flags": {"00.1": ["-formula"]}},
        ]
    )
    assert text.splitlines() == [
        "submission,exercise,reason",
        "'=a,00.1,'-formula",
        "b,00.2,x",
        "b,00.10,y",
    ]


# --------------------------------------------------------------------------- recording


def test_a_result_that_cannot_be_recorded_becomes_error_rows_with_the_cause():
    res = _result("s/x.ipynb", flags={"00.1": ["flag"]})
    failed = recording_failed(res, "OSError: disk full")
    (row,) = failed["rows"]
    assert (row["status"], row["points"], row["max_points"]) == ("error", 0, 1)
    assert "disk full" in row["feedback"][0] and failed["flags"] == {"00.1": ["flag"]}
    bare = recording_failed({"submission": "s/y.ipynb"}, "boom")
    assert [(r["exercise"], r["status"]) for r in bare["rows"]] == [("", "error")]
    assert bare["rows"][0]["feedback"] == [
        "the grader could not record this submission's result: boom"
    ]


def test_a_gradebook_is_valid_from_the_start_and_after_each_submission(tmp_path):
    book = Gradebook(tmp_path, {"course_commit": "c", "grader_version": "v"}, ["s/b.ipynb"])
    assert (tmp_path / "grades.csv").read_text().splitlines() == [",".join(report.COLUMNS)]
    assert (tmp_path / "results.jsonl").read_text() == ""
    book.every = 0  # rewrite the tables after every submission
    book.add(_result("s/b.ipynb"))
    book.add(_result("s/a.ipynb"))  # not announced: its file name is hashed
    rows = list(csv.DictReader(io.StringIO((tmp_path / "grades.csv").read_text())))
    assert [r["submission"] for r in rows] == ["s/a.ipynb", "s/b.ipynb"]
    assert rows[0]["feedback"].startswith("feedback/s/a~")
    assert (tmp_path / "feedback" / "s" / "b.md").is_file()
    journal = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["submission"] for r in journal] == ["s/b.ipynb", "s/a.ipynb"]  # as they came
    assert book.finish() == []
    assert [r["submission"] for r in read_results(tmp_path)] == ["s/a.ipynb", "s/b.ipynb"]


def test_a_lone_surrogate_in_a_learners_message_ends_nothing(tmp_path):
    """An exception message may hold a lone surrogate ("\\ud800"): strict UTF-8 refused to
    write it, and the run lost its journal and its final tables (#45, item 5)."""
    book = Gradebook(tmp_path, {}, ["s/a.ipynb", "s/b.ipynb"])
    odd = "your function raised ValueError: \ud800 here"
    book.add(_result("s/a.ipynb", _row("s/a.ipynb", status="failed", points=0, feedback=[odd])))
    book.add(_result("s/b.ipynb"))
    assert len(book.results) == 2  # each submission once
    assert book.finish() == []
    journal = read_results(tmp_path)
    assert [r["submission"] for r in journal] == ["s/a.ipynb", "s/b.ipynb"]
    assert journal[0]["rows"][0]["feedback"] == [odd]  # the same string read back
    rows = list(csv.DictReader(io.StringIO((tmp_path / "grades.csv").read_text())))
    assert [(r["submission"], r["status"]) for r in rows] == [
        ("s/a.ipynb", "failed"),
        ("s/b.ipynb", "passed"),
    ]
    assert "ValueError: ? here" in (tmp_path / "feedback" / "s" / "a.md").read_text()


def test_a_result_that_is_not_json_is_recorded_as_an_error(tmp_path):
    book = Gradebook(tmp_path, {}, ["s/x.ipynb"])
    res = _result("s/x.ipynb")
    res["notes"] = [object()]  # json.dumps refuses it
    book.add(res)
    (row,) = report.sorted_rows(book.results)
    assert row["status"] == "error" and "TypeError" in row["feedback"][0]
    assert json.loads((tmp_path / "results.jsonl").read_text())["rows"][0]["status"] == "error"


def test_read_results_skips_blank_lines(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"submission": "a"}\n\n{"submission": "b"}\n')
    assert read_results(tmp_path) == [{"submission": "a"}, {"submission": "b"}]


# --------------------------------------------------------------------------- exports


def test_student_keys_without_a_pattern_are_the_part_that_differs():
    assert student_keys(["class/alice/02.ipynb", "class/bob/02.ipynb"]) == {
        "class/alice/02.ipynb": "alice",
        "class/bob/02.ipynb": "bob",
    }
    assert set(student_keys(["subs/alice.ipynb", "subs/bob.ipynb"]).values()) == {"alice", "bob"}
    assert student_keys(["only/one.ipynb"]) == {"only/one.ipynb": "only"}


def test_student_keys_from_a_pattern_take_its_first_group_or_its_match():
    ids = ["x/Alice_123_assignsubmission_file_/00.ipynb", "x/nobody.ipynb"]
    assert student_keys(ids, r"_(\d+)_assign") == {ids[0]: "123", ids[1]: ids[1]}
    assert student_keys(ids, r"\d+") == {ids[0]: "123", ids[1]: ids[1]}


def test_lms_export_keeps_each_students_best_score_per_assignment():
    results = [
        _result(
            "c/alice/00_setup.ipynb", _row("c/alice/00_setup.ipynb", points=0, status="failed")
        ),
        _result("c/alice/00_setup (2).ipynb", _row("c/alice/00_setup (2).ipynb")),
        _result("c/bob/00_setup.ipynb", _row("c/bob/00_setup.ipynb", points=0.5)),
        _result(
            "c/bob/02.ipynb",
            _row("c/bob/02.ipynb", "02.1", max_points=2, points=2, assignment="02_qkv"),
            assignment="02_qkv",
        ),
    ]
    table = list(csv.DictReader(io.StringIO(lms_csv(results))))
    assert list(table[0]) == ["Student", "SIS Login ID", "00_setup (1 points)", "02_qkv (2 points)"]
    got = {r["Student"]: (r["00_setup (1 points)"], r["02_qkv (2 points)"]) for r in table}
    assert got == {"alice": ("1", ""), "bob": ("0.5", "2")}


def test_an_unknown_assignment_never_makes_a_percentage_nan(tmp_path):
    text = lms_csv([_unknown_error_result(feedback=["?"])])
    assert "nan" not in text.lower() and text.splitlines() == ["Student,SIS Login ID"]


def test_a_gradescope_result_has_one_test_per_exercise():
    res = _result(
        "s/x.ipynb",
        _row("s/x.ipynb", "00.2", "timeout", 0, 1, feedback=["ran past 180 s"]),
        _row("s/x.ipynb", "00.1", "passed", 1, 1),
        notes=["converted from nbformat 3"],
    )
    out = gradescope_result(res)
    assert out["score"] == 1.0 and out["output"] == "converted from nbformat 3"
    first, second = out["tests"]
    assert first["name"] == "00.1 softmax" and first["status"] == "passed"
    assert (second["status"], second["score"], second["max_score"]) == ("failed", 0.0, 1.0)
    assert second["output"] == "timeout\nran past 180 s" and second["visibility"] == "visible"


def test_exports_write_what_they_are_asked_for(tmp_path):
    results = [_result("c/alice/00.ipynb"), _result("c/bob/00.ipynb")]
    write_exports(tmp_path, results, ["gradescope"])
    assert not (tmp_path / "lms.csv").exists() and not (tmp_path / "results.json").exists()
    alice = json.loads((tmp_path / "gradescope" / "c" / "alice" / "00.json").read_text())
    assert alice["score"] == 1.0
    write_exports(tmp_path / "one", results[:1], ["lms", "gradescope"])
    assert (tmp_path / "one" / "lms.csv").read_text().startswith("Student,SIS Login ID,")
    single = json.loads((tmp_path / "one" / "results.json").read_text())  # Gradescope's own
    assert single == alice


# --------------------------------------------------------------------------- the summary


def test_the_summary_has_a_line_per_submission_and_counts_per_exercise():
    results = [
        _result("s/b.ipynb", _row("s/b.ipynb", status="failed", points=0), flags={"*": ["x"]}),
        _result("s/a.ipynb", seconds=12.4),
    ]
    text = summary_table(results)
    lines = text.splitlines()
    assert lines[0].split() == ["submission", "assignment", "score", "time", "statuses"]
    assert lines[2].startswith("s/a.ipynb") and "1/1" in lines[2] and "12 s" in lines[2]
    assert lines[3].startswith("s/b.ipynb") and "failed:1" in lines[3] and "⚑ review" in lines[3]
    assert lines[-2:] == ["per exercise:", "  00.1    00_setup               passed:1 failed:1"]


def test_the_summary_shortens_long_ids_from_the_left():
    sub = "class/" + "x" * 80 + "/00_setup.ipynb"
    line = summary_table([_result(sub, _row(sub))]).splitlines()[2]
    assert line.startswith("…") and "00_setup.ipynb" in line and sub not in line


def test_write_all_writes_every_file_of_the_gradebook(tmp_path):
    skipped = write_all(
        tmp_path,
        [_result("s/a.ipynb", flags={"00.1": ["uses ctypes"]})],
        {"course_commit": "c1"},
        all_ids=["s/a.ipynb", "s/A.ipynb"],  # the class, as a single run would name it
    )
    assert skipped == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feedback", "grades.csv", "review.csv"]
    (row,) = csv.DictReader(io.StringIO((tmp_path / "grades.csv").read_text()))
    assert row["course_commit"] == "c1" and "~" in row["feedback"]  # hashed: a case clash
    assert (tmp_path / row["feedback"]).is_file()
    assert "uses ctypes" in (tmp_path / "review.csv").read_text()
    assert os.listdir(tmp_path / "feedback" / "s") == [os.path.basename(row["feedback"])]


def test_two_notebooks_of_one_learner_for_one_assignment_are_flagged_for_review():
    """The LMS export keeps the best of them, so review.csv says so, for each of them."""

    def res(sub, assignment, points):
        row = {"exercise": "02.1", "points": points, "max_points": 2, "status": "passed"}
        return {"submission": sub, "assignment": assignment, "rows": [row], "flags": {}}

    results = [
        res("class/alice/02.ipynb", "02_qkv_attention", 2),
        res("class/alice/02 (1).ipynb", "02_qkv_attention", 0),
        res("class/alice/03.ipynb", "03_scaling_sqrt_dk", 1),
        res("class/bob/02.ipynb", "02_qkv_attention", 1),
    ]
    review = list(csv.DictReader(io.StringIO(review_csv(results))))
    assert [(r["submission"], r["exercise"]) for r in review] == [
        ("class/alice/02 (1).ipynb", "*"),
        ("class/alice/02.ipynb", "*"),
    ]
    assert "one of 2 notebooks of alice for 02_qkv_attention" in review[0]["reason"]
    assert "lms.csv keeps the best of their scores" in review[0]["reason"]
    assert "2" in lms_csv(results).splitlines()[1].split(",")[2]  # the best one, as said
    # with --student naming the learner otherwise, the same rule follows that name
    by_file = review_csv(results, student=r"/(\w+)\.ipynb$")
    assert "notebooks of 02 for 02_qkv_attention" in by_file


def test_a_folder_named_for_the_assignment_names_no_learner():
    """``class/02_qkv_attention/alice.ipynb``: the learner is alice, not the folder (which
    would make the whole class one learner, flagged twice and merged in lms.csv)."""

    def res(sub, points):
        row = {"exercise": "02.1", "points": points, "max_points": 2, "status": "passed"}
        return {"submission": sub, "assignment": "02_qkv_attention", "rows": [row], "flags": {}}

    results = [
        res("class/02_qkv_attention/alice.ipynb", 2),
        res("class/02_qkv_attention/bob.ipynb", 1),
    ]
    ids = [r["submission"] for r in results]
    assert student_keys(ids, None, {"02_qkv_attention"}) == dict(zip(ids, ["alice", "bob"]))
    assert review_csv(results).splitlines() == ["submission,exercise,reason"]
    assert [line.split(",")[0] for line in lms_csv(results).splitlines()[1:]] == ["alice", "bob"]
