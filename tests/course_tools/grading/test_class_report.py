"""`course-grade report OUT`: the class report, computed from a simulated class's gradebook
(files in the shape a grading run writes them) and rendered in Chromium, offline."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from course_lib.checks.core import all_exercises, get_exercise
from course_tools.grading import class_report as C
from course_tools.grading import cli
from course_tools.grading.protocol import exercise_key
from course_tools.grading.report import grades_csv, review_csv

ROOT = Path(__file__).resolve().parents[3]
ASSIGNMENT = "02_qkv_attention"
HOSTILE = "class/<script>window.__pwned = 1</script>/02.ipynb"
SCREENSHOTS = ROOT / "test-output" / "browser"


def simulated_class(n: int = 40, seed: int = 7) -> list[dict]:
    """Results as results.jsonl holds them: a class where 02.4 is hard (its first declared
    mistake made by half), 02.1 is easy, two notebooks time out, one errors, one is a
    broken file; one submission's name carries markup."""
    rng = random.Random(seed)
    exercises = sorted((e for e in all_exercises() if e.startswith("02.")), key=exercise_key)
    results = []
    for i in range(n):
        sub = HOSTILE if i == 0 else f"class/student{i:02d}/{ASSIGNMENT}.ipynb"
        rows = []
        for ex_id in exercises:
            ex = get_exercise(ex_id)
            p_pass = {"02.1": 0.9, "02.4": 0.3}.get(ex_id, 0.7)
            roll = rng.random()
            status, feedback, diagnoses = "passed", ["✓ a case"], []
            if i in (1, 2) and ex_id == "02.6":
                status, feedback = "timeout", ["your function ran past 180 s (infinite loop?)"]
            elif i == 3 and ex_id == "02.5":
                status, feedback = (
                    "error",
                    ["your solution cell raised NameError: name 'q' is not defined"],
                )
            elif roll > p_pass:
                status = "failed"
                hints = list(ex.mistakes)
                hint = hints[0] if ex_id == "02.4" or rng.random() < 0.5 else hints[1]
                detail = getattr(hint, "detail", "")
                feedback = [
                    "✓ a case",
                    f"✗ a batch: 3 of 12 values are off.\n    Likely cause: {hint} {detail}",
                ]
                diagnoses = [hint.key]
                if i == 0:
                    feedback.append('✗ x: <img src=x onerror="window.__pwned=2">')
            points = ex.points if status == "passed" else 0
            rows.append(
                {
                    "submission": sub,
                    "assignment": ASSIGNMENT,
                    "exercise": ex_id,
                    "title": ex.title,
                    "points": points,
                    "max_points": ex.points,
                    "status": status,
                    "feedback": feedback,
                    "diagnoses": diagnoses,
                }
            )
        flags = {"02.1": ["calls course_lib's own attention (R.attention)"]} if i in (5, 6) else {}
        results.append(
            {"submission": sub, "assignment": ASSIGNMENT, "rows": rows, "flags": flags, "notes": []}
        )
    broken = "class/student99/02.ipynb"
    results.append(
        {
            "submission": broken,
            "assignment": "",
            "rows": [
                {
                    "submission": broken,
                    "assignment": "",
                    "exercise": "",
                    "points": 0,
                    "max_points": 0,
                    "status": "error",
                    "feedback": ["not a notebook: invalid JSON at line 1"],
                }
            ],
            "flags": {},
            "notes": [],
        }
    )
    return results


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("class") / "grades"
    out.mkdir()
    results = simulated_class()
    (out / "results.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in results), encoding="utf-8"
    )
    (out / "grades.csv").write_text(grades_csv(results), encoding="utf-8")
    (out / "review.csv").write_text(review_csv(results), encoding="utf-8")
    return out, results


def test_the_figures_numbers_come_from_the_gradebook(graded):
    out, results = graded
    data = C.load(out)
    stats = {s.exercise: s for s in data.exercises()}
    for ex_id, s in stats.items():
        rows = [r for res in results for r in res["rows"] if r["exercise"] == ex_id]
        passed = sum(r["status"] == "passed" for r in rows)
        assert s.n == len(rows) == 40
        assert s.pass_rate == pytest.approx(passed / len(rows))
        assert s.statuses["passed"] == passed
    assert stats["02.4"].pass_rate < stats["02.1"].pass_rate
    top_ex, top_name, top_n = data.mistakes()[0]
    assert top_ex == "02.4" and top_name == str(list(get_exercise("02.4").mistakes)[0])
    failed_24 = sum(
        r["status"] == "failed" for res in results for r in res["rows"] if r["exercise"] == "02.4"
    )
    assert top_n == failed_24
    trouble = data.trouble()
    assert [t["status"] for t in trouble].count("timeout") == 2
    assert any(t["exercise"] == "(whole notebook)" for t in trouble)
    assert len(data.review) == 2
    # grades.csv alone (no results.jsonl) gives the same pass rates
    only_csv = out.parent / "csv-only"
    only_csv.mkdir()
    (only_csv / "grades.csv").write_bytes((out / "grades.csv").read_bytes())
    again = {s.exercise: s.pass_rate for s in C.load(only_csv).exercises()}
    assert again == {k: s.pass_rate for k, s in stats.items()}


def test_the_page_is_self_contained_and_escaped(graded):
    out, _ = graded
    assert cli.main(["report", str(out)]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("<svg") >= 3  # totals, exercises, mistakes
    assert "<script" not in page and "onerror=" not in page.replace("onerror=&quot;", "")
    assert "&lt;script&gt;window.__pwned" in page
    for external in ("http://", "https://", 'src="//', "@import"):
        hits = [line for line in page.splitlines() if external in line and "www.w3.org" not in line]
        assert hits == [], hits[:3]
    assert str(list(get_exercise("02.4").mistakes)[0]).split()[0] in page


def test_a_folder_that_is_no_grading_run_is_refused(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "neither results.jsonl nor grades.csv" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "nope")]) == 2


