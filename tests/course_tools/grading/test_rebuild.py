"""course_tools/grading/rebuild.py: reading a submission, recognising its assignment, the
notebook rebuilt from the course's own copy, and the statement and pattern checks that flag
code for a human look (all on small sources and the course's chapter 00; nothing runs)."""

from __future__ import annotations

import json

import nbformat
import pytest
from grading_lab import (
    ROOT,
    cell,
    dump,
    notebook,
    notebook_v3,
    strip_course_metadata,
    with_solutions,
)

from course_tools.grading import rebuild as rb
from course_tools.grading.rebuild import (
    Course,
    SubmissionError,
    assignment_from_name,
    canonical_tokens,
    claimed_assignment,
    course_imports,
    defined_names,
    dictated,
    expected_assignment,
    identify,
    parse_notebook,
    reaching,
    rebuild,
    references_used,
    safe_flags,
    similarity,
    solution_region,
    suspicious,
)

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


# --------------------------------------------------------------------------- reading


def test_parse_notebook_rejects_what_it_cannot_read():
    for data in (b"{", b"[]", b'{"cells": [], "nbformat": 9}', b"\xff\xfe"):
        with pytest.raises(SubmissionError):
            parse_notebook(data)
    nb, notes = parse_notebook(notebook_v3("x = 1"))
    assert nb.nbformat == 4 and notes


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\xff\xfe", "not UTF-8 text"),
        (b'{"cells": [', "invalid JSON at line 1"),
        (b'{"nbformat": 4}', "no list of cells"),
        (b'{"cells": [], "nbformat": true}', "nbformat is True, expected 4"),
        (b'{"cells": [], "nbformat": "4"}', "nbformat is '4', expected 4"),
        (b'{"cells": [], "nbformat": 5}', "notebook format 5 is newer"),
        (b"[" * 100_000 + b"]" * 100_000, "not a notebook"),  # nested too deeply to read
    ],
)
def test_an_unreadable_notebook_says_why(data, reason):
    with pytest.raises(SubmissionError) as err:
        parse_notebook(data)
    assert err.value.status == "error" and reason in err.value.reason


def test_a_byte_order_mark_and_missing_metadata_are_forgiven():
    nb = _nb()
    del nb["metadata"]
    for c in nb["cells"]:
        c["metadata"] = None
    parsed, notes = parse_notebook(b"\xef\xbb\xbf" + _dump(nb))
    assert notes == [] and parsed.metadata == {} and len(parsed.cells) == len(nb["cells"])


def test_a_notebook_without_any_metadata_is_read():
    nb = _nb()
    del nb["metadata"]
    for c in nb["cells"]:
        c.pop("metadata", None)
    parsed, _ = parse_notebook(_dump(nb))
    assert identify(parsed, "00_setup.ipynb", Course.load(ROOT)) == ("00_setup", "file name")
    lists = _nb()  # sources as lists of lines, as Jupyter writes them
    for c in lists["cells"]:
        c["source"] = c["source"].splitlines(True) if isinstance(c["source"], str) else c["source"]
    parsed, _ = parse_notebook(_dump(lists))
    assert all(isinstance(c.source, str) for c in parsed.cells)


# --------------------------------------------------------------------------- the assignment


def test_identify_by_metadata_name_and_ids():
    course = Course.load(ROOT)
    nb, _ = parse_notebook((ROOT / "solutions/00_setup.ipynb").read_bytes())
    assert identify(nb, "whatever.ipynb", course) == ("00_setup", "metadata")
    bare, _ = parse_notebook(_dump(strip_course_metadata(_nb())))
    assert identify(bare, "bob-00_setup (1).ipynb", course)[0] == "00_setup"
    assert identify(bare, "homework.ipynb", course) == (None, "")


def test_the_instructors_expectation_wins_over_the_metadata(course):
    nb, _ = parse_notebook((ROOT / "solutions/00_setup.ipynb").read_bytes())
    assert identify(nb, "x.ipynb", course, expected="02_qkv_attention") == (
        "02_qkv_attention",
        "expected",
    )
    assert claimed_assignment(nb, course) == "00_setup"
    nb.metadata["course"]["assignment"] = "99_not_in_this_course"
    assert claimed_assignment(nb, course) is None


