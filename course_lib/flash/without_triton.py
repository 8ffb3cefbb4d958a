"""Stand-ins for ``triton`` and ``triton.language`` on a machine without Triton.

Triton ships wheels for Linux only. So that chapter 06 (lecture and exercises) can still be
read and run top to bottom on macOS or Windows, its notebooks import these when Triton is
missing: ``@triton.jit`` then defines the kernel without compiling anything (its source can
be read, printed, discussed), and *launching* it raises an ImportError that says where to
run it (:data:`course_lib.env.TRITON_HELP`). The notebooks check ``ENV.triton_available``
before each launch, so nothing raises when run as they are.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

from ..env import TRITON_HELP

__all__ = ["tl", "triton"]


class StandInKernel:
    """A ``@triton.jit`` function on a machine without Triton: readable, not launchable."""

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.fn = fn

    def _refuse(self, *args, **kwargs):
        raise ImportError(f"the Triton kernel {self.fn.__name__}() needs Triton. {TRITON_HELP}")

    __call__ = _refuse

    def __getitem__(self, grid):
        return self._refuse


def _jit(fn=None, **options):
    """``@triton.jit`` and ``@triton.jit(...)`` alike."""
    if fn is None:
        return lambda f: StandInKernel(f)
    return StandInKernel(fn)


class _Constexpr:
    """``tl.constexpr``, only as an annotation."""


triton = SimpleNamespace(
    jit=_jit,
    cdiv=lambda a, b: -(-a // b),
    next_power_of_2=lambda n: 1 if n <= 1 else 1 << (int(n) - 1).bit_length(),
    __version__="not installed",
)
tl = SimpleNamespace(constexpr=_Constexpr)
