"""course_tools/grading/sandbox.py without launching a sandbox: the bubblewrap command line
it builds (what is bound, read-only, hidden, withheld), the learner's copy of course_lib,
the kernel's environment, the limits and the cgroups (on a made-up cgroup tree), and how it
says why no sandbox can be had."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripts import ROOT

from course_tools.grading import sandbox as S
from course_tools.grading.sandbox import (
    PACKAGES,
    CgroupSet,
    Limits,
    Sandbox,
    SandboxUnavailable,
    apply_limits,
    course_lib_views,
    course_packages,
    kernel_env,
    learner_course_lib,
    python_paths,
    pythonpath,
)

GB = 2**30


# --------------------------------------------------------------------------- the command line


def _pairs(cmd: list[str], flag: str) -> list[tuple[str, str]]:
    return [(cmd[i + 1], cmd[i + 2]) for i, a in enumerate(cmd) if a == flag]


def test_the_command_wraps_the_kernel_last_after_every_mount():
    box = Sandbox("/usr/bin/bwrap")
    cmd = box.command(["python", "-m", "ipykernel"], rw=["/work/box"], cwd="/work/box",
                      ro=["/data/inputs"])  # fmt: skip
    assert cmd[:4] == ["/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    assert cmd[-5:] == ["/work/box", "--", "python", "-m", "ipykernel"]
    assert cmd[cmd.index("--chdir") + 1] == "/work/box"
    assert cmd.index("--remount-ro") == cmd.index("--chdir") - 2  # the root read-only, last
    assert ("/work/box", "/work/box") in _pairs(cmd, "--bind")  # the only writable folder
    assert _pairs(cmd, "--bind") == [("/work/box", "/work/box")]
    assert ("/data/inputs", "/data/inputs") in _pairs(cmd, "--ro-bind")
    assert ["--cap-drop", "ALL"] == cmd[cmd.index("--cap-drop") : cmd.index("--cap-drop") + 2]
    assert ["--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns"] == cmd[
        cmd.index("--unshare-user") : cmd.index("--unshare-user") + 6
    ]


def test_the_host_secrets_are_masked():
    cmd = Sandbox("/usr/bin/bwrap").command(["true"], rw=[], cwd="/")
    masked = {dst for _, dst in _pairs(cmd, "--ro-bind") if _ == "/dev/null"}
    masked |= {cmd[i + 1] for i, a in enumerate(cmd) if a == "--tmpfs"}
    for name in S.ETC_SECRETS:
        if os.path.lexists("/etc/" + name):
            assert "/etc/" + name in masked, name
    assert "/tmp" in masked and ("/etc", "/etc") in _pairs(cmd, "--ro-bind")


def test_the_kernel_runs_the_graders_packages_and_course_lib_without_its_checks():
    cmd = Sandbox("/usr/bin/bwrap").command(["true"], rw=[], cwd="/")
    binds = _pairs(cmd, "--ro-bind")
    packages = course_packages()
    assert (packages["course_lib"], f"{PACKAGES}/course_lib") in binds
    assert (packages["course_tools"], f"{PACKAGES}/course_tools") in binds
    copy = learner_course_lib()
    over = [dst for src, dst in binds if src == copy]
    assert f"{PACKAGES}/course_lib" in over and packages["course_lib"] in over
    # the copy comes after the real one at every place it covers
    for dst in over:
        last = max(i for i, (s, d) in enumerate(binds) if d == dst)
        assert binds[last][0] == copy, dst


def test_a_pythonpath_folder_holding_a_hidden_one_is_never_bound(monkeypatch, tmp_path):
    course, other = tmp_path / "course", tmp_path / "other"
    (course / "solutions").mkdir(parents=True)
    other.mkdir()
    missing = tmp_path / "missing"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(map(str, [tmp_path, course, other, missing])))
    assert pythonpath() == [str(tmp_path), str(course), str(other)]  # (folders that exist)
    assert pythonpath(hide=[course]) == [str(other)]
    cmd = Sandbox("/usr/bin/bwrap", hide=[course]).command(["true"], rw=[], cwd="/")
    bound = {dst for _, dst in _pairs(cmd, "--ro-bind")}
    assert str(other) in bound and str(tmp_path) not in bound and str(course) not in bound


def test_an_old_bubblewrap_gets_only_the_options_it_knows():
    old = Sandbox("/usr/bin/bwrap", version=(0, 6, 1)).command(["true"], rw=[], cwd="/")
    assert "--disable-userns" not in old and "--size" not in old
    new = Sandbox("/usr/bin/bwrap", version=(0, 8, 0)).command(["true"], rw=[], cwd="/")
    assert new.count("--size") == 2  # /dev/shm and /tmp, sized
    assert new[new.index("--size") + 1] == str(S.SHM_BYTES)
    plain = Sandbox("/usr/bin/bwrap", user_namespace=False).command(["true"], rw=[], cwd="/")
    assert "--unshare-user" not in plain and "--uid" not in plain


def test_python_paths_are_the_outermost_folders_the_kernel_needs():
    paths = python_paths()
    assert any(sys.prefix == p or sys.prefix.startswith(p + "/") for p in paths)
    for p in paths:  # none inside another
        assert not any(p != q and p.startswith(q.rstrip("/") + "/") for q in paths), p
    assert S._under("/a/b", ["/a"]) and S._under("/a", ["/a"]) and not S._under("/ab", ["/a"])


# --------------------------------------------------------------------------- course_lib, withheld


def test_the_learners_course_lib_has_no_chapter_checks_and_no_bytecode():
    copy = Path(learner_course_lib())
    assert copy.name == "course_lib" and learner_course_lib() == str(copy)  # made once
    real = Path(course_packages()["course_lib"])
    assert (copy / "checks" / "core.py").is_file() and (real / "checks" / "ch00.py").is_file()
    assert not list((copy / "checks").glob("ch[0-9]*.py"))
    assert not list((copy / "checks").glob("ch[0-9]*.md"))  # the checks' texts go too
    assert not list(copy.rglob("__pycache__")) and not list(copy.rglob("*.pyc"))
    assert (copy / "attention.py").read_bytes() == (real / "attention.py").read_bytes()


def test_every_place_a_kernel_could_find_course_lib_is_listed():
    views = course_lib_views()
    assert views[0] == f"{PACKAGES}/course_lib"
    assert course_packages()["course_lib"] in views
    assert not any(os.path.islink(v) for v in views) and len(views) == len(set(views))


# --------------------------------------------------------------------------- the environment


def test_the_kernels_environment_keeps_nothing_of_the_graders_secrets(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("GITHUB_TOKEN", "t0k3n")
    monkeypatch.setenv("COURSE_MODELS_X", "kept")
    monkeypatch.setenv("LANG", "fr_FR.UTF-8")
    monkeypatch.setenv("COURSE_BUDGET", "full")
    env = kernel_env(2)
    assert "AWS_SECRET_ACCESS_KEY" not in env and "GITHUB_TOKEN" not in env
    assert env["COURSE_MODELS_X"] == "kept" and env["LANG"] == "fr_FR.UTF-8"
    assert env["COURSE_BUDGET"] == "full" and env["OMP_NUM_THREADS"] == "2"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == PACKAGES
    assert (env["HOME"], env["TMPDIR"], env["PYTHONNOUSERSITE"]) == ("/tmp/home", "/tmp", "1")
    assert env["PATH"].startswith(os.path.dirname(sys.executable) + ":")


def test_the_model_folder_is_shown_only_where_it_exists(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_MODELS", str(tmp_path / "absent"))
    assert S.host_models() is None and kernel_env(1).get("COURSE_MODELS") != S.MODELS
    absent = Sandbox("/usr/bin/bwrap").command(["true"], rw=[], cwd="/")
    assert S.MODELS not in {dst for _, dst in _pairs(absent, "--ro-bind")}
    monkeypatch.setenv("COURSE_MODELS", str(tmp_path))
    assert S.host_models() == os.path.realpath(tmp_path)
    assert kernel_env(1)["COURSE_MODELS"] == S.MODELS
    cmd = Sandbox("/usr/bin/bwrap").command(["true"], rw=[], cwd="/")
    assert (os.path.realpath(tmp_path), S.MODELS) in _pairs(cmd, "--ro-bind")


# --------------------------------------------------------------------------- limits


def test_limits_say_what_is_enforced_and_how():
    plain = Limits(cpu_seconds=60).describe()
    assert "(cgroup)" not in plain and "CPU time 60 s per process (rlimit)" in plain
    assert "files up to 2 GB (rlimit)" in plain and "working folders 2 GB in all" in plain
    assert "/tmp 1 GB, /dev/shm 0.5 GB" in plain
    full = Limits(memory=3 * GB, address_space=4 * GB, cpus=1.5, pids=64,
                  cgroup=CgroupSet(2, {})).describe()  # fmt: skip
    assert "memory 3.0 GB (cgroup)" in full and "address space 4.0 GB (rlimit)" in full
    assert "64 processes (cgroup)" in full and "1.5 CPU(s) (cgroup)" in full


def test_limits_are_applied_in_the_kernels_process_before_it_starts():
    limits = Limits(file_bytes=2**20, cpu_seconds=30, address_space=8 * GB)
    code = (
        "import resource as r\n"
        "print(*r.getrlimit(r.RLIMIT_FSIZE), *r.getrlimit(r.RLIMIT_CPU), *r.getrlimit(r.RLIMIT_CORE),"
        " *r.getrlimit(r.RLIMIT_AS))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        preexec_fn=lambda: apply_limits(limits, []),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert list(map(int, out)) == [2**20, 2**20, 30, 35, 0, 0, 8 * GB, 8 * GB]


# --------------------------------------------------------------------------- cgroups


def test_a_cgroup_set_travels_to_a_worker_as_json():
    cg = CgroupSet(1, {"memory": Path("/sys/fs/cgroup/memory/x"), "pids": Path("/p")})
    again = CgroupSet.from_json(cg.to_json("s3-"))
    assert (again.version, again.bases, again.prefix) == (1, cg.bases, "s3-")


@pytest.fixture
def own_cgroup(monkeypatch):
    monkeypatch.setattr(CgroupSet, "_own", classmethod(lambda cls, controller: "/grader"))


def test_cgroups_v2_are_made_under_the_graders_own(tmp_path, own_cgroup):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids")
    own = tmp_path / "grader"
    own.mkdir()
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids")
    (own / "cgroup.subtree_control").write_text("")
    cg = CgroupSet.create("run1", root=tmp_path)
    assert cg.version == 2 and cg.bases == {"unified": own / "run1"}
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    (k1,) = cg.new(Limits(memory=GB, pids=99, cpus=1.5))
    assert k1 == own / "run1" / "k1"
    assert (k1 / "memory.max").read_text() == str(GB)
    assert (k1 / "memory.swap.max").read_text() == "0"
    assert (k1 / "pids.max").read_text() == "99"
    assert (k1 / "cpu.max").read_text() == "150000 100000"
    (k2,) = CgroupSet.from_json(cg.to_json("s2-")).new(Limits())
    assert k2.name == "s2-1" and not (k2 / "memory.max").exists()


def test_without_the_controllers_there_are_no_cgroups(tmp_path, own_cgroup):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids")
    (tmp_path / "grader").mkdir()
    (tmp_path / "grader" / "cgroup.controllers").write_text("cpu io")
    assert CgroupSet.create("run1", root=tmp_path) is None
    assert CgroupSet.create("run1", root=tmp_path / "missing") is None


def test_cgroups_v1_are_one_folder_per_controller(tmp_path, own_cgroup):
    for ctrl in ("memory", "pids", "cpu"):
        (tmp_path / ctrl / "grader").mkdir(parents=True)
    cg = CgroupSet.create("run1", root=tmp_path)
    assert cg.version == 1 and set(cg.bases) == {"memory", "pids", "cpu"}
    made = cg.new(Limits(memory=GB, pids=7, cpus=2.0))
    by = {d.parent.parent.parent.name: d for d in made}
    assert (by["memory"] / "memory.limit_in_bytes").read_text() == str(GB)
    assert (by["pids"] / "pids.max").read_text() == "7"
    assert (by["cpu"] / "cpu.cfs_quota_us").read_text() == "200000"


def test_cgroups_v1_without_pids_are_not_used_and_leave_nothing(tmp_path, own_cgroup):
    (tmp_path / "memory" / "grader").mkdir(parents=True)
    assert CgroupSet.create("run1", root=tmp_path) is None
    assert list((tmp_path / "memory" / "grader").iterdir()) == []


def test_a_kernels_cgroup_is_killed_then_removed(tmp_path):
    empty, busy = tmp_path / "k1", tmp_path / "k2"
    empty.mkdir()
    busy.mkdir()
    (busy / "cgroup.kill").write_text("0")
    CgroupSet.kill([empty, busy])
    assert not empty.exists()
    assert (busy / "cgroup.kill").read_text() == "1"  # (cgroup v2's kill switch)


# --------------------------------------------------------------------------- finding bubblewrap


def _fake_bwrap(tmp_path: Path, version: str, probe_exit: int) -> str:
    path = tmp_path / "bwrap"
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "bubblewrap {version}"; exit 0; fi\n'
        f'echo "bwrap: setting up uid map: Permission denied" >&2; exit {probe_exit}\n'
    )
    path.chmod(0o755)
    return str(path)


def test_bubblewraps_version_is_read_or_zero(tmp_path):
    assert Sandbox.tool_version(_fake_bwrap(tmp_path, "0.9.0", 0)) == (0, 9, 0)
    assert Sandbox.tool_version(str(tmp_path / "nothing")) == (0, 0, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap: Linux")
def test_a_working_bubblewrap_is_found_with_its_version(tmp_path, monkeypatch):
    fake = _fake_bwrap(tmp_path, "0.7.1", 0)
    monkeypatch.setattr(S.shutil, "which", lambda name: fake if name == "bwrap" else None)
    box = Sandbox.find()
    assert (box.bwrap, box.user_namespace, box.version) == (fake, True, (0, 7, 1))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap: Linux")
def test_a_bubblewrap_that_cannot_make_a_sandbox_says_why(tmp_path, monkeypatch):
    fake = _fake_bwrap(tmp_path, "0.8.0", 1)
    monkeypatch.setattr(S.shutil, "which", lambda name: fake if name == "bwrap" else None)
    with pytest.raises(SandboxUnavailable) as err:
        Sandbox.find()
    text = str(err.value)
    assert "setting up uid map: Permission denied" in text and text.count("uid map") == 1
    assert "unprivileged_userns_clone" in text and "--unsafe-no-sandbox" in text


def test_no_bubblewrap_or_no_linux_says_what_to_do(monkeypatch):
    monkeypatch.setattr(S.shutil, "which", lambda name: None)
    if sys.platform.startswith("linux"):
        with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
            Sandbox.find()
    monkeypatch.setattr(S.sys, "platform", "darwin")
    with pytest.raises(SandboxUnavailable, match="no sandbox on darwin.*--unsafe-no-sandbox"):
        Sandbox.find()


def test_the_machine_is_measured():
    assert S.memory_total() > 0 and S.usable_cpus() >= 1


def test_the_course_folder_itself_is_hidden_from_every_kernel():
    """The grader passes the course root as hidden: nothing binds it or a folder above it
    (solutions/ and the gradebook would show)."""
    cmd = Sandbox("/usr/bin/bwrap", hide=[ROOT]).command(["true"], rw=[], cwd="/")
    bound = {dst for flag in ("--ro-bind", "--bind") for _, dst in _pairs(cmd, flag)}
    assert str(ROOT) not in bound and str(ROOT / "solutions") not in bound
