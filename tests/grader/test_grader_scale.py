"""A class too big for one machine, and the files an instructor takes away.

* ``--shard K/N`` runs merged with ``course-grade merge`` write, byte for byte, what one
  run writes (gradebook, review list, every feedback file, the exports);
* caps on count, size and time, with a clear message;
* partial credit, and the exports for Canvas/Moodle (CSV) and Gradescope (results.json).

The parts, without grading runs (names of submissions, the options, the exports' files,
shards refused), are in tests/course_tools/grading/.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import pytest
from grading_lab import ROOT, grade, readable_tree, row, with_solutions

from course_tools.grading import cli
from course_tools.grading.report import student_keys

pytestmark = pytest.mark.slow

NAIVE = """def softmax(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)
"""


def _class(folder: Path) -> Path:
    """Per-student folders, as a platform or a shell glob gives them; two graded by a
    kernel, the others decided without one; names that clash once made safe."""
    subs = folder / "class"
    files = {
        "alice/00_setup.ipynb": (ROOT / "solutions" / "00_setup.ipynb").read_bytes(),
        "bob/00_setup.ipynb": with_solutions({"00.1": NAIVE}),
        "carol/00_setup.ipynb": (ROOT / "exercises" / "00_setup.ipynb").read_bytes(),
        "dave/00_setup.ipynb": b'{"cells": [',
        "erin/homework.ipynb": b"{}",
        "frank/a?.ipynb": b"{",
        "frank/a*.ipynb": b"{",
    }
    for name, data in files.items():
        (subs / name).parent.mkdir(parents=True, exist_ok=True)
        (subs / name).write_bytes(data)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for who in ("gina", "hal"):
            zf.writestr(f"{who}/00_setup.ipynb", (ROOT / "exercises/00_setup.ipynb").read_bytes())
    (subs / "late.zip").write_bytes(buf.getvalue())
    return subs


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    base = tmp_path_factory.mktemp("sharded")
    subs = _class(base)
    flags = ["--partial", "--export", "lms,gradescope", "--cell-timeout", "60"]
    single = grade([subs], base / "single", "--jobs", "2", *flags)
    shards = [
        grade([subs], base / f"shard{k}", "--jobs", "1", "--shard", f"{k}/3", *flags)
        for k in (1, 2, 3)
    ]
    code = cli.main(
        [
            "merge",
            *(str(base / f"shard{k}") for k in (1, 2, 3)),
            "--out",
            str(base / "merged"),
            "--export",
            "lms,gradescope",
        ]
    )
    return {"base": base, "single": single, "shards": shards, "merge_code": code}


def test_three_shards_merged_equal_one_run_byte_for_byte(sharded):
    base = sharded["base"]
    assert sharded["merge_code"] == 0
    single, merged = readable_tree(base / "single"), readable_tree(base / "merged")
    assert sorted(single) == sorted(merged)
    assert {"grades.csv", "review.csv", "lms.csv"} <= set(single)
    assert sum(k.startswith("feedback/") for k in single) == 9
    for path in single:
        assert single[path] == merged[path], path
    sizes = [len(s["rows"]) for s in sharded["shards"]]
    assert all(sizes) and sum(sizes) == len(sharded["single"]["rows"])  # a real split


def test_partial_credit_and_its_rows(sharded):
    single = sharded["single"]
    bob = row(single, "class/bob/00_setup.ipynb")
    assert bob["status"] == "failed" and 0 < float(bob["points"]) < 1
    assert row(single, "class/alice/00_setup.ipynb")["points"] == "1"


def test_lms_export_has_one_row_per_student(sharded):
    text = (sharded["base"] / "single" / "lms.csv").read_text()
    table = list(csv.DictReader(io.StringIO(text)))
    assert list(table[0]) == ["Student", "SIS Login ID", "00_setup (1 points)"]
    got = {r["Student"]: r["00_setup (1 points)"] for r in table}
    assert got["alice"] == "1" and got["carol"] == "0" and 0 < float(got["bob"]) < 1
    assert "late.zip" in got  # (entries of an archive: --student picks them apart)
    keys = student_keys(["x/late.zip/gina/00_setup.ipynb", "x/late.zip/hal/00_setup.ipynb"])
    assert set(keys.values()) == {"gina", "hal"}
    keys = student_keys(["subs/alice.ipynb", "subs/bob.ipynb"])
    assert set(keys.values()) == {"alice", "bob"}
    keys = student_keys(["export.zip/Alice_123_assignsubmission_file_/00.ipynb"], r"_(\d+)_assign")
    assert list(keys.values()) == ["123"]


def test_gradescope_export_follows_its_results_json(sharded):
    out = sharded["base"] / "single" / "gradescope"
    res = json.loads((out / "class" / "bob" / "00_setup.json").read_text())
    assert set(res) >= {"score", "tests"} and isinstance(res["score"], float)
    (test,) = res["tests"]
    assert set(test) >= {"name", "score", "max_score", "status", "output", "visibility"}
    assert test["status"] == "failed" and test["max_score"] == 1.0
    assert test["score"] == res["score"] and "large scores" in test["output"]


def test_one_submission_gives_gradescope_its_results_json(tmp_path):
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "00_setup.ipynb").write_bytes(
        (ROOT / "exercises/00_setup.ipynb").read_bytes()
    )
    grade([tmp_path / "submission"], tmp_path / "out", "--export", "gradescope")
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["score"] == 0 and res["tests"][0]["max_score"] == 1.0


def test_merge_refuses_shards_that_do_not_make_a_whole(sharded, tmp_path, capsys):
    base = sharded["base"]
    assert (
        cli.main(
            ["merge", str(base / "shard1"), str(base / "shard2"), "--out", str(tmp_path / "m")]
        )
        == 2
    )
    assert "expected shards 1..3" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    for name in ("run.json", "results.jsonl"):
        (other / name).write_bytes((base / "shard3" / name).read_bytes())
    info = json.loads((other / "run.json").read_text())
    info["seed_fingerprint"] = "0" * 16
    (other / "run.json").write_text(json.dumps(info))
    assert (
        cli.main(
            [
                "merge",
                str(base / "shard1"),
                str(base / "shard2"),
                str(other),
                "--out",
                str(tmp_path / "m"),
            ]
        )
        == 2
    )
    assert "different seeds" in capsys.readouterr().err


def test_caps_on_count_size_and_time(tmp_path, capsys):
    subs = tmp_path / "subs"
    subs.mkdir()
    for i in range(5):
        (subs / f"s{i}.ipynb").write_bytes(b"{" + b" " * 1000)
    out = str(tmp_path / "out")
    assert cli.main([str(subs), "--out", out, "--quiet", "--max-submissions", "4"]) == 2
    assert "5 submissions, more than --max-submissions 4" in capsys.readouterr().err
    assert cli.main([str(subs), "--out", out, "--quiet", "--max-total-size", "0.000001"]) == 2
    assert "more than --max-total-size" in capsys.readouterr().err
    run = grade([subs], tmp_path / "timed", "--jobs", "1", "--max-time", "0.000001")
    late = [
        r
        for r in run["rows"]
        if "time cap"
        in (
            tmp_path / "timed" / "feedback" / (r["submission"].removesuffix(".ipynb") + ".md")
        ).read_text()
    ]
    assert len(run["rows"]) == 5 and len(late) >= 4
    assert "were not graded: the run reached --max-time" in capsys.readouterr().err
