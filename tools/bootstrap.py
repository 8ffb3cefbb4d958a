# Set up the course's .venv (once) and run a command in it. Used by `make lab` and
# `make test`; also works without make: `python3 tools/bootstrap.py lab|test|progress|update|...`.
#
# Written to run on old Pythons too (no f-strings, no annotations), so that a learner
# with a too-old Python gets a clear message instead of a SyntaxError.
import hashlib
import os
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


def ensure_venv():
    """Create .venv when missing and (re)install the course when pyproject.toml changed."""
    if not os.path.exists(PY):
        check_python()
        print("Creating the course environment in .venv (first run only) ...")
        run([sys.executable, "-m", "venv", VENV])
    want = requirements_hash()
    have = open(STAMP).read().strip() if os.path.exists(STAMP) else ""
    if have == want:
        return
    print("Installing the course and its dependencies into .venv (a few minutes) ...")
    run([PY, "-m", "pip", "install", "--upgrade", "pip"])
    run([PY, "-m", "pip", "install", "-e", ".[test,site]"])
    with open(STAMP, "w") as f:
        f.write(want + "\n")


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


def full_suite_args():
    """What `make test` runs: every test, every lecture and solution notebook, in parallel."""
    return [
        "-n",
        os.environ.get("JOBS", "2"),
        "--dist",
        "loadfile",
        "--nbval-lax",
        "--nbval-current-env",
        "tests",
        "notebooks",
        "solutions",
    ]


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


COMMANDS = ("setup", "lab", "test", "exercises", "progress", "update", "site")


def main(argv):
    if not argv or argv[0] not in COMMANDS:
        die("usage: python3 tools/bootstrap.py {} [args...]".format("|".join(COMMANDS)))
    check_python()
    ensure_venv()
    what, rest = argv[0], argv[1:]
    if what == "setup":
        return 0
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
    env = lab_env()
    # Tests run notebooks in parallel, one kernel per core: one BLAS/OpenMP thread per
    # kernel avoids oversubscription, which makes small matmuls many times slower.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    args = rest or full_suite_args()
    return wait_quietly(subprocess.Popen([PY, "-m", "pytest"] + args, cwd=ROOT, env=env))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
