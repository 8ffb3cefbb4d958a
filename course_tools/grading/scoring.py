"""What a harvest cell records in the learner's kernel, and the verdict the grader draws.

* :func:`grader_cases` runs *in the grader's process*: it draws an exercise's visible and
  hidden cases from the secret seed and a fingerprint of the submission's code, and
  :func:`write_inputs` writes only their inputs to a file the kernel may read. Neither the
  seed nor the references ever reach the kernel, and a re-grade of changed code (a table
  of answers precomputed for last time's inputs, say) gets other inputs.
* :func:`harvest` runs *inside the learner's kernel* (the rebuilt notebook's harvest cells
  call it): it reads the inputs, runs the learner's function on each and only records the
  outputs (``<id>.json`` and ``<id>.npz``); it decides nothing.
* :func:`score` runs *in the grader's own process*: it computes the references on its own
  copy of the cases and judges the recorded outputs with the same comparison as the
  notebook's ``check()`` (:func:`course_lib.checks.core.evaluate_case`), so code in a
  submission cannot turn a failure into a pass other than by computing correct answers.
"""

from __future__ import annotations

import io
import json
import os
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.checks.core import (
    Call,
    Case,
    CaseResult,
    evaluate_case,
    get_exercise,
    judge_call,
)

from .cases import fixed_cases
from .harvest import MAX_MESSAGE, unflatten
from .protocol import MAX_RECORD_BYTES, MAX_RESULT_BYTES

# --------------------------------------------------------------------------- recording


def _recorded_call(entry: dict, arrays, rules: frozenset[str] = frozenset()) -> Call:
    """The :class:`Call` a harvest recorded (every field checked: the kernel wrote it; a
    broken rule counts only when it is one of the exercise's ``rules``)."""

    def text(x: Any) -> str:
        return x[:MAX_MESSAGE] if isinstance(x, str) else ""

    broke = entry.get("broke")
    if isinstance(broke, dict) and broke.get("rule") in rules:  # the kernel saw one broken
        return Call(broke=text(broke.get("rule")), how=text(broke.get("how")) or "a rule")
    raised = entry.get("raised")
    if isinstance(raised, dict):
        if not raised.get("type") and raised.get("exit") is None:
            raise ValueError(text(raised.get("message")) or "a case recorded nothing")
        return Call(
            raised=text(raised.get("type")),
            message=text(raised.get("message")),
            frames=text(raised.get("frames")),
            not_implemented=raised.get("not_implemented") is True,
            exit=text(raised["exit"]) if isinstance(raised.get("exit"), str) else None,
        )
    return Call(
        output=unflatten(entry["output"], arrays),
        warning=text(entry.get("warning")),
        changed=text(entry.get("changed")),
    )


# --------------------------------------------------------------------------- judging


@dataclass
class Verdict:
    exercise: str
    points: float
    max_points: int
    status: str  # passed | failed | error | timeout | missing
    feedback: list[str]
    # the keys of the checks' own diagnoses ("02.1/unscaled"), made in the grader's process
    # from the recorded outputs: never text from the learner's kernel (the class report's list)
    diagnoses: list[str] = field(default_factory=list)
    # the rules of the statement the function broke ("03.2/no-softmax"), and how
    broke: list[str] = field(default_factory=list)
    # where the function checked lives when it is the course library's own (the kernel says)
    origin: str = ""


