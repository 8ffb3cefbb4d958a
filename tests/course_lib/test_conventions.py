"""course_lib called the way users of other libraries call theirs (issue 22).

Each test writes down, in words and in a few lines of plain torch, what the other library
means by a call (its layout, mask polarity, causal alignment, RoPE pairing), then calls
course_lib the way that library's users would. The result is either equal, or a clear error
that names the convention and the fix; never a silently different number. No code is copied
from those libraries: where they are not installed (Hugging Face transformers, flash-attn),
their documented semantics are restated here. docs/conventions.md is the table these tests
back up.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_lib.attention import scaled_dot_product_attention
from course_lib.multihead import KVCache, MultiHeadAttention
from course_lib.positional import apply_rope, llama3_scaled_frequencies, rope_frequencies

DT = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, dtype=DT, generator=_gen(seed))


def _close(a, b, atol=1e-12):
    torch.testing.assert_close(a, b, rtol=0, atol=atol)


# --------------------------------------------------------------------------- torch SDPA


def test_torch_sdpa_users_boolean_mask_means_may_attend_in_both():
    """torch.nn.functional.scaled_dot_product_attention: a boolean attn_mask is True = the
    element takes part in attention; default scale 1/sqrt(d_k). The course's `mask` is the
    same convention, so the same tensor goes across unchanged."""
    q, k, v = _randn(2, 3, 5, 8, seed=1), _randn(2, 3, 7, 8, seed=2), _randn(2, 3, 7, 4, seed=3)
    keep = torch.rand(2, 1, 5, 7, generator=_gen(4)) > 0.3
    keep[..., 0] = True  # no fully masked row (torch gives NaN there, the course zeros)
    theirs = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    ours, _ = scaled_dot_product_attention(q, k, v, keep)
    _close(ours, theirs)


def test_torch_sdpa_users_is_causal_is_top_left_in_both():
    """torch SDPA's is_causal builds the lower-triangular mask aligned top-left, also when
    Nq != Nk: query i sees keys j <= i. The course's is_causal is the same."""
    q, k, v = _randn(1, 2, 3, 8, seed=5), _randn(1, 2, 6, 8, seed=6), _randn(1, 2, 6, 8, seed=7)
    theirs = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    ours, w = scaled_dot_product_attention(q, k, v, is_causal=True)
    _close(ours, theirs)
    assert torch.equal(w[0, 0] > 0, torch.ones(3, 6, dtype=torch.bool).tril())  # top-left


# --------------------------------------------------------------------------- nn.MultiheadAttention


def _torch_mha(batch_first: bool, seed: int = 0) -> nn.MultiheadAttention:
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(16, 4, batch_first=batch_first).to(DT).eval()
    with torch.no_grad():
        m.in_proj_bias.normal_()
    return m


def test_torch_mha_users_sequence_first_module_keeps_its_layout():
    """nn.MultiheadAttention defaults to batch_first=False: inputs and output [N, B, D].
    from_torch copies the flag, so the same [N, B, D] call gives the same numbers; a
    batch-first module given [N, B, D] cross-attention tensors says what to do."""
    theirs = _torch_mha(batch_first=False)
    ours = MultiHeadAttention.from_torch(theirs)
    assert ours.batch_first is False
    x = _randn(6, 2, 16, seed=8)  # (N, B, D) sequence first
    mem = _randn(9, 2, 16, seed=9)  # (Nk, B, D)
    _close(ours(x)[0], theirs(x, x, x)[0])
    _close(ours(x, mem)[0], theirs(x, mem, mem)[0])
    batch_first = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match="batch_first=False"):
        batch_first(x, mem)  # read as B=6 queries vs B=9 keys: refused with the fix


