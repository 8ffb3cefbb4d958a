"""``course-grade report OUT``: one self-contained HTML page about a graded class.

    course-grade report grades/02                 # -> grades/02/report.html
    course-grade report grades/02 --html FILE     # somewhere else

Where the class got stuck, in figures: the distribution of totals, each exercise's pass rate
and median points, a grid of every submission's status on every exercise, the mistakes the
checks diagnosed most often (the keys the grader recorded, such as ``02.1/unscaled``, named
by their nudge; never text from the feedback) and the failures no named mistake explains,
the time-outs and errors, and the submissions that need a human look (``review.csv``,
grouped by submission). It reads what a grading run wrote
(``results.jsonl``, else ``grades.csv``, and ``review.csv``) and changes nothing there.

The page needs no network and no other file: the figures are inline SVG drawn by
matplotlib (text as paths, so no font is needed either), the style sheet is inline, and
every text that came from a submission (names, messages) is escaped; the figures draw
every label as plain text (matplotlib's maths parsing and TeX off: a ``$`` is a dollar).
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from .protocol import STATUSES, exercise_key

COLOURS = {
    "passed": "#2e7d32",
    "failed": "#ef6c00",
    "error": "#c62828",
    "timeout": "#6a1b9a",
    "missing": "#9e9e9e",
}
TOP_MISTAKES = 15
# A failure the checks did not name (a shape, an exception, a wrong value of no declared kind):
# counted beside the named mistakes, so that the chart shows every failure
UNNAMED = "failed, and no named mistake explains it"
# (each in the fonts a plain browser has: the stopwatch emoji showed as an empty box)
SYMBOLS = {"passed": "✓", "failed": "✗", "error": "!", "timeout": "◷", "missing": "–"}


@dataclass
class ExerciseStats:
    exercise: str
    assignment: str
    title: str = ""
    max_points: float = 0.0
    points: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)

    @property
    def n(self) -> int:
        return sum(self.statuses.values())

    @property
    def pass_rate(self) -> float:
        return self.statuses["passed"] / self.n if self.n else 0.0

    @property
    def median_points(self) -> float:
        return statistics.median(self.points) if self.points else 0.0


@dataclass
class ClassData:
    """What the report shows, computed from a grading run's files."""

    folder: Path
    results: list[dict]
    review: list[dict]

    # ------------------------------------------------------------------ derived
    @property
    def rows(self) -> list[dict]:
        return [r for res in self.results for r in res.get("rows", [])]

    def totals(self) -> list[tuple[str, str, float, float]]:
        """(submission, assignment, points, max_points) per submission."""
        out = []
        for res in self.results:
            rows = res.get("rows", [])
            got = sum(float(r.get("points", 0)) for r in rows)
            total = sum(float(r.get("max_points", 0)) for r in rows)
            out.append((res.get("submission", "?"), res.get("assignment") or "", got, total))
        return sorted(out, key=lambda t: (t[1], t[2] / t[3] if t[3] else 0.0, t[0]))

    def exercises(self) -> list[ExerciseStats]:
        stats: dict[str, ExerciseStats] = {}
        for r in self.rows:
            if not r.get("exercise"):
                continue
            s = stats.setdefault(
                r["exercise"], ExerciseStats(r["exercise"], r.get("assignment", ""))
            )
            s.title = s.title or r.get("title", "") or _title(r["exercise"])
            s.max_points = max(s.max_points, float(r.get("max_points", 0)))
            s.points.append(float(r.get("points", 0)))
            s.statuses[r.get("status", "error")] += 1
        return sorted(stats.values(), key=lambda s: exercise_key(s.exercise))

    def mistakes(self) -> list[tuple[str, str, int]]:
        """(exercise, mistake, submissions) for the mistakes the checks named, most common
        first: a submission counts once per exercise and mistake."""
        seen: Counter = Counter()
        for r in self.rows:
            if r.get("status") != "failed" or not r.get("exercise"):
                continue
            names = {mistake_name(r["exercise"], c) for c in _diagnoses(r)} - {None}
            for name in names or {UNNAMED}:
                seen[(r["exercise"], name)] += 1
        ranked = sorted(
            seen.items(),
            key=lambda kv: (-kv[1], exercise_key(kv[0][0]), kv[0][1] == UNNAMED, kv[0][1]),
        )
        return [(ex, name, n) for (ex, name), n in ranked]

    def grid(self) -> tuple[list[str], list[tuple[str, dict[str, dict]]]]:
        """(exercises in course order, [(submission, {exercise: its row})] by submission)."""
        exercises = sorted(
            {r["exercise"] for r in self.rows if r.get("exercise")}, key=exercise_key
        )
        subs = []
        for res in sorted(self.results, key=lambda res: str(res.get("submission", ""))):
            by_ex = {r["exercise"]: r for r in res.get("rows", []) if r.get("exercise")}
            subs.append((str(res.get("submission", "?")), by_ex))
        return exercises, subs

    def review_by_submission(self) -> list[tuple[str, int, list[str]]]:
        """(submission, flags, each reason once with its exercises), most flags first."""
        grouped: dict[str, list[dict]] = defaultdict(list)
        for r in self.review:
            grouped[str(r.get("submission", ""))].append(r)
        out = []
        for sub, flags in grouped.items():
            reasons: dict[str, list[str]] = {}
            for f in flags:
                reasons.setdefault(str(f.get("reason", "")), []).append(str(f.get("exercise", "")))
            lines = [
                f"{reason} ({', '.join(e for e in dict.fromkeys(exs) if e) or 'notebook'})"
                for reason, exs in reasons.items()
            ]
            out.append((sub, len(flags), lines))
        return sorted(out, key=lambda t: (-t[1], t[0]))

    def trouble(self) -> list[dict]:
        """Rows that timed out or errored, with the first line of their reason."""
        out = []
        for r in self.rows:
            if r.get("status") in ("timeout", "error"):
                why = next((m for m in r.get("feedback", []) if str(m).strip()), "")
                out.append(
                    {
                        "submission": r.get("submission", "?"),
                        "exercise": r.get("exercise") or "(whole notebook)",
                        "status": r["status"],
                        "reason": _first_line(str(why)),
                    }
                )
        return sorted(out, key=lambda t: (t["submission"], exercise_key(t["exercise"])))