def read_result_file(path: Path) -> tuple[bytes | None, str | None]:
    """A result file's bytes, read through one descriptor: ``(data, None)``, ``(None,
    None)`` when there is none, or ``(None, why)``. It must be a plain file (not a link, a
    FIFO or a device) of sane size, and an archive must not unpack to too much. Opening
    without following links and without blocking, then checking what was opened, leaves no
    moment in which a FIFO renamed over the file could stall the grader."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None, None
    except OSError:  # a link (ELOOP), or something that cannot be opened to read
        return None, f"{path.name} is not a regular file: results were tampered with"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, f"{path.name} is not a regular file: results were tampered with"
        if st.st_size > MAX_RESULT_BYTES:
            return (
                None,
                f"{path.name} is {st.st_size} bytes, over the {MAX_RESULT_BYTES} byte limit",
            )
        data = f.read(MAX_RESULT_BYTES + 1)
    if len(data) > MAX_RESULT_BYTES:
        return None, f"{path.name} grew past the {MAX_RESULT_BYTES} byte limit while read"
    if path.suffix == ".npz":  # a zip: bound what it unpacks to, not its size on disk
        problem = zip_problem(data, name=path.name)
        if problem:
            return None, problem
    return data, None


MAX_ZIP_ENTRIES = 10_000  # a case records a few arrays; the course's largest is far below
_EOCD, _EOCD64, _LOCATOR64 = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"


def zip_entries(path: str | Path | bytes) -> tuple[int, int]:
    """(entries, central directory bytes) of a zip archive, read from its end record (and
    the zip64 one), before anything parses the central directory. ValueError when there
    is no end record."""
    import struct

    with io.BytesIO(path) if isinstance(path, bytes) else open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        tail_len = min(size, 22 + 65535)
        f.seek(size - tail_len)
        tail = f.read(tail_len)
        at = tail.rfind(_EOCD)
        if at < 0 or len(tail) - at < 22:
            raise ValueError("no end-of-archive record")
        entries, cd_size = struct.unpack("<10xHI4x", tail[at : at + 20])
        if entries == 0xFFFF or cd_size == 0xFFFFFFFF:  # zip64: the counts are elsewhere
            loc = tail[at - 20 : at] if at >= 20 else b""
            if not loc.startswith(_LOCATOR64):
                raise ValueError("a zip64 archive without its locator")
            (offset,) = struct.unpack("<8xQ4x", loc[:20])
            if offset > size - 56:
                raise ValueError("a zip64 end record outside the file")
            f.seek(offset)
            rec = f.read(56)
            if not rec.startswith(_EOCD64):
                raise ValueError("a broken zip64 end record")
            entries, cd_size = struct.unpack("<32xQQ", rec[:48])
    return entries, cd_size


def zip_problem(
    path: str | Path | bytes,
    max_entries: int = MAX_ZIP_ENTRIES,
    max_bytes: int | None = None,
    name: str = "",
) -> str | None:
    """Why the recorded archive at ``path`` must not be opened (too many entries, a
    central directory too large, or it unpacks to more than ``max_bytes``), or None. The
    counts come from the end record: an archive listing millions of entries costs a few
    bytes read, not the memory and minutes of parsing them. ``path`` may be the archive's
    bytes (``name`` then names it)."""
    name = name or (Path(path).name if not isinstance(path, bytes) else "the archive")
    max_bytes = MAX_RESULT_BYTES if max_bytes is None else max_bytes
    try:
        entries, cd_size = zip_entries(path)
    except (OSError, ValueError) as err:
        return f"the recorded outputs ({name}) are not a readable archive ({err})"
    if entries > max_entries or cd_size > max_entries * 1024:
        return (
            f"the recorded outputs ({name}) list {entries} entries, more than the "
            f"{max_entries} the grader reads"
        )
    try:
        with zipfile.ZipFile(io.BytesIO(path) if isinstance(path, bytes) else path) as zf:
            unpacked = sum(i.file_size for i in zf.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        return f"the recorded outputs ({name}) are not a readable archive ({err})"
    if unpacked > max_bytes:
        return (
            f"{name} unpacks to {unpacked / 2**20:.1f} MB, more than the "
            f"{max_bytes / 2**20:.0f} MB the grader reads"
        )
    return None


def _judge(ex, cases: list[Case], recorded: list[dict], arrays, fixed: set[int] | None):
    """Each recorded case against the reference: (feedback, passed, passed of the cases
    drawn from the seed, not implemented, the checks' diagnoses). The feedback on a call that
    raised or warned is composed here, in the grader's process, from what the kernel recorded;
    a diagnosis is the key the checks set (``CaseResult.cause``), never text to re-read."""
    feedback, passed, not_impl, diagnoses = [], 0, 0, []
    fixed = set(fixed or ()) if len(set(fixed or ())) < len(cases) else set()
    drawn_passed = 0
    for i, (case, entry) in enumerate(zip(cases, recorded)):
        try:
            call = _recorded_call(entry, arrays, frozenset(r.name for r in ex.rules))
            got, result = judge_call(ex, case, call)
            if result is None:
                result = evaluate_case(ex, case, got)
        except MemoryError:
            raise
        except Exception as err:
            result = CaseResult(case.name, False, f"could not compare: {err}")
        if result.passed:
            passed += 1
            drawn_passed += i not in fixed
            feedback.append(f"✓ {case.name}")
            continue
        not_impl += result.not_implemented
        feedback.append(f"✗ {case.name}: {result.message[: 2 * MAX_MESSAGE]}")
        if "/" in result.cause:  # a named diagnosis ("02.1/unscaled"), not the general hint
            diagnoses.append(result.cause)
    return feedback, passed, drawn_passed, not_impl, diagnoses


def _broken_rules(ex, recorded: list[dict], feedback: list[str], diagnoses: list[str]):
    """The verdict of a function that broke a rule of the statement on some case (the
    checks' diagnosis is the rule's key: ``03.2/no-softmax``), else None."""
    rules = {f"{ex.id}/{r.name}" for r in ex.rules}
    broke = sorted({d for d in diagnoses if d in rules})
    if not broke:
        return None
    how = sorted(
        {str(e["broke"].get("how", ""))[:300] for e in recorded if isinstance(e.get("broke"), dict)}
    )
    why = f"no points: the function breaks the statement's rules ({', '.join(broke)})"
    seen = [f"{key}: {h}" for key in broke for h in how[:1]] or broke
    return Verdict(ex.id, 0, ex.points, "failed", feedback + [why], diagnoses, seen)


def score(
    exercise_id: str,
    cases: list[Case],
    out_dir: str | Path,
    partial: bool = False,
    fixed: set[int] | None = None,
) -> Verdict:
    """Run in the grader's own process: compute the references on ``cases`` (the grader's
    own copy, never read back from the kernel) and judge the recorded outputs.

    ``partial``: an exercise that fails some cases earns its points times the share of
    cases passed (rounded to 0.01); otherwise all or nothing. ``fixed``: the cases whose
    inputs are written out (by default the ones the exercise declares:
    :func:`course_tools.grading.cases.fixed_cases`): partial credit is the share of
    the *other* cases passed times the share of these passed, so a table of answers to the
    written-out cases earns nothing and a failed exercise never earns full marks."""
    ex = get_exercise(exercise_id)
    fixed = fixed_cases(cases) if fixed is None else fixed
    out = Path(out_dir)
    jpath, npath = out / f"{ex.id}.json", out / f"{ex.id}.npz"
    if not jpath.exists():
        return Verdict(
            ex.id,
            0,
            ex.points,
            "error",
            [
                "the check for this exercise never ran (an earlier cell failed, the "
                "kernel died or the time limit was reached)"
            ],
        )
    (jdata, jproblem), (ndata, nproblem) = read_result_file(jpath), read_result_file(npath)
    if jproblem or nproblem:
        return Verdict(ex.id, 0, ex.points, "error", [jproblem or nproblem or ""])
    if jdata is None:  # gone since it was seen: as if the check never ran
        return Verdict(ex.id, 0, ex.points, "error", ["the check's results disappeared"])
    try:
        record = json.loads(jdata.decode("utf-8"))
        arrays = _Loaded(np.load(io.BytesIO(ndata), allow_pickle=False) if ndata else {})
    except MemoryError:
        raise  # the grader's own limit for one submission: the worker says so
    except Exception as err:
        return Verdict(ex.id, 0, ex.points, "error", [f"unreadable results: {err}"])
    verdict = _verdict_of(ex, cases, record, arrays, partial, fixed)
    origin = record.get("origin") if isinstance(record, dict) else None
    if isinstance(origin, str) and origin.startswith("course_lib/"):
        verdict.origin = origin[:300]
    return verdict


def _verdict_of(ex, cases: list[Case], record, arrays, partial: bool, fixed) -> Verdict:
    """The verdict on a readable record of the cases (see :func:`score`)."""
    if isinstance(record, dict) and record.get("missing"):
        return Verdict(ex.id, 0, ex.points, "missing", [str(record["missing"])[:MAX_MESSAGE]])
    recorded = record.get("cases", []) if isinstance(record, dict) else None
    if not isinstance(recorded, list) or not all(isinstance(e, dict) for e in recorded):
        return Verdict(ex.id, 0, ex.points, "error", ["unreadable results: not a list of cases"])
    if len(recorded) != len(cases):
        return Verdict(
            ex.id,
            0,
            ex.points,
            "error",
            [f"expected results for {len(cases)} cases, found {len(recorded)}"],
        )
    feedback, passed, drawn_passed, not_impl, diagnoses = _judge(ex, cases, recorded, arrays, fixed)
    broken = _broken_rules(ex, recorded, feedback, diagnoses)
    if broken is not None:  # a rule of the statement broken: no points, whatever else passed
        return broken
    fixed = set(fixed or ()) if len(set(fixed or ())) < len(cases) else set()
    ran = sum(1 for entry in recorded if "raised" not in entry)  # cases that returned
    if passed == len(cases):
        return Verdict(ex.id, ex.points, ex.points, "passed", feedback)
    if not_impl and not ran:  # missing only when no case ran the learner's code to a result
        return Verdict(ex.id, 0, ex.points, "missing", ["not implemented"] + feedback)
    drawn = len(cases) - len(fixed)
    # the drawn cases' share, times the written-out cases' share: a table of the written-out
    # answers earns nothing, and a failed exercise never earns its full points
    fixed_share = (passed - drawn_passed) / len(fixed) if fixed else 1.0
    points = round(ex.points * drawn_passed / drawn * fixed_share, 2) if partial and drawn else 0
    points = min(points, round(ex.points - 0.01, 2))  # rounding never makes a failure full marks
    if points:
        written = (
            f" and {passed - drawn_passed} of the {len(fixed)} written-out cases" if fixed else ""
        )
        of_drawn = " drawn from the grader's seed" if fixed else ""
        feedback.append(
            f"partial credit: {drawn_passed} of {drawn} cases{of_drawn} passed{written}; "
            f"{passed} of {len(cases)} in all"
        )
    return Verdict(ex.id, points, ex.points, "failed", feedback, diagnoses)


def results_problem(folder: Path) -> str | None:
    """Why the recorded outputs in ``folder`` must not be read, or None.

    The kernel wrote them, so they are untrusted: only regular files (no links, pipes or
    devices, which could make the grader read forever) of a bounded total size.
    """
    import stat

    if not folder.exists():
        return None
    if folder.is_symlink() or not folder.is_dir():
        return "the results folder was replaced by something else"
    import zipfile

    total = 0
    for n, f in enumerate(folder.iterdir()):
        if n >= 100:
            return "the results folder holds more than 100 files"
        st = os.lstat(f)
        if not stat.S_ISREG(st.st_mode):
            return f"the results folder holds a non-file ({f.name})"
        total += st.st_size
        if f.suffix == ".json" and st.st_size > MAX_RECORD_BYTES:
            return (
                f"the recorded results ({f.name}) take {st.st_size / 2**20:.0f} MB, more "
                f"than the {MAX_RECORD_BYTES / 2**20:.0f} MB the grader reads"
            )
        if f.suffix == ".npz":  # a zip: what it unpacks to counts, not its size on disk
            problem = zip_problem(f)  # (its entries counted from the end record first)
            if problem:
                return problem
            with zipfile.ZipFile(f) as zf:
                total += sum(i.file_size for i in zf.infolist()) - st.st_size
    if total > MAX_RESULT_BYTES:
        return (
            f"your function's outputs take {total / 2**20:.0f} MB, more than the "
            f"{MAX_RESULT_BYTES / 2**20:.0f} MB the grader reads"
        )
    return None


def _harvest_failure(h, cell_timeout) -> tuple[str, float, list[str]] | None:
    """The verdict when the harvest cell itself timed out or its kernel died."""
    if h is None:
        return None
    if h.status == "timeout":
        if "total time limit" in h.message:
            why = (
                "your function was still running when the notebook reached "
                f"its total time limit ({h.message})"
            )
        else:
            why = (
                f"your function did not finish within {cell_timeout:g} s on the "
                "grader's tests: an infinite loop, or far too slow"
            )
        return "timeout", 0, [why]
    if h.status == "died":
        if "was stopped" in h.message or "connection" in h.message:
            return "error", 0, [f"while your function ran on the grader's tests, {h.message}"]
        return (
            "error",
            0,
            [
                "the kernel crashed while your function ran on the grader's tests "
                "(os._exit, sys.exit from native code, a segfault, or running out "
                "of memory)"
            ],
        )
    return None


def _solution_cell_failure(outcomes, sol_cells) -> tuple[str, float, list[str]] | None:
    """The verdict when one of the exercise's own cells hung or crashed its kernel."""
    for i in sol_cells:
        o = outcomes[i]
        if o.status == "timeout":
            return (
                "timeout",
                0,
                [
                    f"your solution cell itself did not finish ({o.message}): "
                    "is there an infinite loop outside the function?"
                ],
            )
        if o.status == "died" and ("was stopped" in o.message or "connection" in o.message):
            return "error", 0, [f"in your solution cell: {o.message}"]
        if o.status == "died":
            return (
                "error",
                0,
                [
                    "the kernel crashed while your solution cell ran (os._exit, a "
                    "signal, a crash in native code, or out of memory)"
                ],
            )
    return None


