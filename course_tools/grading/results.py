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

import hashlib
import io
import json
import math
import os
import pickle
import stat
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.checks.core import (
    Call,
    Case,
    CaseResult,
    call_learner,
    cases_for,
    evaluate_case,
    get_exercise,
    judge_call,
    to_numpy,
)

MAX_RESULT_BYTES = 256 * 2**20
MAX_MESSAGE = 2000  # characters of a learner's exception message kept per case


def case_seed(seed: int, exercise_id: str, kind: str, fingerprint: str = "") -> int:
    """The seed of one exercise's visible or hidden cases: the grader's secret ``seed``
    mixed with the exercise and a ``fingerprint`` of the submission's code."""
    text = f"{int(seed)}:{exercise_id}:{kind}:{fingerprint}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def grader_cases(exercise_id: str, seed: int, fingerprint: str = "") -> list[Case]:
    """The grader's cases for one exercise: visible ones, then hidden ones (both drawn
    afresh, so a function fitted to the notebook's visible cases gains nothing)."""
    visible = cases_for(exercise_id, False, case_seed(seed, exercise_id, "visible", fingerprint))
    hidden = cases_for(exercise_id, True, case_seed(seed, exercise_id, "hidden", fingerprint))
    return list(visible) + list(hidden)


def _signature(x: Any, out: list) -> list:
    """A case's inputs as comparable parts (arrays by shape and bytes)."""
    x = to_numpy(x)
    if isinstance(x, np.ndarray):
        out.append((x.shape, str(x.dtype), x.tobytes()))
    elif isinstance(x, (list, tuple)):
        for e in x:
            _signature(e, out)
    elif isinstance(x, dict):
        for k in sorted(x, key=str):
            _signature(x[k], out)
    else:
        out.append(repr(x))
    return out


def fixed_cases(exercise_id: str, cases: list[Case], seed: int, fingerprint: str = "") -> set[int]:
    """The positions of ``cases`` whose inputs the seed does not change (the written-out
    cases, which the learners' edition shows): drawn once more from another seed, the
    cases that come out the same. ``--partial`` credit counts only the others."""
    other = grader_cases(exercise_id, int(seed) ^ 0x5EED5EED, fingerprint + ":fixed?")
    if len(other) != len(cases):
        return set()
    return {
        i
        for i, (a, b) in enumerate(zip(cases, other))
        if _signature((a.args, a.kwargs), []) == _signature((b.args, b.kwargs), [])
    }


def code_fingerprint(sources: list[str]) -> str:
    """A digest of the learner's code as it will run (every cell's source, in order)."""
    h = hashlib.sha256()
    for src in sources:
        h.update(hashlib.sha256(src.encode("utf-8", "surrogatepass")).digest())
    return h.hexdigest()


def write_inputs(cases: list[Case], path: str | Path, exercise_id: str | None = None) -> None:
    """The cases' inputs (names, arguments) for the kernel, and what the kernel needs to call
    the learner's function (its name, whether warnings fail a case): no seed, no expected
    output, nothing the kernel would have to import the exercise's checks for."""
    ex = get_exercise(exercise_id) if exercise_id else None
    data = {
        "target": ex.target if ex else "",
        "no_warnings": bool(ex.no_warnings) if ex else False,
        "keeps_inputs": bool(ex.keeps_inputs) if ex else False,
        "cases": [(c.name, c.args, c.kwargs) for c in cases],
    }
    Path(path).write_bytes(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))


# --------------------------------------------------------------------------- recording


def _flatten(x: Any, prefix: str, arrays: dict) -> Any:
    """Turn an output into JSON-able structure with arrays stored separately (a torch
    tensor marked as one, so that the grader judges what the notebook's check would)."""
    torch = sys.modules.get("torch")
    was_tensor = torch is not None and isinstance(x, torch.Tensor)
    x = to_numpy(x)
    if isinstance(x, (tuple, list)):
        return {
            "seq": type(x).__name__,
            "items": [_flatten(e, f"{prefix}_{i}", arrays) for i, e in enumerate(x)],
        }
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return {"repr": repr(x)[:200]}
        # a copy, made now: a function that reuses its output buffer (or returns a view
        # of its state) must be recorded as it returned, not as the next call leaves it
        arrays[prefix] = np.array(x, copy=True)
        return {"array": prefix, "torch": True} if was_tensor else {"array": prefix}
    if x is None or isinstance(x, (bool, int, float, str)):
        if isinstance(x, float) and not math.isfinite(x):
            return {"float": repr(x)}
        return {"value": x}
    return {"repr": f"{type(x).__name__}: {repr(x)[:200]}"}


