"""The OS sandbox every learner's kernel runs in: bubblewrap (``bwrap``), plus limits.

A kernel (and every process it starts) sees a file system made of read-only binds of what
it needs and nothing else:

* read-only: the system (``/usr``, ``/etc`` without its secrets), the folder of model files
  (SmolLM2, which chapters 10 and 11 load; ``COURSE_MODELS`` points there), the Python environment
  (``sys.prefix``, ``sys.base_prefix``), the packages ``course_lib`` and ``course_tools``,
  ``course_lib`` without its chapter checks (``course_lib/checks/chNN.py``: the exercises'
  references and hidden-case generators) and without compiled files, wherever the kernel
  could find it (:func:`learner_course_lib`);
* read-write: this kernel's own working folder (its cwd, where it writes the recorded
  outputs) and its own channel folder (the Jupyter connection file and the ZMQ sockets,
  ``ipc`` transport: Unix sockets, never TCP);
* private: ``/tmp`` (a small tmpfs), ``/dev`` (the usual nodes), ``/proc`` (its own PID
  namespace), and the IPC, network (loopback only), UTS and user namespaces;
* invisible: everything else — the course's ``solutions/`` and ``.git``, the submissions,
  the gradebook folder (and its secret seed), the grader's scratch space, other kernels'
  folders and sockets, home folders.

The kernel runs with no capabilities, cannot create user namespaces, and dies with its
parent (``--die-with-parent``); when the PID namespace's first process dies, the kernel
kills every process left in it. Limits come from cgroups when this process may create
them (memory, number of processes, CPU share), else from rlimits (address space, CPU
time, file size): :meth:`Limits.describe` says which.

Why bubblewrap: it is small (one setuid-free binary, packaged by every Linux
distribution, the tool Flatpak is built on), needs no daemon, image or root, starts in
milliseconds, and is driven entirely from its command line, so the grader states every
mount itself. See ``docs/instructors.md`` for the comparison with nsjail, firejail and
containers.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# /etc files and folders a kernel has no business reading (masked with empty ones).
ETC_SECRETS = (
    "shadow",
    "gshadow",
    "shadow-",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "ssl/private",
    "security/opasswd",
    "krb5.keytab",
    "machine-id",
)
PACKAGES = "/opt/course-packages"  # where a kernel finds course_lib and course_tools
MODELS = "/opt/course-models"  # where a kernel finds the real model (chapters 10 and 11)
TMP_BYTES = 1 << 30  # the kernel's private /tmp (a tmpfs: memory)
SHM_BYTES = 512 << 20  # its /dev/shm (a tmpfs too: shared memory, torch's worker tensors)
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")
SAFE_ENV_PREFIXES = ("COURSE_", "TRITON_", "CUDA_", "NVIDIA_")
SAFE_ENV = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM")


class SandboxUnavailable(RuntimeError):
    """No usable sandbox on this machine; the message says why and what to do."""


def _real(p: str | Path) -> str:
    return os.path.realpath(str(p))


def pythonpath(hide: Sequence[str | Path] = ()) -> list[str]:
    """The folders of ``PYTHONPATH`` a kernel may see (read-only): all but a folder that is,
    or holds, one of ``hide`` (the course folder, whose solutions/ no kernel may read)."""
    out = []
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        real = Path(_real(entry))
        if any(Path(_real(h)).is_relative_to(real) for h in hide):
            continue
        out.append(os.path.abspath(entry))
    return out


def course_packages() -> dict[str, str]:
    """{name: folder} of the packages ``course_lib`` and ``course_tools`` this process
    imported; the sandbox shows them under :data:`PACKAGES`, first on the kernel's path, so
    a kernel runs the very code the grader checked (not another checkout that an editable
    install of the environment points to)."""
    import course_lib
    import course_tools

    files = {"course_lib": course_lib.__file__, "course_tools": course_tools.__file__}
    return {name: _real(Path(file).parent) for name, file in files.items()}


# the chapter checks: references, hidden-case generators (chNN.py) and their texts (chNN.md)
_WITHHELD = ("checks/ch[0-9]*.py", "checks/ch[0-9]*.md")


def learner_course_lib() -> str:
    """A copy of the ``course_lib`` this process imported, for the kernels to see: without
    the chapter checks (:data:`_WITHHELD`) and without ``__pycache__`` (a compiled check is a
    check). Made once per grading process, in a private temporary folder removed at exit.
    The kernel still has :mod:`course_lib.checks.core` (``check``, the comparison); the
    grader computes every expected value in its own process."""
    global _LEARNER_COPY
    if _LEARNER_COPY is None or not os.path.isdir(_LEARNER_COPY):
        import atexit
        import tempfile

        root = tempfile.mkdtemp(prefix="course-grade-lib-")
        atexit.register(_remove_if_mine, root, os.getpid())  # a forked worker inherits the
        # handler: only the process that made the copy removes it
        dest = os.path.join(root, "course_lib")
        src = course_packages()["course_lib"]
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for pattern in _WITHHELD:
            for path in glob.glob(os.path.join(dest, pattern)):
                os.remove(path)
        _LEARNER_COPY = dest
    return _LEARNER_COPY


_LEARNER_COPY: str | None = None


def _remove_if_mine(root: str, pid: int) -> None:
    if os.getpid() == pid:
        shutil.rmtree(root, ignore_errors=True)


def course_lib_views(hide: Sequence[str | Path] = ()) -> list[str]:
    """Every path under which a kernel could find ``course_lib``'s files: the grader's own
    (:data:`PACKAGES`), where it really lives, and a ``course_lib`` inside any folder the
    kernel sees (site-packages, ``PYTHONPATH``). The sandbox binds the learner's copy over each."""
    import site

    import course_lib

    views = [f"{PACKAGES}/course_lib", _real(Path(course_lib.__file__).parent)]
    views.append(os.path.abspath(Path(course_lib.__file__).parent))
    try:
        folders = [*python_paths(hide), *site.getsitepackages()]
    except AttributeError:  # pragma: no cover - very old virtualenv
        folders = python_paths(hide)
    for p in folders:
        if os.path.isdir(os.path.join(p, "course_lib", "checks")):
            views += [os.path.join(p, "course_lib"), _real(os.path.join(p, "course_lib"))]
    # a link is not a mount point (bubblewrap follows it): its target is in the list
    return [v for v in dict.fromkeys(views) if not os.path.islink(v)]


