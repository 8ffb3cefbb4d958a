"""A hostile class, round 5 (issue 45): the statement's rules, the course's own code, partial
credit that cannot be gamed, and what the notebook showed.

Every submission below is graded in the real sandbox, in one shared run with --partial
among honest submissions (``--jobs 2``), as the instructors' guide grades. Each test asserts
the grade, that the feedback or review.csv says why, and that the honest are unharmed.
Nothing here depends on the machine's load: the limits are far above what any cell takes.
"""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import nbformat
import pytest
from grading_lab import (
    ROOT,
    cell,
    dump,
    feedback,
    grade,
    notebook,
    require_sandbox,
    row,
    rows_of,
    source,
    with_solutions,
)

import course_lib

pytestmark = pytest.mark.slow

CH03, CH04, CH06, CH01, CH00 = (
    "03_scaling_sqrt_dk",
    "04_multi_head_attention",
    "06_flash_attention",
    "01_rnn_bottleneck",
    "00_setup",
)

# 03.2's statement forbids torch.softmax: right numbers, no point.
TORCH_SOFTMAX = (
    "def stable_softmax(scores, temperature=1.0):\n"
    "    return torch.softmax(scores / temperature, dim=-1)\n"
)
# The same, by a name built at run time: the code shows nothing, the run-time watch sees it.
HIDDEN_SOFTMAX = (
    "import torch.nn.functional as _F\n"
    "_f = getattr(_F, 'soft' + 'max')\n"
    "def stable_softmax(scores, temperature=1.0):\n"
    "    return _f(scores / temperature, dim=-1)\n"
)
# 04.3 handed to PyTorch's module.
LIBRARY_MHA = """def mha_forward(x, W_Q, W_K, W_V, W_O, num_heads):
    B, N, D = x.shape
    mha = torch.nn.MultiheadAttention(D, num_heads, bias=False, batch_first=True).to(x.dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T]))
        mha.out_proj.weight.copy_(W_O.T)
        return mha(x, x, x, need_weights=False)[0]
"""
# 06.2 "tiled" from the whole score matrix; 06.3's kernel replaced by PyTorch's attention.
WHOLE_SCORES = """def tiled_attention(Q, K, V, block_size):
    S = Q @ K.T / np.sqrt(Q.shape[1])
    m = S.max(axis=1, keepdims=True)
    P = np.exp(S - m)
    l = P.sum(axis=1)
    return (P @ V) / l[:, None], m[:, 0] + np.log(l)
"""
LIBRARY_SDPA = """def flash_forward(q, k, v):
    import torch.nn.functional as F
    return F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
"""
# 01.4 answered with the course library's own function, reached by a name given as text.
RESOLVED = (
    "import pkgutil\ncritical_path = pkgutil.resolve_name('course' + '_lib.rnn:critical_path')\n"
)


def _pasted_rnn_forward() -> str:
    """course_lib/rnn.py's rnn_forward, pasted as 01.1's answer (renamed as the exercise's)."""
    text = (Path(course_lib.__file__).parent / "rnn.py").read_text()
    tree = ast.parse(text)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "rnn_forward")
    return "import torch\n" + (ast.get_source_segment(text, fn) or "") + "\n"


# 00.1 right on small scores only (NaN past exp's range): a partial answer, with and without
# a comment, must earn the same partial marks.
NAIVE = "def softmax(x):\n    e = np.exp(x)\n    return e / e.sum(axis=-1, keepdims=True)\n"
NAIVE_COMMENTED = "# my first try\ndef softmax(x):\n    e = np.exp(x)  # no max\n    return e / e.sum(axis=-1, keepdims=True)\n"
CORRECT = source(cell(notebook(CH00), "solution", "00.1"))


def _typed_in_check() -> bytes:
    """The placeholder left in 00.1's solution cell; the answer typed into the check cell,
    above the check call (the check passed in the learner's notebook)."""
    nb = notebook(CH00, "exercises")
    cell(nb, "check", "00.1")["source"] = CORRECT + '\ncheck("00.1", softmax)\n'
    return dump(nb)


def _fixed_below_check() -> bytes:
    """The answer in a new cell below the check, and the check run again after it."""
    nb = notebook(CH00, "exercises")
    check = cell(nb, "check", "00.1")
    check["execution_count"] = 9
    new = dict(nbformat.v4.new_code_cell(CORRECT))
    new["id"], new["execution_count"] = "fix-below", 8
    nb["cells"].insert(nb["cells"].index(check) + 1, new)
    return dump(nb)