def _scored_verdict(ex, v, h, errored) -> tuple[str, float, list[str]]:
    """The verdict from the score of the recorded outputs, with the cells' errors."""
    if (
        errored
        and v.status in ("missing", "error", "failed")
        and not any("not implemented" in f for f in v.feedback)
    ):
        # the cell raised (a NameError, say) and the function did not pass: `error`, as the
        # guide's table says, with the exception named first
        return "error", 0, [f"your solution cell raised {errored[-1].message}"] + v.feedback
    if v.status == "error" and h is not None and h.status == "error":
        if h.message.startswith(("SystemExit", "KeyboardInterrupt")):
            return (
                "error",
                0,
                [
                    f"your function stopped the program ({h.message}): it must "
                    "return its result, not call sys.exit() or exit()"
                ],
            )
        return "error", 0, [f"the check of this exercise could not run: {h.message}"] + v.feedback
    if v.status == "missing" and v.feedback[:1] == ["not implemented"]:
        rest = [f for f in v.feedback[1:] if not f.endswith("not implemented yet")]
        return (
            "missing",
            0,
            [
                f"not implemented yet: `{ex.target}` still raises "
                "NotImplementedError (the placeholder line)"
            ]
            + rest,
        )
    return v.status, v.points, v.feedback


def verdict_for(ex, plan, outcomes, verdicts, cell_timeout) -> tuple[str, float, list[str]]:
    """Combine the score of the recorded outputs with what happened to the cells; a
    function whose code uses what the statement forbids (``plan.breaches``) earns nothing."""
    status, points, feedback = _verdict_for(ex, plan, outcomes, verdicts, cell_timeout)
    breaches = getattr(plan, "breaches", {}).get(ex.id)
    if breaches and status in ("passed", "failed"):
        why = (
            "no points: the statement forbids what your function uses: "
            + ", ".join(breaches[:5])
            + " (see the exercise's statement)"
        )
        return "failed", 0, [why] + [f for f in feedback if not f.startswith("partial credit")]
    return status, points, feedback


