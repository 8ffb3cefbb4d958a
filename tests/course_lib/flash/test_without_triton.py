"""course_lib.flash.without_triton: chapter 06's kernels readable on a machine without Triton.

``@triton.jit`` defines a kernel whose source can be read; launching it raises an
ImportError that says where to run it.
"""

from __future__ import annotations

import inspect

import pytest

from course_lib.env import TRITON_HELP
from course_lib.flash.without_triton import StandInKernel, tl, triton


@triton.jit
def _add_kernel(X, Y, N, BLOCK: tl.constexpr):
    """Adds two vectors (never runs here)."""
    pass


@triton.jit(do_not_specialize=["N"])
def _with_options(X, N):
    pass


def test_jit_keeps_the_kernel_readable():
    for kernel in (_add_kernel, _with_options):
        assert isinstance(kernel, StandInKernel)
    assert _add_kernel.__name__ == "_add_kernel" and _add_kernel.__doc__.startswith("Adds two")
    assert "def _add_kernel(X, Y, N, BLOCK: tl.constexpr):" in inspect.getsource(_add_kernel.fn)


def test_launching_says_where_to_run_it():
    with pytest.raises(ImportError, match="_add_kernel\\(\\) needs Triton") as info:
        _add_kernel[(4,)](1, 2, 3, BLOCK=16)
    assert TRITON_HELP in str(info.value)
    with pytest.raises(ImportError, match="_with_options\\(\\) needs Triton"):
        _with_options(1, 2)


def test_the_helpers_a_launcher_calls_work_as_tritons():
    assert [triton.cdiv(n, 4) for n in (0, 1, 4, 5)] == [0, 1, 1, 2]
    assert [triton.next_power_of_2(n) for n in (0, 1, 2, 3, 17, 64)] == [1, 1, 2, 4, 32, 64]
    assert triton.__version__ == "not installed"
    assert isinstance(tl.constexpr, type)
