"""Environment set-up for every notebook: seeds, plotting defaults, device, Triton mode.

``setup()`` is the first call of every notebook. Its one subtle job is Triton's mode:
Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a kernel, and the kernel
keeps that mode, so the variable must be set before any kernel is defined (importing
``triton`` earlier is harmless; tests/course_lib/test_triton_mode.py). Without a CUDA GPU we turn the
interpreter on, which runs every Triton kernel on the CPU through numpy: slow, but
exact enough to learn from and to test against.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import random
import sys
from dataclasses import dataclass

DEFAULT_SEED = 0

# How long the chapters that train models (07-09) may train: "full" for a learner (a few
# minutes on a laptop CPU), "ci" for the test suite (seconds). The test suite sets
# COURSE_BUDGET=ci; a learner never needs to. Claims a notebook asserts hold in both.
BUDGETS = ("full", "ci")


@dataclass(frozen=True)
class Environment:
    """What ``setup()`` decided. ``device`` is "cuda" or "cpu"."""

    device: str
    triton_available: bool
    triton_interpreter: bool
    seed: int

    @property
    def triton_mode(self) -> str:
        if not self.triton_available:
            return "unavailable"
        return "interpreter (CPU)" if self.triton_interpreter else "compiled (GPU)"


def _no_nvidia_gpu_here() -> bool:
    """True when this machine certainly has no NVIDIA GPU for torch, known without importing
    torch (which takes about 2 s): macOS (torch has no CUDA there), or Linux without any
    trace of a GPU driver torch could use (``/proc/driver/nvidia``, ``/dev/nvidia0``...,
    WSL's ``/dev/dxg``, or ROCm's ``/dev/kfd``: torch's ``cuda`` is AMD's GPU there).
    Anywhere else the answer is torch's."""
    if sys.platform == "darwin":
        return True
    if not sys.platform.startswith("linux"):
        return False
    traces = ("/proc/driver/nvidia", "/dev/dxg", "/dev/kfd")  # NVIDIA, WSL, AMD's ROCm
    if any(os.path.exists(p) for p in traces):
        return False
    return not any(name.startswith("nvidia") for name in _listdir("/dev"))


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _cuda_available() -> bool:
    if "torch" not in sys.modules and _no_nvidia_gpu_here():
        return False  # no driver: torch would say the same, two seconds later
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False
    return bool(torch.cuda.is_available())


def triton_installed() -> bool:
    """True when the triton package can be imported (Linux wheels only)."""
    return importlib.util.find_spec("triton") is not None


# The one message about Triton's absence, the same in every notebook, the README and the
# notebooks' Colab cell (course_tools/notebook_headers.py): see advice().
TRITON_HELP = (
    "Triton is not installed here: it ships wheels for Linux only. Everything except the "
    "Triton kernels runs on this machine. For the kernels (chapter 06), open the notebook in "
    "Google Colab with its 'Open in Colab' badge (README or the course website): its first "
    "cell installs the course, and Runtime > Change runtime type > GPU runs the kernels "
    "compiled. Or use Binder, or WSL/Linux with `make lab`. On Linux, "
    "`.venv/bin/pip install triton` adds it to the course's environment."
)
TRITON_INTERPRETER_NOTE = (
    "No CUDA GPU: everything runs on the CPU, and Triton kernels run in Triton's interpreter "
    "(exact but slow, so the CPU versions use small sizes). On a GPU they run compiled "
    "(on Colab: Runtime > Change runtime type > GPU)."
)


def advice(environment: Environment | None = None) -> list[str]:
    """What a learner should know about this environment, one note per topic (no note
    repeats another: without Triton, only :data:`TRITON_HELP`)."""
    cuda = environment.device == "cuda" if environment is not None else _cuda_available()
    if not triton_installed():
        return [TRITON_HELP]
    if not cuda:
        return [TRITON_INTERPRETER_NOTE]
    return []


