"""course_lib.env and the bootstrap script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib import env

ROOT = Path(__file__).resolve().parents[2]


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


def test_setup_seeds_torch_and_sets_matplotlibs_defaults_in_a_fresh_process():
    """What a notebook's first cell guarantees: torch, imported in a later cell, is in the
    state a seed at setup gives, and matplotlib has the course's defaults."""
    proc = _run(
        "from course_lib import env\n"
        "env.setup(seed=3)\n"
        "import torch\n"
        "first = torch.rand(4)\n"
        "torch.manual_seed(3)\n"
        "print('SEEDED', torch.equal(first, torch.rand(4)))\n"
        "import matplotlib.pyplot as plt\n"
        "print('RC', plt.rcParams['figure.dpi'], plt.rcParams['axes.grid'])\n"
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "SEEDED True" in out and "RC 100.0 True" in out, proc.stdout


def test_course_lib_and_setup_install_no_import_hook():
    """Importing course_lib and calling setup() change nothing in how Python imports: no
    finder on sys.meta_path, no path hook, no patched loader (issue 39)."""
    proc = _run(
        "import sys\n"
        "before = (list(sys.meta_path), list(sys.path_hooks))\n"
        "import course_lib\n"
        "from course_lib import env\n"
        "env.setup(quiet=True)\n"
        "import course_lib.attention, course_lib.multihead\n"
        "print('SAME', (list(sys.meta_path), list(sys.path_hooks)) == before)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert "SAME True" in proc.stdout.splitlines(), proc.stdout


def test_setup_works_without_torch_or_matplotlib():
    """Seeding torch and setting plot defaults are for what is installed: with neither
    (an import of them fails), setup() still seeds Python and numpy."""
    proc = _run(
        "import sys\n"
        "sys.modules['torch'] = None  # import torch now raises ImportError\n"
        "sys.modules['matplotlib'] = None\n"
        "from course_lib import env\n"
        "e = env.setup(seed=5, quiet=True)\n"
        "import numpy as np, random\n"
        "a, r = np.random.rand(), random.random()\n"
        "np.random.seed(5); random.seed(5)\n"
        "print('SEEDED', a == np.random.rand() and r == random.random(), e.device)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert "SEEDED True cpu" in proc.stdout.splitlines(), proc.stdout


def test_no_driver_means_no_cuda_without_asking_torch(monkeypatch):
    """Without torch imported, a Linux machine with no trace of the NVIDIA driver has no
    GPU; a trace (the driver's /proc entry, a device file, WSL's /dev/dxg) leaves the
    question to torch, and so does an imported torch."""
    monkeypatch.setattr(env.sys, "platform", "linux")
    monkeypatch.setattr(env.os.path, "exists", lambda p: False)
    monkeypatch.setattr(env, "_listdir", lambda p: ["null", "tty0"])
    assert env._no_nvidia_gpu_here()
    monkeypatch.setattr(env, "_listdir", lambda p: ["null", "nvidia0", "nvidiactl"])
    assert not env._no_nvidia_gpu_here()
    monkeypatch.setattr(env, "_listdir", lambda p: ["null"])
    monkeypatch.setattr(env.os.path, "exists", lambda p: p == "/dev/dxg")
    assert not env._no_nvidia_gpu_here()
    monkeypatch.setattr(env.os.path, "exists", lambda p: p == "/dev/kfd")  # ROCm
    assert not env._no_nvidia_gpu_here()
    monkeypatch.setattr(env.sys, "platform", "darwin")
    assert env._no_nvidia_gpu_here()
    monkeypatch.setattr(env.sys, "platform", "win32")
    assert not env._no_nvidia_gpu_here()
    # torch imported (it is, in this process): torch answers, whatever the files say
    monkeypatch.setattr(env.sys, "platform", "darwin")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert env._cuda_available()


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
