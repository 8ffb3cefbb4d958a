"""A workshop's plan from the course's own figures.

    python -m course_tools.plan            # print the plan (markdown)
    python -m course_tools.plan --write    # after re-measuring: refresh README.md's "runs in"
                                           # column and docs/instructors.md's plan block

Two sources, both in the repository: the README's course map (the reading time of each
lecture and its exercises, an estimate for a careful reader on a laptop CPU) and the
recorded notebook times (``benchmarks/results/notebook_times.json``, every notebook with the
CI budget, and ``notebook_times_full.json``, chapters 07-09 with the learners' budget; both
measured on 2 cores by ``benchmarks/notebook_times.py``). The "runs in" figure of a chapter is
how long its lecture takes to execute top to bottom with the learners' budget: waiting time
inside the reading time, and what a shared machine must serve per learner.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .course import CourseRootError, course_root

# Suggested cuts: (name, what it is for, lectures, exercise notebooks).
CUTS = (
    ("one day", "attention itself: why, how, why √d_k", "00 01 02 03", "00 02 03"),
    (
        "two days",
        "from the RNN to the FlashAttention kernel",
        "00 01 02 03 04 05 06",
        "00 02 03 04 06",
    ),
    ("one week", "the whole course, exercises included", "all", "all"),
)
# Breaks in a cut's time: BREAK_MIN after every WORK_BLOCK_MIN of lectures and exercises.
WORK_BLOCK_MIN, BREAK_MIN = 90, 15
PLAN_START, PLAN_END = "<!-- plan:start -->", "<!-- plan:end -->"
_ROW = re.compile(r"^\| (\d\d) \| \[([^\]]*)\]\((notebooks/\d\d_[a-z0-9_]+\.ipynb)\) \|")


@dataclass
class Chapter:
    number: str
    title: str
    lecture: str  # notebooks/NN_topic.ipynb
    lecture_min: int
    exercise_min: int
    runs_in_s: float | None  # as the README states it


def minutes(text: str) -> int:
    """``"2 h"``, ``"90 min"``, ``"1 h 30 min"`` -> minutes."""
    total, found = 0, False
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(h|min)\b", text):
        total += round(float(value) * (60 if unit == "h" else 1))
        found = True
    if not found:
        raise ValueError(f"no time in {text!r} (write e.g. '90 min' or '2 h')")
    return total


def course_map(root: Path) -> tuple[list[str], list[Chapter]]:
    """The README's course map: its header cells and one Chapter per row."""
    lines = (Path(root) / "README.md").read_text(encoding="utf-8").splitlines()
    header: list[str] = []
    chapters = []
    for i, line in enumerate(lines):
        m = _ROW.match(line)
        if not m:
            continue
        if not header:
            header = [c.strip() for c in lines[i - 2].strip().strip("|").split("|")]
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        row = dict(zip(header, cells))
        time = row.get("time", "")
        lecture_part, _, exercise_part = time.partition("+")
        runs = re.search(r"(\d+(?:\.\d+)?)\s*s\b", row.get("runs in", ""))
        chapters.append(
            Chapter(
                m.group(1),
                m.group(2),
                m.group(3),
                minutes(lecture_part),
                minutes(exercise_part) if exercise_part.strip() else 0,
                float(runs.group(1)) if runs else None,
            )
        )
    if not chapters:
        raise ValueError("README.md has no course map rows (| NN | [title](notebooks/...) |)")
    return header, chapters


def measured(root: Path) -> dict[str, float]:
    """Each lecture's recorded execution time with the learners' budget, in seconds: the
    full-budget file where it has the notebook, else the CI one (chapters 00-06 train
    nothing, so their budget changes nothing)."""
    results = Path(root) / "benchmarks" / "results"
    times: dict[str, float] = {}
    for name in ("notebook_times.json", "notebook_times_full.json"):  # the full one wins
        path = results / name
        if path.exists():
            for entry in json.loads(path.read_text(encoding="utf-8")).get("notebooks", []):
                times[entry["notebook"]] = float(entry["seconds"])
    return times