@pytest.mark.browser
def test_the_report_renders_offline_in_chromium(graded):
    from browser_lab import launched_chromium  # the browser tests' Chromium (tests/support)

    out, _ = graded
    page_path = C.write_report(out)
    with launched_chromium() as browser:
        context = browser.new_context(viewport={"width": 1200, "height": 900})
        requests: list[str] = []

        def route(r):
            requests.append(r.request.url)
            if r.request.url.startswith(("file://", "data:")):
                r.continue_()
            else:
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.resolve().as_uri())
        page.wait_for_load_state("load")
        assert errors == []
        assert [u for u in requests if not u.startswith(("file://", "data:"))] == []
        assert page.evaluate("typeof window.__pwned") == "undefined"
        for fig in ("fig-totals", "fig-exercises", "fig-mistakes"):
            box = page.locator(f"#{fig} svg").bounding_box()
            assert box and box["width"] > 300 and box["height"] > 100, (fig, box)
        text = page.inner_text("body")
        assert "Where the class got stuck" in text and "Needs a human look (2 flags" in text
        assert "41" in page.inner_text(".cards")  # 40 notebooks and the broken file
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "class_report.png"), full_page=True)


def test_review_rows_survive_the_round_trip(graded):
    out, _ = graded
    with open(out / "review.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert C.load(out).review == rows


def test_only_the_checks_own_diagnoses_are_listed_and_any_text_renders(tmp_path):
    """A learner's own exception saying "Likely cause: ..." is no diagnosis, and `$...$`
    anywhere (a name, a reason, a diagnosis) is drawn as text, never parsed as maths."""
    forged = "your function raised ValueError: Likely cause: $\\frac{1}{$ the teacher"
    rows = [
        {
            "submission": "class/$x$/02.ipynb",
            "assignment": ASSIGNMENT,
            "exercise": "02.1",
            "title": "$\\sqrt{$",
            "points": 0,
            "max_points": 2,
            "status": "failed",
            "feedback": [f"✗ a case: {forged}"],
        },
        {
            "submission": "class/b/02.ipynb",
            "assignment": ASSIGNMENT,
            "exercise": "02.1",
            "title": "t",
            "points": 0,
            "max_points": 2,
            "status": "failed",
            "feedback": ["✗ a case: off.\n    Likely cause: rows $ 0..$n$ unscaled"],
            "diagnoses": ["rows $ 0..$n$ unscaled"],  # the grader's own, however it reads
        },
        {
            "submission": "class/c/02.ipynb",
            "assignment": ASSIGNMENT,
            "exercise": "02.2",
            "title": "t",
            "points": 0,
            "max_points": 1,
            "status": "error",
            "feedback": ["your solution cell raised NameError: $\\undefined{$"],
        },
    ]
    results = [
        {"submission": r["submission"], "assignment": ASSIGNMENT, "rows": [r], "flags": {}}
        for r in rows
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    data = C.load(tmp_path)
    assert [name for _, name, _ in data.mistakes()] == ["rows $ 0..$n$ unscaled", C.UNNAMED]
    assert C.mistake_name("02.1", "$\\frac{1}{$ the teacher") is None
    assert cli.main(["report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "the teacher" not in page and "unscaled" in page


def test_the_grid_the_unnamed_failures_and_the_flags_by_learner(tmp_path):
    """A learner x exercise grid (status symbol, points in the title), a failure no named
    mistake explains counted in the mistakes' table and chart, and review flags grouped by
    submission, most flags first."""

    def r(sub, ex, status, points, feedback=()):
        return {
            "submission": sub,
            "assignment": ASSIGNMENT,
            "exercise": ex,
            "title": "t",
            "points": points,
            "max_points": 2,
            "status": status,
            "feedback": list(feedback),
        }

    results = [
        {
            "submission": "ann.ipynb",
            "assignment": ASSIGNMENT,
            "rows": [r("ann.ipynb", "02.1", "passed", 2), r("ann.ipynb", "02.2", "timeout", 0)],
        },
        {
            "submission": "bo.ipynb",
            "assignment": ASSIGNMENT,
            "rows": [
                r("bo.ipynb", "02.1", "failed", 0, ["✗ c: shape (2, 3) expected (3, 2)"]),
                r("bo.ipynb", "02.2", "passed", 2),
            ],
        },
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in results))
    flags = [("bo.ipynb", "02.1", "copied"), ("bo.ipynb", "02.2", "copied"), ("ann.ipynb", "", "x")]
    with open(tmp_path / "review.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["submission", "exercise", "reason"])
        w.writerows(flags)
    data = C.load(tmp_path)
    exercises, subs = data.grid()
    assert exercises == ["02.1", "02.2"] and [s for s, _ in subs] == ["ann.ipynb", "bo.ipynb"]
    assert data.mistakes() == [("02.1", C.UNNAMED, 1)]
    assert data.review_by_submission() == [
        ("bo.ipynb", 2, ["copied (02.1, 02.2)"]),
        ("ann.ipynb", 1, ["x (notebook)"]),
    ]
    page = C.render(data)
    assert '<td class="timeout" title="02.2: timeout, 0 / 2">◷</td>' in page
    assert '<td class="failed" title="02.1: failed, 0 / 2">✗</td>' in page
    assert "3 flags on 2 submissions" in page and C.UNNAMED in page