def test_torch_mha_users_key_padding_mask_keeps_torchs_meaning():
    """torch: key_padding_mask [B, Nk], boolean True = padding (ignored), or float (added).
    The course's module takes it under that name with that meaning."""
    theirs = _torch_mha(batch_first=True, seed=1)
    ours = MultiHeadAttention.from_torch(theirs)
    x = _randn(3, 5, 16, seed=10)  # (B, N, D)
    lengths = torch.tensor([5, 3, 4])
    padding = torch.arange(5)[None, :] >= lengths[:, None]  # (B, Nk) True = padding
    r, rw = theirs(x, x, x, key_padding_mask=padding, average_attn_weights=False)
    o, w = ours(x, key_padding_mask=padding)
    _close(o, r)
    _close(w, rw)
    assert torch.all(w[1, :, :, 3:] == 0)
    as_float = torch.zeros(3, 5, dtype=DT).masked_fill(padding, float("-inf"))
    _close(ours(x, key_padding_mask=as_float)[0], theirs(x, x, x, key_padding_mask=as_float)[0])
    # torch averages the weights over heads by default; the course returns them per head
    _close(w.mean(dim=1), theirs(x, x, x, key_padding_mask=padding)[1])


def test_torch_mha_users_padding_mask_given_as_mask_is_refused_not_misread():
    """A [B, Nk] padding mask passed as `mask` would be read as [Nq, Nk]: an error when
    B != N, and silently wrong when B == N. Both now raise, naming key_padding_mask."""
    ours = MultiHeadAttention(16, 4).to(DT)
    for batch_size, n in ((3, 5), (5, 5)):
        x = _randn(batch_size, n, 16, seed=11)
        keep = torch.ones(batch_size, n, dtype=torch.bool)
        keep[1, -2:] = False  # sequence 1 ends with two pad tokens
        with pytest.raises(ValueError, match="key_padding_mask"):
            ours(x, mask=keep)
        want, _ = ours(x, mask=keep[:, None, :])  # the course's way: [B, 1, Nk], True = keep
        _close(ours(x, key_padding_mask=~keep)[0], want)


def test_torch_mha_users_mask_with_batch_equal_to_queries_must_say_which():
    """With B == Nq a 2-D mask fits both [Nq, Nk] and [B, Nk]; the caller says which."""
    ours = MultiHeadAttention(16, 4).to(DT)
    x = _randn(4, 4, 16, seed=12)
    tri = torch.ones(4, 4, dtype=torch.bool).tril()
    with pytest.raises(ValueError, match=r"ambiguous.*mask\[None\]"):
        ours(x, mask=tri)
    _close(ours(x, mask=tri[None])[0], ours(x, is_causal=True)[0])
    x1 = _randn(1, 4, 16, seed=13)  # B = 1: no ambiguity, the usual [Nq, Nk] mask
    _close(ours(x1, mask=tri)[0], ours(x1, is_causal=True)[0])


def test_torch_mha_users_attn_mask_is_refused_with_the_polarity_named():
    """torch's attn_mask: boolean True = blocked, the opposite of the course's `mask`."""
    theirs = _torch_mha(batch_first=True, seed=2)
    ours = MultiHeadAttention.from_torch(theirs)
    x = _randn(2, 6, 16, seed=14)
    blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)  # torch's causal mask: True = blocked
    with pytest.raises(TypeError, match=r"True\s+means \*blocked\*.*mask=~attn_mask"):
        ours(x, attn_mask=blocked)
    _close(ours(x, mask=~blocked)[0], theirs(x, x, x, attn_mask=blocked)[0])


def test_course_polarity_given_as_key_padding_mask_is_refused():
    """A True = real-token mask (the course's, or Hugging Face's attention_mask of ones and
    zeros) passed as key_padding_mask marks every key of an unpadded sequence as padding:
    torch would return NaN for it; the course refuses and names the inversion."""
    ours = MultiHeadAttention(16, 4).to(DT)
    x = _randn(2, 5, 16, seed=15)
    hf_attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])  # 1 = real token
    with pytest.raises(ValueError, match="every key of sequence 0.*~keep"):
        ours(x, key_padding_mask=hf_attention_mask.bool())
    want, _ = ours(x, mask=hf_attention_mask.bool()[:, None, :])  # the right way
    _close(ours(x, key_padding_mask=hf_attention_mask == 0)[0], want)


