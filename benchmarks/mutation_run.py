"""Run each lecture with one wrong library function and see which assertion stops it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mutation_run.py
        [--lectures 00 03 ...] [--mutants NAME ...] [--no-control] [--out PATH]

The lectures are the course's test suite only if each of their assertions fails when its
claim is false. ``course_tools/mutants.py`` declares, per lecture, plausible wrong versions
of the ``course_lib`` functions it relies on (attention without its scale, a mask of the
wrong sign, RoPE with the other pairing, ...). For every lecture and mutant this script
executes a copy of the notebook in a fresh kernel (nbclient, one kernel at a time, the CI
budget: ``COURSE_BUDGET=ci``; Triton's mode as ``course_lib.env.setup()`` decides), with one
cell inserted after the Colab install cell that applies the mutant
(``course_tools.mutants.apply``). The notebook in ``notebooks/`` is never written. A run is

* ``killed`` when it stops at an ``AssertionError`` of one of the lecture's own ``assert``
  statements (or of an ``assert_*`` call it makes, such as ``torch.testing.assert_close``):
  the cell, the statement, its message and the seconds from the kernel's start are recorded;
* ``crashed`` when it stops at any other error (a shape error, an exception inside the
  library, a timeout): a crash is not a kill;
* ``survived`` when every cell runs.

Each lecture also runs once without a mutant, the control, which must pass. The results go
to JSON (default ``benchmarks/results/mutations.json``) with the machine, versions and date;
a run of some lectures or mutants updates their entries and keeps the others, and the totals
are recomputed over the whole file. Times are reported, never asserted.
"""

import argparse
import ast
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: course_tools next to it
    sys.path.insert(0, str(ROOT))

from course_tools import mutants as M  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
LECTURES = tuple(f"{i:02d}" for i in range(12))  # every lecture, 00-11
CELL_TIMEOUT_S = 900
PROBE_MARK = "MUTATION-RUN-PROBE "

# what the inserted cell runs: a declared mutant by name, or (tests) one given in full
INJECTED_BY_NAME = """# mutation run: {target} replaced by the mutant {name!r}
from course_tools import mutants as _mutants

_mutants.apply(_mutants.find({name!r}, {lecture!r}))
"""
INJECTED_IN_FULL = """# mutation run: {target} replaced by the mutant {name!r}
from course_tools import mutants as _mutants

_mutants.apply(_mutants.Mutant({name!r}, {lecture!r}, {target!r}, {replacement!r}, {claim!r}))
"""
# run in the kernel after a cell failed: the exception and its frames, as JSON on stdout
PROBE = f"""import json as _json, linecache as _lc, os as _os, sys as _sys, traceback as _tb
_value = getattr(_sys, "last_value", None)
_frames = _tb.extract_tb(getattr(_sys, "last_traceback", None)) if _value is not None else []
print({PROBE_MARK!r} + _json.dumps({{
    "type": type(_value).__name__, "assertion_error": isinstance(_value, AssertionError),
    "message": str(_value),
    "frames": [{{"file": f.filename, "line": f.lineno, "in_cell": not _os.path.exists(f.filename),
                "source": "".join(_lc.getlines(f.filename)) if not _os.path.exists(f.filename)
                else ""}} for f in _frames],
}}))
"""


@dataclass
class Outcome:
    """How one run of a lecture ended."""

    status: str  # killed, crashed, survived; the control: passed or failed
    seconds: float
    cell: int | None = None  # index in the notebook file (the inserted cell not counted)
    assertion: str | None = None  # the assert statement that stopped it
    message: str | None = None  # its message, or the other error's
    error: str | None = None  # the exception's type


def lecture_path(lecture: str) -> Path:
    """``notebooks/NN_*.ipynb`` of a lecture ``"NN"``."""
    (path,) = sorted((ROOT / "notebooks").glob(f"{lecture}_*.ipynb"))
    return path


