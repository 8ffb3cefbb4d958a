"""course_tools/grading/collect.py: finding the submitted notebooks (files, folders, zip
archives), naming them, reading them lazily, and copying them out of the kernels' reach."""

from __future__ import annotations

import io
import os
import zipfile

import pytest

from course_tools.grading import collect as C
from course_tools.grading.collect import Submission, collect, printable, snapshot


def _zip_bytes() -> bytes:
    """An archive as a learning platform exports it, with what must never become an id:
    macOS's resource forks, an entry that climbs out, a file that is not a notebook."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("alice/00_setup.ipynb", b"{}")
        zf.writestr("bob/00_setup.ipynb", b"{}")
        zf.writestr("__MACOSX/bob/._00_setup.ipynb", b"\x00\x05\x16\x07")
        zf.writestr("../../escape/00_setup.ipynb", b'{"cells": [')
        zf.writestr("alice/notes.txt", b"not a notebook")
    return buf.getvalue()


def test_collect_reads_folders_and_zips_without_escaping(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.ipynb").write_bytes(b"{}")
    (tmp_path / "a" / "x.txt").write_bytes(b"no")
    (tmp_path / "e.zip").write_bytes(_zip_bytes())
    subs = collect([tmp_path / "a", tmp_path / "e.zip", tmp_path / "nope.ipynb"])
    ids = [s.id for s in subs]
    assert ids == sorted(ids)
    assert "a/x.ipynb" in ids and "e.zip/(up)/(up)/escape/00_setup.ipynb" in ids
    assert not any(".." in i or "MACOSX" in i for i in ids)
    assert next(s for s in subs if s.id.endswith("nope.ipynb")).data is None


def test_collect_reads_lazily_and_cleans_names(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "x\x1b[31m.ipynb").write_bytes(b"{}")
    subs = collect([tmp_path / "s", tmp_path / "s"])  # the same folder twice: unique ids
    assert [s.id for s in subs] == ["s/x?[31m.ipynb", "s/x?[31m.ipynb (2)"]
    assert subs[0]._data is None and subs[0].read() == b"{}"  # read when graded
    (tmp_path / "s" / "x\x1b[31m.ipynb").unlink()
    assert subs[0].read() is None and "could not read" in subs[0].problem


def test_a_shell_glob_over_student_folders_names_every_student(tmp_path, monkeypatch):
    for who in ("alice", "bob"):
        (tmp_path / "class" / who).mkdir(parents=True)
        (tmp_path / "class" / who / "02_qkv_attention.ipynb").write_bytes(b"{}")
    paths = sorted((tmp_path / "class").glob("*/02_qkv_attention.ipynb"))  # the shell's glob
    ids = [s.id for s in collect(paths)]
    assert ids == ["alice/02_qkv_attention.ipynb", "bob/02_qkv_attention.ipynb"]
    monkeypatch.chdir(tmp_path)  # relative paths, as typed: the same names
    rel = [
        s.id
        for s in collect(["class/alice/02_qkv_attention.ipynb", "class/bob/02_qkv_attention.ipynb"])
    ]
    assert rel == ids
    assert [s.id for s in collect([tmp_path / "class"])][0] == "class/alice/02_qkv_attention.ipynb"


def test_a_single_file_is_named_by_its_file_name(tmp_path):
    (tmp_path / "alice.ipynb").write_bytes(b"{}")
    (sub,) = collect([tmp_path / "alice.ipynb"])
    assert (sub.id, sub.name, sub.size, sub.read()) == ("alice.ipynb", "alice.ipynb", 2, b"{}")


def test_checkpoints_hidden_folders_and_other_files_are_skipped(tmp_path):
    subs = tmp_path / "subs"
    for name in (
        "a.ipynb",
        ".ipynb_checkpoints/a-checkpoint.ipynb",
        ".git/x.ipynb",
        "__pycache__/y.ipynb",
        "._a.ipynb",  # macOS's AppleDouble file
        "notes.md",
    ):
        (subs / name).parent.mkdir(parents=True, exist_ok=True)
        (subs / name).write_bytes(b"{}")
    assert [s.id for s in collect([subs])] == ["subs/a.ipynb"]


def test_archives_inside_a_folder_are_read_as_submissions(tmp_path):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "late.zip").write_bytes(_zip_bytes())
    ids = [s.id for s in collect([tmp_path / "class"])]
    assert ids == [
        "class/late.zip/(up)/(up)/escape/00_setup.ipynb",
        "class/late.zip/alice/00_setup.ipynb",
        "class/late.zip/bob/00_setup.ipynb",
    ]


def test_a_broken_archive_is_one_submission_with_its_problem(tmp_path):
    (tmp_path / "broken.zip").write_bytes(b"PK not really")
    (sub,) = collect([tmp_path / "broken.zip"])
    assert sub.id == "broken.zip" and sub.read() is None
    assert "not a readable zip archive" in sub.problem


def test_files_over_the_size_limit_are_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "MAX_NOTEBOOK_BYTES", 10)
    (tmp_path / "big.ipynb").write_bytes(b"{" + b" " * 20 + b"}")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("x/big.ipynb", b" " * 20)
    (tmp_path / "e.zip").write_bytes(buf.getvalue())
    subs = {s.id: s for s in collect([tmp_path / "big.ipynb", tmp_path / "e.zip"])}
    for sub in subs.values():
        assert sub.read() is None and "over the" in sub.problem and "limit" in sub.problem
    assert set(subs) == {"big.ipynb", "e.zip/x/big.ipynb"}


def test_a_file_that_grows_past_the_limit_after_it_was_found_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "MAX_NOTEBOOK_BYTES", 10)
    (tmp_path / "a.ipynb").write_bytes(b"{}")
    (sub,) = collect([tmp_path / "a.ipynb"])
    (tmp_path / "a.ipynb").write_bytes(b"{" + b" " * 20 + b"}")
    assert sub.read() is None and "grew over" in sub.problem


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_a_link_says_where_it_leads(tmp_path):
    (tmp_path / "real.ipynb").write_bytes(b"{}")
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "link.ipynb").symlink_to(tmp_path / "real.ipynb")
    (sub,) = collect([tmp_path / "subs"])
    assert sub.link == str((tmp_path / "real.ipynb").resolve()) and sub.read() == b"{}"


def test_a_folder_named_like_a_notebook_is_not_a_regular_file(tmp_path):
    (tmp_path / "odd.ipynb").mkdir()
    sub = C._read_file(tmp_path / "odd.ipynb", "odd.ipynb")
    assert sub.read() is None and sub.problem == "not a regular file"


@pytest.mark.parametrize(
    "name, parts",
    [
        ("a/b.ipynb", ["a", "b.ipynb"]),
        ("../b.ipynb", ["(up)", "b.ipynb"]),
        ("/etc/b.ipynb", ["(root)", "etc", "b.ipynb"]),
        ("C:\\x\\b.ipynb", ["(root)", "x", "b.ipynb"]),
        ("./a//b.ipynb", ["a", "b.ipynb"]),
    ],
)
def test_archive_entry_names_never_climb_out(name, parts):
    assert C._clean_parts(name) == parts


def test_printable_keeps_text_and_replaces_what_a_terminal_would_obey():
    assert printable("ünï 日本\tcol\nline") == "ünï 日本\tcol\nline"
    assert printable("a\x1b[2Jb\x07\r") == "a?[2Jb??"
    assert printable("evil\u202etxt.ipynb") == "evil?txt.ipynb"  # a bidirectional override
    assert printable("bad\udcffname") == "bad?name"  # a byte that is not UTF-8


def test_snapshot_copies_every_readable_submission_out_of_reach(tmp_path):
    (tmp_path / "a.ipynb").write_bytes(b"AAA")
    subs = collect([tmp_path / "a.ipynb"]) + [Submission("gone", "gone.ipynb", None, "missing")]
    assert snapshot(subs, tmp_path / "inbox") == 3
    (tmp_path / "a.ipynb").write_bytes(b"overwritten by a kernel")
    assert subs[0].read() == b"AAA"  # read from the grader's private copy
    copied = tmp_path / "inbox" / "000000.ipynb"
    assert copied.read_bytes() == b"AAA" and oct(copied.stat().st_mode & 0o777) == "0o400"
    assert sorted(p.name for p in (tmp_path / "inbox").iterdir()) == ["000000.ipynb"]