def triton_interpreter_on() -> bool:
    """True when ``TRITON_INTERPRET`` asks Triton for its CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def choose_triton_mode(*, warn: bool = False) -> bool:
    """The one place that turns Triton's interpreter on: ``TRITON_INTERPRET=1`` when there
    is no CUDA GPU, unless the variable is already set. Returns :func:`triton_interpreter_on`.

    Triton reads the variable when ``@triton.jit`` decorates a kernel, so kernels defined
    before this call keep the compiled mode; ``warn`` prints a note when triton was imported
    first (such kernels may exist).
    """
    if not _cuda_available() and "TRITON_INTERPRET" not in os.environ:
        if sys.modules.get("triton") is not None and warn:
            print(
                "warning: triton was imported before env.setup(). Kernels decorated with "
                "@triton.jit before this call stay in compiled (GPU) mode: define them after "
                "env.setup(), or restart the kernel and call env.setup() first."
            )
        os.environ["TRITON_INTERPRET"] = "1"
    return triton_interpreter_on()


def budget() -> str:
    """The training budget: ``"full"`` (default) or ``"ci"`` (env. variable COURSE_BUDGET).

    Chapters that train a model pick their number of steps from it, e.g.
    ``steps = {"full": 3000, "ci": 300}[env.budget()]``.
    """
    value = os.environ.get("COURSE_BUDGET", "full").strip().lower() or "full"
    if value not in BUDGETS:
        raise ValueError(f"COURSE_BUDGET must be one of {BUDGETS}, got {value!r}")
    return value


def seed_everything(seed: int = DEFAULT_SEED) -> None:
    """Seed Python, numpy and torch so every run of a notebook prints the same numbers.

    Imports torch to seed it (when it is installed): see :func:`setup` for what that costs.
    """
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch = _import_if_installed("torch")
    if torch is not None:
        torch.manual_seed(seed)


def _import_if_installed(name: str):
    """The module ``name``, imported, or None when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def setup(seed: int = DEFAULT_SEED, *, quiet: bool = False, plots: bool = True) -> Environment:
    """Prepare a notebook: Triton mode, seeds, plotting defaults; returns what was chosen.

    In this order: Triton's mode first (it turns on Triton's interpreter,
    ``TRITON_INTERPRET=1``, when there is no CUDA GPU, unless the learner set the variable
    themselves), before anything this function imports could define a kernel; then it seeds
    Python, numpy and torch (:func:`seed_everything`) and sets matplotlib's defaults for the
    course (``plots=False`` leaves matplotlib alone). Prints one line saying what it chose.

    It imports torch and matplotlib when they are installed: about 2.5 s in a fresh
    process, which a lecture spends anyway in its next cells (the figures are below).
    """
    # What importing them here costs, measured in fresh processes on a 2-core Linux CPU
    # without a GPU, medians of 7 runs (2026-12-04). Quiet machine: `import torch` 2.4 s,
    # `import matplotlib` 0.3 s; the previous setup(), which put both off with an import hook
    # until first used, 0.2 s for the whole process. Under load (load average 9-14): torch
    # 4.6 s, matplotlib 0.7 s, setup() alone 5.1 s (0.3 s with the hook), and
    # `setup(); import torch, matplotlib.pyplot`, what a lecture does, 6.9 s (5.8 s with the
    # hook, within the runs' spread of 5.4-8.0 s). So only a notebook that uses numpy alone
    # pays: chapter 00's exercises, and each grading run of them, 2-3 s more.
    cuda = _cuda_available()
    interpret = choose_triton_mode(warn=not quiet)  # before torch: nothing defines a kernel yet
    seed_everything(seed)
    if plots:
        _plot_defaults()
    env = Environment(
        device="cuda" if cuda else "cpu",
        triton_available=triton_installed(),
        triton_interpreter=interpret,
        seed=seed,
    )
    if not quiet:
        if cuda:
            import torch

            where = f"CUDA GPU ({torch.cuda.get_device_name(0)})"
        else:
            where = "CPU (no CUDA GPU)"
        print(f"course_lib: device={env.device} on {where}; Triton: {env.triton_mode}; seed={seed}")
    return env


def _plot_defaults() -> None:
    """matplotlib's defaults for the course (imports matplotlib, when it is installed)."""
    mpl = _import_if_installed("matplotlib")
    if mpl is not None:
        _set_rc(mpl)


def _set_rc(mpl) -> None:
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 100,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "image.cmap": "viridis",
        }
    )


def versions() -> dict[str, str]:
    """Versions of the packages the course relies on ("missing" when absent)."""
    out = {"python": platform.python_version()}
    for name in ("numpy", "torch", "triton", "matplotlib", "ipywidgets", "jupyterlab"):
        if importlib.util.find_spec(name) is None:
            out[name] = "missing"
            continue
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:  # pragma: no cover - odd installs
            out[name] = "installed (version unknown)"
    return out


def report() -> dict[str, str]:
    """Print a short environment summary and return it as a dict."""
    info = versions()
    info["platform"] = f"{platform.system()} {platform.machine()}"
    cuda = _cuda_available()
    if cuda:
        import torch

        info["gpu"] = torch.cuda.get_device_name(0)
    else:
        info["gpu"] = "none (CPU only)"
    interp = triton_interpreter_on()
    info["triton mode"] = (
        "not installed"
        if info.get("triton") == "missing"
        else "interpreter (CPU)"
        if interp
        else "compiled (GPU)"
    )
    width = max(len(k) for k in info)
    for k, v in info.items():
        print(f"{k:<{width}} : {v}")
    return info