def _unflatten(node: dict, arrays: Any) -> Any:
    if "seq" in node:
        items = [_unflatten(e, arrays) for e in node["items"]]
        return tuple(items) if node["seq"] == "tuple" else items
    if "array" in node:
        if node.get("torch") is True:
            import torch

            return torch.as_tensor(np.array(arrays[node["array"]]))
        return arrays[node["array"]]
    if "float" in node:
        return float(node["float"])
    if "value" in node:
        return node["value"]
    return _Unreadable(node.get("repr", "?"))


class _Loaded:
    """A recorded archive's arrays, each read once however many cases name it (a record
    naming one 100 MB array 20 times costs 100 MB, not 2 GB)."""

    def __init__(self, archive):
        self.archive, self.cache = archive, {}

    def __getitem__(self, name: str):
        if name not in self.cache:
            self.cache[name] = self.archive[name]
        return self.cache[name]


class _Unreadable:
    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def harvest(exercise_id: str, fn: Any, inputs: str | Path, out_dir: str | Path) -> None:
    """Run inside the student's kernel: record the learner's outputs, decide nothing.

    Reads the cases' inputs from ``inputs`` (written by :func:`write_inputs`) and writes
    ``<out_dir>/<id>.json`` (per case, what the call did: :class:`~course_lib.checks.core.Call`)
    and ``<out_dir>/<id>.npz`` (arrays). It needs no exercise: the kernel in the grader's
    sandbox has no chapter checks, so no reference and no hidden-case generator to reach.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(inputs, "rb") as f:
        spec = pickle.load(f)
    record: dict[str, Any] = {"exercise": str(exercise_id), "cases": []}
    arrays: dict[str, np.ndarray] = {}
    if fn is None or not callable(fn):
        record["missing"] = f"no function named `{spec['target']}` was defined"
    else:
        for i, (name, args, kwargs) in enumerate(spec["cases"]):
            call = call_learner(
                fn, Case(name, args, kwargs), spec["no_warnings"], spec.get("keeps_inputs", False)
            )
            entry: dict[str, Any] = {"name": name}
            if call.raised or call.exit is not None:
                entry["raised"] = {
                    "type": call.raised[:200],
                    "message": call.message[:MAX_MESSAGE],
                    "frames": call.frames[:MAX_MESSAGE],
                    "not_implemented": call.not_implemented,
                    "exit": None if call.exit is None else call.exit[:200],
                }
            else:
                if call.warning:
                    entry["warning"] = call.warning[:MAX_MESSAGE]
                if call.changed:
                    entry["changed"] = call.changed[:MAX_MESSAGE]
                try:
                    entry["output"] = _flatten(call.output, f"c{i}", arrays)
                except Exception as err:  # pragma: no cover - defensive
                    entry["raised"] = {"type": "", "message": f"could not record: {err}"}
            record["cases"].append(entry)
    # (mypy matches **arrays against allow_pickle, which numpy >= 2.1's savez has too; the
    # keys are case names. unused-ignore: older numpy has no such parameter.)
    np.savez(out / f"{exercise_id}.npz", **arrays)  # type: ignore[arg-type, unused-ignore]
    (out / f"{exercise_id}.json").write_text(json.dumps(record))


def _recorded_call(entry: dict, arrays) -> Call:
    """The :class:`Call` a harvest recorded (every field checked: the kernel wrote it)."""

    def text(x: Any) -> str:
        return x[:MAX_MESSAGE] if isinstance(x, str) else ""

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
        output=_unflatten(entry["output"], arrays),
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
        return f"{name} unpacks to {unpacked} bytes, over the {max_bytes} byte limit"
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
            call = _recorded_call(entry, arrays)
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
    inputs the seed does not change (:func:`fixed_cases`): partial credit is the share of
    the *other* cases passed times the share of these passed, so a table of answers to the
    written-out cases earns nothing and a failed exercise never earns full marks."""
    ex = get_exercise(exercise_id)
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
