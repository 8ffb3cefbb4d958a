"""Unit tests for course_lib.multihead: MHA, GQA/MQA and the KV cache."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.attention import scaled_dot_product_attention
from course_lib.multihead import (
    KVCache,
    MultiHeadAttention,
    decode_step_bytes,
    kv_cache_bytes,
    merge_heads,
    mha_num_params,
    repeat_kv,
    split_heads,
)

D, H = 24, 4
DT = torch.float64


def _torch_pair(bias=True, d=D, h=H, seed=0):
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(d, h, bias=bias, batch_first=True).to(DT).eval()
    with torch.no_grad():  # nonzero biases so a forgotten bias cannot pass
        if bias:
            ref.in_proj_bias.normal_()
            ref.out_proj.bias.normal_()
    return ref, MultiHeadAttention.from_torch(ref)


def _close(a, b, atol=1e-10):
    assert a.shape == b.shape, (a.shape, b.shape)
    torch.testing.assert_close(a, b, atol=atol, rtol=1e-8)


# --------------------------------------------------------------------------- helpers


def test_split_merge_roundtrip_and_layout():
    x = torch.arange(2 * 3 * 12, dtype=DT).reshape(2, 3, 12)  # (B, N, D)
    heads = split_heads(x, 4)  # (B, H, N, d_h)
    assert heads.shape == (2, 4, 3, 3)
    # head i holds features i*d_h .. (i+1)*d_h - 1 of each token
    assert torch.equal(heads[1, 2, 0], x[1, 0, 6:9])
    assert torch.equal(merge_heads(heads), x)


def test_split_heads_errors_name_shapes():
    with pytest.raises(ValueError, match=r"not divisible by num_heads=5"):
        split_heads(torch.zeros(1, 2, 12), 5)
    with pytest.raises(ValueError, match=r"\[B, N, H\*d_h\], got \(2, 12\)"):
        split_heads(torch.zeros(2, 12), 3)
    with pytest.raises(ValueError, match=r"got \(2, 3, 4\)"):
        merge_heads(torch.zeros(2, 3, 4))


def test_repeat_kv_repeats_in_place_not_tiled():
    x = torch.arange(2, dtype=DT).reshape(1, 2, 1, 1).expand(1, 2, 3, 2)  # (B, H_kv, N, d)
    out = repeat_kv(x, 3)  # (B, 6, N, d)
    assert out.shape == (1, 6, 3, 2)
    assert out[0, :, 0, 0].tolist() == [0, 0, 0, 1, 1, 1]
    assert repeat_kv(x, 1) is x
    with pytest.raises(ValueError, match="num_groups"):
        repeat_kv(x, 0)


def test_kv_cache_bytes_llama3_8b():
    # 32 layers, 8 KV heads, head dim 128, bf16: 128 KiB per token, 16 GiB at 128k tokens
    assert kv_cache_bytes(32, 8, 128, 1) == 128 * 1024
    assert kv_cache_bytes(32, 8, 128, 131072) == 16 * 1024**3
    assert kv_cache_bytes(32, 32, 128, 8192, batch_size=2) == 8 * 1024**3
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(32, 8, 128, -1)


# --------------------------------------------------------------------------- vs torch


@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_equals_torch(bias):
    ref, mha = _torch_pair(bias=bias)
    x = torch.randn(3, 7, D, dtype=DT)  # (B, N, D)
    out, w = mha(x)
    out_ref, w_ref = ref(x, x, x, average_attn_weights=False)
    _close(out, out_ref)
    _close(w, w_ref)
    assert w.shape == (3, H, 7, 7)


def test_cross_attention_equals_torch():
    ref, mha = _torch_pair()
    q = torch.randn(2, 5, D, dtype=DT)  # (B, Nq, D)
    kv = torch.randn(2, 9, D, dtype=DT)  # (B, Nk, D)
    out, w = mha(q, kv)
    out_ref, w_ref = ref(q, kv, kv, average_attn_weights=False)
    _close(out, out_ref)
    _close(w, w_ref)
    assert w.shape == (2, H, 5, 9)
    # distinct key and value tensors
    v = torch.randn(2, 9, D, dtype=DT)
    _close(mha(q, kv, v)[0], ref(q, kv, v)[0])


def test_causal_equals_torch_with_inverted_mask():
    ref, mha = _torch_pair()
    x = torch.randn(2, 6, D, dtype=DT)
    allowed = torch.ones(6, 6, dtype=torch.bool).tril()  # ours: True = may attend
    out, w = mha(x, is_causal=True)
    # torch.nn.MultiheadAttention: True = NOT allowed, so pass the complement
    out_ref, w_ref = ref(x, x, x, attn_mask=~allowed, average_attn_weights=False)
    _close(out, out_ref)
    _close(w, w_ref)
    _close(mha(x, mask=allowed)[0], out_ref)
    assert torch.all(w.triu(1) == 0)
    # the classic mistake: handing torch our mask unchanged attends to the *future*
    wrong, _ = ref(x[:, :5], x[:, :5], x[:, :5], attn_mask=allowed[:5, :5])
    assert not torch.allclose(wrong, out_ref[:, :5])


def test_boolean_and_padding_masks_equal_torch():
    ref, mha = _torch_pair()
    b, n = 3, 6
    x = torch.randn(b, n, D, dtype=DT)
    lengths = torch.tensor([6, 4, 2])
    keep = torch.arange(n)[None, :] < lengths[:, None]  # (B, Nk) True = real token
    out, _ = mha(x, mask=keep[:, None, :])  # (B, 1, Nk) broadcasts over queries and heads
    out_ref, _ = ref(x, x, x, key_padding_mask=~keep)
    _close(out, out_ref)
    # a per-example [B, Nq, Nk] mask and a per-head [B, H, Nq, Nk] one
    rand = torch.rand(b, n, n) > 0.5
    rand[..., 0] = True  # no fully masked rows (torch returns NaN there)
    out_ref, _ = ref(x, x, x, attn_mask=(~rand).repeat_interleave(H, dim=0))
    _close(mha(x, mask=rand)[0], out_ref)
    _close(mha(x, mask=rand[:, None].expand(b, H, n, n))[0], out_ref)


def test_fully_masked_row_gives_finite_output():
    _, mha = _torch_pair()
    x = torch.randn(1, 3, D, dtype=DT)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    out, w = mha(x, mask=mask)
    assert torch.isfinite(out).all()
    assert torch.all(w[:, :, 1] == 0)


def test_need_weights_false_and_from_torch_errors():
    _, mha = _torch_pair()
    x = torch.randn(1, 3, D, dtype=DT)
    out, w = mha(x, need_weights=False)
    assert w is None and out.shape == (1, 3, D)
    with pytest.raises(ValueError, match="kdim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, batch_first=True))
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.5).to(DT)
    x = torch.randn(1, 8, D, dtype=DT)
    mha.eval()
    a, _ = mha(x)
    b, _ = mha(x)
    _close(a, b)
    mha.train()
    c, w = mha(x)
    assert not torch.allclose(a, c)
    assert (w == 0).any()


# --------------------------------------------------------------------------- heads


def test_equals_separate_single_head_attentions():
    torch.manual_seed(1)
    mha = MultiHeadAttention(D, H).to(DT)
    x = torch.randn(2, 5, D, dtype=DT)
    head_dim = D // H
    q, k, v = mha.W_Q(x), mha.W_K(x), mha.W_V(x)  # (B, N, D) each
    heads = []
    for i in range(H):
        sl = slice(i * head_dim, (i + 1) * head_dim)
        o, _ = scaled_dot_product_attention(q[..., sl], k[..., sl], v[..., sl])  # (B, N, d_h)
        heads.append(o)
    expected = mha.W_O(torch.cat(heads, dim=-1))  # (B, N, D)
    _close(mha(x)[0], expected)


def test_num_kv_heads_equal_heads_is_plain_mha():
    torch.manual_seed(2)
    plain = MultiHeadAttention(D, H).to(DT)
    gqa = MultiHeadAttention(D, H, num_kv_heads=H).to(DT)
    gqa.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, D, dtype=DT)
    _close(gqa(x, is_causal=True)[0], plain(x, is_causal=True)[0])


@pytest.mark.parametrize("h_kv", [1, 2])
def test_gqa_equals_mha_with_duplicated_kv_weights(h_kv):
    """GQA = MHA whose K/V projections repeat each KV head's weights G times."""
    torch.manual_seed(3)
    gqa = MultiHeadAttention(D, H, num_kv_heads=h_kv).to(DT)
    mha = MultiHeadAttention(D, H).to(DT)
    head_dim, g = D // H, H // h_kv
    with torch.no_grad():
        mha.W_Q.load_state_dict(gqa.W_Q.state_dict())
        mha.W_O.load_state_dict(gqa.W_O.state_dict())
        for name in ("W_K", "W_V"):
            src, dst = getattr(gqa, name), getattr(mha, name)
            w = src.weight.reshape(h_kv, head_dim, D).repeat_interleave(g, dim=0)  # (H, d_h, D)
            dst.weight.copy_(w.reshape(D, D))
            dst.bias.copy_(src.bias.reshape(h_kv, head_dim).repeat_interleave(g, 0).reshape(D))
    x = torch.randn(2, 6, D, dtype=DT)
    _close(gqa(x, is_causal=True)[0], mha(x, is_causal=True)[0])
    assert gqa.W_K.weight.shape == (h_kv * head_dim, D)
    assert mha_num_params(D, H, h_kv) == sum(p.numel() for p in gqa.parameters())