def _huge_cell() -> bytes:
    """A right answer, and a 4 MB added cell (it once cost the grader 2.8 GB to parse)."""
    nb = json.loads(with_solutions({}, CH00))
    huge = dict(nbformat.v4.new_code_cell("a=1\n" * 1_000_000))
    huge["id"] = "huge"
    nb["cells"].append(huge)
    return dump(nb)


# A lone surrogate in an exception message: once the journal's write raised, the row was
# added twice and results.jsonl was truncated to nothing.
LONE_SURROGATE = 'def softmax(x):\n    raise ValueError("half a character: \\ud800")\n'

SUBMISSIONS = {
    f"{CH03}/alice.ipynb": lambda: with_solutions({"03.2": TORCH_SOFTMAX}, CH03),
    f"{CH03}/bob.ipynb": lambda: with_solutions({"03.2": HIDDEN_SOFTMAX}, CH03),
    f"{CH03}/honest.ipynb": lambda: (ROOT / "solutions" / f"{CH03}.ipynb").read_bytes(),
    f"{CH04}/carol.ipynb": lambda: with_solutions({"04.3": LIBRARY_MHA}, CH04),
    f"{CH06}/dave.ipynb": lambda: with_solutions(
        {"06.2": WHOLE_SCORES, "06.3": LIBRARY_SDPA}, CH06
    ),
    f"{CH06}/honest.ipynb": lambda: (ROOT / "solutions" / f"{CH06}.ipynb").read_bytes(),
    f"{CH01}/erin.ipynb": lambda: with_solutions(
        {"01.1": _pasted_rnn_forward(), "01.4": RESOLVED}, CH01
    ),
    f"{CH00}/naive.ipynb": lambda: with_solutions({"00.1": NAIVE}, CH00),
    f"{CH00}/naive_commented.ipynb": lambda: with_solutions({"00.1": NAIVE_COMMENTED}, CH00),
    f"{CH00}/typed_in_check.ipynb": _typed_in_check,
    f"{CH00}/fixed_below_check.ipynb": _fixed_below_check,
    f"{CH00}/huge_cell.ipynb": _huge_cell,
    f"{CH00}/surrogate.ipynb": lambda: with_solutions({"00.1": LONE_SURROGATE}, CH00),
    # one learner, two notebooks for one assignment (file names: the student is the stem)
    f"{CH00}/frank.ipynb": lambda: with_solutions({"00.1": NAIVE}, CH00),
    f"{CH00}/frank (1).ipynb": lambda: (ROOT / "solutions" / f"{CH00}.ipynb").read_bytes(),
}


@pytest.fixture(scope="session")
def round5(tmp_path_factory):
    require_sandbox()
    base = tmp_path_factory.mktemp("round5")
    subs = base / "subs"
    for name, make in SUBMISSIONS.items():
        (subs / name).parent.mkdir(parents=True, exist_ok=True)
        (subs / name).write_bytes(make())
    run = grade(
        [subs],
        base / "out",
        "--jobs",
        "2",
        "--partial",
        "--export",
        "lms",
        "--student",
        r"/(\w+)(?: \(\d\))?\.ipynb$",
        "--cell-timeout",
        "400",
        "--timeout",
        "1200",
    )
    with open(base / "out" / "review.csv", newline="", encoding="utf-8") as f:
        run["review"] = list(csv.DictReader(f))
    return run


def _sub(name: str) -> str:
    return f"subs/{name}"


def _review(run: dict, name: str, exercise: str | None = None) -> list[str]:
    return [
        r["reason"]
        for r in run["review"]
        if r["submission"] == _sub(name) and (exercise is None or r["exercise"] == exercise)
    ]


def test_the_run_ended_whole(round5):
    assert round5["code"] == 0
    run_info = json.loads((round5["out"] / "run.json").read_text())
    assert run_info["complete"] and run_info["graded"] == len(SUBMISSIONS)


