"""Write the gradebook, the feedback files and the terminal summary.

* ``DIR/grades.csv``: ``submission,assignment,exercise,points,max_points,status`` and, so
  that a grade can be traced to the code that produced it, ``course_commit`` (the course
  folder's ``git describe``, or ``unknown``) and ``grader_version``; one row per submission
  and exercise, sorted (so re-runs and any ``--jobs`` give the same file);
* ``DIR/feedback/<submission path>.md``: for the learner: score, what passed, what failed
  and why (the same messages the notebook's checks print, on the grader's hidden cases);
* ``DIR/review.csv``: for the instructor only: solution cells that reach for the grading
  machinery, reference answers or the interpreter's internals (a human should look; the
  grade does not depend on it);
* ``DIR/results.jsonl``: every submission's whole result, one JSON line each, appended as
  it finishes (``course-grade merge`` reads it; so can your own scripts);
* ``DIR/run.json``: how the run was made (shard, seed fingerprint, options, whether it
  finished);
* optional exports (``--export``): ``DIR/lms.csv`` (one row per student, one column per
  assignment, for Canvas or Moodle) and ``DIR/gradescope/<submission>.json`` (Gradescope's
  ``results.json`` format);
* every file is written to a temporary name and moved into place (``os.replace``), so a
  reader never sees a half-written gradebook, and the gradebook is rewritten as
  submissions finish, so a stopped run leaves a valid one with what was graded.

Text a learner controls (file names, exception messages, printed values) can reach these
files: in CSV a cell never starts a formula (``=``, ``+``, ``-``, ``@``, tab), and in the
feedback it only ever appears inside code blocks and spans, so it shows as plain text.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Collection
from pathlib import Path

from .collect import printable
from .protocol import exercise_key

COLUMNS = [
    "submission",
    "assignment",
    "exercise",
    "points",
    "max_points",
    "status",
    "course_commit",
    "grader_version",
    "feedback",
]
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
    # a short temporary name: the final one may be as long as the file system allows
    fd, tmp = tempfile.mkstemp(prefix=".cg-", suffix=".tmp", dir=path.parent)
    try:
        # a lone surrogate (a learner's exception message may hold one) is written as
        # "\\udXXX": valid JSON, readable CSV; strict UTF-8 would end the whole run
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
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


def sorted_rows(results: list[dict]) -> list[dict]:
    rows = [r for res in results for r in res["rows"]]
    return sorted(
        rows, key=lambda r: (r["submission"], r["assignment"], exercise_key(r["exercise"]))
    )


_FORMULA = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def cell(value) -> str:
    """A CSV cell that no spreadsheet reads as a formula: text starting with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return (or their full-width forms) gets a leading
    ``'``. Numbers are written by the caller and never pass through here."""
    text = printable(str(value))
    return "'" + text if text.startswith(_FORMULA) else text


def grades_csv(
    results: list[dict],
    provenance: dict[str, str] | None = None,
    paths: dict[str, Path] | None = None,
    out_dir: Path | None = None,
) -> str:
    """The gradebook; ``provenance`` gives ``course_commit`` and ``grader_version``;
    ``feedback`` names each row's feedback file, relative to the gradebook's folder
    (``paths``, from :func:`feedback_paths`, else made here)."""
    provenance = provenance or {}
    trace = [
        provenance.get("course_commit", "unknown"),
        provenance.get("grader_version", "unknown"),
    ]
    base = Path(out_dir) if out_dir is not None else Path()
    if paths is None:
        paths = feedback_paths(base, sorted({r["submission"] for r in sorted_rows(results)}))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in sorted_rows(results):
        path = paths.get(r["submission"]) or feedback_path(base, r["submission"])
        w.writerow(
            [
                cell(r["submission"]),
                cell(r["assignment"]),
                cell(r["exercise"]),
                _num(r["points"]),
                _num(r["max_points"]),
                r["status"],
                *map(cell, trace),
                cell(Path(os.path.relpath(path, base)).as_posix()),
            ]
        )
    return buf.getvalue()


MAX_NAME_BYTES = 200  # of one part of a feedback path (file systems allow 255)
_UNSAFE = re.compile(r"[^\w.@+\- ]")


