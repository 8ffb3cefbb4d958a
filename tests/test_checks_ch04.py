"""The chapter 04 exercises: references pass, every declared mistake is caught and named."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import CheckFailed, check
from course_lib.checks.core import get_exercise, harvest, score

IDS = ["04.1", "04.2", "04.3", "04.4", "04.5", "04.6"]


@pytest.mark.parametrize("ex_id", IDS)
def test_reference_passes_visible_and_hidden(ex_id, capsys):
    ex = get_exercise(ex_id)
    assert check(ex_id, ex.reference).passed
    assert check(ex_id, ex.reference, hidden=True).passed
    assert "all" in capsys.readouterr().out


@pytest.mark.parametrize("ex_id", IDS)
def test_every_mistake_fails_with_its_own_hint(ex_id):
    ex = get_exercise(ex_id)
    assert ex.mistakes, f"{ex_id} declares no mistakes"
    for hint, wrong in ex.mistakes.items():
        messages = []
        for hidden in (False, True):
            try:
                check(ex_id, wrong, hidden=hidden, quiet=True)
            except CheckFailed as failure:
                messages.append(str(failure))
        assert messages, f"{ex_id}: the mistake {hint[:50]!r}... passes the checks"
        assert any(hint in m for m in messages), (
            f"{ex_id}: the mistake {hint[:50]!r}... is caught but not named: {messages}")


@pytest.mark.parametrize("ex_id", IDS)
def test_every_mistake_fails_the_visible_cases(ex_id):
    """A learner sees the mistake in the notebook, not only in the grader's hidden cases."""
    ex = get_exercise(ex_id)
    for hint, wrong in ex.mistakes.items():
        with pytest.raises(CheckFailed) as failure:
            check(ex_id, wrong, quiet=True)
        assert hint in str(failure.value), f"{ex_id}: visible cases do not name {hint[:50]!r}"


def test_kv_cache_bytes_forgetting_the_batch_is_named_in_the_notebook():
    def no_batch(config, seq_len, batch_size=1, bytes_per_value=2):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        return (2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim
                * seq_len * bytes_per_value)

    with pytest.raises(CheckFailed, match="you forgot the batch"):
        check("04.6", no_batch, quiet=True)


def test_decode_step_with_top_left_is_causal_is_named():
    from course_lib.attention import scaled_dot_product_attention

    def causal(q_new, k_new, v_new, k_cache, v_cache):
        k = torch.cat([k_cache, k_new], dim=-2)
        v = torch.cat([v_cache, v_new], dim=-2)
        g = q_new.shape[1] // k.shape[1]
        o, _ = scaled_dot_product_attention(q_new, k.repeat_interleave(g, 1),
                                            v.repeat_interleave(g, 1), is_causal=True)
        return o, k, v

    with pytest.raises(CheckFailed, match="you passed is_causal=True"):
        check("04.5", causal, quiet=True)


@pytest.mark.parametrize("ex_id", IDS)
def test_placeholder_says_not_implemented(ex_id, capsys):
    def blank(*args, **kwargs):
        raise NotImplementedError("Exercise is not implemented yet")

    report = check(ex_id, blank)
    assert report.not_implemented
    assert "not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("ex_id", IDS)
def test_grader_round_trip(ex_id, tmp_path):
    ex = get_exercise(ex_id)
    harvest(ex_id, ex.reference, seed=7, out_dir=tmp_path)
    verdict = score(ex_id, seed=7, out_dir=tmp_path)
    assert verdict.status == "passed" and verdict.points == ex.points
    wrong = next(iter(ex.mistakes.values()))
    harvest(ex_id, wrong, seed=7, out_dir=tmp_path / "w")
    assert score(ex_id, seed=7, out_dir=tmp_path / "w").status == "failed"


def test_split_heads_shape_error_is_explained():
    def no_transpose_shape(x, num_heads):
        b, n, d = x.shape
        return x.reshape(b, n, num_heads, d // num_heads)  # forgot the transpose

    with pytest.raises(CheckFailed, match="expected shape"):
        check("04.1", no_transpose_shape, quiet=True)


def test_decode_step_that_forgets_repeat_kv_is_reported():
    def no_repeat(q_new, k_new, v_new, k_cache, v_cache):
        k = torch.cat([k_cache, k_new], dim=-2)
        v = torch.cat([v_cache, v_new], dim=-2)
        w = torch.softmax(q_new @ k.transpose(-2, -1) / q_new.shape[-1] ** 0.5, dim=-1)
        return w @ v, k, v

    with pytest.raises(CheckFailed, match="raised RuntimeError"):
        check("04.5", no_repeat, quiet=True)