def _hm(mins: int) -> str:
    h, m = divmod(mins, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


def exercises_where(root: Path, chapter: Chapter) -> str:
    """The exercises column of a chapter whose course map gives them no time of their own."""
    name = Path(chapter.lecture).stem
    if (Path(root) / "exercises" / f"{name}.ipynb").exists():
        return f"with the lecture (work/{name}_exercises.ipynb)"
    return "(in the lecture)"


def cut_chapters(chapters: list[Chapter], lectures: str, exercises: str, name: str = "") -> tuple:
    """A cut's lectures and exercise chapters; every exercise chapter's lecture is in it."""
    by_number = {c.number: c for c in chapters}
    lect = chapters if lectures == "all" else [by_number[n] for n in lectures.split()]
    exs = chapters if exercises == "all" else [by_number[n] for n in exercises.split()]
    missing = [c.number for c in exs if c not in lect]
    if missing:
        raise ValueError(f"the cut {name!r} has exercises {missing} without their lectures")
    return lect, exs


def with_breaks(work_min: int) -> int:
    """Lectures and exercises plus a break after every full work block."""
    return work_min + BREAK_MIN * (work_min // WORK_BLOCK_MIN)


def plan_markdown(root: Path) -> str:
    """The plan: time per chapter, the totals and the suggested cuts (markdown)."""
    _, chapters = course_map(root)
    rows = [
        "| chapter | lecture | exercises | the lecture runs in |",
        "|---|---|---|---|",
    ]
    for c in chapters:
        runs = f"{c.runs_in_s:.0f} s" if c.runs_in_s is not None else "not measured"
        rows.append(
            f"| {c.number} {c.title} | {_hm(c.lecture_min)} | "
            f"{_hm(c.exercise_min) if c.exercise_min else exercises_where(root, c)} | {runs} |"
        )
    lec = sum(c.lecture_min for c in chapters)
    ex = sum(c.exercise_min for c in chapters)
    rows.append(f"| **all {len(chapters)} chapters** | **{_hm(lec)}** | **{_hm(ex)}** | |")
    cuts = ["", "| cut | for | lectures | exercises | work | with breaks |"]
    cuts.append("|---|---|---|---|---|---|")
    for name, purpose, lectures, exercises in CUTS:
        lect, exs = cut_chapters(chapters, lectures, exercises, name)
        work = sum(c.lecture_min for c in lect) + sum(c.exercise_min for c in exs)
        cuts.append(
            f"| {name} | {purpose} | {', '.join(c.number for c in lect)} | "
            f"{', '.join(c.number for c in exs)} | {_hm(work)} | {_hm(with_breaks(work))} |"
        )
    cuts.append(
        f"\n*With breaks*: {BREAK_MIN} min after every {WORK_BLOCK_MIN} min of lectures and "
        "exercises; lunch and the days' start and end are yours to add."
    )
    return "\n".join(rows + cuts)


def readme_with_measured(root: Path) -> str:
    """README.md with its course map's "runs in" column set from the recorded times."""
    path = Path(root) / "README.md"
    header, _ = course_map(root)
    if "runs in" not in header:
        raise ValueError("the README's course map has no 'runs in' column")
    col = header.index("runs in")
    times = measured(root)
    out = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        m = _ROW.match(line)
        if m and m.group(3) in times:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            cells[col] = f"{times[m.group(3)]:.0f} s"
            line = "| " + " | ".join(cells) + " |"
        out.append(line)
    return "\n".join(out)


def doc_with_plan(root: Path) -> str:
    """docs/instructors.md with its plan block (between the plan markers) regenerated."""
    path = Path(root) / "docs" / "instructors.md"
    text = path.read_text(encoding="utf-8")
    start, end = text.find(PLAN_START), text.find(PLAN_END)
    if start < 0 or end < start:
        raise ValueError(f"{path} has no {PLAN_START} ... {PLAN_END} block")
    return text[: start + len(PLAN_START)] + "\n" + plan_markdown(root) + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.plan",
        description="A workshop's plan: time per chapter (reading and exercises from the "
        "README's course map, execution from the recorded notebook times) and cuts.",
    )
    parser.add_argument("--course", type=Path, default=None, metavar="ROOT")
    parser.add_argument(
        "--write",
        action="store_true",
        help="refresh README.md's 'runs in' column from benchmarks/results/ and the plan "
        "block of docs/instructors.md",
    )
    args = parser.parse_args(argv)
    try:
        root = course_root(args.course)
        if args.write:
            (root / "README.md").write_text(readme_with_measured(root), encoding="utf-8")
            (root / "docs" / "instructors.md").write_text(doc_with_plan(root), encoding="utf-8")
            print("updated README.md (runs in) and docs/instructors.md (the plan)")
            return 0
        print(plan_markdown(root))
    except (CourseRootError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
