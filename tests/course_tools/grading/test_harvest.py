"""course_tools/grading/harvest.py: the kernel's side of grading. The inputs the grader
writes for the kernel hold only arrays and numbers (no seed, no reference, no function), and
a harvest cell records the function's outputs on them (the verdict is drawn elsewhere)."""

from __future__ import annotations

import pickle

import numpy as np
from grading_lab import harvested

from course_lib.checks.ch00 import softmax_reference


def softmax_ok(x):
    return softmax_reference(x)


def test_only_inputs_reach_the_kernel(tmp_path):
    cases = harvested("00.1", softmax_ok, 99, tmp_path)
    spec = pickle.loads((tmp_path / "inputs.pkl").read_bytes())
    assert spec["target"] == "softmax" and spec["no_warnings"] in (True, False)
    data = spec["cases"]
    assert [name for name, _, _ in data] == [c.name for c in cases]
    for _, args, kwargs in data:  # arrays and numbers: no seed, no reference, no function
        assert all(isinstance(a, np.ndarray) for a in args) and kwargs == {}


def test_a_function_of_the_course_library_is_recognised_by_where_its_code_lives():
    """01.4 answered with ``pkgutil.resolve_name("course_lib.rnn:critical_path")``: the kernel
    records where the function's code lives, and the grader flags it (here a function of
    a module that needs no torch, as this test runs without it)."""
    import functools
    import pkgutil

    from course_tools.grading.harvest import course_origin

    resolved = pkgutil.resolve_name("course" + "_lib.progress:find_solution_cells")
    where = "course_lib/progress.py `find_solution_cells`"
    assert course_origin(resolved) == where
    assert course_origin(functools.partial(resolved)) == where

    def mine(x):
        return x

    assert course_origin(mine) == "" and course_origin(len) == ""
