"""course_lib/checks/rules.py: what a statement forbids, watched while a function runs."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from course_lib.checks.core import Case, get_exercise, run_case
from course_lib.checks.rules import (
    SOFTMAX_CALLS,
    Rule,
    Watch,
    watch_for,
    watched,
    whole_scores,
)

SOFTMAX = Watch(calls={name: "no-softmax" for name in SOFTMAX_CALLS})


def _written_out(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def test_every_way_to_call_torchs_softmax_is_seen_and_a_written_one_is_not():
    x = torch.randn(3, 5)
    for way in (
        lambda: torch.softmax(x, -1),
        lambda: F.softmax(x, -1),
        lambda: x.softmax(-1),
        lambda: torch.special.softmax(x, -1),
        lambda: F.log_softmax(x, -1).exp(),
        lambda: torch.nn.Softmax(dim=-1)(x),
    ):
        out, breach = watched(way, SOFTMAX)
        assert breach is not None and breach.rule == "no-softmax", breach
        assert torch.allclose(out, _written_out(x))  # the call still returns its result
    assert watched(lambda: _written_out(x), SOFTMAX)[1] is None


def test_the_library_attention_is_seen_inside_nn_multiheadattention():
    ex = get_exercise("04.3")
    watch = watch_for(ex.rules, Case("x", ()))
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 4, 8)
    _, breach = watched(lambda: mha(x, x, x), watch)
    assert breach is not None and "multi_head_attention_forward" in breach.how
    q = torch.randn(1, 2, 4, 4)
    assert watched(lambda: F.scaled_dot_product_attention(q, q, q), watch)[1] is not None


_tiled = get_exercise("06.2").reference  # (fetched here: an import inside a watch counts)


def _whole(Q, K, V, block):
    S = Q @ K.T / np.sqrt(Q.shape[1])  # (Nq, Nk): what tiling avoids
    m = S.max(axis=1)
    P = np.exp(S - m[:, None])
    return P @ V / P.sum(axis=1)[:, None], m + np.log(P.sum(axis=1))


def test_the_whole_score_matrix_is_seen_in_numpys_memory_and_a_tiled_loop_is_not():
    rng = np.random.default_rng(0)
    Q, K, V = rng.normal(size=(160, 4)), rng.normal(size=(160, 4)), rng.normal(size=(160, 4))
    case = Case("big", (Q, K, V, 16))
    watch = watch_for((Rule("whole-scores", largest=whole_scores(margin=8)),), case)
    assert watch.largest == 160 * 160 and watch.numpy
    _, breach = watched(lambda: _whole(Q, K, V, 16), watch)
    assert breach is not None and breach.rule == "whole-scores" and "KiB" in breach.how
    out, breach = watched(lambda: _tiled(Q, K, V, 16), watch)
    assert breach is None
    np.testing.assert_allclose(out[0], _whole(Q, K, V, 16)[0], atol=1e-12)


def test_a_torch_result_as_large_as_the_scores_is_seen():
    q = torch.randn(100, 16)
    watch = Watch(largest=100 * 100, largest_rule="whole-scores")
    _, breach = watched(lambda: (q @ q.T).softmax(-1) @ q, watch)
    assert breach is not None and "`matmul` returned a tensor of 10000 values" in breach.how
    assert watched(lambda: torch.empty_like(q), watch)[1] is None


def test_whole_scores_watches_only_cases_where_the_memory_can_tell():
    small = Case("small", (np.ones((8, 4)), np.ones((8, 4)), np.ones((8, 4)), 4))
    big = Case("big", (np.ones((176, 4)), np.ones((160, 4)), np.ones((160, 4)), 16))
    assert whole_scores(8)(small) is None and whole_scores(8)(big) == 176 * 160
    square = Case("q", (torch.ones(100, 16), torch.ones(100, 16), torch.ones(100, 16)))
    assert whole_scores(1)(square) == 10_000  # N >= 4 d_h
    assert whole_scores(1)(Case("q", (torch.ones(50, 16),) * 3)) is None


def test_a_watch_travels_as_plain_data_and_anything_else_watches_nothing():
    w = Watch({"softmax": "no-softmax"}, 400, "whole-scores", True)
    assert Watch.from_json(w.to_json()) == w
    assert not Watch.from_json("garbage") and not Watch.from_json({"largest": "9"})


def test_the_notebooks_check_fails_a_case_that_breaks_a_rule_and_names_it():
    ex = get_exercise("03.2")
    case = Case("c", (torch.randn(3, 4),))
    got, failure = run_case(ex, lambda scores, temperature=1.0: torch.softmax(scores, -1), case)
    assert got is None and failure.cause == "03.2/no-softmax"
    assert "breaks a rule of the exercise's statement: it called `softmax`" in failure.message
    assert run_case(ex, ex.reference, case)[1] is None
