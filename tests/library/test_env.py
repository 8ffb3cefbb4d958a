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


def test_setup_imports_neither_torch_nor_matplotlib_and_seeds_them_on_import():
    """A notebook that uses numpy only (chapter 00's exercises) does not pay two seconds for
    importing torch at setup; torch, imported later, is in the state a seed at setup gives,
    a ``find_spec`` (which imports nothing) does not use the seeding up, and matplotlib
    gets the course's defaults the moment it is imported."""
    proc = _run(
        "import sys, importlib.util\n"
        "from course_lib import env\n"
        "env.setup(seed=3)\n"
        "print('IMPORTED', 'torch' in sys.modules, 'matplotlib' in sys.modules)\n"
        "assert importlib.util.find_spec('torch') is not None\n"
        "import torch\n"
        "first = torch.rand(4)\n"
        "torch.manual_seed(3)\n"
        "print('SEEDED', torch.equal(first, torch.rand(4)))\n"
        "import matplotlib\n"
        "print('RC', matplotlib.rcParams['figure.dpi'], matplotlib.rcParams['axes.grid'])\n"
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    if not torch.cuda.is_available():  # with a GPU, setup imports torch to say which
        assert "IMPORTED False False" in out, proc.stdout
    assert "SEEDED True" in out and "RC 100.0 True" in out, proc.stdout


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


def test_a_failing_after_import_callback_warns_and_the_import_still_works(tmp_path, monkeypatch):
    """The hook never breaks the learner's import: a callback that raises is a warning."""
    import importlib

    name = "course_env_probe_module"  # a module of its own, never imported before
    (tmp_path / f"{name}.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)

    def broken(module):
        raise RuntimeError("no defaults today")

    env._when_imported(name, broken)
    with pytest.warns(UserWarning, match="no defaults today"):
        module = importlib.import_module(name)
    assert module.VALUE == 42 and not any(getattr(f, "name", None) == name for f in sys.meta_path)


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