def injection_index(nb) -> int:
    """Where the mutant's cell goes: right after the Colab install cell, else first."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            return i + 1 if "google.colab" in cell.source else i
    return 0


def injection_source(mutant: M.Mutant) -> str:
    """The inserted cell: the mutant by name when it is declared, otherwise in full (its
    replacement must then be source text)."""
    fields = asdict(mutant)
    try:
        declared = M.find(mutant.name, mutant.lecture) == mutant
    except KeyError:
        declared = False
    if declared:
        return INJECTED_BY_NAME.format(**fields)
    if not isinstance(mutant.replacement, str):
        raise ValueError(f"{mutant.name}: an undeclared mutant needs its replacement as source")
    return INJECTED_IN_FULL.format(**fields)


def assertion_at(source: str, line: int) -> tuple[str, str] | None:
    """``(kind, text)`` of the assertion on ``line`` of ``source``: kind ``"assert"`` for an
    ``assert`` statement, ``"call"`` for a call of a function named ``assert*``; None when
    that line holds neither (or the source does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = None
    for node in ast.walk(tree):
        if not getattr(node, "lineno", 0) <= line <= getattr(node, "end_lineno", 0):
            continue
        if isinstance(node, ast.Assert):
            found = ("assert", node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and found is None:
            func = node.value.func
            name = getattr(func, "attr", getattr(func, "id", ""))
            if name.startswith("assert"):
                found = ("call", node)
    if found is None:
        return None
    text = ast.get_source_segment(source, found[1]) or ""
    return found[0], " ".join(text.split())


def classify(failure: dict, cell: int, seconds: float) -> Outcome:
    """A failed cell as an outcome: killed by one of the lecture's assertions, or crashed."""
    frames = failure.get("frames", [])
    in_cell = [f for f in frames if f["in_cell"]]
    error, message = failure.get("type"), failure.get("message")
    if failure.get("assertion_error") and in_cell:
        last = in_cell[-1]
        found = assertion_at(last["source"], last["line"])
        if found is not None:
            kind, text = found
            innermost = frames[-1] is last
            if kind == "call" or innermost:
                return Outcome("killed", seconds, cell, text, message, error)
    return Outcome("crashed", seconds, cell, None, message, error)


def _probe(client: NotebookClient) -> dict:
    """What the kernel knows about the exception that stopped the last cell."""
    cell = nbformat.v4.new_code_cell(PROBE)
    client.nb.cells.append(cell)  # nbclient writes each executed cell back by its index
    client.execute_cell(cell, len(client.nb.cells) - 1)
    for out in cell.outputs:
        text = out.get("text", "")
        if PROBE_MARK in text:
            return json.loads(text.split(PROBE_MARK, 1)[1].splitlines()[0])
    return {"type": "unknown", "frames": []}


def run_notebook(nb, path: Path, *, inserted_at: int | None = None) -> Outcome:
    """Execute ``nb`` (a copy; ``path`` gives the kernel's working folder) cell by cell and
    say how it ended. ``inserted_at``: the index of an inserted cell, so that the recorded
    cell is the file's index."""
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.reset_execution_trackers()
    t0 = time.perf_counter()
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            in_file = index - (inserted_at is not None and index > inserted_at)
            try:
                client.execute_cell(cell, index)
            except CellExecutionError:
                seconds = time.perf_counter() - t0
                return classify(_probe(client), in_file, round(seconds, 1))
            except (CellTimeoutError, DeadKernelError) as err:
                seconds = round(time.perf_counter() - t0, 1)
                return Outcome(
                    "crashed", seconds, in_file, None, str(err)[:300], type(err).__name__
                )
    return Outcome("survived", round(time.perf_counter() - t0, 1))


def run_lecture(lecture: str, mutant: M.Mutant | None = None, path: Path | None = None) -> Outcome:
    """One run of a lecture (``path`` overrides ``notebooks/NN_*.ipynb``), with a mutant or
    as the control (then ``survived`` reads ``passed``, and any stop ``failed``)."""
    path = path or lecture_path(lecture)
    nb = nbformat.read(path, as_version=4)
    if mutant is None:
        outcome = run_notebook(nb, path)
        outcome.status = "passed" if outcome.status == "survived" else "failed"
        return outcome
    at = injection_index(nb)
    nb.cells.insert(at, nbformat.v4.new_code_cell(injection_source(mutant)))
    return run_notebook(nb, path, inserted_at=at)


def _row(outcome: Outcome, mutant: M.Mutant | None = None) -> dict:
    row = {k: v for k, v in asdict(outcome).items() if v is not None}
    if mutant is not None:
        row = {"target": mutant.target, "claim": mutant.claim, **row}
    return {**row, "date": time.strftime("%Y-%m-%d")}


def _say(outcome: Outcome, lecture: str, name: str) -> None:
    where = f"cell {outcome.cell}: " if outcome.cell is not None else ""
    what = outcome.assertion or (f"{outcome.error}: {outcome.message}" if outcome.error else "")
    print(f"{outcome.seconds:7.1f} s  {outcome.status:8s} {lecture} {name:34s} {where}{what[:90]}")
    sys.stdout.flush()


def run_matrix(lectures, names, control: bool, results: dict) -> None:
    """Run the selected lectures and mutants, writing each outcome into ``results``."""
    for lecture in lectures:
        entry = results.setdefault(lecture, {})
        rows = entry.pop("mutants", {})  # kept, and listed after the control
        entry["notebook"] = str(lecture_path(lecture).relative_to(ROOT))
        if control:
            outcome = run_lecture(lecture)
            entry["control"] = _row(outcome)
            _say(outcome, lecture, "(control, no mutant)")
        entry["mutants"] = rows
        for mutant in M.by_lecture(lecture):
            if names and mutant.name not in names:
                continue
            outcome = run_lecture(lecture, mutant)
            entry["mutants"][mutant.name] = _row(outcome, mutant)
            _say(outcome, lecture, mutant.name)


def totals(lectures: dict) -> dict:
    """Counts and seconds over every recorded lecture and mutant."""
    rows = [r for e in lectures.values() for r in e.get("mutants", {}).values()]
    controls = [e["control"] for e in lectures.values() if "control" in e]
    count = {s: sum(r["status"] == s for r in rows) for s in ("killed", "crashed", "survived")}
    return {
        "lectures": len(lectures),
        "mutants": len(rows),
        **count,
        "controls_passed": sum(c["status"] == "passed" for c in controls),
        "mutant_seconds": round(sum(r["seconds"] for r in rows), 1),
        "control_seconds": round(sum(c["seconds"] for c in controls), 1),
    }


def machine() -> dict:
    """Where the run happened: the machine, the versions, the budget."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()}), no GPU"
        if not torch.cuda.is_available()
        else torch.cuda.get_device_name(0),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "course_budget": os.environ["COURSE_BUDGET"],
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lectures", nargs="+", default=list(LECTURES), metavar="NN")
    parser.add_argument("--mutants", nargs="+", metavar="NAME", help="only these mutants")
    parser.add_argument("--no-control", action="store_true", help="skip the unmutated runs")
    parser.add_argument("--out", type=Path, default=RESULTS / "mutations.json")
    args = parser.parse_args(argv)
    known = {m.name for m in M.MUTANTS}
    if args.mutants and not set(args.mutants) <= known:
        parser.error(f"unknown mutants: {sorted(set(args.mutants) - known)}")
    os.environ["COURSE_BUDGET"] = "ci"  # the kernels inherit it
    from course_lib import env

    env.setup(quiet=True, plots=False)  # Triton's mode, which the kernels inherit
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    lectures = report.get("lectures", {})
    run_matrix(args.lectures, args.mutants, not args.no_control, lectures)
    report = {
        "what": "each lecture run in a fresh kernel with one mutant of course_lib applied; "
        "killed = stopped by one of the lecture's own assertions",
        # every run that wrote into this file, oldest first (a run adds its lectures' rows)
        "commands": [
            *report.get("commands", [report["command"]] if "command" in report else []),
            "benchmarks/mutation_run.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        ],
        **machine(),
        "lectures": dict(sorted(lectures.items())),
        "totals": totals(lectures),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    t = report["totals"]
    print(f"{t['killed']} of {t['mutants']} mutants killed, {t['crashed']} crashed, "
          f"{t['survived']} survived; wrote {args.out}")  # fmt: skip


if __name__ == "__main__":
    main()
