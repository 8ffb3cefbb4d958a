"""course_tools/grading/analysis.py: reading the learner's code without running it. The
names a cell defines, its canonical tokens and the similarity of two sources (a copy under
new names), the statement's dictated lines, the course's imports and who uses them, and the
patterns that flag code for a human look (all on small sources; nothing runs)."""

from __future__ import annotations

import json

import nbformat
import pytest

from course_tools.grading import analysis
from course_tools.grading.analysis import (
    canonical_tokens,
    course_imports,
    defined_names,
    dictated,
    reaching,
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


# --------------------------------------------------------------------------- patterns


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


# --------------------------------------------------------------------------- names and tokens


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
    assert similarity(CORRECT, "def softmax(x):\n    return x\n") < analysis.COPY_SIMILARITY
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


def test_forbidden_uses_are_found_in_the_function_and_its_helpers_only():
    names = frozenset({"softmax", "log_softmax", "Softmax"})
    direct = "def stable_softmax(s, t=1.0):\n    return torch.softmax(s / t, -1)\n"
    assert analysis.forbidden_uses([direct], "stable_softmax", names) == [
        "`torch.softmax` (line 2)"
    ]
    helper = (
        "from torch.nn.functional import softmax as sm\n"
        "def _h(z):\n    return sm(z, -1)\n"
        "def stable_softmax(s, t=1.0):\n    return _h(s / t)\n"
    )
    assert analysis.forbidden_uses([helper], "stable_softmax", names) == [
        "`sm` (line 3), imported as a forbidden name"
    ]
    by_text = "def stable_softmax(s, t=1.0):\n    return getattr(s, 'softmax')(-1)\n"
    assert analysis.forbidden_uses([by_text], "stable_softmax", names) == [
        "the text 'softmax' (line 2), a forbidden name"
    ]
    as_lambda = "stable_softmax = lambda s, t=1.0: F.softmax(s / t, -1)\n"
    assert analysis.forbidden_uses([as_lambda], "stable_softmax", names)
    # a learner's own comparison at the cell's top level is not the function
    honest = (
        "def stable_softmax(s, t=1.0):\n    e = (s / t - (s / t).amax(-1, keepdim=True)).exp()\n"
        "    return e / e.sum(-1, keepdim=True)\n"
        "print(torch.allclose(stable_softmax(x), torch.softmax(x, -1)))\n"
    )
    assert analysis.forbidden_uses([honest], "stable_softmax", names) == []
    assert analysis.forbidden_uses([direct], "stable_softmax", frozenset()) == []
    assert analysis.forbidden_uses(["def (:"], "stable_softmax", names) == []  # unparsable


def test_a_function_pasted_from_the_course_library_is_matched_with_its_source(tmp_path):
    """Any function of course_lib (its modules, the references its checks ship), renamed and
    re-laid out, is named; the course's own solutions match none of them."""
    library = tmp_path / "course_lib"
    library.mkdir()
    (library / "rnn.py").write_text(
        "def rnn_forward(x, h0, W):\n"
        "    h = h0\n    out = []\n    for t in range(x.shape[0]):\n"
        "        h = (x[t] @ W + h).tanh()\n        out.append(h)\n"
        "    return torch.stack(out), h\n"
    )
    functions = analysis.course_functions(str(library))
    assert [label for label, _ in functions] == ["course_lib/rnn.py `rnn_forward`"]
    pasted = (
        "def my_rnn(inputs, state, weights):  # renamed, re-spaced\n"
        "    hidden = state\n    outs = []\n    for i in range(inputs.shape[0]):\n"
        "        hidden = (inputs[i] @ weights + hidden).tanh()\n        outs.append(hidden)\n"
        "    return torch.stack(outs), hidden\n"
    )
    assert analysis.course_copies([pasted], "my_rnn", functions) == [
        "`my_rnn` matches course_lib/rnn.py `rnn_forward` (100% alike)"
    ]
    own = "def my_rnn(x, h, W):\n    for t in range(len(x)):\n        h = np.tanh(W @ h + x[t])\n    return h\n"
    assert analysis.course_copies([own], "my_rnn", functions) == []
    path = tmp_path / "functions.json"
    analysis.write_course_functions(library, path)
    assert analysis.read_course_functions(path, "elsewhere") == functions


def test_the_librarys_functions_are_read_once_per_version_of_its_sources(tmp_path, monkeypatch):
    """A per-user cache keyed by the sources' digest: a run after the first reads it; a
    changed source, or a damaged cache file, is read afresh."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    library = tmp_path / "course_lib"
    library.mkdir()
    body = "".join(f"    v{i} = x[{i}] * {i} + x[{i} + 1] - ({i} * x)\n" for i in range(8))
    body += "    return [v0, v1, v2, v3, v4, v5, v6, v7]\n"
    (library / "m.py").write_text("def f(x):\n" + body)
    first = analysis.course_functions_file(library, tmp_path / "run1")
    assert json.loads(first.read_text())[0][0] == "course_lib/m.py `f`"
    (cached,) = (tmp_path / "cache" / "attention-course" / "grader").iterdir()
    assert cached.read_bytes() == first.read_bytes()
    cached.write_text('[["from the cache", ["Module"]]]')  # what a second run reads
    second = analysis.course_functions_file(library, tmp_path / "run2")
    assert json.loads(second.read_text()) == [["from the cache", ["Module"]]]
    (library / "m.py").write_text("def g(x):\n" + body)  # another version: read afresh
    third = analysis.course_functions_file(library, tmp_path / "run3")
    assert json.loads(third.read_text())[0][0] == "course_lib/m.py `g`"
    cached.write_text("{damaged")
    (library / "m.py").write_text("def f(x):\n" + body)
    assert json.loads(analysis.course_functions_file(library, tmp_path / "run4").read_text())