def test_exercise_ids_name_an_assignment_when_nothing_else_does(course):
    nb, _ = parse_notebook(_dump(_nb()))
    nb.metadata.pop("course")
    assert identify(nb, "homework.ipynb", course) == ("00_setup", "exercise ids")


@pytest.mark.parametrize(
    "name, assignment",
    [
        ("02_qkv_attention.ipynb", "02_qkv_attention"),  # the stem
        ("alice-02_qkv_attention (1).ipynb", "02_qkv_attention"),  # inside the name
        ("02_qkv_attention_exercises.ipynb", "02_qkv_attention"),  # a work/ copy
        ("hw02.ipynb", "02_qkv_attention"),  # its chapter number
        ("hw_02_and_03.ipynb", None),  # two chapter numbers: no guess
        ("homework.ipynb", None),
        ("2024_02.ipynb", "02_qkv_attention"),
        ("hw_2024.ipynb", None),  # four digits: a year, not a chapter
    ],
)
def test_an_assignment_from_a_file_name(course, name, assignment):
    assert assignment_from_name(name, course) == assignment


def test_a_broken_chapter_still_names_its_submissions():
    broken = Course(ROOT, broken={"07_tiny_gpt": "ValueError: bad cell"})
    assert assignment_from_name("07_tiny_gpt.ipynb", broken) == "07_tiny_gpt"


@pytest.mark.parametrize(
    "path, assignment",
    [
        ("class/02_qkv_attention/alice.ipynb", "02_qkv_attention"),  # the folder says
        ("02_qkv_attention/alice/00_setup.ipynb", "02_qkv_attention"),  # the innermost wins
        ("hw/alice/00_setup.ipynb", "00_setup"),  # else the file name
        ("hw_2024_01/alice/notebook.ipynb", None),  # never a guess from a number
        ("class\\00_setup\\x.ipynb", "00_setup"),  # a Windows path in an archive
    ],
)
def test_the_assignment_a_submission_was_handed_in_for(course, path, assignment):
    assert expected_assignment(path, course) == assignment


# --------------------------------------------------------------------------- the course


def test_a_course_records_its_broken_notebooks_and_keeps_the_others(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "00_setup.ipynb").write_bytes(
        (ROOT / "solutions" / "00_setup.ipynb").read_bytes()
    )
    (tmp_path / "solutions" / "01_broken.ipynb").write_text("{")
    course = Course.load(tmp_path)
    assert list(course.notebooks) == ["00_setup"] and course.exercises == {"00_setup": ["00.1"]}
    assert list(course.broken) == ["01_broken"] and "Error" in course.broken["01_broken"]


def test_the_courses_notebook_is_a_fresh_copy_each_time(course):
    first = course.solution_notebook("00_setup")
    first.cells.clear()
    assert len(course.solution_notebook("00_setup").cells) > 0


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
    monkeypatch.setattr(rb, "MAX_ADDED_CELLS", 2)
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
    monkeypatch.setattr(rb, "MAX_SOLUTION_CHARS", 50)
    nb, _ = parse_notebook(_with_solution(CORRECT))
    plan = rebuild(nb, "00_setup", course, {"00.1": "/r"})
    assert "over the 50 limit" in plan.missing["00.1"] and not plan.needs_kernel


# --------------------------------------------------------------------------- code analysis


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


@pytest.mark.parametrize(
    "source, what",
    [
        ("from course_lib.checks import core", "imports the course's checks"),
        ("import course_tools.grading", "imports the course's checks or grading code"),
        ("from course_lib import attention", "uses the course's library"),
        ("f = get_exercise('00.1')", "uses the checking machinery"),
        ("y = softmax_reference(x)", "uses a reference implementation"),
        ("import ctypes", "inspects or patches the interpreter"),
        ("g = globals ()", "inspects or patches the interpreter"),
        ("import os\nos.kill(1, 9)", "manipulates processes"),
        ("eval('1')", "runs code built at run time"),
        ("open('x').read()", "reads files"),
        ("ｏｐｅｎ('x')", "reads files"),  # full-width letters: `open` to Python
    ],
)
def test_suspicious_patterns_are_named_with_what_matched(source, what):
    found = suspicious(source)
    assert any(f.startswith(what) and "(`" in f for f in found), found