def _under(path: str, folders: list[str]) -> bool:
    """Whether ``path`` is one of ``folders`` or inside one (as the sandbox shows them)."""
    return any(path == f or path.startswith(str(f).rstrip("/") + "/") for f in folders)


def python_paths(hide: Sequence[str | Path] = ()) -> list[str]:
    """Folders the kernel's Python needs: the environment, its base, site-packages, the
    course's own packages (wherever an editable install keeps them) and ``PYTHONPATH``
    (see :func:`pythonpath`)."""
    import site

    import course_lib
    import course_tools

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    paths |= set(pythonpath(hide))
    try:
        paths |= set(site.getsitepackages())
    except AttributeError:  # pragma: no cover - very old virtualenv
        pass
    paths.add(str(Path(course_lib.__file__).resolve().parent))
    paths.add(str(Path(course_tools.__file__).resolve().parent))
    out = set()
    for p in paths:
        if p and os.path.isdir(p):
            out.add(os.path.abspath(p))
            out.add(_real(p))
    # keep only the outermost folders (a bind of /a also shows /a/b)
    ordered = sorted(out, key=len)
    keep: list[str] = []
    for p in ordered:
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in keep):
            keep.append(p)
    return keep


@dataclass
class Limits:
    """Per-kernel limits: ``memory`` bytes, ``cpus`` (a CPU share), ``pids``, ``cpu_seconds``
    and ``file_bytes``. Applied by cgroups where possible, else by rlimits."""

    memory: int | None = None
    address_space: int | None = None  # rlimit, also set when the instructor asks for it
    cpus: float | None = None
    pids: int = 512
    cpu_seconds: int | None = None
    file_bytes: int = 2 << 30
    disk_bytes: int = 2 << 30  # what the kernel may write into its working folders, in all
    cgroup: CgroupSet | None = None

    def describe(self) -> str:
        """What is enforced, for the start-up line."""
        parts = []
        if self.cgroup and self.memory:
            parts.append(f"memory {self.memory / 2**30:.1f} GB (cgroup)")
        if self.address_space:
            parts.append(f"address space {self.address_space / 2**30:.1f} GB (rlimit)")
        if self.cgroup:
            parts.append(f"{self.pids} processes (cgroup)")
            if self.cpus:
                parts.append(f"{self.cpus:g} CPU(s) (cgroup)")
        if self.cpu_seconds:
            parts.append(f"CPU time {self.cpu_seconds} s per process (rlimit)")
        parts.append(f"files up to {self.file_bytes / 2**30:.0f} GB (rlimit)")
        parts.append(f"working folders {self.disk_bytes / 2**30:g} GB in all")
        parts.append(f"/tmp {TMP_BYTES / 2**30:.0f} GB, /dev/shm {SHM_BYTES / 2**30:g} GB")
        return ", ".join(parts)


