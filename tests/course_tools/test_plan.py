"""course_tools/plan.py: a workshop's plan from the README's course map and the recorded
notebook times, its cuts and breaks, and ``--write`` (on a small made-up course, and the
course's own README for the cuts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts import ROOT

from course_tools import plan as P

TIMES = ["10 min", "60 min + 55 min exercises", "1 h 30 min + 75 min", "1 h", "2 h + 1 h",
         "45 min", "90 min + 60 min"]  # fmt: skip


def _course(tmp_path: Path, exercises=("00",)) -> Path:
    """A course of seven chapters (00-06, what the cuts name) with a course map."""
    rows = [
        f"| {n:02d} | [topic {n}](notebooks/{n:02d}_topic.ipynb) | what | {t} | {n + 1} s | open |"
        for n, t in enumerate(TIMES)
    ]
    readme = "\n".join(
        [
            "# Course",
            "",
            "## Course map",
            "",
            "| # | chapter | what you will see | time | runs in | open |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "More text.",
        ]
    )
    (tmp_path / "README.md").write_text(readme, encoding="utf-8")
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    for n in exercises:
        (tmp_path / "exercises" / f"{n}_topic.ipynb").write_text("{}")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "instructors.md").write_text(
        f"# Guide\n\n{P.PLAN_START}\nold plan\n{P.PLAN_END}\n\nAfter.\n"
    )
    return tmp_path


def _times(root: Path, name: str, **seconds: float) -> None:
    results = root / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    notebooks = [
        {"notebook": k.replace("__", "/") + ".ipynb", "seconds": v} for k, v in seconds.items()
    ]
    (results / name).write_text(json.dumps({"notebooks": notebooks}))


@pytest.mark.parametrize(
    "text, mins",
    [("2 h", 120), ("90 min", 90), ("1 h 30 min", 90), ("1.5 h", 90), (" 10 min exercises", 10)],
)
def test_minutes_are_read_from_hours_and_minutes(text, mins):
    assert P.minutes(text) == mins


def test_a_time_without_a_unit_is_refused():
    with pytest.raises(ValueError, match="no time in 'soon'"):
        P.minutes("soon")


def test_hours_and_minutes_are_written_back():
    assert [P._hm(m) for m in (5, 60, 95)] == ["5 min", "1 h 00 min", "1 h 35 min"]


def test_the_course_map_is_read_row_by_row(tmp_path):
    header, chapters = P.course_map(_course(tmp_path))
    assert header == ["#", "chapter", "what you will see", "time", "runs in", "open"]
    assert [c.number for c in chapters] == [f"{n:02d}" for n in range(7)]
    first, second, third = chapters[:3]
    assert (first.title, first.lecture) == ("topic 0", "notebooks/00_topic.ipynb")
    assert (first.lecture_min, first.exercise_min, first.runs_in_s) == (10, 0, 1.0)
    assert (second.lecture_min, second.exercise_min) == (60, 55)
    assert (third.lecture_min, third.exercise_min) == (90, 75)


def test_a_readme_without_a_course_map_is_refused(tmp_path):
    (tmp_path / "README.md").write_text("# Nothing here\n")
    with pytest.raises(ValueError, match="no course map rows"):
        P.course_map(tmp_path)


def test_the_full_budgets_times_win_over_the_ci_ones(tmp_path):
    _times(tmp_path, "notebook_times.json", notebooks__00_topic=3.0, notebooks__01_topic=20.0)
    _times(tmp_path, "notebook_times_full.json", notebooks__01_topic=200.0)
    assert P.measured(tmp_path) == {
        "notebooks/00_topic.ipynb": 3.0,
        "notebooks/01_topic.ipynb": 200.0,
    }
    assert P.measured(tmp_path / "nothing") == {}


def test_chapters_without_exercise_time_point_at_the_learners_copy(tmp_path):
    root = _course(tmp_path)
    _, chapters = P.course_map(root)
    assert (
        P.exercises_where(root, chapters[0]) == "with the lecture (work/00_topic_exercises.ipynb)"
    )
    assert P.exercises_where(root, chapters[5]) == "(in the lecture)"


def test_a_cuts_exercises_need_their_lectures(tmp_path):
    _, chapters = P.course_map(_course(tmp_path))
    lect, exs = P.cut_chapters(chapters, "00 01", "01")
    assert [c.number for c in lect] == ["00", "01"] and [c.number for c in exs] == ["01"]
    assert P.cut_chapters(chapters, "all", "all") == (chapters, chapters)
    with pytest.raises(ValueError, match=r"the cut 'x' has exercises \['02'\] without their"):
        P.cut_chapters(chapters, "00 01", "01 02", "x")


def test_a_break_follows_every_full_work_block():
    assert [P.with_breaks(m) for m in (0, 89, 90, 180, 200)] == [0, 89, 105, 210, 230]


def test_the_plan_has_a_row_per_chapter_the_totals_and_every_cut(tmp_path):
    text = P.plan_markdown(_course(tmp_path))
    lines = text.splitlines()
    assert lines[0] == "| chapter | lecture | exercises | the lecture runs in |"
    assert (
        "| 00 topic 0 | 10 min | with the lecture (work/00_topic_exercises.ipynb) | 1 s |" in lines
    )
    assert "| 01 topic 1 | 1 h 00 min | 55 min | 2 s |" in lines
    assert "| **all 7 chapters** | **7 h 55 min** | **4 h 10 min** | |" in lines
    for name, *_ in P.CUTS:
        assert any(line.startswith(f"| {name} |") for line in lines), name
    week = next(line for line in lines if line.startswith("| one week |"))
    assert week.endswith("| 12 h 05 min | 14 h 05 min |")  # 725 min and 8 breaks
    assert f"*With breaks*: {P.BREAK_MIN} min after every {P.WORK_BLOCK_MIN} min" in text


def test_write_refreshes_the_readme_and_the_guide(tmp_path, capsys):
    root = _course(tmp_path)
    _times(root, "notebook_times.json", notebooks__00_topic=3.4, notebooks__02_topic=26.2)
    assert P.main(["--course", str(root), "--write"]) == 0
    assert "updated README.md (runs in) and docs/instructors.md" in capsys.readouterr().out
    _, chapters = P.course_map(root)
    assert [c.runs_in_s for c in chapters[:4]] == [3.0, 2.0, 26.0, 4.0]  # measured ones only
    assert (root / "README.md").read_text().endswith("\nMore text.")
    guide = (root / "docs" / "instructors.md").read_text()
    assert "old plan" not in guide and guide.endswith(f"{P.PLAN_END}\n\nAfter.\n")
    assert P.plan_markdown(root) in guide


def test_the_command_prints_the_plan_or_says_what_is_missing(tmp_path, capsys):
    root = _course(tmp_path)
    assert P.main(["--course", str(root)]) == 0
    assert capsys.readouterr().out.strip() == P.plan_markdown(root).strip()
    (root / "docs" / "instructors.md").write_text("no markers\n")
    assert P.main(["--course", str(root), "--write"]) == 2
    assert "has no <!-- plan:start -->" in capsys.readouterr().err
    assert P.main(["--course", str(tmp_path / "nowhere")]) == 2


def test_a_map_without_a_runs_in_column_cannot_be_refreshed(tmp_path):
    root = _course(tmp_path)
    text = (root / "README.md").read_text().replace("| runs in |", "| speed |")
    (root / "README.md").write_text(text)
    with pytest.raises(ValueError, match="no 'runs in' column"):
        P.readme_with_measured(root)


def test_the_plans_cuts_are_consistent_and_include_breaks():
    """Every cut's exercises come with their lectures (the one-week cut has lecture 10 with
    exercises 10), its time includes breaks, and a chapter whose exercises have no time of
    their own points at the learner's copy when one exists (issue 37, item 5)."""
    _, chapters = P.course_map(ROOT)
    for name, _purpose, lectures, exercises in P.CUTS:
        lect, exs = P.cut_chapters(chapters, lectures, exercises, name)
        assert set(c.number for c in exs) <= set(c.number for c in lect), name
    week = next(c for c in P.CUTS if c[0] == "one week")
    lect, exs = P.cut_chapters(chapters, *week[2:], week[0])
    assert [c.number for c in lect] == [c.number for c in chapters] == [c.number for c in exs]
    with pytest.raises(ValueError, match="without their lectures"):
        P.cut_chapters(chapters, "00 01", "00 01 02", "broken")
    assert P.with_breaks(90) == 90 + P.BREAK_MIN and P.with_breaks(89) == 89
    text = P.plan_markdown(ROOT)
    assert "with breaks" in text and "(in the lecture)" not in text
    assert "with the lecture (work/00_setup_exercises.ipynb)" in text
    assert (ROOT / "exercises" / "00_setup.ipynb").exists()