def _title(ex_id: str) -> str:
    try:
        from course_lib.checks.core import get_exercise

        return get_exercise(ex_id).title
    except Exception:  # an exercise this course no longer has
        return ""


def _first_line(text: str, limit: int = 300) -> str:
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _diagnoses(row: dict) -> list[str]:
    """A failed row's diagnoses: the keys the grader recorded (``diagnoses``, made in its
    process from the checks' own results). Feedback text is never read for them: a row
    without the record (a gradebook from a grader before 0.4) names no mistake."""
    recorded = row.get("diagnoses")
    return [_GRADER + str(d) for d in recorded] if isinstance(recorded, list) else []


_GRADER = "\0grader:"  # marks a diagnosis the grader recorded itself (no learner text has it)


_KEY = re.compile(r"^\d{2}\.\d+/[a-z0-9-]+$")


def _keyed(exercise_id: str, key: str) -> str:
    """The nudge of the hint the checks diagnose as ``key`` ("02.1/unscaled"), else the key."""
    try:
        from course_lib.checks.core import get_exercise

        ex = get_exercise(exercise_id)
    except Exception:  # an exercise this course no longer has: the key says what it was
        return key
    hints = [*ex.mistakes, *(getattr(ex, "errors", None) or {}).values(), ex.no_warnings]
    return next((str(h) for h in hints if getattr(h, "key", "") == key), key)


def mistake_name(exercise_id: str, cause: str) -> str | None:
    """The diagnosis of the exercise's own checks that ``cause`` names: the hint's nudge
    for a key the grader recorded ("02.1/unscaled"), else None. Only what the grader
    recorded itself counts: text (a learner's exception saying "Likely cause: ...") is
    never a diagnosis."""
    if not cause.startswith(_GRADER):
        return None
    cause = cause.removeprefix(_GRADER)
    if _KEY.match(cause):
        return _keyed(exercise_id, cause)
    first = re.split(r"(?<=[.!?])\s", cause, maxsplit=1)[0]
    return first if len(first) <= 200 else first[:199] + "…"