def test_param_count_does_not_depend_on_heads():
    counts = {
        h: sum(p.numel() for p in MultiHeadAttention(D, h).parameters()) for h in (1, 2, 3, 4, 6)
    }
    assert set(counts.values()) == {4 * D * D + 4 * D}
    assert mha_num_params(D, 4, 1, bias=False) == 2 * D * D + 2 * D * (D // 4)
    with pytest.raises(ValueError, match="not divisible by num_heads=5"):
        mha_num_params(D, 5)
    with pytest.raises(ValueError, match="not divisible by num_kv_heads=3"):
        mha_num_params(D, 4, 3)


def test_constructor_errors_are_clear():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by num_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="num_heads=4 is not divisible by num_kv_heads=3"):
        MultiHeadAttention(12, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads must be a positive integer"):
        MultiHeadAttention(12, 4, num_kv_heads=0)
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(12, 4, dropout=1.0)


def test_forward_shape_errors_are_clear():
    mha = MultiHeadAttention(12, 4)
    with pytest.raises(ValueError, match=r"query of shape \[B, N, d_model=12\], got \(2, 5, 8\)"):
        mha(torch.zeros(2, 5, 8))
    with pytest.raises(ValueError, match="same batch size"):
        mha(torch.zeros(2, 5, 12), torch.zeros(3, 5, 12))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 4\) does not match"):
        mha(torch.zeros(1, 5, 12), mask=torch.ones(4, 4, dtype=torch.bool))


