"""course_tools/grading/cases.py: the grader's cases, drawn in the grader's process from
the secret seed and a fingerprint of the submission's code (re-runs agree; other code or
another seed gets other inputs)."""

from __future__ import annotations

from course_tools.grading.cases import grader_cases


def test_cases_depend_on_the_seed_and_the_code(tmp_path):
    import numpy as np

    def first(fp, seed=7):
        return grader_cases("00.1", seed, fp)[-1].args[0]

    assert np.array_equal(first("a"), first("a"))  # deterministic: re-runs agree
    assert not np.array_equal(first("a"), first("b"))  # other code, other inputs
    assert not np.array_equal(first("a", 7), first("a", 8))
