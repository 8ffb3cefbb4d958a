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

    with pytest.raises(CheckFailed, match="raised RuntimeError"):
        check("04.5", no_repeat, quiet=True)
