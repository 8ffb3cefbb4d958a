"""course_tools/grading/merge.py: ``course-grade merge`` makes one gradebook of the shards
of a class, the same as one run's, and refuses shards that do not make a whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grading_lab import readable_tree
from scripts import ROOT

from course_tools.grading import cli
from course_tools.grading.merge import _merge_problems, merge_main, write_json

FLAGS = ["--course", str(ROOT), "--unsafe-no-sandbox", "--quiet", "--no-integrity-check"]


def _class(folder: Path) -> Path:
    """Five submissions decided without a kernel (broken files, named for chapter 00)."""
    subs = folder / "class"
    for who in ("alice", "bob", "carol", "dave", "erin"):
        (subs / who).mkdir(parents=True)
        (subs / who / "00_setup.ipynb").write_bytes(b'{"cells": [' + who.encode())
    return subs


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("shards")
    subs = _class(base)
    for out, more in (("single", []), *((f"shard{k}", ["--shard", f"{k}/2"]) for k in (1, 2))):
        argv = [str(subs), "--out", str(base / out), "--seed", "3", *FLAGS, *more]
        assert cli.main([*argv, "--export", "lms,gradescope"]) == 0
    return base


def test_merged_shards_equal_one_run_byte_for_byte(shards, tmp_path, capsys):
    argv = [str(shards / "shard1"), str(shards / "shard2"), "--out", str(tmp_path / "m")]
    assert merge_main([*argv, "--export", "lms,gradescope"]) == 0
    assert "merged 2 shard(s), 5 submission(s)" in capsys.readouterr().out
    single, merged = readable_tree(shards / "single"), readable_tree(tmp_path / "m")
    assert sorted(single) == sorted(merged) and {"grades.csv", "lms.csv"} <= set(single)
    for path in single:
        assert single[path] == merged[path], path
    info = json.loads((tmp_path / "m" / "run.json").read_text())
    assert info["shard"] is None and info["complete"] is True and info["graded"] == 5
    assert info["submissions"] == info["all_submissions"] and len(info["merged_from"]) == 2
    lines = (tmp_path / "m" / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["submission"] for x in lines] == info["all_submissions"]


def test_a_missing_shard_is_refused(shards, tmp_path, capsys):
    assert merge_main([str(shards / "shard1"), "--out", str(tmp_path / "m")]) == 2
    assert "expected shards 1..2 once each, got 1" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_a_folder_that_is_not_an_output_folder_is_refused(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    assert merge_main([str(tmp_path / "x"), "--out", str(tmp_path / "m")]) == 2
    assert f"error: {tmp_path / 'x'} is not a course-grade output folder" in capsys.readouterr().err


def test_a_bad_export_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        merge_main([str(tmp_path), "--out", str(tmp_path / "m"), "--export", "pdf"])
    assert "unknown export pdf" in capsys.readouterr().err


def _info(k: int, n: int = 2, **kw) -> dict:
    return {
        "shard": [k, n],
        "seed_fingerprint": "f",
        "course_commit": "c",
        "grader_version": "v",
        "partial": False,
        "all_submissions": ["a", "b"],
        "complete": True,
        **kw,
    }


def _infos(*infos: dict) -> list[tuple[Path, dict]]:
    return [(Path(f"shard{i}"), info) for i, info in enumerate(infos, 1)]


def test_shards_that_make_a_whole_have_no_problems():
    results = [{"submission": "a"}, {"submission": "b"}]
    assert _merge_problems(_infos(_info(1), _info(2)), results) == []


@pytest.mark.parametrize(
    "infos, results, problem",
    [
        ([_info(1), dict(_info(2), shard=None)], [], "must come from a `--shard K/N` run"),
        ([_info(1, 2), _info(2, 3)], [], "different splits (N = [2, 3])"),
        ([_info(1), _info(1)], [], "expected shards 1..2 once each, got 1, 1"),
        ([_info(1), _info(2, seed_fingerprint="g")], [], "different seeds"),
        ([_info(1), _info(2, course_commit="d")], [], "different course commits"),
        ([_info(1), _info(2, grader_version="w")], [], "different grader versions"),
        ([_info(1), _info(2, partial=True)], [], "different --partial settings"),
        ([_info(1), _info(2, all_submissions=["a"])], [], "different lists of submissions"),
        ([_info(1), _info(2, complete=False)], [], "shard2 is an incomplete run"),
        ([_info(1), _info(2)], [{"submission": "a"}] * 2, "graded in two shards"),
        ([_info(1), _info(2)], [{"submission": "a"}], "1 submission(s) are missing"),
    ],
)
def test_shards_that_do_not_make_a_whole_are_named(infos, results, problem):
    problems = _merge_problems(_infos(*infos), results)
    assert any(problem in p for p in problems), problems


def test_write_json_is_sorted_and_ends_with_a_newline(tmp_path):
    write_json(tmp_path / "run.json", {"b": 1, "a": [1, 2]})
    text = (tmp_path / "run.json").read_text()
    assert text.endswith("}\n") and text.index('"a"') < text.index('"b"')
    assert json.loads(text) == {"a": [1, 2], "b": 1}
