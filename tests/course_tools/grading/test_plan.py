"""course_tools/grading/plan.py: the notebook rebuilt from the course's own copy (the
learner's solution cells and added cells in place, a harvest cell where each check was),
what is missing before a kernel starts, the fingerprint of the learner's code, and the flags
a plan carries for a human look (all on the course's chapter 00; nothing runs)."""

from __future__ import annotations

import json

import nbformat
import pytest
from grading_lab import ROOT, cell, dump, notebook, with_solutions

from course_tools.grading import plan as plan_module
from course_tools.grading.analysis import suspicious
from course_tools.grading.identity import Course, parse_notebook
from course_tools.grading.plan import rebuild

CORRECT = """def softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)
"""


def _nb() -> dict:
    return notebook("00_setup")


def _dump(nb: dict) -> bytes:
    return dump(nb)


def _with_solution(source: str) -> bytes:
    return with_solutions({"00.1": source})


@pytest.fixture(scope="module")
def course() -> Course:
    return Course.load(ROOT, check=False)


# --------------------------------------------------------------------------- rebuilding


def test_the_harvest_cell_goes_where_the_check_cell_was(course):
    nb, _ = parse_notebook(_with_solution(CORRECT))
    plan = rebuild(nb, "00_setup", course, {"00.1": "/results"}, {"00.1": "/inputs.pkl"})
    roles = [r for r, _ in plan.roles]
    assert roles.count("harvest") == 1 and plan.needs_kernel
    harvest = roles.index("harvest")
    assert plan.roles[harvest - 1] == ("solution", "00.1")
    src = plan.nb.cells[harvest].source
    assert (
        "_course_grade_harvest('00.1', globals().get('softmax'), '/inputs.pkl', '/results')" in src
    )
    assert plan.nb.cells[harvest - 1].source == CORRECT
    code = [c.source for c in plan.nb.cells if c.cell_type == "code"]
    assert not any('check("00.1"' in src for src in code)  # the check cell is not run
    assert plan.missing == {} and plan.flags == {}


def test_an_untouched_exercise_is_missing_without_a_kernel(course):
    nb, _ = parse_notebook((ROOT / "exercises" / "00_setup.ipynb").read_bytes())
    plan = rebuild(nb, "00_setup", course, {"00.1": "/results"})
    assert not plan.needs_kernel
    assert "`softmax` still raises NotImplementedError" in plan.missing["00.1"]


def test_the_learners_copies_of_course_cells_are_not_used(course):
    nb = _nb()
    setup = cell(nb, "solution", "00.1")
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    code[1]["source"] += "\nnp.exp = lambda x: 0 * x\n"  # the set-up cell, edited
    setup["source"] = CORRECT
    parsed, _ = parse_notebook(_dump(nb))
    plan = rebuild(parsed, "00_setup", course, {"00.1": "/r"})
    assert not any("np.exp = lambda" in c.source for c in plan.nb.cells)


def test_a_cell_the_learner_added_runs_after_the_course_cell_it_followed(course):
    nb = _nb()
    sol = cell(nb, "solution", "00.1")
    sol["source"] = "def softmax(x):\n    return _helper(x)\n"
    helper = {
        "cell_type": "code",
        "execution_count": None,
        "id": "mine-1",
        "metadata": {},
        "outputs": [],
        "source": CORRECT.replace("def softmax", "def _helper"),
    }
    nb["cells"].insert(nb["cells"].index(sol), helper)
    parsed, _ = parse_notebook(_dump(nb))
    plan = rebuild(parsed, "00_setup", course, {"00.1": "/r"})
    roles = [r for r, _ in plan.roles]
    assert roles.index("learner") < roles.index("solution") < roles.index("harvest")
    assert plan.nb.cells[roles.index("learner")].source == helper["source"]