# --------------------------------------------------------------------------- KV cache


@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_cached_decoding_equals_full_recompute(h_kv):
    torch.manual_seed(4)
    mha = MultiHeadAttention(D, H, num_kv_heads=h_kv).to(DT).eval()
    x = torch.randn(2, 9, D, dtype=DT)
    full, w_full = mha(x, is_causal=True)  # (B, N, D), (B, H, N, N)
    cache = KVCache()
    steps = []
    for t in range(9):
        o, w = mha(x[:, t : t + 1], cache=cache, is_causal=True)  # (B, 1, D), (B, H, 1, t+1)
        assert w.shape == (2, H, 1, t + 1)
        _close(w[..., 0, :], w_full[..., t, : t + 1])
        steps.append(o)
        assert len(cache) == t + 1
    _close(torch.cat(steps, dim=1), full)
    assert cache.k.shape == (2, h_kv, 9, D // H)
    assert cache.nbytes == kv_cache_bytes(1, h_kv, D // H, 9, batch_size=2, bytes_per_value=8)


def test_cached_prefill_then_chunks_equals_full():
    torch.manual_seed(5)
    mha = MultiHeadAttention(D, H, num_kv_heads=2).to(DT).eval()
    x = torch.randn(1, 10, D, dtype=DT)
    full, _ = mha(x, is_causal=True)
    cache = KVCache()
    parts = [
        mha(x[:, a:b], cache=cache, is_causal=True)[0] for a, b in ((0, 4), (4, 7), (7, 10))
    ]  # prompt of 4, then chunks of 3
    _close(torch.cat(parts, dim=1), full)
    # top-left alignment would be wrong for a chunk after a prefix: the test can fail
    cache2 = KVCache()
    mha(x[:, :4], cache=cache2, is_causal=True)
    k_all = torch.cat([x[:, :4], x[:, 4:7]], dim=1)
    top_left, _ = mha(x[:, 4:7], k_all, is_causal=True)
    assert not torch.allclose(top_left, full[:, 4:7])


def test_cache_errors():
    cache = KVCache()
    assert len(cache) == 0 and cache.nbytes == 0
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="do not match the cache"):
        cache.update(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match=r"\[B, Hkv, n, d_h\]"):
        cache.update(torch.zeros(2, 1, 4), torch.zeros(2, 1, 4))


# --------------------------------------------------------------------------- what a decoding step reads


def test_decode_step_bytes_weights_once_cache_per_sequence():
    step = decode_step_bytes(16 * 10**9, 32, 8, 128, 8192, batch_size=1)
    assert step.cache == 1024**3 and step.weights == 16 * 10**9
    assert step.total == step.cache + step.weights and 0 < step.cache_share < 0.1
    big = decode_step_bytes(16 * 10**9, 32, 8, 128, 8192, batch_size=64)
    assert big.cache == 64 * step.cache and big.weights == step.weights and big.cache_share > 0.8


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_cached_chunks_with_a_padding_mask_equal_full(kind):
    """The cache path ANDs its shifted triangle with the caller's mask (bool or additive)."""
    torch.manual_seed(6)
    mha = MultiHeadAttention(D, H, num_kv_heads=2).to(DT).eval()
    x = torch.randn(2, 8, D, dtype=DT)
    keep = torch.ones(2, 8, dtype=torch.bool)
    keep[0, 2] = keep[1, 5] = False  # (B, Nk) keys nobody may see
    if kind == "bool":
        m = keep[:, None, :]  # (B, 1, Nk)
    else:
        m = torch.zeros(2, 1, 8, dtype=DT).masked_fill(~keep[:, None, :], float("-inf"))
    full, w_full = mha(x, mask=m, is_causal=True)
    cache = KVCache()
    parts = [
        mha(x[:, a:b], cache=cache, mask=m[..., :b], is_causal=True)
        for a, b in ((0, 3), (3, 6), (6, 8))
    ]
    _close(torch.cat([o for o, _ in parts], dim=1), full)
    _close(parts[-1][1], w_full[:, :, 6:8])
    assert torch.all(parts[-1][1][1, :, :, 5] == 0)  # the masked key stays masked