@pytest.mark.parametrize(
    "name, exercise, rule, seen",
    [
        (f"{CH03}/alice.ipynb", "03.2", "03.2/no-softmax", "`torch.softmax` (line 2)"),
        (f"{CH03}/bob.ipynb", "03.2", "03.2/no-softmax", "it called `softmax`"),
        (f"{CH04}/carol.ipynb", "04.3", "04.3/no-library-attention", "MultiheadAttention"),
        (f"{CH06}/dave.ipynb", "06.2", "06.2/whole-scores", "as much as the whole score matrix"),
        (f"{CH06}/dave.ipynb", "06.3", "06.3/no-library-attention", "scaled_dot_product_attention"),
    ],
)
def test_a_rule_of_the_statement_broken_earns_nothing_and_says_which(
    round5, name, exercise, rule, seen
):
    """Right numbers from what the statement forbids: failed with no point, even under
    --partial; the feedback names the rule, review.csv what the grader saw."""
    r = row(round5, _sub(name), exercise)
    assert (r["status"], float(r["points"])) == ("failed", 0.0), feedback(round5, _sub(name))
    assert "breaks a rule of the exercise's statement" in feedback(round5, _sub(name)) or (
        "the statement forbids what your function uses" in feedback(round5, _sub(name))
    )
    reasons = " | ".join(_review(round5, name, exercise))
    assert "breaks the statement's rules" in reasons and seen in reasons, reasons
    assert rule in feedback(round5, _sub(name)) or rule.split("/")[1] in reasons


def test_the_honest_keep_every_point(round5):
    for name in (f"{CH03}/honest.ipynb", f"{CH06}/honest.ipynb"):
        rows = rows_of(round5, _sub(name))
        assert rows and all(r["status"] == "passed" for r in rows), feedback(round5, _sub(name))
        assert not any("rules" in reason for reason in _review(round5, name))


def test_the_course_librarys_own_code_is_flagged_with_its_source(round5):
    name = f"{CH01}/erin.ipynb"
    pasted = " | ".join(_review(round5, name, "01.1"))
    assert "matches course_lib/rnn.py `rnn_forward`" in pasted, pasted
    resolved = " | ".join(_review(round5, name, "01.4"))
    assert "the function checked is the course's own: course_lib/rnn.py `critical_path`" in (
        resolved
    ), resolved
    assert "pkgutil" in resolved


def test_partial_marks_do_not_depend_on_a_comment(round5):
    plain = row(round5, _sub(f"{CH00}/naive.ipynb"))
    commented = row(round5, _sub(f"{CH00}/naive_commented.ipynb"))
    assert plain["status"] == commented["status"] == "failed"
    assert 0 < float(plain["points"]) < 1
    assert plain["points"] == commented["points"]


@pytest.mark.parametrize("name", ["typed_in_check.ipynb", "fixed_below_check.ipynb"])
def test_what_the_notebook_showed_is_what_is_graded(round5, name):
    r = row(round5, _sub(f"{CH00}/{name}"))
    assert (r["status"], r["points"]) == ("passed", "1"), feedback(round5, _sub(f"{CH00}/{name}"))


def test_a_huge_cell_neither_stalls_nor_fails_the_right_answer(round5):
    name = _sub(f"{CH00}/huge_cell.ipynb")
    r = row(round5, name)
    assert (r["status"], r["points"]) == ("passed", "1"), feedback(round5, name)
    assert "holds 4000000 characters" in feedback(round5, name)


def test_two_notebooks_of_one_learner_are_flagged_and_the_export_keeps_the_best(round5):
    for name in ("frank.ipynb", "frank (1).ipynb"):
        reasons = " | ".join(_review(round5, f"{CH00}/{name}", "*"))
        assert "one of 2 notebooks of frank for 00_setup" in reasons, reasons
    with open(round5["out"] / "lms.csv", newline="", encoding="utf-8") as f:
        frank = next(r for r in csv.DictReader(f) if r["Student"] == "frank")
    column = next(k for k in frank if k.startswith("00_setup"))
    assert float(frank[column]) == 1.0  # the best of the two


def test_a_lone_surrogate_in_a_message_is_that_submissions_row_once(round5):
    name = _sub(f"{CH00}/surrogate.ipynb")
    r = row(round5, name)
    assert r["status"] == "failed" and float(r["points"]) == 0, feedback(round5, name)
    assert "half a character" in feedback(round5, name)
    lines = (round5["out"] / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert sum(json.loads(line)["submission"] == name for line in lines) == 1
    assert len(lines) == len(SUBMISSIONS)