# --------------------------------------------------------------------------- Hugging Face RoPE


def _hf_llama_rope(q, position_ids, base):
    """Hugging Face's Llama rotary embedding, restated from its documented behaviour:
    inv_freq_i = base^(-2i/d); angles = position_ids[..., None] * inv_freq (from
    position_ids [B, N]); emb = cat(angles, angles) gives cos and sin of shape [B, N, d],
    unsqueezed at dim 1 to broadcast over the heads of q [B, H, N, d];
    q_rot = q * cos + rotate_half(q) * sin with rotate_half(x) = cat(-x2, x1), x1 and x2
    the first and second halves of the features."""
    d = q.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=DT) / d)  # (d/2,)
    angles = position_ids.to(DT)[..., None] * inv_freq  # (B, N, d/2)
    emb = torch.cat((angles, angles), dim=-1)  # (B, N, d)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # (B, 1, N, d)
    x1, x2 = q[..., : d // 2], q[..., d // 2 :]
    return q * cos + torch.cat((-x2, x1), dim=-1) * sin  # (B, H, N, d)


@pytest.mark.parametrize("num_heads", [3, 2])  # B != H, then B == H
def test_hugging_face_users_rope_with_position_ids(num_heads):
    """HF passes position_ids [B, N] (one row per sequence, e.g. left padding or a cache)
    and pairs features (i, i + d/2). The course reads [B, N] the same way (never as
    [H, N], even when B == H) and reproduces HF with interleaved=False."""
    q = _randn(2, num_heads, 5, 8, seed=16)  # (B, H, N, d)
    position_ids = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])  # (B, N)
    theirs = _hf_llama_rope(q, position_ids, 10000.0)
    _close(apply_rope(q, position_ids, interleaved=False), theirs)
    # the course's default pairing is the RoFormer paper's (2i, 2i+1): a different model
    assert (apply_rope(q, position_ids) - theirs).abs().max() > 0.5


def test_hugging_face_users_llama3_rope_scaling():
    """HF's rope_type "llama3" (Llama 3.1's config: factor 8, low_freq_factor 1,
    high_freq_factor 4, original_max_position_embeddings 8192, rope_theta 500000),
    restated: for each inverse frequency f with wavelength w = 2 pi / f, keep f when
    w < 8192 / 4, use f / 8 when w > 8192 / 1, otherwise blend (1 - s) f / 8 + s f with
    s = (8192 / w - 1) / (4 - 1)."""
    theta = rope_frequencies(128, 500_000.0)
    want = []
    for f in theta.tolist():
        w = 2 * math.pi / f
        if w < 8192 / 4:
            want.append(f)
        elif w > 8192 / 1:
            want.append(f / 8)
        else:
            s = (8192 / w - 1) / (4 - 1)
            want.append((1 - s) * f / 8 + s * f)
    got = llama3_scaled_frequencies(theta)
    _close(got, torch.tensor(want, dtype=DT), atol=1e-15)
    # and RoPE with those frequencies is what a Llama 3.1 layer applies
    q = _randn(1, 2, 4, 128, seed=17)
    pos = torch.arange(100_000, 100_004)
    _close(
        apply_rope(q, pos, frequencies=got),
        apply_rope(q, pos / 1.0, frequencies=got, base=123.0),  # base is unused then
    )


def _hf_rope_config(d: int, base: float, rope: dict):
    """A Llama config for transformers' RoPE functions: `rope_parameters` (transformers
    5) or `rope_theta` + `rope_scaling` (4.x)."""
    from transformers import LlamaConfig

    common = dict(hidden_size=4 * d, num_attention_heads=4, head_dim=d)
    common["max_position_embeddings"] = int(
        rope["factor"] * rope["original_max_position_embeddings"]
    )
    try:
        return LlamaConfig(**common, rope_parameters={"rope_theta": base, **rope})
    except TypeError:  # pragma: no cover - transformers 4.x
        return LlamaConfig(**common, rope_theta=base, rope_scaling=rope)