def _verdict_for(ex, plan, outcomes, verdicts, cell_timeout) -> tuple[str, float, list[str]]:
    ex_id = ex.id
    sol_cells = [
        i for i, (r, e) in enumerate(plan.roles) if r in ("solution", "learner") and e == ex_id
    ]
    harvest = [i for i, (r, e) in enumerate(plan.roles) if r == "harvest" and e == ex_id]
    v = verdicts.get(ex_id)
    errored = [outcomes[i] for i in sol_cells if outcomes[i].status == "error"]
    if v is not None and v.status == "passed":
        # the check saw a working definition; the exception the cell raised is still named
        raised = [
            f"your solution cell raised {o.message}: the function it defined passed, but "
            "a top-to-bottom run of your notebook stops at that cell"
            for o in errored[-1:]
        ]
        return "passed", v.points, raised + v.feedback
    h = outcomes[harvest[0]] if harvest else None
    failed = _harvest_failure(h, cell_timeout) or _solution_cell_failure(outcomes, sol_cells)
    if failed:
        return failed
    if h is not None and h.status == "skipped":
        status = "timeout" if "time limit" in h.message else "error"
        return status, 0, [f"your function was never checked: {h.message}"]
    if v is None:
        msg = h.message if h is not None and h.message else "no results were recorded"
        extra = [f"your solution cell raised {errored[-1].message}"] if errored else []
        return "error", 0, extra + [f"the check of this exercise did not run: {msg}"]
    return _scored_verdict(ex, v, h, errored)


class _Loaded:
    """A recorded archive's arrays, each read once however many cases name it (a record
    naming one 100 MB array 20 times costs 100 MB, not 2 GB)."""

    def __init__(self, archive):
        self.archive, self.cache = archive, {}

    def __getitem__(self, name: str):
        if name not in self.cache:
            self.cache[name] = self.archive[name]
        return self.cache[name]
