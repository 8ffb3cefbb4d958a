"""The pieces chapter check files share (course_lib/checks/kit.py)."""

from __future__ import annotations

import numpy as np
import torch

from course_lib.checks.core import Case
from course_lib.checks.kit import (
    DT,
    byte_compare,
    integer_compare,
    randn,
    refuse_complex,
    softmax_rows,
    with_note,
    within,
)

CASE = Case("a case")


def test_randn_draws_float64_normals_from_the_generator():
    a = randn(np.random.default_rng(0), 3, 4, std=2.0)
    b = np.random.default_rng(0).normal(size=(3, 4)) * 2.0
    assert a.dtype == DT and a.shape == (3, 4)
    assert torch.equal(a, torch.from_numpy(b))


def test_softmax_rows_sum_to_one():
    w = softmax_rows(np.random.default_rng(1), (2, 5), scale=3.0)
    assert torch.allclose(w.sum(-1), torch.ones(2, dtype=w.dtype))


def test_byte_compare_wants_ints_and_names_each_count():
    one = byte_compare("use //")
    assert one(12, 12, CASE) is None
    assert "use //" in one(12.0, 12, CASE)
    two = byte_compare("use //", names=("ring", "ulysses"))
    assert two((1, 2), (1, 2), CASE) is None
    assert two((1, 3), (1, 2), CASE).startswith("ulysses: ")
    assert "tuple (ring, ulysses) of 2 ints" in two(3, (1, 2), CASE)


def test_with_note_adds_its_diagnosis_only_to_a_failure():
    cmp = with_note(1e-9, 0.0, lambda got, exp, case: "NOTE")
    assert cmp(np.ones(2), np.ones(2), CASE) is None
    assert cmp(np.zeros(2), np.ones(2), CASE).endswith(" NOTE")
    own_line = with_note(1e-9, 0.0, lambda got, exp, case: "\n    Likely cause: X")
    msg = own_line(np.zeros(2), np.ones(2), CASE)
    assert "values are off" in msg and msg.endswith(").\n    Likely cause: X")


def test_refuse_complex_names_the_dtype():
    cmp = refuse_complex(1e-9, 0.0, "take .real.")
    msg = cmp(torch.ones(2, dtype=torch.complex128), torch.ones(2, dtype=DT), CASE)
    assert "complex (dtype torch.complex128)" in msg and "take .real." in msg
    assert cmp(torch.ones(2, dtype=DT), torch.ones(2, dtype=DT), CASE) is None


def test_integer_compare_refuses_floats_and_shows_both_lists():
    cmp = integer_compare("positions", "use arange.")
    want = torch.tensor([0, 1, 6, 7])
    assert cmp(want.clone(), want, CASE) is None
    assert "integer positions, got dtype float32" in cmp(want.float(), want, CASE)
    assert "expected [0, 1, 6, 7], got [0, 1, 7, 6]" in cmp(torch.tensor([0, 1, 7, 6]), want, CASE)
    assert "got list" in cmp([0, 1, 6, 7], want, CASE)


def test_integer_compare_may_accept_a_list_of_ints():
    cmp = integer_compare("positions", "use arange.", accept_lists=True)
    want = torch.tensor([0, 1, 6, 7])
    assert cmp([0, 1, 6, 7], want, CASE) is None
    assert cmp((0, 1, 6, 7), want, CASE) is None
    assert "a list of float" in cmp([0.0, 1.0, 6.0, 7.0], want, CASE)
    assert "expected shape (4,), got (3,)" in cmp([0, 1, 6], want, CASE)


def test_within_grades_a_measurement_by_its_tolerance():
    rel = within(0.1)
    assert rel(1.05, 1.0, CASE) is None
    assert "off" in rel(1.2, 1.0, CASE) and "within 10% of it" in rel(1.2, 1.0, CASE)
    absolute = within(0.5, relative=False, unit=" s")
    assert absolute(2.4, 2.0, CASE) is None
    assert "within 0.5 s" in absolute(3.0, 2.0, CASE)
    assert "expected a number" in rel("fast", 1.0, CASE)
    assert "no finite number" in rel(float("nan"), 1.0, CASE)
    assert rel(np.float32(1.0), 1.0, CASE) is None and rel(torch.tensor(1.0), 1.0, CASE) is None