# --------------------------------------------------------------------------- cgroups


class CgroupSet:
    """A folder of per-kernel cgroups the grader made (v2, or v1's memory/pids/cpu)."""

    def __init__(self, version: int, bases: dict[str, Path], prefix: str = "k"):
        self.version = version
        self.bases = bases  # controller ("unified" for v2) -> this run's parent cgroup
        self.prefix = prefix  # one per worker process: their kernels' cgroups never clash
        self.count = 0

    def to_json(self, prefix: str) -> dict:
        return {
            "version": self.version,
            "bases": {k: str(v) for k, v in self.bases.items()},
            "prefix": prefix,
        }

    @classmethod
    def from_json(cls, data: dict) -> CgroupSet:
        bases = {k: Path(v) for k, v in data["bases"].items()}
        return cls(int(data["version"]), bases, data.get("prefix", "k"))

    @classmethod
    def create(cls, name: str, root: Path = Path("/sys/fs/cgroup")) -> CgroupSet | None:
        """This run's parent cgroup, or None when cgroups cannot be used here."""
        try:
            if (root / "cgroup.controllers").exists():
                return cls._create_v2(name, root)
            return cls._create_v1(name, root)
        except OSError:
            return None

    @classmethod
    def _own(cls, controller: str) -> str:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if controller in ctrls.split(",") or (controller == "" and ctrls == ""):
                    return path
        raise OSError(f"not in a {controller or 'v2'} cgroup")

    @classmethod
    def _create_v2(cls, name: str, root: Path) -> CgroupSet | None:
        own = root / cls._own("").lstrip("/")
        wanted = {"memory", "pids", "cpu"}
        if not wanted <= set((own / "cgroup.controllers").read_text().split()):
            return None
        enabled = set((own / "cgroup.subtree_control").read_text().split())
        if not {"memory", "pids"} <= enabled:
            # fails (EBUSY) when processes live in our cgroup: then no cgroups
            (own / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        base = own / name
        base.mkdir()
        try:
            (base / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        except OSError:
            base.rmdir()
            return None
        return cls(2, {"unified": base})

    @classmethod
    def _create_v1(cls, name: str, root: Path) -> CgroupSet | None:
        bases = {}
        for ctrl in ("memory", "pids", "cpu"):
            mount = root / ctrl
            if not mount.is_dir():
                continue
            own = mount / cls._own(ctrl).lstrip("/")
            base = own / name
            base.mkdir()
            bases[ctrl] = base
        if not {"memory", "pids"} <= set(bases):
            for b in bases.values():
                b.rmdir()
            return None
        return cls(1, bases)

    def new(self, limits: Limits) -> list[Path]:
        """A fresh cgroup (one folder per hierarchy) with ``limits`` written in."""
        self.count += 1
        made = []
        for ctrl, base in self.bases.items():
            d = base / f"{self.prefix}{self.count}"
            d.mkdir()
            made.append(d)
            if self.version == 2:
                if limits.memory:
                    (d / "memory.max").write_text(str(limits.memory))
                    _try_write(d / "memory.swap.max", "0")
                (d / "pids.max").write_text(str(limits.pids))
                if limits.cpus:
                    _try_write(d / "cpu.max", f"{int(limits.cpus * 100000)} 100000")
            elif ctrl == "memory" and limits.memory:
                (d / "memory.limit_in_bytes").write_text(str(limits.memory))
                _try_write(d / "memory.memsw.limit_in_bytes", str(limits.memory))
            elif ctrl == "pids":
                (d / "pids.max").write_text(str(limits.pids))
            elif ctrl == "cpu" and limits.cpus:
                _try_write(d / "cpu.cfs_period_us", "100000")
                _try_write(d / "cpu.cfs_quota_us", str(int(limits.cpus * 100000)))
        return made

    @staticmethod
    def kill(dirs: list[Path]) -> None:
        """Kill whatever is left in these cgroups, then remove them."""
        for d in dirs:
            if (d / "cgroup.kill").exists():
                _try_write(d / "cgroup.kill", "1")
        for _ in range(50):
            alive = False
            for d in dirs:
                try:
                    pids = (d / "cgroup.procs").read_text().split()
                except OSError:
                    continue
                for pid in pids:
                    alive = True
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
            if not alive:
                break
            import time

            time.sleep(0.02)
        for d in dirs:
            try:
                d.rmdir()
            except OSError:
                pass

    def close(self) -> None:
        for base in self.bases.values():
            for d in sorted(p for p in base.iterdir() if p.is_dir()):
                self.kill([d])
            try:
                base.rmdir()
            except OSError:
                pass


def _try_write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError:
        pass


def apply_limits(limits: Limits, cgroup_dirs: list[Path]) -> None:
    """Runs in the child process (``preexec_fn``) right before it becomes the sandbox."""
    import resource

    for d in cgroup_dirs:
        try:  # a cgroup that refuses the process leaves the rlimits below in force
            with open(d / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass
    wanted = [
        (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if limits.address_space:
        wanted.append((resource.RLIMIT_AS, limits.address_space, limits.address_space))
    if limits.cpu_seconds:
        wanted.append((resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5))
    for which, soft, hard in wanted:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):  # a limit this system does not support (macOS: AS)
            if which == resource.RLIMIT_AS:
                raise


# --------------------------------------------------------------------------- bubblewrap


@dataclass
class Sandbox:
    """How to wrap a kernel's command in bubblewrap."""

    bwrap: str
    user_namespace: bool = True
    ro: list[str] = field(default_factory=list)  # extra read-only folders
    hide: list[str | Path] = field(default_factory=list)  # never bound, nor any folder above them
    version: tuple[int, ...] = (0, 8, 0)

    @staticmethod
    def tool_version(bwrap: str) -> tuple[int, ...]:
        """bubblewrap's version (``--size`` needs 0.7, ``--disable-userns`` 0.8)."""
        try:
            out = subprocess.run(
                [bwrap, "--version"], capture_output=True, text=True, timeout=30
            ).stdout
            return tuple(int(x) for x in out.split()[-1].split("."))
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return (0, 0, 0)

    @classmethod
    def find(cls) -> Sandbox:
        """A working sandbox, or :class:`SandboxUnavailable` saying why not."""
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable(
                f"no sandbox on {sys.platform}: bubblewrap needs Linux namespaces. Grade on "
                "Linux (a VM, WSL 2 or a container), or pass --unsafe-no-sandbox"
            )
        bwrap = shutil.which("bwrap")
        if not bwrap:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed: `sudo apt-get install bubblewrap` "
                "(Debian/Ubuntu), `dnf install bubblewrap` (Fedora), or pass "
                "--unsafe-no-sandbox"
            )
        errors = []
        version = cls.tool_version(bwrap)
        for userns in (True, False):
            box = cls(bwrap, user_namespace=userns, version=version)
            probe = box.command(["/bin/true"], rw=[], cwd="/")
            try:
                proc = subprocess.run(probe, capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.SubprocessError) as err:
                errors.append(str(err))
                continue
            if proc.returncode == 0:
                return box
            errors.append(proc.stderr.strip()[-300:] or f"exit code {proc.returncode}")
        raise SandboxUnavailable(
            "bubblewrap is installed but could not make a sandbox here ("
            + "; ".join(dict.fromkeys(errors))
            + "). Unprivileged user namespaces may be disabled (sysctl "
            "kernel.unprivileged_userns_clone=1, or Ubuntu's AppArmor userns restriction); "
            "or pass --unsafe-no-sandbox"
        )

    def command(
        self,
        cmd: list[str],
        rw: Sequence[str | Path],
        cwd: str | Path,
        ro: Sequence[str | Path] = (),
    ) -> list[str]:
        """``cmd`` wrapped: ``rw`` folders writable, ``ro`` (and the system) read-only."""
        b = [self.bwrap, "--unshare-all", "--die-with-parent", "--new-session"]
        if self.user_namespace:
            b += ["--unshare-user", "--uid", "65534", "--gid", "65534"]
            if self.version >= (0, 8):
                b += ["--disable-userns"]
        b += ["--cap-drop", "ALL", "--unsetenv", "JPY_PARENT_PID", "--hostname", "sandbox"]
        b += ["--ro-bind", "/usr", "/usr"]
        for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            p = "/" + d
            if os.path.islink(p):
                b += ["--symlink", os.readlink(p), p]
            elif os.path.isdir(p):
                b += ["--ro-bind", p, p]
        b += ["--ro-bind", "/etc", "/etc"]
        for name in ETC_SECRETS:
            p = "/etc/" + name
            if os.path.isdir(p) and not os.path.islink(p):
                b += ["--tmpfs", p]
            elif os.path.lexists(p):
                b += ["--ro-bind", "/dev/null", p]
        b += ["--proc", "/proc", "--dev", "/dev"]
        if self.version >= (0, 7):  # a sized /dev/shm: an unsized one is memory unbounded
            b += ["--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
        for pattern in GPU_DEVICES:
            for dev in sorted(glob.glob(pattern)):
                b += ["--dev-bind", dev, dev]
        if os.path.isdir("/sys/devices/system/cpu"):
            b += ["--ro-bind", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
        if glob.glob("/dev/nvidia*") and os.path.isdir("/sys"):
            b += ["--ro-bind", "/sys", "/sys"]
        if self.version >= (0, 7):
            b += ["--size", str(TMP_BYTES)]
        b += ["--tmpfs", "/tmp", "--dir", "/tmp/home"]
        seen = set()
        for p in [*python_paths(self.hide), *self.ro, *map(str, ro)]:
            if p in seen or p in ("/usr", "/etc") or p.startswith(("/usr/", "/etc/")):
                continue
            seen.add(p)
            b += ["--ro-bind", _real(p), p]
        for name, folder in course_packages().items():  # the grader's own, whatever the
            b += ["--ro-bind", folder, f"{PACKAGES}/{name}"]  # kernel's Python would find
        models = host_models()
        if models:  # the real model of chapters 10 and 11, read-only, as the learner had it
            b += ["--ro-bind", models, MODELS]
        shown = [*python_paths(self.hide), *self.ro, *map(str, ro)]
        for view in course_lib_views(self.hide):  # then, over each place the kernel sees
            if view.startswith(PACKAGES + "/") or _under(view, shown):  # course_lib, the
                b += ["--ro-bind", learner_course_lib(), view]  # copy without the checks
        for w in rw:
            b += ["--bind", str(w), str(w)]
        # last: the root (bubblewrap's own tmpfs, unsized) becomes read-only once every
        # mount point is made; the binds and tmpfs under it keep their own modes
        b += ["--remount-ro", "/", "--chdir", str(cwd), "--"]
        return b + list(cmd)


def host_models() -> str | None:
    """The grader's folder of model files (``course_lib.gpt.smollm2.models_dir``: where
    ``make model`` put SmolLM2), when it exists: the sandbox shows it at :data:`MODELS`."""
    from course_lib.gpt.smollm2 import models_dir

    folder = models_dir()
    return _real(folder) if folder.is_dir() else None


def kernel_env(threads: int, hide: Sequence[str | Path] = ()) -> dict[str, str]:
    """The environment inside the sandbox: nothing of the grader's but what a kernel needs
    (no tokens or credentials), private folders under the sandbox's own /tmp, and the
    ``PYTHONPATH`` folders the sandbox shows (see :func:`pythonpath`)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(SAFE_ENV_PREFIXES) or k in SAFE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([PACKAGES, *pythonpath(hide)])
    if host_models():
        env["COURSE_MODELS"] = MODELS
    bindir = os.path.dirname(sys.executable)
    env.update(
        {
            "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp/home",
            "TMPDIR": "/tmp",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "IPYTHONDIR": "/tmp/home/.ipython",
            "JUPYTER_CONFIG_DIR": "/tmp/home/.jupyter",
            "JUPYTER_DATA_DIR": "/tmp/home/.local/share/jupyter",
            "JUPYTER_RUNTIME_DIR": "/tmp/home/.local/share/jupyter/runtime",
            "MPLCONFIGDIR": "/tmp/home/.matplotlib",
            "MPLBACKEND": "Agg",
            "COURSE_GRADING": "1",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "OPENBLAS_NUM_THREADS": str(threads),
        }
    )
    env.setdefault("LANG", "C.UTF-8")
    # The course's training cells run on the short budget: grading needs their state, not
    # the quality of a long run (an instructor's own COURSE_BUDGET is kept).
    env.setdefault("COURSE_BUDGET", "ci")
    return env


def memory_total() -> int:
    """This machine's memory in bytes (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def lift_own_limits() -> None:
    """In a kernel's process before it starts: the grading process's own soft limits
    lifted (the kernel has limits of its own: :func:`course_tools.grading.sandbox.apply_limits`)."""
    import resource

    for which in (resource.RLIMIT_DATA, resource.RLIMIT_CPU):
        try:
            _, hard = resource.getrlimit(which)
            resource.setrlimit(which, (hard, hard))
        except (ValueError, OSError):
            pass
