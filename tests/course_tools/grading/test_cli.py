"""course_tools/grading/cli.py: ``course-grade``'s stages in order (usage checks, the
course, the submissions, the output folder and its seed), its sub-commands, and a run over
submissions that need no kernel (no sandbox, no notebook executed)."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
from scripts import ROOT

from course_tools.grading import cli

# Every run here decides its submissions without a kernel: the sandbox is never used.
BASE_FLAGS = ["--course", str(ROOT), "--unsafe-no-sandbox", "--quiet"]


def test_help_names_the_sub_commands(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: course-grade") and "course-grade merge" in out
    assert "--partial" in out and "--unsafe-no-sandbox" in out


def test_merge_and_report_are_sub_commands(tmp_path, capsys):
    assert cli.main(["merge", str(tmp_path), "--out", str(tmp_path / "m")]) == 2
    assert "is not a course-grade output folder" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.startswith("error:")


def test_an_unusable_out_folder_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "x.ipynb").write_bytes(b"{")
    (tmp_path / "taken").write_text("a file, not a folder")
    code = cli.main([str(tmp_path / "x.ipynb"), "--out", str(tmp_path / "taken"), *BASE_FLAGS])
    assert code == 2 and "cannot write the results" in capsys.readouterr().err


def test_a_mistyped_path_is_a_usage_error_not_a_gradebook_row(tmp_path, capsys):
    assert (
        cli.main([str(tmp_path / "submisions"), "--out", str(tmp_path / "out"), *BASE_FLAGS]) == 2
    )
    assert "no such file or folder" in capsys.readouterr().err
    assert not (tmp_path / "out" / "grades.csv").exists()


def test_shards_need_a_shared_seed_and_a_valid_slice(tmp_path, capsys):
    (tmp_path / "x.ipynb").write_bytes(b"{")
    base = [str(tmp_path / "x.ipynb"), "--out", str(tmp_path / "o"), "--quiet"]
    assert cli.main([*base, "--shard", "1/2"]) == 2
    assert "needs --seed or --seed-file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([*base, "--shard", "3/2", "--seed", "1"])


@pytest.mark.parametrize("flag", [["--jobs", "0"], ["--timeout", "0"], ["--cell-timeout", "-1"]])
def test_limits_must_be_positive(tmp_path, capsys, flag):
    argv = [str(tmp_path), "--out", str(tmp_path / "o"), *BASE_FLAGS, *flag]
    assert cli.main(argv) == 2
    assert "must be positive" in capsys.readouterr().err


def test_a_folder_that_is_not_a_course_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "x.ipynb").write_bytes(b"{")
    argv = [str(tmp_path / "x.ipynb"), "--out", str(tmp_path / "o"), "--course", str(tmp_path)]
    assert cli.main([*argv, "--unsafe-no-sandbox", "--quiet"]) == 2
    assert "has no solutions/ folder" in capsys.readouterr().err


def test_an_unknown_assignment_option_names_the_courses(tmp_path, capsys):
    (tmp_path / "x.ipynb").write_bytes(b"{")
    argv = [str(tmp_path / "x.ipynb"), "--out", str(tmp_path / "o"), *BASE_FLAGS]
    assert cli.main([*argv, "--assignment", "02_qkv"]) == 2
    err = capsys.readouterr().err
    assert "--assignment '02_qkv' is not one of this course's assignments" in err
    assert "02_qkv_attention" in err


def test_a_folder_without_notebooks_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no notebook here")
    argv = [str(tmp_path / "empty"), "--out", str(tmp_path / "o"), *BASE_FLAGS]
    assert cli.main(argv) == 2
    assert "no notebooks (.ipynb) found in" in capsys.readouterr().err


def test_without_the_sandbox_the_run_says_what_it_loses(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    argv = [str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--course", str(ROOT)]
    assert cli.main([*argv, "--unsafe-no-sandbox"]) == 2  # (no notebooks: stops after it)
    err = capsys.readouterr().err
    assert err.startswith("warning: --unsafe-no-sandbox") and "It loses:" in err
    cli.main([*argv, "--unsafe-no-sandbox", "--quiet"])
    assert "It loses" not in capsys.readouterr().err  # --quiet: the instructor knows


# --------------------------------------------------------------------------- the seed


def test_the_seed_is_given_read_from_a_file_or_kept_in_the_output_folder(tmp_path):
    assert cli._seed(tmp_path / "a", 12, None) == 12
    (tmp_path / "seed.txt").write_text(" 99\n")
    assert cli._seed(tmp_path / "a", None, tmp_path / "seed.txt") == 99
    out = tmp_path / "out"
    first = cli._seed(out, None, None)
    kept = out / cli.SEED_FILE
    assert kept.read_text() == f"{first}\n" and oct(kept.stat().st_mode & 0o777) == "0o600"
    assert cli._seed(out, None, None) == first  # a re-run into DIR draws the same cases
    kept.write_text("not a number")
    assert cli._seed(out, None, None) == int(kept.read_text())  # a fresh one, kept


def test_a_seed_fingerprint_tells_seeds_apart_without_saying_which():
    one = cli.seed_fingerprint(1)
    assert one == cli.seed_fingerprint(1) != cli.seed_fingerprint(2)
    assert len(one) == 16 and set(one) <= set("0123456789abcdef")


def test_scratch_paths_stay_short_for_unix_sockets(monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/short")
    assert cli._short_tmp() == "/short"
    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/" + "x" * 60)
    assert cli._short_tmp() == ("/tmp" if os.path.isdir("/tmp") else None)


# --------------------------------------------------------------------------- a whole run


def _unreadable_class(folder):
    """Submissions the grader decides without a kernel: broken files of chapter 00."""
    subs = folder / "class"
    for who in ("alice", "bob", "carol"):
        (subs / who).mkdir(parents=True)
        (subs / who / "00_setup.ipynb").write_bytes(b'{"cells": [')
    return subs


def test_a_run_writes_the_gradebook_the_run_record_and_the_exports(tmp_path, capsys):
    subs, out = _unreadable_class(tmp_path), tmp_path / "out"
    argv = [str(subs), "--out", str(out), *BASE_FLAGS, "--no-integrity-check"]
    assert cli.main([*argv, "--export", "lms", "--seed", "5"]) == 0
    rows = list(csv.DictReader(io.StringIO((out / "grades.csv").read_text())))
    assert [r["submission"] for r in rows] == [
        f"class/{w}/00_setup.ipynb" for w in ("alice", "bob", "carol")
    ]
    assert {(r["assignment"], r["status"], r["points"]) for r in rows} == {
        ("00_setup", "error", "0")
    }
    info = json.loads((out / "run.json").read_text())
    assert info["complete"] is True and info["graded"] == 3 and info["shard"] is None
    assert info["seed_fingerprint"] == cli.seed_fingerprint(5) and info["sandbox"] is False
    assert info["partial"] is False and len(info["all_submissions"]) == 3
    assert (out / "lms.csv").read_text().splitlines()[0].startswith("Student,SIS Login ID,00_setup")
    assert "invalid JSON" in (out / "feedback" / "class" / "alice" / "00_setup.md").read_text()
    said = capsys.readouterr().out
    assert "3 submission(s) graded" in said and str(out / "grades.csv") in said
    log = (out / "grading.log").read_text()
    assert log.count(" start ") == log.count(" done ") == 3
    assert not (out / cli.SEED_FILE).exists()  # the seed was given: none kept


def test_a_shard_grades_its_slice_and_records_the_whole_class(tmp_path):
    subs = _unreadable_class(tmp_path)
    argv = [str(subs), *BASE_FLAGS, "--no-integrity-check", "--seed", "5"]
    assert cli.main([*argv, "--out", str(tmp_path / "s2"), "--shard", "2/2"]) == 0
    info = json.loads((tmp_path / "s2" / "run.json").read_text())
    assert info["shard"] == [2, 2] and info["submissions"] == ["class/bob/00_setup.ipynb"]
    assert len(info["all_submissions"]) == 3 and info["graded"] == 1
    rows = list(csv.DictReader(io.StringIO((tmp_path / "s2" / "grades.csv").read_text())))
    assert {r["submission"] for r in rows} == {"class/bob/00_setup.ipynb"}
