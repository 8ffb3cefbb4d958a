"""benchmarks/mutation_run.py: the lectures' assertions can fail.

Fast: how a stopped cell is classified (one of the lecture's assertions kills; any other
error is a crash); a tiny synthetic lecture in a real kernel (its control passes, its mutant
is killed, an error of another kind is a crash); and the recorded run,
``benchmarks/results/mutations.json``: every mutant of lectures 00-11 killed, at least two
per lecture, the same mutants as course_tools/mutants.py declares. (The mutants themselves,
their declarations and their injection in this process, are tested in
tests/course_tools/test_mutants.py.)

Slow (``make test``): for each lecture 00-11, the mutant the recorded run killed fastest, run
again through the script's own code and killed by one of the lecture's assertions. Measured
budget: the sum of those twelve kill times in mutations.json (kernel start included) is 56 s
(2026-12-04, 2 CPUs, load average about 1.5; chapter 10's, which loads the real model, is
20 s of it); a busy machine takes longer.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from scripts import load_script

from course_lib import env
from course_tools import mutants as M

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "benchmarks" / "results" / "mutations.json"
LECTURES = [f"{i:02d}" for i in range(12)]


def _script():
    return load_script("benchmarks/mutation_run.py")


def _recorded() -> dict:
    return json.loads(RECORDED.read_text())["lectures"]


# --------------------------------------------------------------------------- classification


def test_assertion_at_finds_the_statement_around_a_line():
    at = _script().assertion_at
    src = (
        "x = 1\nassert (\n    x == 2\n), 'the claim'\ntorch.testing.assert_close(a, b)\ny = f(x)\n"
    )
    assert at(src, 3) == ("assert", "assert ( x == 2 ), 'the claim'")
    assert at(src, 5) == ("call", "torch.testing.assert_close(a, b)")
    assert at(src, 6) is None and at(src, 1) is None
    assert at("def f():\n    assert x\n", 2) == ("assert", "assert x")
    assert at("%matplotlib inline\nassert x\n", 2) is None  # not Python: never a kill


def _failure(error, frames, assertion_error=True):
    return {"type": error, "assertion_error": assertion_error, "message": "m", "frames": frames}


def test_only_the_lectures_own_assertions_kill():
    classify = _script().classify
    cell = {
        "file": "/tmp/ipykernel_1/1.py",
        "line": 2,
        "in_cell": True,
        "source": "a = 1\nassert a == 2\n",
    }
    library = {"file": "/lib/core.py", "line": 9, "in_cell": False, "source": ""}
    call = dict(cell, source="a = 1\ncheck('00.1', f)\n")
    close = dict(cell, source="a = 1\ntorch.testing.assert_close(a, 2)\n")
    killed = classify(_failure("AssertionError", [cell]), 7, 1.5)
    assert (killed.status, killed.cell, killed.assertion, killed.seconds) == (
        "killed",
        7,
        "assert a == 2",
        1.5,
    )
    assert classify(_failure("AssertionError", [close, library]), 7, 1.0).status == "killed"
    assert classify(_failure("AssertionError", [cell, library]), 7, 1.0).status == "crashed"  # fmt: skip
    assert classify(_failure("CheckFailed", [call, library]), 7, 1.0).status == "crashed"
    crash = classify(_failure("ValueError", [cell], assertion_error=False), 7, 1.0)
    assert (crash.status, crash.error, crash.message) == ("crashed", "ValueError", "m")


def test_the_mutant_cell_goes_after_the_colab_cell():
    index = _script().injection_index
    colab = nbformat.v4.new_code_cell("if 'google.colab' in sys.modules:\n    pass")
    setup = nbformat.v4.new_code_cell("from course_lib import env")
    title = nbformat.v4.new_markdown_cell("# title")
    assert index(nbformat.v4.new_notebook(cells=[title, colab, setup])) == 2
    assert index(nbformat.v4.new_notebook(cells=[title, setup])) == 1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A lecture of three code cells: the Colab stand-in, set-up, and one asserted claim."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import sys\nif 'google.colab' in sys.modules:\n    pass"),
        nbformat.v4.new_code_cell("from course_lib import env\nfrom course_lib.env import budget"),
        nbformat.v4.new_markdown_cell("The budget of the test suite is `ci`."),
        nbformat.v4.new_code_cell("n = 1\nassert budget() == 'ci', 'the CI budget'"),
    ]
    path = tmp_path_factory.mktemp("lecture") / "99_tiny.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_tiny_lecture_passes_its_control_and_kills_its_mutant(tiny):
    run = _script().run_lecture
    assert run("99", None, tiny).status == "passed"
    wrong = M.Mutant("budget_full", "99", "course_lib.env:budget", "def budget():\n    return 'full'\n", "the CI budget")  # fmt: skip
    killed = run("99", wrong, tiny)
    assert (killed.status, killed.cell, killed.message) == ("killed", 3, "the CI budget")
    assert killed.assertion == "assert budget() == 'ci', 'the CI budget'"  # imported after it
    raising = M.Mutant("budget_raises", "99", "course_lib.env:budget", "def budget():\n    raise ValueError('no budget')\n", "x")  # fmt: skip
    crashed = run("99", raising, tiny)
    assert (crashed.status, crashed.error, crashed.cell) == ("crashed", "ValueError", 3)


# --------------------------------------------------------------------------- the recorded run


def test_every_recorded_mutant_is_killed_and_every_lecture_has_two():
    recorded = _recorded()
    assert set(LECTURES) <= set(recorded), f"not recorded: {sorted(set(LECTURES) - set(recorded))}"
    for lecture, entry in recorded.items():
        assert entry["control"]["status"] == "passed", f"lecture {lecture}'s control run failed"
        rows = entry["mutants"]
        assert len(rows) >= 2, f"lecture {lecture}: {len(rows)} mutants recorded"
        assert set(rows) == {m.name for m in M.by_lecture(lecture)}, f"lecture {lecture}: rerun"
        for name, row in rows.items():
            assert row["status"] == "killed", f"{lecture} {name}: {row['status']}"
            assert row["assertion"].startswith(("assert", "torch.testing.assert"))
            assert row["seconds"] > 0 and isinstance(row["cell"], int)
    totals = json.loads(RECORDED.read_text())["totals"]
    assert (
        totals["killed"] == totals["mutants"] == sum(len(e["mutants"]) for e in recorded.values())
    )


def fastest_kills() -> dict[str, tuple[str, float]]:
    """Lecture -> (the mutant the recorded run killed fastest, its seconds). A mutant that
    only Triton's presence can kill is left out where Triton is not installed."""
    out = {}
    for lecture in LECTURES:
        rows = [
            (name, row["seconds"])
            for name, row in _recorded()[lecture]["mutants"].items()
            if row["status"] == "killed"
            and (env.triton_installed() or name != "triton_installed_means_imported")
        ]
        out[lecture] = min(rows, key=lambda r: r[1])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("lecture", LECTURES)
def test_the_fastest_mutant_of_each_lecture_is_still_killed(lecture):
    name, _ = fastest_kills()[lecture]
    outcome = _script().run_lecture(lecture, M.find(name, lecture))
    assert outcome.status == "killed", f"{lecture} {name}: {outcome}"
