"""course_tools/grading/options.py: ``course-grade``'s options, checked as they are read,
and the limits they give each kernel and the grading process."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripts import ROOT

from course_tools.grading import options
from course_tools.grading.collect import Submission
from course_tools.grading.options import (
    KERNEL_MEMORY,
    _shard,
    build_parser,
    default_jobs,
    grader_cpu_seconds,
    make_limits,
    parse_exports,
)
from course_tools.grading.sandbox import memory_total, usable_cpus

GB = 2**30


def parse(*argv: str):
    return build_parser().parse_args(["subs", "--out", "out", *argv])


def test_the_default_jobs_use_the_machine():
    jobs = build_parser().get_default("jobs")
    assert jobs == max(1, min(usable_cpus(), int(memory_total() // KERNEL_MEMORY)))
    if memory_total() >= usable_cpus() * KERNEL_MEMORY:
        assert jobs == usable_cpus()  # every core (was half of them)


@pytest.mark.parametrize(
    "cpus, memory, jobs",
    [
        (8, 64 * GB, 8),  # memory for all: every core
        (8, 3 * GB, 2),  # 3 GB holds two kernels of 1.5 GB
        (8, 1 * GB, 1),  # never fewer than one
        (4, 0, 4),  # memory unknown: the cores decide
    ],
)
def test_default_jobs_are_the_cores_the_memory_holds(monkeypatch, cpus, memory, jobs):
    monkeypatch.setattr(options, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(options, "memory_total", lambda: memory)
    assert default_jobs() == jobs


def test_the_defaults():
    args = parse()
    assert args.inputs == ["subs"] and args.out == Path("out")
    assert (args.timeout, args.cell_timeout, args.output_limit) == (900.0, 180.0, 1_000_000)
    assert (args.memory_limit, args.disk_limit, args.grader_memory) == (None, 2.0, 2.0)
    assert (args.max_submissions, args.max_total_size, args.max_time) == (20000, 10.0, None)
    assert args.cgroups and args.sandbox and args.integrity  # safe unless told otherwise
    assert not (args.partial or args.keep_work or args.quiet or args.verbose)
    assert (args.assignment, args.seed, args.seed_file, args.shard) == (None, None, None, None)
    assert (args.export, args.student, args.course) == ([], None, None)


def test_every_option_is_read_into_its_field():
    args = parse(
        *("-j", "3", "--timeout", "60", "--cell-timeout", "5.5", "--output-limit", "10"),
        *("--memory-limit", "1.5", "--disk-limit", "0.5", "--grader-memory", "1"),
        *("--max-submissions", "7", "--max-total-size", "0.1", "--max-time", "30"),
        *("--assignment", "02_qkv_attention", "--partial", "--export", "lms"),
        *("--student", r"(\w+)/", "--seed", "42", "--seed-file", "s.txt", "--shard", "2/3"),
        *("--course", "/c", "--no-cgroups", "--unsafe-no-sandbox", "--no-integrity-check"),
        *("--keep-work", "-q", "-v"),
    )
    assert (args.jobs, args.timeout, args.cell_timeout, args.output_limit) == (3, 60, 5.5, 10)
    assert (args.memory_limit, args.disk_limit, args.grader_memory) == (1.5, 0.5, 1.0)
    assert (args.max_submissions, args.max_total_size, args.max_time) == (7, 0.1, 30.0)
    assert (args.assignment, args.partial, args.export) == ("02_qkv_attention", True, ["lms"])
    assert (args.student, args.seed, args.seed_file) == (r"(\w+)/", 42, Path("s.txt"))
    assert (args.shard, args.course) == ((2, 3), Path("/c"))
    assert not (args.cgroups or args.sandbox or args.integrity)
    assert args.keep_work and args.quiet and args.verbose


def test_the_course_is_also_spelled_root():
    assert parse("--root", "/somewhere").course == Path("/somewhere")


@pytest.mark.parametrize("text, want", [("2/8", (2, 8)), (" 1 / 1 ", (1, 1)), ("8/8", (8, 8))])
def test_a_shard_is_k_of_n(text, want):
    assert _shard(text) == want


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "-1/2", "", "1/0"])
def test_a_bad_shard_says_what_is_expected(text):
    with pytest.raises(Exception, match=r"expected K/N with 1 <= K <= N"):
        _shard(text)


def test_exports_are_a_comma_separated_choice():
    assert parse_exports("lms, gradescope,") == ["lms", "gradescope"]
    assert parse_exports("") == []
    with pytest.raises(Exception, match="unknown export canvas: choose from lms, gradescope"):
        parse_exports("lms,canvas")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--shard", "3/2"], "expected K/N"),
        (["--export", "pdf"], "unknown export pdf"),
        (["--jobs", "two"], "invalid int value"),
        (["--timeout", "soon"], "invalid float value"),
        (["--seed", "1.5"], "invalid int value"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_the_option(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and argv[0] in err


def test_out_and_a_submission_are_required(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["subs"])
    assert "--out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--out", "o"])
    assert "SUBMISSION_OR_FOLDER" in capsys.readouterr().err


def test_the_grading_process_gets_its_notebooks_time_and_two_minutes():
    assert grader_cpu_seconds(parse("--timeout", "60.7")) == 180
    assert grader_cpu_seconds(parse()) == 1020


def test_limits_without_cgroups_are_rlimits_only():
    args = parse("--no-cgroups", "--timeout", "100", "--disk-limit", "0.5")
    limits = make_limits(args, jobs=2, threads=3)
    assert limits.cgroup is None and limits.memory is None and limits.cpus is None
    assert limits.address_space is None  # no address-space cap unless asked
    assert limits.cpu_seconds == 100 * 3 * 2 + 120  # every thread busy, twice over
    assert limits.disk_bytes == GB // 2 and limits.pids == 1024
    capped = make_limits(parse("--no-cgroups", "--memory-limit", "1.5"), jobs=1, threads=1)
    assert capped.address_space == int(1.5 * GB) and capped.memory is None


class _FakeCgroups:
    made: list[str] = []

    @classmethod
    def create(cls, name):
        cls.made.append(name)
        return cls()


def test_limits_with_cgroups_share_the_memory_among_the_jobs(monkeypatch):
    monkeypatch.setattr(options, "CgroupSet", _FakeCgroups)
    monkeypatch.setattr(options, "memory_total", lambda: 40 * GB)
    limits = make_limits(parse(), jobs=4, threads=2)
    assert isinstance(limits.cgroup, _FakeCgroups)
    assert _FakeCgroups.made[-1].startswith("course-grade-")
    assert limits.memory == int(40 * GB * 0.8 / 4) and limits.cpus == 2.0
    assert make_limits(parse(), jobs=40, threads=1).memory == 2 * GB  # never under 2 GB
    explicit = make_limits(parse("--memory-limit", "3"), jobs=4, threads=1)
    assert explicit.memory == explicit.address_space == 3 * GB


def test_a_machine_without_cgroups_falls_back_to_rlimits(monkeypatch):
    class NoCgroups:
        @classmethod
        def create(cls, name):
            return None  # what CgroupSet.create says where cgroups cannot be used

    monkeypatch.setattr(options, "CgroupSet", NoCgroups)
    limits = make_limits(parse(), jobs=1, threads=4)
    assert limits.cgroup is None and limits.memory is None and limits.cpus is None


# --------------------------------------------------------------------------- --partial


class _NoReaper:
    def sweep(self, keep):
        return 0


def test_partial_reaches_the_job_the_worker_reads(tmp_path):
    """``--partial`` is carried into every worker's job (the worker passes it to
    :func:`course_tools.grading.results.score`; tests/course_tools/grading/test_worker.py
    follows it from the job to the verdict)."""
    from course_tools.grading.identity import Course
    from course_tools.grading.pool import Grader

    course = Course.load(ROOT, check=False)
    sub = Submission("class/alice/00_setup.ipynb", "00_setup.ipynb", b"{}")
    jobs = {}
    for flags in ([], ["--partial"]):
        args = parse("--no-integrity-check", *flags)
        grader = Grader(ROOT, course, 7, args, tmp_path, tmp_path, 1, _NoReaper())
        jobs[bool(flags)] = grader._job(sub, b"{}", tmp_path / "w")
    assert jobs[False]["partial"] is False and jobs[True]["partial"] is True
    assert jobs[True]["expected"] == "00_setup" and jobs[True]["expected_from"] == "its file name"
    assert jobs[True]["cell_timeout"] == 180.0 and jobs[True]["seed"] == 7
