"""How course_lib.flash reads: one pass in two files, kernels launched by name, short functions.

Each pass reads as Triton's fused-attention tutorial does (the kernel in ``kernels/<pass>.py``;
its launcher and, for the forward, the autograd function in ``<pass>.py``): the launcher
imports the kernel object, passes every argument by keyword, and the package hands on no
private name. These are rules of the source, checked on its text.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import course_lib.flash as flash

FLASH = Path(flash.__file__).parent
LAUNCHERS = ("forward.py", "backward.py", "decode.py")
FUNCTION_MAX_LINES = 80  # outside the @triton.jit kernels


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _is_kernel(node) -> bool:
    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def test_no_function_outside_the_kernels_is_longer_than_a_reader_can_follow():
    long = [
        f"{path.relative_to(FLASH)}:{node.lineno} {node.name} ({n} lines)"
        for path in sorted(FLASH.rglob("*.py"))
        for node in _functions(path)
        if not _is_kernel(node) and (n := node.end_lineno - node.lineno + 1) > FUNCTION_MAX_LINES
    ]
    assert not long, f"functions over {FUNCTION_MAX_LINES} lines: {long}"


def test_every_kernel_is_launched_with_keyword_arguments_from_its_own_module():
    """``kernel[grid](...)`` and ``run_kernel(kernel, tiles, grid, ...)`` take no positional
    kernel argument, and the kernel is imported by name from ``kernels/<pass>.py``: never
    looked up by a string."""
    launched = set()
    for name in LAUNCHERS:
        tree = ast.parse((FLASH / name).read_text())
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == f"kernels.{name[:-3]}"
            for alias in node.names
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Subscript):  # kernel[grid](...)
                kernel = node.func.value.id
                assert not node.args, f"{name}: {kernel} launched with positional arguments"
            elif isinstance(node.func, ast.Name) and node.func.id == "run_kernel":
                kernel = node.args[0].id
                assert len(node.args) == 3, f"{name}: {kernel} gets positional kernel arguments"
            else:
                continue
            assert kernel in imported, f"{name}: {kernel} is not imported from kernels/{name}"
            launched.add(kernel)
        assert "getattr(" not in (FLASH / name).read_text(), name
    assert launched == {
        "_fwd_kernel",
        "_bwd_preprocess_kernel",
        "_bwd_dkdv_kernel",
        "_bwd_dq_kernel",
        "_decode_kernel",
        "_decode_merge_kernel",
    }


def test_the_package_hands_on_public_names_only():
    private = sorted(n for n in vars(flash) if n.startswith("_") and not n.startswith("__"))
    assert not private, private
    assert all(not n.startswith("_") for n in flash.__all__)


def test_importing_the_package_leaves_triton_alone():
    """Triton reads TRITON_INTERPRET when a kernel is decorated: the kernels are imported at
    the first launch, after course_lib.env has chosen the mode, never by ``import``."""
    code = "import sys, course_lib.flash; print('triton' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "False", proc.stderr
