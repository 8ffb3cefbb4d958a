"""Write the gradebook, the feedback files and the terminal summary.

* ``DIR/grades.csv``: ``submission,assignment,exercise,points,max_points,status``, one row
  per submission and exercise, sorted (so re-runs and any ``--jobs`` give the same file);
* ``DIR/feedback/<submission path>.md``: for the learner: score, what passed, what failed
  and why (the same messages the notebook's checks print, on the grader's hidden cases);
* ``DIR/review.csv``: for the instructor only: solution cells that reach for the grading
  machinery, reference answers or the interpreter's internals (a human should look; the
  grade does not depend on it);
* every file is written to a temporary name and moved into place (``os.replace``), so a
  reader never sees a half-written gradebook.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
from collections import Counter
from pathlib import Path

from .collect import printable

COLUMNS = ["submission", "assignment", "exercise", "points", "max_points", "status"]
ICONS = {"passed": "✅", "failed": "❌", "error": "⚠️", "timeout": "⏱️", "missing": "⬜"}


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new, never half.

    Something other than a file in the way (a folder a kernel made there, say) is renamed
    to ``<name>.moved-aside``, not allowed to stop the gradebook from being written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        aside = path.with_name(path.name + ".moved-aside")
        n = 1
        while aside.exists() or aside.is_symlink():
            n += 1
            aside = path.with_name(f"{path.name}.moved-aside-{n}")
        os.replace(path, aside)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _num(x: float) -> str:
    return f"{float(x):g}"


def _exercise_key(ex_id: str) -> tuple:
    """Sort "00.2" before "00.10"; any other key ("*", "") sorts too, before the ids."""
    return tuple(
        (1, int(p), "") if p.isdigit() else (0, 0, p) for p in re.split(r"[.]", ex_id or "")
    )


def sorted_rows(results: list[dict]) -> list[dict]:
    rows = [r for res in results for r in res["rows"]]
    return sorted(
        rows, key=lambda r: (r["submission"], r["assignment"], _exercise_key(r["exercise"]))
    )


def grades_csv(results: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in sorted_rows(results):
        w.writerow(
            [
                r["submission"],
                r["assignment"],
                r["exercise"],
                _num(r["points"]),
                _num(r["max_points"]),
                r["status"],
            ]
        )
    return buf.getvalue()


def feedback_path(out_dir: Path, submission: str) -> Path:
    """Where a submission's feedback goes: its path, made safe, with .md."""
    parts = [
        re.sub(r"[^\w.@+\- ]", "_", p).strip(" .") or "_"
        for p in submission.split("/")
        if p not in ("", ".", "..")
    ]
    name = parts[-1]
    parts[-1] = (name[:-6] if name.endswith(".ipynb") else name) + ".md"
    return Path(out_dir, "feedback", *parts)


_TAG = re.compile(r"<(?=[A-Za-z/!?])")


_BLOCK = re.compile(r"^(\s*)(#|>|\||=|```|~~~)", re.M)


def _safe(text: str) -> str:
    """Learner-controlled text (an exception's message, a printed value) as plain text in
    Markdown: no terminal escapes or bidi tricks, no HTML a platform would render, and no
    line that would start a heading, quote or table (a fake "✅ passed" section)."""
    text = _TAG.sub("&lt;", printable(str(text).replace("\r", "")))
    return _BLOCK.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def feedback_markdown(result: dict) -> str:
    rows = sorted(result["rows"], key=lambda r: _exercise_key(r["exercise"]))
    got = sum(float(r["points"]) for r in rows)
    total = sum(float(r["max_points"]) for r in rows)
    lines = [
        f"# Feedback: {result.get('assignment') or 'unknown assignment'}",
        "",
        "Submission: `" + _safe(result["submission"]).replace("`", "'") + "`",
        "",
        f"**Score: {_num(got)} / {_num(total)}**",
        "",
    ]
    if any(r["exercise"] for r in rows):
        lines += ["| exercise | | points | status |", "|---|---|---|---|"]
        for r in rows:
            lines.append(
                f"| {r['exercise']} | {r.get('title', '')} | {_num(r['points'])} / "
                f"{_num(r['max_points'])} | {ICONS[r['status']]} {r['status']} |"
            )
        lines.append("")
    if result.get("notes"):
        lines += ["## Notes", ""] + [f"- {_safe(n)}" for n in result["notes"]] + [""]
    for r in rows:
        head = f"Exercise {r['exercise']}" if r["exercise"] else "This submission"
        if r.get("title"):
            head += f": {r['title']}"
        lines += [
            f"## {head} — {ICONS[r['status']]} {r['status']} "
            f"({_num(r['points'])} / {_num(r['max_points'])})",
            "",
        ]
        if r["status"] == "passed":
            lines.append("All of the grader's cases passed, including the hidden ones.")
            lines.append("")
        for f in r["feedback"]:
            first, *rest = _safe(f).split("\n")
            lines.append(f"- {first}")
            lines += [f"  {line}" for line in rest]
        lines.append("")
    lines += [
        "---",
        "Cases are drawn afresh by the grader (visible ones and hidden ones), so "
        "the numbers differ from those in your notebook's checks.",
    ]
    return "\n".join(lines).rstrip() + "\n"