def test_a_definition_added_after_the_check_is_not_the_one_graded(course):
    nb = _nb()
    chk = cell(nb, "check", "00.1")
    later = {"cell_type": "code", "id": "late", "metadata": {}, "outputs": [],
             "execution_count": None, "source": CORRECT}  # fmt: skip
    nb["cells"].insert(nb["cells"].index(chk) + 1, later)
    parsed, _ = parse_notebook(_dump(nb))
    plan = rebuild(parsed, "00_setup", course, {"00.1": "/r"})
    assert any("defined again in a cell you added after the check" in n for n in plan.notes["00.1"])


def test_too_many_added_cells_are_cut_with_a_note(course, monkeypatch):
    monkeypatch.setattr(plan_module, "MAX_ADDED_CELLS", 2)
    nb = _nb()
    for i in range(4):
        nb["cells"].append({"cell_type": "code", "id": f"m{i}", "metadata": {}, "outputs": [],
                            "execution_count": None, "source": f"x{i} = {i}"})  # fmt: skip
    parsed, _ = parse_notebook(_dump(nb))
    plan = rebuild(parsed, "00_setup", course, {"00.1": "/r"})
    assert [r for r, _ in plan.roles].count("learner") == 2
    assert "the notebook has 4 cells added by the learner; only the first 2" in plan.notes["*"][0]


def test_the_fingerprint_follows_the_learners_code_only(course):
    def fingerprint(data: bytes) -> str:
        nb, _ = parse_notebook(data)
        return rebuild(nb, "00_setup", course, {"00.1": "/r"}).fingerprint

    one = fingerprint(_with_solution(CORRECT))
    assert one == fingerprint(_with_solution(CORRECT))
    assert one != fingerprint(_with_solution(CORRECT + "\n# changed"))
    nb = json.loads(_with_solution(CORRECT))
    nb["cells"][0]["source"] = "# a title the learner edited"  # a course cell: not used
    assert fingerprint(_dump(nb)) == one


def test_a_solution_cell_that_lost_its_tag_is_found_by_its_function(course):
    nb = _nb()
    sol = cell(nb, "solution", "00.1")
    sol["metadata"] = {}
    sol["source"] = CORRECT
    parsed, _ = parse_notebook(_dump(nb))
    plan = rebuild(parsed, "00_setup", course, {"00.1": "/r"})
    assert "lost its exercise tag" in plan.notes["00.1"][0]
    assert plan.needs_kernel


def test_a_solution_cell_over_the_size_limit_is_missing(course, monkeypatch):
    monkeypatch.setattr(plan_module, "MAX_SOLUTION_CHARS", 50)
    nb, _ = parse_notebook(_with_solution(CORRECT))
    plan = rebuild(nb, "00_setup", course, {"00.1": "/r"})
    assert "over the 50 limit" in plan.missing["00.1"] and not plan.needs_kernel


# --------------------------------------------------------------------------- flags


def test_review_flags_frames_files_and_copies():
    frames = "import inspect\ndef softmax(x):\n    f = inspect.currentframe().f_back\n"
    disk = (
        "import json, pathlib, course_lib as cl\n"
        "p = pathlib.Path(cl.__file__).parents[1] / 'solutions'\n"
    )
    assert any("interpreter" in f for f in suspicious(frames))
    found = " ".join(suspicious(disk))
    assert "reads files" in found and "course's library" in found
    course = Course.load(ROOT)
    nb, _ = parse_notebook((ROOT / "solutions/00_setup.ipynb").read_bytes())
    plan = rebuild(nb, "00_setup", course, {"00.1": "/nonexistent"})
    assert plan.flags == {}  # three lines the statement dictates: no copy flag
    nb, _ = parse_notebook(_with_solution(CORRECT))
    assert rebuild(nb, "00_setup", course, {"00.1": "/nonexistent"}).flags == {}


