"""The grader's protocol: the learner's kernel records outputs, the grader judges them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from course_lib.checks import CheckFailed, check
from course_lib.checks.ch00 import softmax_reference
from course_tools.grading import results
from course_tools.grading.results import harvest, score


def softmax_ok(x):
    return softmax_reference(x)


def test_harvest_then_score_passes_a_correct_function(tmp_path):
    harvest("00.1", softmax_ok, seed=99, out_dir=tmp_path)
    verdict = score("00.1", seed=99, out_dir=tmp_path)
    assert verdict.status == "passed" and verdict.points == verdict.max_points == 1


def test_score_judges_in_its_own_process_and_ignores_claims(tmp_path):
    def wrong(x):
        return np.zeros_like(x)

    harvest("00.1", wrong, seed=5, out_dir=tmp_path)
    # A tampered record that claims success changes nothing: score recomputes everything.
    rec = json.loads((tmp_path / "00.1.json").read_text())
    rec["status"] = "passed"
    (tmp_path / "00.1.json").write_text(json.dumps(rec))
    verdict = score("00.1", seed=5, out_dir=tmp_path)
    assert verdict.status == "failed" and verdict.points == 0


def test_outputs_recorded_for_another_seed_fail(tmp_path):
    harvest("00.1", softmax_ok, seed=1, out_dir=tmp_path)
    assert score("00.1", seed=2, out_dir=tmp_path).status == "failed"


def test_missing_and_not_implemented_and_never_ran(tmp_path):
    harvest("00.1", None, seed=3, out_dir=tmp_path / "a")
    assert score("00.1", seed=3, out_dir=tmp_path / "a").status == "missing"

    def softmax(x):
        raise NotImplementedError("Exercise 00.1 is not implemented yet: replace this line")

    harvest("00.1", softmax, seed=3, out_dir=tmp_path / "b")
    assert score("00.1", seed=3, out_dir=tmp_path / "b").status == "missing"
    assert score("00.1", seed=3, out_dir=tmp_path / "c").status == "error"


def test_sys_exit_in_learner_code_fails_the_case_only(tmp_path):
    import sys

    def softmax(x):
        sys.exit(3)

    with pytest.raises(CheckFailed, match=r"sys.exit\(3\)"):
        check("00.1", softmax)
    harvest("00.1", softmax, seed=4, out_dir=tmp_path)
    assert score("00.1", seed=4, out_dir=tmp_path).status == "failed"


def test_a_planted_fifo_is_refused_not_read(tmp_path):
    import os

    harvest("00.1", softmax_ok, seed=8, out_dir=tmp_path)
    (tmp_path / "00.1.npz").unlink()
    os.mkfifo(tmp_path / "00.1.npz")
    verdict = score("00.1", seed=8, out_dir=tmp_path)
    assert verdict.status == "error" and "not a regular file" in verdict.feedback[0]


def test_a_compressed_bomb_is_refused_before_it_is_unpacked(tmp_path, monkeypatch):
    harvest("00.1", softmax_ok, seed=8, out_dir=tmp_path)
    npz = tmp_path / "00.1.npz"
    np.savez_compressed(npz, c0=np.zeros(2**20))  # 8 MiB of zeros, a few KiB on disk
    monkeypatch.setattr(results, "MAX_RESULT_BYTES", 2**20)  # the real limit is 256 MiB
    assert npz.stat().st_size < 2**20
    verdict = score("00.1", seed=8, out_dir=tmp_path)
    assert verdict.status == "error" and "unpacks to" in verdict.feedback[0]