def review_csv(results: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["submission", "exercise", "reason"])
    for res in sorted(results, key=lambda r: r["submission"]):
        for ex_id in sorted(res.get("flags", {}), key=_exercise_key):
            for reason in res["flags"][ex_id]:
                w.writerow([res["submission"], ex_id, reason])
    return buf.getvalue()


def feedback_paths(out_dir: Path, submissions: list[str]) -> dict[str, Path]:
    """Each submission's feedback file; names that clash once made safe (``a?.ipynb`` and
    ``a*.ipynb``, or ``A.ipynb`` and ``a.ipynb`` on a case-insensitive disk) get
    `` (2)``, `` (3)``, … in the order of the submissions' ids."""
    out, used = {}, set()
    for sub in sorted(submissions):
        path = feedback_path(out_dir, sub)
        n = 1
        while str(path).casefold() in used:
            n += 1
            first = feedback_path(out_dir, sub)
            path = first.with_name(f"{first.stem} ({n}).md")
        used.add(str(path).casefold())
        out[sub] = path
    return out


def _inside(path: Path, folder: Path) -> bool:
    """True when ``path``'s folder, links resolved, is inside ``folder`` (a kernel that
    planted a link in DIR/feedback must not make the grader write elsewhere)."""
    return path.parent.resolve().is_relative_to(folder.resolve())


def write_all(out_dir: Path, results: list[dict]) -> list[Path]:
    """Write everything; return the feedback files not written (their folder was a link
    leading outside ``out_dir``)."""
    out_dir = Path(out_dir)
    paths = feedback_paths(out_dir, [res["submission"] for res in results])
    skipped = []
    for res in results:
        path = paths[res["submission"]]
        if not _inside(path, out_dir):
            skipped.append(path)
            continue
        atomic_write(path, feedback_markdown(res))
    atomic_write(out_dir / "review.csv", review_csv(results))
    atomic_write(out_dir / "grades.csv", grades_csv(results))  # last: the "done" marker
    return skipped


def summary_table(results: list[dict]) -> str:
    """A plain-text table: one line per submission, then status counts per exercise."""
    results = sorted(results, key=lambda r: r["submission"])
    width = min(60, max([len(r["submission"]) for r in results] + [10]))
    lines = [f"{'submission':<{width}}  {'assignment':<22} {'score':>9} {'time':>6}  statuses"]
    lines.append("-" * len(lines[0]) + "-" * 20)
    per_ex: dict[tuple[str, str], Counter] = {}
    for res in results:
        got = sum(float(r["points"]) for r in res["rows"])
        total = sum(float(r["max_points"]) for r in res["rows"])
        counts = Counter(r["status"] for r in res["rows"])
        sub = res["submission"]
        sub = sub if len(sub) <= width else "…" + sub[-(width - 1) :]
        flag = "  ⚑ review" if res.get("flags") else ""
        stat = " ".join(f"{k}:{counts[k]}" for k in ICONS if counts[k])
        secs = f"{res['seconds']:.0f} s" if res.get("seconds") is not None else "-"
        lines.append(
            f"{sub:<{width}}  {(res.get('assignment') or '?'):<22} "
            f"{_num(got):>4}/{_num(total):<4} {secs:>6}  {stat}{flag}"
        )
        for r in res["rows"]:
            if r["exercise"]:
                per_ex.setdefault((r["assignment"], r["exercise"]), Counter())[r["status"]] += 1
    if per_ex:
        lines += ["", "per exercise:"]
        for (a, e), c in sorted(per_ex.items(), key=lambda kv: (kv[0][0], _exercise_key(kv[0][1]))):
            stat = " ".join(f"{k}:{c[k]}" for k in ICONS if c[k])
            lines.append(f"  {e:<7} {a:<22} {stat}")
    return "\n".join(lines)
