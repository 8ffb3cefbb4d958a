"""course_tools/grading/integrity.py: the course's own files, fingerprinted. Which files the
verdicts depend on (the packages and the solutions), a file that cannot be read, and the
files changed between two fingerprints."""

from __future__ import annotations

from course_tools.grading.integrity import changed_files, course_files, hash_files


def test_changed_files_are_the_added_removed_and_edited_ones():
    old = {"a": "1", "b": "2", "c": "3"}
    assert changed_files(old, {"a": "1", "b": "9", "d": "4"}) == ["b", "c", "d"]
    assert changed_files(old, dict(old)) == []


def test_a_file_that_cannot_be_read_hashes_as_missing(tmp_path):
    (tmp_path / "a").write_bytes(b"a")
    got = hash_files([tmp_path / "a", tmp_path / "gone"])
    assert got[str(tmp_path / "gone")] == "missing" and len(got[str(tmp_path / "a")]) == 64


def test_the_verdicts_depend_on_the_packages_and_the_solutions(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "00_setup.ipynb").write_text("{}")
    (tmp_path / "solutions" / "notes.txt").write_text("not a notebook")
    files = course_files(tmp_path)
    names = {f.name for f in files}
    assert tmp_path.resolve() / "solutions" / "00_setup.ipynb" in files
    assert "notes.txt" not in names and {"core.py", "worker.py", "ch00.py"} <= names