@pytest.mark.parametrize(
    "d, base, factor, context", [(128, 10_000.0, 4.0, 4096), (64, 1_000_000.0, 8.0, 32768)]
)
def test_hugging_face_users_yarn_rope_scaling(d, base, factor, context):
    """HF's rope_type "yarn" (what a YaRN checkpoint's config.json names): its own
    `_compute_yarn_parameters` gives the course's yarn_scaled_frequencies (float32 there)
    and yarn_attention_factor; the paper's ramp in r is a different set of frequencies. Then
    one Llama rotary layer: HF's cos/sin (already times the attention factor) on the
    half-split pairing equal the course's apply_rope with those frequencies, times the
    factor."""
    pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import _compute_yarn_parameters
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    from course_lib.positional import (
        yarn_attention_factor,
        yarn_paper_frequencies,
        yarn_scaled_frequencies,
    )

    rope = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": context}
    config = _hf_rope_config(d, base, rope)
    inv_freq, attention_factor = _compute_yarn_parameters(config, "cpu")
    ours = yarn_scaled_frequencies(d, factor, context, base=base)
    torch.testing.assert_close(inv_freq.to(DT), ours, rtol=1e-6, atol=0)
    assert attention_factor == pytest.approx(yarn_attention_factor(factor), rel=1e-12)
    paper = yarn_paper_frequencies(rope_frequencies(d, base), factor, context)
    assert ((inv_freq.to(DT) / paper - 1).abs().max()) > 0.3  # not the paper's ramp

    rotary = LlamaRotaryEmbedding(config)
    q = torch.randn(1, 2, 4, d, generator=_gen(40))  # (B, H, N, d) float32
    position_ids = torch.tensor([[3, 1000, 20_000, int(factor * context) - 1]])  # (B, N)
    cos, sin = rotary(q, position_ids)  # (B, N, d)
    theirs, _ = apply_rotary_pos_emb(q, q, cos, sin)
    mine = yarn_attention_factor(factor) * apply_rope(
        q.to(DT), position_ids, interleaved=False, frequencies=ours
    )
    # float32 angles of up to ~1e5 radians: HF's own rounding, not a convention difference
    torch.testing.assert_close(theirs.to(DT), mine, rtol=0, atol=1e-2)
    near = position_ids[0] < 2000
    torch.testing.assert_close(theirs.to(DT)[:, :, near], mine[:, :, near], rtol=0, atol=1e-4)
    # the paper's ramp in the same layer: wrong by more than the size of a feature
    wrong = yarn_attention_factor(factor) * apply_rope(
        q.to(DT), position_ids, interleaved=False, frequencies=paper
    )
    assert (theirs.to(DT) - wrong)[:, :, ~near].abs().max() > 1.0


# --------------------------------------------------------------------------- Meta Llama / flash-attn


