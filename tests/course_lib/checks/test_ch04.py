"""The chapter 04 exercises: references pass, every declared mistake is caught and named."""

from __future__ import annotations

import pytest
import torch

from course_lib.checks import CheckFailed, check


def test_kv_cache_bytes_forgetting_the_batch_is_named_in_the_notebook():
    def no_batch(config, seq_len, batch_size=1, bytes_per_value=2):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        return (
            2
            * config["num_hidden_layers"]
            * config["num_key_value_heads"]
            * head_dim
            * seq_len
            * bytes_per_value
        )

    with pytest.raises(CheckFailed, match="you forgot the batch"):
        check("04.6", no_batch, quiet=True)


def test_decode_step_with_top_left_is_causal_is_named():
    from course_lib.attention import scaled_dot_product_attention

    def causal(q_new, k_new, v_new, k_cache, v_cache):
        k = torch.cat([k_cache, k_new], dim=-2)
        v = torch.cat([v_cache, v_new], dim=-2)
        g = q_new.shape[1] // k.shape[1]
        o, _ = scaled_dot_product_attention(
            q_new, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=True
        )
        return o, k, v

    with pytest.raises(CheckFailed, match="you passed is_causal=True"):
        check("04.5", causal, quiet=True)


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

    with pytest.raises(CheckFailed) as err:
        check("04.5", no_repeat, quiet=True)
    msg = str(err.value)  # torch's size error, and what it means here
    assert "raised RuntimeError" in msg and "you did not repeat the KV heads" in msg
    with pytest.raises(CheckFailed, match="you did not repeat the KV heads"):
        check("04.8", lambda q, k, v, kc, vc, window: no_repeat(q, k, v, kc, vc), quiet=True)


def test_decode_step_returning_repeated_caches_is_named():
    from course_lib.multihead import repeat_kv

    def repeated(q_new, k_new, v_new, k_cache, v_cache):
        g = q_new.shape[1] // k_cache.shape[1]
        k = repeat_kv(torch.cat([k_cache, k_new], dim=-2), g)
        v = repeat_kv(torch.cat([v_cache, v_new], dim=-2), g)
        w = torch.softmax(q_new @ k.transpose(-2, -1) / q_new.shape[-1] ** 0.5, dim=-1)
        return w @ v, k, v

    with pytest.raises(CheckFailed) as err:
        check("04.5", repeated, quiet=True)
    msg = str(err.value)
    assert "k_cache: expected shape (2, 2, 6, 3), got (2, 4, 6, 3)" in msg  # named, not item 1
    assert "returned the *repeated* caches" in msg


def test_kv_cache_bytes_as_a_float_is_refused_and_sizes_are_integers():
    def with_slash(config, seq_len, batch_size=1, bytes_per_value=2):
        head_dim = config["hidden_size"] / config["num_attention_heads"]  # a float
        return (
            2
            * config["num_hidden_layers"]
            * config["num_key_value_heads"]
            * head_dim
            * seq_len
            * batch_size
            * bytes_per_value
        )

    with pytest.raises(CheckFailed) as err:
        check("04.6", with_slash, quiet=True, hidden=True)
    msg = str(err.value)
    assert "expected an int (a number of bytes), got the float 17,179,869,184" in msg
    assert "use `//`" in msg and "e+10" not in msg

    def one_layer(config, seq_len, batch_size=1, bytes_per_value=2):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        return 2 * config["num_key_value_heads"] * head_dim * seq_len * batch_size * bytes_per_value

    with pytest.raises(CheckFailed) as err:
        check("04.6", one_layer, quiet=True, hidden=True)
    msg = str(err.value)
    assert "expected 17,179,869,184 bytes (16 GiB), got 536,870,912 bytes (0.5 GiB)" in msg
    assert "you forgot the layers" in msg


def test_mha_to_gqa_strided_groups_are_named():
    def strided(W, num_heads, num_kv_heads):
        d, width = W.shape
        head_dim = width // num_heads
        w = W.reshape(d, num_heads // num_kv_heads, num_kv_heads, head_dim).mean(1)
        return w.reshape(d, num_kv_heads * head_dim)

    with pytest.raises(CheckFailed, match="grouped heads j, j \\+ H_kv"):
        check("04.7", strided, quiet=True)


def test_mha_to_gqa_pooled_module_runs_and_equals_mha_when_heads_agree():
    """Pooled weights load into a GQA module; when the heads of each group were equal,
    the GQA module computes exactly what the MHA module did."""
    from course_lib.checks import get_exercise
    from course_lib.multihead import MultiHeadAttention

    torch.manual_seed(0)
    pool = get_exercise("04.7").reference
    mha = MultiHeadAttention(16, 4, bias=False).double()
    with torch.no_grad():  # make heads 0 = 1 and 2 = 3 in W_K and W_V
        for lin in (mha.W_K, mha.W_V):
            w = lin.weight.reshape(2, 2, 4, 16)  # (Hkv, G, d_h, D) in nn.Linear's layout
            lin.weight.copy_(w[:, :1].expand(2, 2, 4, 16).reshape(16, 16))
    gqa = MultiHeadAttention(16, 4, num_kv_heads=2, bias=False).double()
    with torch.no_grad():
        gqa.W_Q.weight.copy_(mha.W_Q.weight)
        gqa.W_O.weight.copy_(mha.W_O.weight)
        for name in ("W_K", "W_V"):
            pooled = pool(getattr(mha, name).weight.T, 4, 2)  # (D, Hkv d_h) in x @ W form
            getattr(gqa, name).weight.copy_(pooled.T)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    torch.testing.assert_close(gqa(x)[0], mha(x)[0])


def test_sliding_window_trimmed_before_appending_is_named():
    from course_lib.multihead import repeat_kv

    def trim_first(q_new, k_new, v_new, k_cache, v_cache, window):
        k = torch.cat([k_cache[..., -window:, :], k_new], dim=-2)
        v = torch.cat([v_cache[..., -window:, :], v_new], dim=-2)
        g = q_new.shape[1] // k.shape[1]
        w = torch.softmax(q_new @ repeat_kv(k, g).transpose(-2, -1) / q_new.shape[-1] ** 0.5, -1)
        return w @ repeat_kv(v, g), k, v

    with pytest.raises(CheckFailed, match="trimmed the cache before appending"):
        check("04.8", trim_first, quiet=True)


def _learner_cache_saving(num_tokens, num_heads, head_dim, seed, *, last_only=False):
    """04.9 by the course's own cached decoding: MultiHeadAttention with a KVCache."""
    full = cached = 0
    steps = [num_tokens] if last_only else range(1, num_tokens + 1)
    for t in steps:
        full += num_heads * t * t  # all t queries against t keys
        cached += num_heads * t  # the new query against t keys
    return full / cached


def test_04_9_the_ratio_is_measured_and_the_prediction_shown(capsys):
    assert check("04.9", _learner_cache_saving, prediction=lambda t, h, d, s: t).passed
    assert check("04.9", _learner_cache_saving, hidden=True).passed
    assert "you predicted 64, measured 43: your prediction is 49% high" in capsys.readouterr().out


def test_04_9_the_last_step_alone_is_named():
    with pytest.raises(CheckFailed, match="your ratio is T"):
        check("04.9", lambda *a: _learner_cache_saving(*a, last_only=True), quiet=True)