# --------------------------------------------------------------------------- reading


def load(folder: str | Path) -> ClassData:
    """A grading run's output folder: results.jsonl (whole results), else grades.csv."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder: give the --out DIR of a grading run")
    results: list[dict] = []
    jsonl = folder / "results.jsonl"
    if jsonl.exists():
        for n, line in enumerate(jsonl.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    results.append(json.loads(line))
                except ValueError as err:
                    raise ValueError(f"{jsonl}, line {n}: not JSON ({err})") from None
    elif (folder / "grades.csv").exists():
        by_sub: dict[str, dict] = {}
        with open(folder / "grades.csv", newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                res = by_sub.setdefault(
                    row["submission"],
                    {"submission": row["submission"], "assignment": row["assignment"], "rows": []},
                )
                res["rows"].append({**row, "feedback": []})
        results = list(by_sub.values())
    else:
        raise FileNotFoundError(
            f"{folder} has neither results.jsonl nor grades.csv: is it the --out DIR of a "
            "grading run?"
        )
    review = []
    if (folder / "review.csv").exists():
        with open(folder / "review.csv", newline="", encoding="utf-8") as f:
            review = list(csv.DictReader(f))
    return ClassData(folder, results, review)


# --------------------------------------------------------------------------- figures


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.find("<svg") :]  # inline: no XML declaration or doctype
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)  # no RDF links


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "path"  # text as outlines: the page needs no font
    # every label is shown as written: `$...$` in any text is never parsed as maths
    plt.rcParams["text.usetex"] = False
    plt.rcParams["text.parse_math"] = False
    return plt


def figure_totals(data: ClassData) -> str:
    plt = _pyplot()
    shares = [100 * got / total for _, _, got, total in data.totals() if total > 0]
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    ax.hist(shares, bins=[i * 10 for i in range(11)], color="#1565c0", edgecolor="white")
    ax.set_xlabel("score (% of the points)")
    ax.set_ylabel("submissions")
    ax.set_xlim(0, 100)
    if shares:
        med = statistics.median(shares)
        ax.axvline(med, color="black", linestyle="--", linewidth=1)
        ax.text(med, ax.get_ylim()[1] * 0.92, f" median {med:.0f}%", fontsize=9)
    ax.set_title(f"Totals of {len(shares)} submissions")
    return _svg(fig)


def figure_exercises(data: ClassData) -> str:
    plt = _pyplot()
    stats = data.exercises()
    fig, ax = plt.subplots(figsize=(6.4, 0.35 * max(3, len(stats)) + 1.0))
    labels = [s.exercise for s in stats][::-1]
    left = [0.0] * len(stats)
    for status in STATUSES:
        share = [s.statuses[status] / s.n if s.n else 0 for s in stats][::-1]
        ax.barh(labels, share, left=left, color=COLOURS[status], label=status, height=0.7)
        left = [a + b for a, b in zip(left, share)]
    for i, s in enumerate(stats[::-1]):
        ax.text(
            1.01,
            i,
            f"{s.pass_rate:.0%} · median {s.median_points:g}/{s.max_points:g}",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of submissions")
    ax.legend(
        ncol=5, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.3 / len(stats))
    )
    ax.set_title("Each exercise: statuses, pass rate and median points")
    return _svg(fig)


def figure_mistakes(data: ClassData) -> str | None:
    plt = _pyplot()
    top = data.mistakes()[:TOP_MISTAKES]
    if not top:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 0.4 * len(top) + 1.0))
    labels = [f"{ex}: {_short(name, 60)}" for ex, name, _ in top][::-1]
    ax.barh(labels, [n for _, _, n in top][::-1], color=COLOURS["failed"], height=0.7)
    ax.set_xlabel("submissions")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Failures by the mistake the checks named (or none)")
    return _svg(fig)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# --------------------------------------------------------------------------- the page

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 60em; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.figure svg { max-width: 100%; height: auto; }
.cards { display: flex; gap: 1em; flex-wrap: wrap; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.5em 1em; min-width: 9em; }
.card b { display: block; font-size: 1.5em; }
.passed { color: #2e7d32; } .failed { color: #ef6c00; } .error { color: #c62828; }
.timeout { color: #6a1b9a; } .missing { color: #757575; }
code { font-size: 0.9em; word-break: break-all; }
table.grid td { text-align: center; font-weight: bold; padding: 0.15em 0.45em; }
table.grid td:first-child { text-align: left; font-weight: normal; }
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _table(head: list[str], rows: list[list[str]], numeric: Collection[int] = frozenset()) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cells = "".join(
            f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    return "\n".join(out)


def _head(data: ClassData, totals, statuses: Counter) -> list[str]:
    """The title, the summary cards and the totals' figure."""
    assignments = sorted({a for _, a, _, _ in totals if a})
    shares = [100 * g / t for _, _, g, t in totals if t > 0]
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Class report: {_e(', '.join(assignments) or data.folder.name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Class report: {_e(', '.join(assignments) or 'no assignment')}</h1>",
        f"<p>From <code>{_e(data.folder)}</code>. Cases are the grader's (visible and "
        "hidden); mistakes are the ones the checks named in the feedback.</p>",
        '<div class="cards">',
        f'<div class="card"><b>{len(totals)}</b>submissions</div>',
        f'<div class="card"><b>{statistics.median(shares):.0f}%</b>median score</div>'
        if shares
        else "",
        *(f'<div class="card {s}"><b>{statuses[s]}</b>{s}</div>' for s in STATUSES if statuses[s]),
        f'<div class="card"><b>{len(data.review)}</b>flags to review</div>',
        "</div>",
        "<h2>Totals</h2>",
        f'<div class="figure" id="fig-totals">{figure_totals(data)}</div>',
    ]


def _per_assignment(totals) -> str:
    per_assignment = defaultdict(list)
    for _, a, g, t in totals:
        if t > 0:
            per_assignment[a].append(100 * g / t)
    return _table(
        ["assignment", "submissions", "median %", "mean %", "all points"],
        [
            [
                _e(a or "(unknown)"),
                str(len(v)),
                f"{statistics.median(v):.0f}",
                f"{statistics.mean(v):.0f}",
                str(sum(x >= 100 - 1e-9 for x in v)),
            ]
            for a, v in sorted(per_assignment.items())
        ],
        numeric={1, 2, 3, 4},
    )


def _exercises(data: ClassData) -> list[str]:
    stats = data.exercises()
    return [
        "<h2>Exercises</h2>",
        f'<div class="figure" id="fig-exercises">{figure_exercises(data)}</div>'
        if stats
        else "<p>No exercise rows.</p>",
        _table(
            ["exercise", "title", "pass rate", "median points", *STATUSES],
            [
                [
                    _e(s.exercise),
                    _e(s.title),
                    f"{s.pass_rate:.0%}",
                    f"{s.median_points:g} / {s.max_points:g}",
                    *(str(s.statuses[st]) for st in STATUSES),
                ]
                for s in stats
            ],
            numeric={2, 3, 4, 5, 6, 7, 8},
        ),
    ]


def _grid(data: ClassData) -> list[str]:
    """One row per submission, one column per exercise: its status as a symbol and colour,
    its points in the cell's title."""
    exercises, subs = data.grid()
    if not exercises:
        return []
    head = "<tr><th>submission</th>" + "".join(f"<th>{_e(e)}</th>" for e in exercises)
    rows = ['<table class="grid">', head + "<th>points</th></tr>"]
    for sub, by_ex in subs:
        cells = []
        for e in exercises:
            r = by_ex.get(e)
            if r is None:
                cells.append("<td></td>")
                continue
            status = str(r.get("status", "error"))
            status = status if status in SYMBOLS else "error"
            tip = (
                f"{e}: {status}, {float(r.get('points', 0)):g} / {float(r.get('max_points', 0)):g}"
            )
            cells.append(f'<td class="{status}" title="{_e(tip)}">{SYMBOLS[status]}</td>')
        got = sum(float(r.get("points", 0)) for r in by_ex.values())
        top = sum(float(r.get("max_points", 0)) for r in by_ex.values())
        rows.append(
            f"<tr><td><code>{_e(sub)}</code></td>{''.join(cells)}"
            f'<td class="num">{got:g} / {top:g}</td></tr>'
        )
    rows.append("</table>")
    legend = " · ".join(f'<span class="{s}">{SYMBOLS[s]}</span> {s}' for s in STATUSES)
    return ["<h2>Each submission, each exercise</h2>", f"<p>{legend}</p>", "\n".join(rows)]


def _mistakes(data: ClassData) -> list[str]:
    parts = ["<h2>Where the class got stuck: the mistakes diagnosed</h2>"]
    fig = figure_mistakes(data)
    if not fig:
        return parts + ["<p>No failure matched a declared mistake.</p>"]
    return parts + [
        f'<div class="figure" id="fig-mistakes">{fig}</div>',
        _table(
            ["exercise", "mistake (as the check names it)", "submissions"],
            [[_e(ex), _e(name), str(n)] for ex, name, n in data.mistakes()],
            numeric={2},
        ),
    ]


def _trouble(data: ClassData) -> list[str]:
    trouble = data.trouble()
    rows = [
        [
            f"<code>{_e(t['submission'])}</code>",
            _e(t["exercise"]),
            f'<span class="{_e(t["status"])}">{_e(t["status"])}</span>',
            _e(t["reason"]),
        ]
        for t in trouble
    ]
    return [
        f"<h2>Time-outs and errors ({len(trouble)})</h2>",
        _table(["submission", "exercise", "status", "reason"], rows) if trouble else "<p>None.</p>",
    ]


def _review(data: ClassData) -> list[str]:
    grouped = data.review_by_submission()
    rows = [
        [
            f"<code>{_e(sub)}</code>",
            str(n),
            "<br>".join(_e(line) for line in lines),
        ]
        for sub, n, lines in grouped
    ]
    return [
        f"<h2>Needs a human look ({len(data.review)} flags on {len(grouped)} submissions, "
        "from review.csv)</h2>",
        _table(["submission", "flags", "reasons (exercises)"], rows, numeric={1})
        if data.review
        else "<p>Nothing was flagged.</p>",
    ]


def _submissions(totals) -> list[str]:
    return [
        "<h2>Submissions, lowest score first</h2>",
        _table(
            ["submission", "assignment", "points"],
            [
                [f"<code>{_e(s)}</code>", _e(a), f"{g:g} / {t:g}"]
                for s, a, g, t in sorted(totals, key=lambda x: (x[2] / x[3] if x[3] else 0, x[0]))
            ],
            numeric={2},
        ),
    ]


def render(data: ClassData) -> str:
    """The report as one HTML document (escaped, self-contained), section by section."""
    totals = data.totals()
    statuses = Counter(r.get("status") for r in data.rows)
    parts = _head(data, totals, statuses) + [_per_assignment(totals)]
    parts += _exercises(data) + _grid(data) + _mistakes(data) + _trouble(data) + _review(data)
    parts += _submissions(totals) + ["</body></html>"]
    return "\n".join(p for p in parts if p)


def write_report(folder: str | Path, html_path: str | Path | None = None) -> Path:
    """Write the report of the grading run in ``folder``; returns the page's path."""
    data = load(folder)
    dest = Path(html_path) if html_path else Path(folder) / "report.html"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(render(data), encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="course-grade report",
        description="One self-contained HTML page about a graded class: totals, each "
        "exercise's pass rate and median points, the mistakes diagnosed most often, "
        "time-outs and errors, and what review.csv flags.",
    )
    parser.add_argument("out", type=Path, help="the --out DIR of a grading run (or a merge)")
    parser.add_argument("--html", type=Path, default=None, help="default: OUT/report.html")
    args = parser.parse_args(argv)
    try:
        dest = write_report(args.out, args.html)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"class report: {dest}")
    return 0