def test_honest_code_is_not_suspicious():
    assert suspicious(CORRECT) == []
    assert suspicious("def softmax(x):\n    return x.evaluate()\n") == []  # a method


def test_reaching_past_a_name_is_found_in_the_syntax_tree():
    assert "__globals__" in reaching("g = f.__globals__")[0]
    assert "built at run time" in reaching("name = 'a' + 'b'\ngetattr(m, name)")[0]
    assert "built at run time" in reaching("m.__dict__[k]")[0]
    assert reaching("getattr(m, 'shape')") == [] and reaching("def (") == []


def test_defined_names_are_what_a_cell_binds_at_its_top_level():
    src = (
        "%matplotlib inline\n"
        "import numpy as np, os.path\n"
        "from math import sqrt as root\n"
        "a, (b, c) = 1, (2, 3)\n"
        "d: int = 4\n"
        "class K: pass\n"
        "def f():\n    inner = 1\n"
        "async def g(): pass\n"
    )
    assert defined_names(src) == {"np", "os", "root", "a", "b", "c", "d", "K", "f", "g"}
    assert defined_names("def softmax(x):\n    return x +\n") == {"softmax"}  # not Python yet


def test_canonical_tokens_ignore_names_comments_docstrings_and_dead_code():
    a = 'def softmax(x):\n    """Doc."""\n    e = np.exp(x)  # exp\n    return e / e.sum()\n'
    b = (
        "def my_soft(values):\n    unused = 3\n    if False:\n        print(1)\n"
        "    ex = np.exp(values)\n    return ex / ex.sum()\n    print('after')\n"
    )
    assert canonical_tokens(a) == canonical_tokens(b)
    assert "np" in canonical_tokens(a) and "softmax" not in canonical_tokens(a)
    assert canonical_tokens(a) != canonical_tokens(a.replace("np.exp", "np.log"))
    assert canonical_tokens("def (") == []


def test_similarity_sees_a_copy_under_new_names():
    renamed = (
        "def stable(values):\n    shifted = values - values.max(axis=-1, keepdims=True)\n"
        "    num = np.exp(shifted)\n    return num / num.sum(axis=-1, keepdims=True)\n"
    )
    assert similarity(CORRECT, renamed) == 1.0
    assert similarity(CORRECT, "def softmax(x):\n    return x\n") < rb.COPY_SIMILARITY
    assert similarity(CORRECT, "def (") == 0.0  # not Python: nothing to compare


def test_a_small_solution_region_is_dictated_by_the_statement():
    short = "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n"
    assert solution_region(short) == "return x"
    assert dictated(short)
    body = "\n".join(f"    y{i} = np.dot(x, x) + {i} * np.sum(x ** 2)" for i in range(8))
    long = f"def f(x):\n    ### BEGIN SOLUTION\n{body}\n    return y7\n    ### END SOLUTION\n"
    assert not dictated(long)


def test_what_the_course_imports_from_course_lib_and_who_calls_it():
    cells = [
        nbformat.v4.new_code_cell("import course_lib.rnn as R\nfrom course_lib import env, check"),
        nbformat.v4.new_code_cell("from course_lib.positional import apply_rope as rope"),
        nbformat.v4.new_markdown_cell("import course_lib.attention"),
    ]
    names = course_imports(cells)
    assert names == {"R": "course_lib.rnn", "rope": "course_lib.positional.apply_rope"}
    used = references_used("y = R.rnn_forward(x)\nz = getattr(R, 'gru')\nw = rope(q)", names)
    assert used == {"R.rnn_forward", "R.gru", "rope"}
    assert references_used("R = 1", names) == set()  # bound, not read
    assert references_used("R.x(\n", names) == {"R"}  # not Python: by word


def test_a_failed_analysis_skips_the_flag_not_the_grade():
    assert safe_flags(lambda: ["ok"]) == (["ok"], [])

    def deep():
        raise RecursionError

    result, notes = safe_flags(deep)
    assert result == [] and "(RecursionError); they were skipped" in notes[0]