def test_a_huge_added_cell_is_neither_parsed_nor_run(course):
    """44 MB of `a=1` lines once cost the grader 16 GB to parse: a cell over the parser's cap
    is left out with a note, and planning the notebook stays small."""
    import tracemalloc

    nb, _ = parse_notebook(_with_solution(CORRECT))
    huge = nbformat.v4.new_code_cell("a=1\n" * 1_000_000)  # 4 MB
    nb.cells.append(huge)
    tracemalloc.start()
    try:
        plan = rebuild(nb, "00_setup", course, {"00.1": "/r"}, library=())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"planning took {peak / 2**20:.0f} MB"
    assert any("holds 4000000 characters" in n for n in plan.notes["*"])
    assert all(c.source != huge.source for c in plan.nb.cells)


# --------------------------------------------------------------------------- what the notebook showed


def _harvest_after(plan) -> list[tuple[str, str | None]]:
    """The roles of the cells from the last learner cell up to the harvest of 00.1."""
    h = plan.roles.index(("harvest", "00.1"))
    return plan.roles[h - 1 : h + 1]


def test_an_answer_typed_into_the_check_cell_is_run_before_the_check(course):
    """The placeholder stays in the solution cell; the learner wrote the function in the
    check cell, above the check call, and the check passed: the grader runs that code just
    before its harvest (and never the learner's own check call)."""
    nb = notebook("00_setup", "exercises")
    cell(nb, "check", "00.1")["source"] = CORRECT + '\ncheck("00.1", softmax)\n'
    plan = rebuild(parse_notebook(dump(nb))[0], "00_setup", course, {"00.1": "/r"}, library=())
    assert "00.1" not in plan.missing
    assert _harvest_after(plan) == [("learner", "00.1"), ("harvest", "00.1")]
    typed = plan.nb.cells[plan.roles.index(("harvest", "00.1")) - 1].source
    assert "def softmax" in typed and "check(" not in typed
    assert any("you wrote code in the check cell" in n for n in plan.notes["00.1"])
    # the check cell as handed out (only the check call) adds nothing
    untouched = notebook("00_setup", "exercises")
    plan = rebuild(parse_notebook(dump(untouched))[0], "00_setup", course, {"00.1": "/r"})
    assert "00.1" in plan.missing


def _below_the_check(check_count, cell_count, source=CORRECT) -> bytes:
    nb = notebook("00_setup", "exercises")
    check = cell(nb, "check", "00.1")
    check["execution_count"] = check_count
    new = nbformat.v4.new_code_cell(source)
    new["id"], new["execution_count"] = "learner-fix", cell_count
    nb["cells"].insert(nb["cells"].index(check) + 1, dict(new))
    return dump(nb)


def test_an_answer_below_the_check_counts_when_the_check_ran_after_it(course):
    """The learner fixed the function in a new cell below the check and ran the check
    again (its execution count is the later one): the notebook showed a pass, so the
    harvest goes after that cell."""
    plan = rebuild(
        parse_notebook(_below_the_check(7, 6))[0], "00_setup", course, {"00.1": "/r"}, library=()
    )
    assert "00.1" not in plan.missing
    assert _harvest_after(plan) == [("learner", "00.1"), ("harvest", "00.1")]
    assert any("ran the check of 00.1 again" in n for n in plan.notes["00.1"])
    # the check ran before the new cell (or the notebook kept no counts): as before, the
    # placeholder in force at the check is what was checked
    for counts in ((6, 7), (None, None)):
        plan = rebuild(
            parse_notebook(_below_the_check(*counts))[0], "00_setup", course, {"00.1": "/r"}
        )
        assert "00.1" in plan.missing, counts
    # a new cell below that runs the check itself counts however the counts stand
    again = CORRECT + 'check("00.1", softmax)\n'
    plan = rebuild(
        parse_notebook(_below_the_check(None, None, again))[0],
        "00_setup",
        course,
        {"00.1": "/r"},
        library=(),
    )
    assert "00.1" not in plan.missing
    assert _harvest_after(plan) == [("learner", "00.1"), ("harvest", "00.1")]