def _meta_llama_rope(xq, start_pos, base):
    """Meta's Llama reference code, restated: xq [B, N, H, d]; adjacent features
    (2i, 2i+1) read as one complex number, multiplied by exp(1j * p * theta_i) for the
    positions p = start_pos .. start_pos + N - 1."""
    b, n, h, d = xq.shape
    theta = base ** (-torch.arange(0, d, 2, dtype=DT) / d)  # (d/2,)
    p = torch.arange(start_pos, start_pos + n, dtype=DT)  # (N,)
    rot = torch.polar(torch.ones(n, d // 2, dtype=DT), p[:, None] * theta)  # (N, d/2)
    z = torch.view_as_complex(xq.reshape(b, n, h, d // 2, 2).contiguous())  # (B, N, H, d/2)
    return torch.view_as_real(z * rot[None, :, None, :]).reshape(b, n, h, d)


@pytest.mark.parametrize("shape", [(2, 5, 3, 8), (2, 4, 4, 8)])  # N != H, then N == H
def test_meta_llama_users_tokens_before_heads(shape):
    """Meta's Llama code and flash-attn hold [B, N, H, d]. layout="BNHD" says so."""
    xq = _randn(*shape, seed=18)
    start = 37
    n = shape[1]
    theirs = _meta_llama_rope(xq, start, 500_000.0)
    _close(apply_rope(xq, torch.arange(start, start + n), base=500_000.0, layout="BNHD"), theirs)
    _close(
        apply_rope(xq.transpose(1, 2), torch.arange(start, start + n), base=500_000.0),
        theirs.transpose(1, 2),
    )  # or transpose to the course's [B, H, N, d] first


def test_tokens_before_heads_without_layout_is_caught_when_positions_tell():
    """Without layout a 4-D x is [B, H, N, d]; positions of x.shape[1]'s length give the
    [B, N, H, d] mistake away, and the error names the layout and the fix."""
    xq = _randn(2, 5, 3, 8, seed=19)  # (B, N, H, d): five tokens, three heads
    with pytest.raises(ValueError, match=r"\[B, N, H, d\].*layout='BNHD'"):
        apply_rope(xq, torch.arange(5))
    with pytest.raises(ValueError, match="layout must be None, 'BHND'"):
        apply_rope(xq, layout="BSHD")
    with pytest.raises(ValueError, match="names the four axes"):
        apply_rope(_randn(5, 8, seed=20), layout="BNHD")


def test_flash_attn_users_rotary_is_half_split_by_default():
    """flash-attn's apply_rotary_emb(x [B, N, H, d], cos, sin, interleaved=False) rotates
    (i, i + d/2) pairs by default, like Hugging Face: layout="BNHD", interleaved=False."""
    x = _randn(2, 6, 3, 8, seed=21)  # (B, N, H, d)
    pos = torch.arange(6)
    want = _hf_llama_rope(x.transpose(1, 2), pos.expand(2, 6), 10000.0).transpose(1, 2)
    _close(apply_rope(x, pos, layout="BNHD", interleaved=False), want)


def test_cached_decoding_is_bottom_right_causal_like_flash_attn():
    """flash-attn's causal=True aligns the triangle bottom-right when Nq != Nk: query i
    sees keys j <= i + Nk - Nq (the queries are the last Nq positions). With a KVCache,
    MultiHeadAttention's is_causal means exactly that; without one it is top-left, like
    torch SDPA."""
    torch.manual_seed(3)
    attn = MultiHeadAttention(16, 4, num_kv_heads=2).to(DT).eval()
    x = _randn(1, 7, 16, seed=22)
    cache = KVCache()
    attn(x[:, :4], cache=cache, is_causal=True)
    chunk, _ = attn(x[:, 4:], cache=cache, is_causal=True)  # Nq = 3 queries, Nk = 7 keys
    n_q, n_k = 3, 7
    bottom_right = torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + n_k - n_q
    want, _ = attn(x[:, 4:], x, mask=bottom_right)
    _close(chunk, want)
    top_left, _ = attn(x[:, 4:], x, is_causal=True)
    assert not torch.allclose(top_left, want)


def _flash_attn_func(q, k, v, causal=False, window_size=(-1, -1)):
    """flash-attn's flash_attn_func, restated in plain torch: q [B, Nq, H, d],
    k, v [B, Nk, Hkv, d] with Hkv dividing H (query head h reads KV head h // (H / Hkv));
    causal=True is bottom-right (query i sees keys j <= i + Nk - Nq); window_size=(l, r)
    keeps keys i + Nk - Nq - l <= j <= i + Nk - Nq + r (-1: unbounded); scale 1/sqrt(d).
    Returns [B, Nq, H, d]."""
    b, n_q, h, d = q.shape
    n_k, h_kv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(h // h_kv, dim=2)  # (B, Nk, H, d)
    v = v.repeat_interleave(h // h_kv, dim=2)  # (B, Nk, H, d)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)  # (B, H, Nq, Nk)
    i = torch.arange(n_q)[:, None] + n_k - n_q  # (Nq, 1) the query's place among the keys
    j = torch.arange(n_k)[None, :]  # (1, Nk)
    keep = torch.ones(n_q, n_k, dtype=torch.bool)
    left, right = window_size
    if causal:
        right = 0
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)  # (B, H, Nq, Nk)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)  # (B, Nq, H, d)


def _bnhd(b, n, h, d, seed):
    return _randn(b, n, h, d, seed=seed)  # (B, N, H, d)


@pytest.mark.parametrize(
    "n_q, n_k, window",
    [(5, 5, None), (3, 9, None), (3, 9, 4), (9, 9, 3)],  # square, a cache chunk, windows
)
def test_flash_attn_users_layout_bottom_right_and_window_in_the_reference(n_q, n_k, window):
    """flash_attn_func(q, k, v, causal=True, window_size=(W - 1, 0)) with [B, N, H, d]
    tensors and GQA is flash_attention_reference(..., layout="bnhd", is_causal=True,
    causal_alignment="bottom_right", window=W)."""
    from course_lib.flash import flash_attention_reference

    q, k, v = _bnhd(2, n_q, 4, 8, 40), _bnhd(2, n_k, 2, 8, 41), _bnhd(2, n_k, 2, 8, 42)
    theirs = _flash_attn_func(
        q, k, v, causal=True, window_size=(-1 if window is None else window - 1, 0)
    )
    ours, _ = flash_attention_reference(
        q,
        k,
        v,
        is_causal=True,
        causal_alignment="bottom_right",
        window=window,
        layout="bnhd",
        block_size=(2, 4),
    )
    assert ours.shape == theirs.shape  # (B, Nq, H, d): the layout comes back as it went in
    _close(ours, theirs)
    if n_q != n_k:  # the default, torch SDPA's top-left triangle, is a different number
        top_left, _ = flash_attention_reference(q, k, v, is_causal=True, layout="bnhd")
        assert not torch.allclose(top_left, theirs)


def test_flash_attn_users_layout_bottom_right_and_window_in_the_kernel():
    """The Triton kernel (the interpreter on a CPU) takes the same call and gives the same
    numbers, GQA read in-kernel, at a shape small enough for the interpreter."""
    from course_lib import flash

    if flash.triton_mode() == "unavailable":
        pytest.skip("Triton is not installed (Linux only); the reference above covers the call")
    device = "cpu" if flash.triton_mode() == "interpreter" else "cuda"
    f32 = dict(dtype=torch.float32, device=device)
    q, k, v = (
        _bnhd(1, 3, 4, 16, 43).to(**f32),
        _bnhd(1, 9, 2, 16, 44).to(**f32),
        _bnhd(1, 9, 2, 16, 45).to(**f32),
    )
    theirs = _flash_attn_func(
        *(x.double().cpu() for x in (q, k, v)), causal=True, window_size=(4, 0)
    )
    ours = flash.flash_attention(
        q, k, v, is_causal=True, causal_alignment="bottom_right", window=5, layout="bnhd"
    )
    assert ours.shape == (1, 3, 4, 16)
    torch.testing.assert_close(ours.double().cpu(), theirs, rtol=1e-4, atol=2e-5)


# --------------------------------------------------------------------------- the table


def test_the_conventions_page_exists_and_the_chapters_point_to_it():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "conventions.md").read_text(encoding="utf-8")
    for needle in (
        "key_padding_mask",
        'layout="BNHD"',
        "bottom-right",
        "rotate_half",
        "81 559 MiB",
        'layout="bnhd"',
        'causal_alignment="bottom_right"',
    ):
        assert needle in page, needle
    for chapter in ("04_multi_head_attention", "05_positional_encodings"):
        nb = json.loads((root / "notebooks" / f"{chapter}.ipynb").read_text(encoding="utf-8"))
        text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        assert "docs/conventions.md" in text, chapter


def test_fully_masked_rows_give_zeros_in_the_course():
    """The table's course column: a query that may attend to no key gets zero weights."""
    q, k, v = _randn(1, 3, 4, seed=30), _randn(1, 5, 4, seed=31), _randn(1, 5, 4, seed=32)
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[1] = False
    out, w = scaled_dot_product_attention(q, k, v, keep)
    assert torch.all(w[0, 1] == 0) and torch.all(out[0, 1] == 0) and torch.isfinite(out).all()
