"""course_lib.env and the bootstrap script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib import env

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, **extra_env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    e.update(extra_env)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd=ROOT, timeout=120
    )


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="the interpreter is for machines without a CUDA GPU"
)
def test_setup_turns_on_the_triton_interpreter_before_triton_is_imported():
    proc = _run(
        "from course_lib import env; e = env.setup(); import os, triton; "
        "print('MODE', os.environ['TRITON_INTERPRET'], e.triton_mode)"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("course_lib: device=cpu"), "setup must say what it chose"
    assert "interpreter" in lines[0]
    assert lines[-1] == "MODE 1 interpreter (CPU)"


def test_setup_respects_a_learners_own_choice():
    proc = _run(
        "from course_lib import env; env.setup(quiet=True); import os; "
        "print(os.environ['TRITON_INTERPRET'])",
        TRITON_INTERPRET="0",
    )
    assert proc.stdout.strip() == "0"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_setup_warns_when_triton_was_imported_first():
    proc = _run("import triton; from course_lib import env; env.setup()")
    assert "restart the kernel" in proc.stdout


def test_setup_seeds_everything():
    env.setup(seed=7, quiet=True, plots=False)
    a = torch.rand(3)
    env.setup(seed=7, quiet=True, plots=False)
    assert torch.equal(a, torch.rand(3))


def test_report_lists_versions(capsys):
    info = env.report()
    out = capsys.readouterr().out
    for key in ("python", "numpy", "torch", "triton", "gpu", "triton mode"):
        assert key in info and key in out
    assert info["torch"] == torch.__version__.split("+")[0] or info["torch"].startswith(
        torch.__version__.split("+")[0]
    )


def test_bootstrap_refuses_a_too_old_python_with_a_clear_message():
    code = (
        "import sys; sys.path.insert(0, 'tools'); import bootstrap; "
        "bootstrap.MIN_PYTHON = (99, 0); bootstrap.check_python()"
    )
    proc = _run(code)
    assert proc.returncode == 1
    assert "needs Python 99.0 or newer" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bootstrap_usage_message():
    proc = subprocess.run(
        [sys.executable, "tools/bootstrap.py", "frobnicate"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "usage:" in proc.stderr


def test_bootstrap_reuses_an_installed_environment():
    """A second `make test` must not reinstall: the stamp matches pyproject.toml."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import bootstrap
    finally:
        sys.path.pop(0)
    stamp = Path(bootstrap.STAMP)
    if not stamp.exists():
        pytest.skip("not running from the course's .venv")
    installed, extras = bootstrap.read_stamp()
    assert installed == bootstrap.requirements_hash(), "the stamp is not this pyproject.toml's"
    assert "test" in extras, f"`make test` ran, yet the stamp records extras {extras}"


def test_budget_reads_course_budget(monkeypatch):
    from course_lib import env

    monkeypatch.delenv("COURSE_BUDGET", raising=False)
    assert env.budget() == "full"
    monkeypatch.setenv("COURSE_BUDGET", " CI ")
    assert env.budget() == "ci"
    monkeypatch.setenv("COURSE_BUDGET", "fast")
    with pytest.raises(ValueError, match="COURSE_BUDGET"):
        env.budget()