def _id_hash(submission: str) -> str:
    return hashlib.sha256(submission.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _short(part: str) -> str:
    """``part`` cut to :data:`MAX_NAME_BYTES` bytes of UTF-8, on a character boundary."""
    data = part.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_NAME_BYTES:
        return part
    return data[:MAX_NAME_BYTES].decode("utf-8", "ignore")


def feedback_path(out_dir: Path, submission: str, hashed: bool = False) -> Path:
    """Where a submission's feedback goes: its path, made safe, with ``.md``; unique by
    construction. Each part keeps letters, digits and ``.@+- _``; a part that had to
    change (another character replaced by ``_``, a ``..`` dropped, a name over
    :data:`MAX_NAME_BYTES` bytes cut, a folder ending in ``.md`` given a ``_``) adds
    ``~`` and a hash of the whole submission id to the file's name (``kim_00.md`` for
    ``kim_00.ipynb``, ``kim_00~1f0c…md`` for ``kim#00.ipynb``). A name kept as it was
    never holds ``~`` (it is replaced), and two changed names differ by their ids' hashes,
    so no two submissions share a file, whatever their order. ``hashed``: add the hash
    anyway (for names that differ only in case, see :func:`feedback_paths`)."""
    raw = [p for p in submission.split("/")]
    kept = [p for p in raw if p not in ("", ".", "..")]
    changed = hashed or len(kept) != len(raw) or not kept
    parts = []
    for i, p in enumerate(kept or ["_"]):
        last = i == len(kept or ["_"]) - 1
        if last and p.endswith(".ipynb"):
            p = p[:-6]
        safe = _short(_UNSAFE.sub("_", p).strip(" .") or "_")
        if not last and safe.casefold().endswith(".md"):
            safe += "_"  # a folder never takes the name of a feedback file
        changed |= safe != p
        parts.append(safe)
    name = parts[-1]
    if changed:
        name = f"{name}~{_id_hash(submission)}"
    parts[-1] = name + ".md"
    return Path(out_dir, "feedback", *parts)


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text`` (so it cannot close)."""
    runs = [len(m) for m in re.findall(r"`+", text)]
    return "`" * max(3, max(runs, default=0) + 1)


def code_block(lines: list[str]) -> list[str]:
    """Learner-controlled text as a fenced code block: shown as typed, never rendered
    (no heading, link, image or HTML can come out of it)."""
    text = "\n".join(printable(str(line).replace("\r", "")) for line in lines)
    fence = _fence(text)
    return [fence + "text", *text.split("\n"), fence]


def code_span(text: str) -> str:
    """Learner-controlled text on one line, as an inline code span."""
    text = printable(str(text)).replace("\n", " ")
    runs = [len(m) for m in re.findall(r"`+", text)]
    ticks = "`" * (max(runs, default=0) + 1)
    return f"{ticks} {text} {ticks}"


def _items(messages: list[str], bullet: str = "- ") -> list[str]:
    out = []
    for m in messages:
        first, *rest = str(m).split("\n")
        out.append(bullet + first)
        out += ["  " + line for line in rest]
    return out


def feedback_markdown(result: dict) -> str:
    """The learner's feedback file. Everything a learner's code or file could have put in
    a message (exception texts, printed values, the file name) sits in code blocks."""
    rows = sorted(result["rows"], key=lambda r: exercise_key(r["exercise"]))
    got = sum(float(r["points"]) for r in rows)
    total = sum(float(r["max_points"]) for r in rows)
    lines = [
        f"# Feedback: {result.get('assignment') or 'unknown assignment'}",
        "",
        "Submission: " + code_span(result["submission"]),
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
        lines += ["## Notes", ""] + code_block(_items(result["notes"])) + [""]
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
        if r["feedback"]:
            lines += code_block(_items(r["feedback"], bullet="")) + [""]
    lines += [
        "---",
        "Cases are drawn afresh by the grader (visible ones and hidden ones), so "
        "the numbers differ from those in your notebook's checks.",
    ]
    return "\n".join(lines).rstrip() + "\n"


def one_learner_twice(results: list[dict], pattern: str | None = None) -> dict[str, str]:
    """{submission: why} for each notebook handed in by a learner who handed in another for
    the same assignment (the learner as :func:`student_keys` names them, ``--student``):
    the LMS export keeps the best of them, and a human should know."""
    assignments = {r.get("assignment") or "" for r in results}
    keys = student_keys([r["submission"] for r in results], pattern, assignments)
    groups: dict[tuple[str, str], list[str]] = {}
    for res in results:
        if res.get("assignment"):
            groups.setdefault((keys[res["submission"]], res["assignment"]), []).append(
                res["submission"]
            )
    out = {}
    for (student, assignment), subs in groups.items():
        for sub in subs if len(subs) > 1 else ():
            others = ", ".join(s for s in sorted(subs) if s != sub)
            out[sub] = (
                f"one of {len(subs)} notebooks of {student} for {assignment} (also: {others}); "
                "lms.csv keeps the best of their scores"
            )
    return out


def review_csv(results: list[dict], student: str | None = None) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["submission", "exercise", "reason"])
    twice = one_learner_twice(results, student)
    for res in sorted(results, key=lambda r: r["submission"]):
        if res["submission"] in twice:
            w.writerow([cell(res["submission"]), cell("*"), cell(twice[res["submission"]])])
        for ex_id in sorted(res.get("flags", {}), key=exercise_key):
            for reason in res["flags"][ex_id]:
                w.writerow([cell(res["submission"]), cell(ex_id), cell(reason)])
    return buf.getvalue()


def feedback_paths(out_dir: Path, submissions: list[str]) -> dict[str, Path]:
    """Each submission's feedback file (:func:`feedback_path`). Names that differ only in
    case (``A.ipynb``, ``a.ipynb``: one file on a case-insensitive disk) all get their ids'
    hashes, every one of them, so which is which never depends on an order."""
    first = {sub: feedback_path(out_dir, sub) for sub in submissions}
    seen: dict[str, int] = {}
    for path in first.values():
        key = str(path).casefold()
        seen[key] = seen.get(key, 0) + 1
    return {
        sub: feedback_path(out_dir, sub, hashed=True) if seen[str(p).casefold()] > 1 else p
        for sub, p in first.items()
    }


def _inside(path: Path, folder: Path) -> bool:
    """True when ``path``'s folder, links resolved, is inside ``folder`` (a kernel that
    planted a link in DIR/feedback must not make the grader write elsewhere)."""
    return path.parent.resolve().is_relative_to(folder.resolve())


def recording_failed(res: dict, cause: str) -> dict:
    """``res`` turned into an ``error`` result that says why it could not be recorded:
    every row 0 points, ``error``, with the cause (the rest of the class goes on)."""
    sub = str(res.get("submission", ""))
    why = f"the grader could not record this submission's result: {cause}"
    rows = [dict(r, points=0, status="error", feedback=[why]) for r in res.get("rows") or []] or [
        {
            "submission": sub,
            "assignment": res.get("assignment") or "",
            "exercise": "",
            "points": 0,
            "max_points": 0,
            "status": "error",
            "feedback": [why],
            "title": "",
        }
    ]
    return {
        "submission": sub,
        "assignment": res.get("assignment") or "",
        "notes": [],
        "flags": dict(res.get("flags") or {}),
        "rows": rows,
    }


def _fault(err: BaseException) -> str:
    return printable(f"{type(err).__name__}: {err}")[:500]


def write_feedback(path: Path, out_dir: Path, res: dict) -> str | None:
    """Write one feedback file; None when written, else why not (the file's folder leads
    outside ``out_dir``, or the disk refused it)."""
    if not _inside(path, out_dir):
        return "its folder leads outside the output folder"
    try:
        atomic_write(path, feedback_markdown(res))
    except (OSError, ValueError) as err:
        return _fault(err)
    return None


def write_all(
    out_dir: Path,
    results: list[dict],
    provenance: dict[str, str] | None = None,
    all_ids: list[str] | None = None,
    student: str | None = None,
) -> list[Path]:
    """Write everything; return the feedback files not written (their folder was a link
    leading outside ``out_dir``, or the disk refused them). ``provenance``: see
    :func:`grades_csv`. ``all_ids``: every submission of the class (a shard's, or a stopped
    run's, results are a part of them), so that names are made as in a single complete run."""
    out_dir = Path(out_dir)
    ids = list(all_ids or []) + [res["submission"] for res in results]
    paths = feedback_paths(out_dir, list(dict.fromkeys(ids)))
    skipped = []
    for res in results:
        path = paths[res["submission"]]
        if write_feedback(path, out_dir, res) is not None:
            skipped.append(path)
    write_tables(out_dir, results, provenance, paths, student)
    return skipped


def write_tables(
    out_dir: Path,
    results: list[dict],
    provenance: dict[str, str] | None,
    paths: dict[str, Path] | None = None,
    student: str | None = None,
) -> None:
    atomic_write(out_dir / "review.csv", review_csv(results, student))
    atomic_write(out_dir / "grades.csv", grades_csv(results, provenance, paths, out_dir))


class Gradebook:
    """``DIR`` written as results come in: each submission's feedback and its line in
    ``results.jsonl`` at once, ``grades.csv`` and ``review.csv`` at most every ``every``
    seconds and at the end. A run stopped at any moment leaves a valid gradebook of the
    submissions it finished. A fault while recording one submission (its feedback file
    refused by the disk, a result that cannot be written) makes that submission's rows
    ``error`` with the cause; the others go on."""

    def __init__(
        self,
        out_dir: Path,
        provenance: dict[str, str],
        all_ids: list[str],
        every: float = 2.0,
        student: str | None = None,
    ):
        import time

        self.out_dir = Path(out_dir)
        self.provenance = provenance
        self.student = student  # --student: who a submission belongs to
        self.paths = feedback_paths(self.out_dir, all_ids)
        self.results: list[dict] = []
        self.skipped: list[Path] = []
        self.every = every
        self.clock = time.monotonic
        self.last = self.clock()
        self.journal = self.out_dir / "results.jsonl"
        self.journal.write_text("")
        write_tables(self.out_dir, [], provenance, self.paths)  # valid and empty from the start

    def path(self, submission: str) -> Path:
        if submission not in self.paths:
            self.paths[submission] = feedback_path(self.out_dir, submission, hashed=True)
        return self.paths[submission]

    def add(self, res: dict) -> None:
        """Record one submission's result; never raises for a fault of this submission."""
        try:
            line = json.dumps(res, sort_keys=True, ensure_ascii=False)
            path = self.path(res["submission"])
        except Exception as err:  # a result that cannot be serialised: its cause, recorded
            res = recording_failed(res, _fault(err))
            line = json.dumps(res, sort_keys=True, ensure_ascii=False)
            path = self.path(res["submission"])
        if _inside(path, self.out_dir):
            why = write_feedback(path, self.out_dir, res)
            if why is not None:
                res = recording_failed(res, f"its feedback file could not be written ({why})")
                line = json.dumps(res, sort_keys=True, ensure_ascii=False)
                self.skipped.append(path)
        else:
            self.skipped.append(path)
        self.results.append(res)
        with open(self.journal, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.clock() - self.last >= self.every:
            self.flush()

    def flush(self) -> None:
        write_tables(self.out_dir, self.results, self.provenance, self.paths, self.student)
        self.last = self.clock()

    def finish(self) -> list[Path]:
        """Rewrite everything from memory (after the last learner process is gone, so
        nothing a kernel did to ``DIR`` meanwhile survives)."""
        atomic_write(
            self.journal,
            "".join(
                json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n"
                for r in sorted(self.results, key=lambda r: r["submission"])
            ),
        )
        skipped = write_all(
            self.out_dir, self.results, self.provenance, list(self.paths), self.student
        )
        return sorted(set(skipped) | set(self.skipped))


def read_results(out_dir: Path) -> list[dict]:
    """The results a run (or a shard) wrote to ``DIR/results.jsonl``."""
    out = []
    with open(Path(out_dir) / "results.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
    return out


# --------------------------------------------------------------------------- exports


def student_keys(
    ids: list[str], pattern: str | None = None, assignments: Collection[str] = ()
) -> dict[str, str]:
    """Who each submission belongs to, for a per-student export.

    With ``pattern`` (a regular expression), its first group (or whole match) in the
    submission id; without, the part of the id that tells submissions apart: the first
    folder below what all ids share (``alice`` in ``class/alice/02.ipynb``), else the
    file name without ``.ipynb`` (``alice`` in ``subs/alice.ipynb``). A folder named for
    one of ``assignments`` names no student (``alice`` in
    ``class/02_qkv_attention/alice.ipynb``)."""
    out = {}
    if pattern:
        rx = re.compile(pattern)
        for i in ids:
            m = rx.search(i)
            out[i] = (m.group(1) if m and m.groups() else m.group(0)) if m else i
        return out
    split = [i.split("/") for i in ids]
    common = 0
    if len(split) > 1:
        while all(len(p) > common + 1 for p in split) and len({p[common] for p in split}) == 1:
            common += 1
    for i, parts in zip(ids, split):
        rest = [p for p in parts[common:-1] if p not in assignments] + parts[-1:]
        key = rest[0] if len(rest) > 1 else rest[-1]
        out[i] = key[:-6] if key.endswith(".ipynb") else key
    return out


def lms_csv(results: list[dict], pattern: str | None = None) -> str:
    """One row per student, one column per assignment (its points), for a learning
    platform's grade import: Canvas (Grades → Import; students matched by ``SIS Login ID``)
    or Moodle (Grades → Import → CSV file; map ``SIS Login ID`` to the username or ID
    number). Submissions a key names twice (two files of one student for the same
    assignment) keep their best score. A row for a submission whose assignment is unknown
    is left out (it has no column)."""
    named = {r.get("assignment") or "" for r in results}
    keys = student_keys([r["submission"] for r in results], pattern, named)
    table: dict[str, dict[str, float]] = {}
    maxima: dict[str, float] = {}
    for res in results:
        a = res.get("assignment") or ""
        if not a:
            continue
        pts = sum(float(r["points"]) for r in res["rows"])
        maxima[a] = max(maxima.get(a, 0.0), sum(float(r["max_points"]) for r in res["rows"]))
        row = table.setdefault(keys[res["submission"]], {})
        row[a] = max(row.get(a, 0.0), pts)
    assignments = sorted(maxima)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        ["Student", "SIS Login ID", *(f"{a} ({_num(maxima[a])} points)" for a in assignments)]
    )
    for student in sorted(table):
        w.writerow(
            [cell(student), cell(student)]
            + [_num(table[student][a]) if a in table[student] else "" for a in assignments]
        )
    return buf.getvalue()


def gradescope_result(res: dict) -> dict:
    """A submission's result in the format of Gradescope's ``results.json``: a score and
    one test per exercise (its points, status and the feedback as plain text)."""
    tests = []
    for r in sorted(res["rows"], key=lambda r: exercise_key(r["exercise"])):
        name = f"{r['exercise']} {r.get('title', '')}".strip() or "this submission"
        tests.append(
            {
                "name": name,
                "score": float(r["points"]),
                "max_score": float(r["max_points"]),
                "status": "passed" if r["status"] == "passed" else "failed",
                "output": "\n".join(printable(str(f)) for f in [r["status"], *r["feedback"]]),
                "visibility": "visible",
            }
        )
    return {
        "score": sum(t["score"] for t in tests),
        "output": "\n".join(printable(str(n)) for n in res.get("notes", [])),
        "tests": tests,
    }


def write_exports(
    out_dir: Path, results: list[dict], which: list[str], pattern: str | None = None
) -> None:
    out_dir = Path(out_dir)
    if "lms" in which:
        atomic_write(out_dir / "lms.csv", lms_csv(results, pattern))
    if "gradescope" in which:
        paths = feedback_paths(out_dir / "gradescope", [r["submission"] for r in results])
        for res in results:
            path = paths[res["submission"]].relative_to(out_dir / "gradescope" / "feedback")
            path = (out_dir / "gradescope" / path).with_suffix(".json")
            if _inside(path, out_dir):
                atomic_write(path, json.dumps(gradescope_result(res), indent=1) + "\n")
        if len(results) == 1:  # Gradescope grades one submission at a time
            atomic_write(
                out_dir / "results.json", json.dumps(gradescope_result(results[0]), indent=1) + "\n"
            )


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
        for (a, e), c in sorted(per_ex.items(), key=lambda kv: (kv[0][0], exercise_key(kv[0][1]))):
            stat = " ".join(f"{k}:{c[k]}" for k in ICONS if c[k])
            lines.append(f"  {e:<7} {a:<22} {stat}")
    return "\n".join(lines)
