"""When Triton decides between its interpreter and the compiler (chapter 00's claim).

With the installed Triton (3.x), ``@triton.jit`` reads ``TRITON_INTERPRET`` when it
decorates a function (through ``triton.knobs.runtime.interpret``, which reads the environment
on each access), not once when triton is imported; a kernel keeps the mode it was given.
Each test runs a fresh Python process, so the test session's own setting does not matter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import os

    import torch
    import triton
    import triton.language as tl


    def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(y_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


    early = triton.jit(double)  # decorated after `import triton`, variable unset
    os.environ["TRITON_INTERPRET"] = "1"  # set after the import
    late = triton.jit(double)  # decorated now
    print(type(early).__name__, type(late).__name__)

    x = torch.arange(10, dtype=torch.float32)  # CPU tensors
    y = torch.empty_like(x)
    late[(1,)](x, y, x.numel(), BLOCK=16)  # the interpreter runs it on the CPU
    print("late ran on the CPU:", torch.equal(y, 2 * x))
    """
)


def _run(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    path = tmp_path / "probe.py"  # @triton.jit needs a function defined in a file
    path.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_mode_is_read_when_a_kernel_is_decorated_not_at_import(tmp_path):
    proc = _run(tmp_path, PROBE)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().splitlines()
    assert first == "JITFunction InterpretedFunction"  # same process, same import of triton
    assert second == "late ran on the CPU: True"


def test_env_setup_after_import_triton_still_interprets_later_kernels(tmp_path):
    """The case chapter 00's first question asks about: `import triton` first, then setup."""
    code = textwrap.dedent(
        """
        import triton
        from course_lib import env

        e = env.setup(quiet=True)


        def kernel(x_ptr):
            pass


        print(e.triton_interpreter, type(triton.jit(kernel)).__name__)
        """
    )
    proc = _run(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    import torch

    expected = "False JITFunction" if torch.cuda.is_available() else "True InterpretedFunction"
    assert proc.stdout.strip() == expected
