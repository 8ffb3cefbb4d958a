"""Checks for chapter 04 (multi-head attention, GQA/MQA and the KV cache).

Nine exercises, each a function the learner writes, on torch tensors in float64:

* 04.1 ``split_heads(x, num_heads)``: ``[B, N, H*d_h] -> [B, H, N, d_h]``
* 04.2 ``merge_heads(x)``: ``[B, H, N, d_h] -> [B, N, H*d_h]``
* 04.3 ``mha_forward(x, W_Q, W_K, W_V, W_O, num_heads)``: multi-head self-attention
* 04.4 ``repeat_kv(x, num_groups)``: GQA's key/value heads for every query head
* 04.5 ``decode_step(q_new, k_new, v_new, k_cache, v_cache)``: one cached decoding step
* 04.6 ``kv_cache_bytes_from_config(config, seq_len, batch_size, bytes_per_value)``, an int
* 04.7 ``mha_to_gqa_weights(W, num_heads, num_kv_heads)``: mean-pool a multi-head
  checkpoint's key/value heads into grouped-query heads (not shown in the lecture)
* 04.8 ``sliding_window_decode_step(q_new, k_new, v_new, k_cache, v_cache, window)``: a
  rolling-buffer KV cache (not shown in the lecture)
* 04.9 ``measure_cache_saving(num_tokens, num_heads, head_dim, seed)``: predict, then measure
  the work a KV cache saves
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..attention import scaled_dot_product_attention
from ..multihead import merge_heads, repeat_kv, split_heads
from .core import Case, Exercise, Hint, register
from .kit import DT, byte_compare, randn, twin, within

# --------------------------------------------------------------------------- 04.1 split heads


def split_heads_reference(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    return split_heads(x, num_heads)  # (B, H, N, d_h)


def _split_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "x of shape (1, 3, 8) into 2 heads (features 0..3 and 4..7)",
                (torch.arange(24, dtype=DT).reshape(1, 3, 8), 2),
            ),
            Case("x of shape (2, 5, 12) into 4 heads", (randn(rng, 2, 5, 12), 4)),
        ]
    return [
        Case("one head: only a new axis", (randn(rng, 2, 3, 6), 1)),
        Case("d_h = 1: one feature per head", (randn(rng, 3, 4, 5), 5)),
        Case("x of shape (2, 7, 24) into 3 heads", (randn(rng, 2, 7, 24), 3)),
    ]


def _split_no_transpose(x, num_heads):
    b, n, d = x.shape
    return x.reshape(b, num_heads, n, d // num_heads)


def _split_wrong_order(x, num_heads):
    b, n, d = x.shape
    return x.reshape(b, n, d // num_heads, num_heads).permute(0, 3, 1, 2)


register(
    Exercise(
        id="04.1",
        title="split the features into heads",
        points=1,
        target="split_heads",
        cases=_split_cases,
        reference=split_heads_reference,
        atol=1e-12,
        rtol=1e-10,
        mistakes={
            Hint(
                "you reshaped straight to (B, H, N, d_h): the shape is right, the numbers are not.",
                "A reshape keeps the memory order, so it cuts the token axis, not the features. "
                "Reshape to (B, N, H, d_h) first, then transpose axes 1 and 2.",
            ): _split_no_transpose,
            Hint(
                "you split the features as (d_h, H): head i then gets features i, i+H, i+2H, ...",
                "Head i must get the contiguous block i*d_h ... (i+1)*d_h-1, so reshape to "
                "(B, N, H, d_h).",
            ): _split_wrong_order,
        },
        hint=Hint(
            "check which features head h receives: each token's features, cut into H blocks of "
            "d_h, one block per head.",
            "Cut the last axis into (H, d_h), then move the head axis in front of the tokens. "
            "x.reshape(B, N, H, D // H) then .transpose(1, 2).",
        ),
    )
)


# --------------------------------------------------------------------------- 04.2 merge heads


def merge_heads_reference(x: torch.Tensor) -> torch.Tensor:
    return merge_heads(x)  # (B, N, H*d_h)


def _merge_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "2 heads of shape (3, 4) each, batch 1",
                (torch.arange(24, dtype=DT).reshape(1, 2, 3, 4),),
            ),
            Case("x of shape (2, 4, 5, 3)", (randn(rng, 2, 4, 5, 3),)),
        ]
    return [
        Case("one head", (randn(rng, 2, 1, 3, 6),)),
        Case("x of shape (3, 6, 7, 2)", (randn(rng, 3, 6, 7, 2),)),
        Case("a single token", (randn(rng, 2, 3, 1, 4),)),
    ]


def _merge_no_transpose(x):
    b, h, n, d = x.shape
    return x.reshape(b, n, h * d)


def _merge_wrong_order(x):
    b, h, n, d = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, n, h * d)


register(
    Exercise(
        id="04.2",
        title="merge the heads back (Concat)",
        points=1,
        target="merge_heads",
        cases=_merge_cases,
        reference=merge_heads_reference,
        atol=1e-12,
        rtol=1e-10,
        mistakes={
            Hint(
                "you reshaped (B, H, N, d_h) straight to (B, N, H*d_h) without moving the head "
                "axis: tokens and heads get mixed up.",
                "Transpose axes 1 and 2 first.",
            ): _merge_no_transpose,
            Hint(
                "you interleaved the heads' features (feature c of every head, then c+1, ...).",
                "Concat puts head 1's d_h features first, then head 2's: transpose(1, 2), then "
                "reshape.",
            ): _merge_wrong_order,
        },
        hint=Hint(
            "check that merging undoes 04.1's split: token n's features are head 0's d_h "
            "features, then head 1's, and so on.",
            "Undo the split: heads back behind the tokens, then join (H, d_h) into one axis. "
            "x.transpose(1, 2).reshape(B, N, H * d_h) (reshape, not view: the transpose is not "
            "contiguous).",
        ),
    )
)


# --------------------------------------------------------------------------- 04.3 MHA forward


def _mha(
    x,
    W_Q,
    W_K,
    W_V,
    W_O,
    num_heads,
    *,
    scale_dim=None,
    use_wo=True,
    transpose=False,
    softmax_dim=-1,
    split=split_heads,
    merge=merge_heads,
):
    t = (lambda w: w.T) if transpose else (lambda w: w)
    q = split(x @ t(W_Q), num_heads)  # (B, H, N, d_h)
    k = split(x @ t(W_K), num_heads)  # (B, H, N, d_h)
    v = split(x @ t(W_V), num_heads)  # (B, H, N, d_h)
    d = q.shape[-1] if scale_dim is None else scale_dim
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, N, N)
    heads = torch.softmax(scores, dim=softmax_dim) @ v  # (B, H, N, d_h)
    merged = merge(heads)  # (B, N, D)
    return merged @ t(W_O) if use_wo else merged  # (B, N, D)


def mha_forward_reference(x, W_Q, W_K, W_V, W_O, num_heads):
    q = split_heads(x @ W_Q, num_heads)  # (B, H, N, d_h)
    k = split_heads(x @ W_K, num_heads)  # (B, H, N, d_h)
    v = split_heads(x @ W_V, num_heads)  # (B, H, N, d_h)
    heads, _ = scaled_dot_product_attention(q, k, v)  # (B, H, N, d_h)
    return merge_heads(heads) @ W_O  # (B, N, D)


def _mha_case(rng, name, b, n, d, h):
    ws = tuple(randn(rng, d, d) / math.sqrt(d) for _ in range(4))
    return Case(name, (randn(rng, b, n, d),) + ws + (h,))


def _mha_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _mha_case(rng, "B=1, N=4, d_model=8, 2 heads", 1, 4, 8, 2),
            _mha_case(rng, "B=2, N=6, d_model=12, 3 heads", 2, 6, 12, 3),
        ]
    return [
        _mha_case(rng, "one head (plain attention)", 2, 5, 8, 1),
        _mha_case(rng, "8 heads of size 2", 2, 7, 16, 8),
        _mha_case(rng, "a single token", 3, 1, 12, 4),
    ]


register(
    Exercise(
        id="04.3",
        title="multi-head self-attention from its weights",
        points=2,
        target="mha_forward",
        cases=_mha_cases,
        reference=mha_forward_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "you scaled the scores by 1/sqrt(d_model).",
                "Each head is an attention in d_h = d_model / H dimensions: divide by sqrt(d_h).",
            ): lambda x, a, b, c, o, h: _mha(x, a, b, c, o, h, scale_dim=x.shape[-1]),
            Hint("you forgot the output projection.", "MultiHead = Concat(heads) @ W_O."): twin(
                _mha, use_wo=False
            ),
            Hint(
                "you applied the weights transposed (x @ W.T, as nn.Linear stores them).",
                "Here the matrices are (d_in, d_out) and the projection is x @ W.",
            ): twin(_mha, transpose=True),
            Hint(
                "your softmax normalises over the queries (dim=-2).",
                "Each query's weights over the keys must sum to 1: softmax over the last axis.",
            ): lambda x, a, b, c, o, h: _mha(x, a, b, c, o, h, softmax_dim=-2),
            Hint(
                "you computed one big head (no split): that is attention with d_k = d_model.",
                "Split Q, K and V into heads before the scores.",
            ): lambda x, a, b, c, o, h: _mha(x, a, b, c, o, 1),
            Hint(
                "you split the heads by reshaping straight to (B, H, N, d_h), without the "
                "transpose: each 'head' is then a slice of the tokens.",
                "Reshape to (B, N, H, d_h), then transpose(1, 2) (exercise 04.1).",
            ): lambda x, a, b, c, o, h: _mha(
                x, a, b, c, o, h, split=_split_no_transpose, merge=_merge_no_transpose
            ),
            Hint(
                "the heads are split correctly but merged by a plain reshape of (B, H, N, d_h) "
                "to (B, N, D): tokens and heads get mixed up.",
                "transpose(1, 2) before the reshape (exercise 04.2).",
            ): twin(_mha, merge=_merge_no_transpose),
        },
        hint=Hint(
            "check each stage against the statement: how the heads are split and merged, the "
            "width each head's scores are scaled by, and the output projection.",
            "Project, split into heads, attend per head, merge, project out. Q = x @ W_Q, split "
            "into heads; the same for K and V; softmax(Q K^T / sqrt(d_h)) V per head; merge the "
            "heads; @ W_O.",
        ),
    )
)


# --------------------------------------------------------------------------- 04.4 repeat KV


def repeat_kv_reference(x: torch.Tensor, num_groups: int) -> torch.Tensor:
    return repeat_kv(x, num_groups)  # (B, Hkv * G, N, d_h)


def _repeat_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    labelled = torch.arange(2, dtype=DT).reshape(1, 2, 1, 1).expand(1, 2, 3, 2).clone()
    if not hidden:
        return [
            Case("2 KV heads filled with their index, G=2: heads 0,0,1,1", (labelled, 2)),
            Case("x of shape (2, 3, 4, 5), G=2", (randn(rng, 2, 3, 4, 5), 2)),
        ]
    return [
        Case("G=1: plain multi-head attention, unchanged", (randn(rng, 2, 4, 3, 2), 1)),
        Case("multi-query: one KV head for 6 query heads", (randn(rng, 2, 1, 5, 4), 6)),
        Case("Llama-3-8B-like grouping: 8 KV heads, G=4", (randn(rng, 1, 8, 3, 2), 4)),
    ]


register(
    Exercise(
        id="04.4",
        title="repeat key/value heads for grouped-query attention",
        points=1,
        target="repeat_kv",
        cases=_repeat_cases,
        reference=repeat_kv_reference,
        atol=1e-12,
        rtol=1e-10,
        mistakes={
            Hint(
                "you tiled the heads (0,1,0,1: x.repeat(1, num_groups, 1, 1)).",
                "Query heads 0..G-1 share KV head 0, so each KV head must be repeated in place: "
                "0,0,1,1 (repeat_interleave on dim 1).",
            ): lambda x, n: x.repeat(1, n, 1, 1),
            Hint(
                "you repeated along the token axis (dim 2) instead of the head axis (dim 1).",
                "x.repeat_interleave(num_groups, dim=1).",
            ): lambda x, n: x.repeat_interleave(n, dim=2),
        },
        hint=Hint(
            "check the order of your output's heads (which KV head each query head reads) and "
            "the axis you repeat along.",
            "Every KV head appears num_groups times in a row, along the head axis. "
            "x.repeat_interleave(num_groups, dim=1), or x[:, :, None].expand(B, Hkv, G, N, d_h) "
            "reshaped to (B, Hkv * G, N, d_h).",
        ),
    )
)


# --------------------------------------------------------------------------- 04.5 decode step


def decode_step_reference(q_new, k_new, v_new, k_cache, v_cache):
    k_all = torch.cat([k_cache, k_new], dim=-2)  # (B, Hkv, T+1, d)
    v_all = torch.cat([v_cache, v_new], dim=-2)  # (B, Hkv, T+1, d)
    g = q_new.shape[1] // k_all.shape[1]
    out, _ = scaled_dot_product_attention(
        q_new, repeat_kv(k_all, g), repeat_kv(v_all, g)
    )  # (B, H, 1, d)
    return out, k_all, v_all


def _decode_wrong(
    q_new,
    k_new,
    v_new,
    k_cache,
    v_cache,
    *,
    append_first=True,
    tile=False,
    only_new=False,
    top_left_causal=False,
    prepend=False,
    return_repeated=False,
):
    if prepend:
        k_all = torch.cat([k_new, k_cache], dim=-2)  # (B, Hkv, T+1, d) new token first
        v_all = torch.cat([v_new, v_cache], dim=-2)  # (B, Hkv, T+1, d)
    else:
        k_all = torch.cat([k_cache, k_new], dim=-2)  # (B, Hkv, T+1, d)
        v_all = torch.cat([v_cache, v_new], dim=-2)  # (B, Hkv, T+1, d)
    k_att, v_att = (k_all, v_all) if append_first else (k_cache, v_cache)
    if only_new:
        k_att, v_att = k_new, v_new
    g = q_new.shape[1] // k_att.shape[1]
    rep = (lambda t: t.repeat(1, g, 1, 1)) if tile else (lambda t: repeat_kv(t, g))
    out, _ = scaled_dot_product_attention(
        q_new, rep(k_att), rep(v_att), is_causal=top_left_causal
    )  # (B, H, 1, d)
    if return_repeated:
        return out, rep(k_all), rep(v_all)  # (B, H, T+1, d): the caches grew G times
    return out, k_all, v_all


def _decode_case(rng, name, b, h, h_kv, t, d):
    return Case(
        name,
        (
            randn(rng, b, h, 1, d),
            randn(rng, b, h_kv, 1, d),
            randn(rng, b, h_kv, 1, d),
            randn(rng, b, h_kv, t, d),
            randn(rng, b, h_kv, t, d),
        ),
    )


def _decode_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _decode_case(rng, "MHA: 2 heads, 3 cached tokens", 1, 2, 2, 3, 4),
            _decode_case(rng, "GQA: 4 query heads, 2 KV heads, 5 cached tokens", 2, 4, 2, 5, 3),
        ]
    return [
        _decode_case(rng, "the first token: an empty cache", 2, 4, 2, 0, 3),
        _decode_case(rng, "MQA: 4 query heads, 1 KV head", 1, 4, 1, 6, 2),
        _decode_case(rng, "GQA 6 query heads, 3 KV heads, 9 cached tokens", 2, 6, 3, 9, 4),
    ]


register(
    Exercise(
        id="04.5",
        title="one cached decoding step",
        points=2,
        target="decode_step",
        cases=_decode_cases,
        reference=decode_step_reference,
        atol=1e-9,
        rtol=1e-7,
        outputs=("output", "k_cache", "v_cache"),
        mistakes={
            Hint(
                "the new token does not attend to itself.",
                "Append k_new and v_new to the cache *before* attending (key j <= i includes "
                "j = i).",
            ): twin(_decode_wrong, append_first=False),
            Hint(
                "the new token attends only to itself.",
                "It must attend to every cached token plus itself.",
            ): twin(_decode_wrong, only_new=True),
            Hint(
                "you tiled the KV heads (0,1,0,1) instead of repeating each in place (0,0,1,1).",
                "Query head i reads KV head i // G.",
            ): twin(_decode_wrong, tile=True),
            Hint(
                "you passed is_causal=True: its triangle is aligned top-left, so the single new "
                "query (row 0) sees only key 0, the oldest cached token.",
                "The new token is the *last* position, T: it may see all T+1 keys, so no mask is "
                "needed here (with several new tokens the triangle must be shifted by the cache "
                "length T, bottom-right).",
            ): twin(_decode_wrong, top_left_causal=True),
            Hint(
                "your attention output is right but you returned the *repeated* caches, "
                "[B, H, T+1, d]: G times the memory GQA is there to save.",
                "Repeat the KV heads only for the attention; return the caches with their "
                "H_kv heads, cat([k_cache, k_new], dim=-2) of shape [B, H_kv, T+1, d].",
            ): twin(_decode_wrong, return_repeated=True),
            Hint(
                "your attention output is right but the returned caches put the new key/value "
                "first.",
                "Append at the end, cat([k_cache, k_new], dim=-2), so that position t stays at "
                "index t.",
            ): twin(_decode_wrong, prepend=True),
        },
        errors={
            r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at "
            r"non-singleton dimension 1": Hint(
                "torch could not line up the H query heads with the H_kv key/value heads: "
                "you did not repeat the KV heads.",
                "With grouped-query attention q_new has H heads and the cache H_kv < H: repeat "
                "each KV head G = H // H_kv times in place (repeat_kv, or "
                "repeat_interleave(G, dim=1)) before q_new @ k.transpose(-2, -1).",
            ),
        },
        hint=Hint(
            "check which keys the new token sees (the cache, and itself?), which KV head each "
            "query head reads, and the shapes of the caches you return.",
            "Append, give every query head its KV head, attend over everything, return the "
            "output and the grown caches. k_all = cat([k_cache, k_new], dim=-2) (the same for "
            "v); repeat the KV heads for the query heads; attention of q_new over all of them; "
            "return (out, k_all, v_all).",
        ),
    )
)


# --------------------------------------------------------------------------- 04.6 cache bytes


def _bytes(
    config,
    seq_len,
    batch_size,
    bytes_per_value,
    *,
    kv_key="num_key_value_heads",
    kv_factor=2,
    layers=True,
    batch=True,
    bits=False,
):
    layers_n = config["num_hidden_layers"] if layers else 1
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    b = batch_size if batch else 1
    unit = 8 if bits else 1
    return int(
        kv_factor * layers_n * config[kv_key] * head_dim * seq_len * b * bytes_per_value * unit
    )


def kv_cache_bytes_from_config(
    config: dict, seq_len: int, batch_size: int = 1, bytes_per_value: int = 2
) -> int:
    return _bytes(config, seq_len, batch_size, bytes_per_value)


def _config(layers, d_model, heads, kv_heads):
    return {
        "num_hidden_layers": layers,
        "hidden_size": d_model,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
    }


def _bytes_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "a tiny GQA model: 3 layers, d_model=64, 8 heads, 2 KV heads, 5 sequences of "
                "10 tokens, fp32",
                (_config(3, 64, 8, 2), 10, 5, 4),
            ),
            Case(
                "a Llama-3-8B-like config, one token in bf16", (_config(32, 4096, 32, 8), 1, 1, 2)
            ),
        ]
    n = int(rng.integers(100, 5000))
    return [
        Case(
            "Llama-3-8B-like, 128k tokens (131072) in bf16",
            (_config(32, 4096, 32, 8), 131072, 1, 2),
        ),
        Case(f"MQA, 12 layers, batch 3, {n} tokens, fp16", (_config(12, 768, 12, 1), n, 3, 2)),
        Case(
            "plain MHA, 6 layers, 2 sequences of 512 tokens, fp32",
            (_config(6, 512, 8, 8), 512, 2, 4),
        ),
    ]


_bytes_compare = byte_compare(
    "In Python 3, `/` always returns a float (hidden_size / num_attention_heads is 128.0): "
    "use `//` for head_dim, or wrap the product in int()."
)


register(
    Exercise(
        id="04.6",
        title="KV-cache bytes from a model config",
        points=1,
        target="kv_cache_bytes_from_config",
        cases=_bytes_cases,
        reference=kv_cache_bytes_from_config,
        atol=0.0,
        rtol=1e-12,
        compare=_bytes_compare,
        mistakes={
            Hint(
                "you counted only the keys (or only the values).",
                "The cache holds both K and V, a factor 2.",
            ): twin(_bytes, kv_factor=1),
            Hint(
                "your cache is as wide as hidden_size per layer and token, as in plain "
                "multi-head attention.",
                "With GQA only num_key_value_heads heads are cached, each of size head_dim = "
                "hidden_size // num_attention_heads (not hidden_size // num_kv_heads).",
            ): twin(_bytes, kv_key="num_attention_heads"),
            Hint("you forgot the layers.", "Every layer caches its own keys and values."): twin(
                _bytes, layers=False
            ),
            Hint(
                "you forgot the batch.", "Each of the batch_size sequences has its own cache."
            ): twin(_bytes, batch=False),
            Hint(
                "your answer is 8 times too large: that is bits.",
                "bytes_per_value already counts bytes (2 for bf16/fp16, 4 for fp32).",
            ): twin(_bytes, bits=True),
        },
        hint=Hint(
            "count what one layer caches for one token (which tensors, how many heads, how "
            "wide), then check that every factor of the statement is in.",
            "Count what one layer caches for one token, then multiply by layers, tokens, "
            "sequences and bytes per value. bytes = 2 (K and V) x layers x KV heads x head_dim x "
            "tokens x batch x bytes_per_value, with head_dim = hidden_size // "
            "num_attention_heads.",
        ),
    )
)


# --------------------------------------------------------------------------- 04.7 MHA -> GQA


def mha_to_gqa_weights_reference(W: torch.Tensor, num_heads: int, num_kv_heads: int):
    r"""Mean-pool the key (or value) heads of each group: ``[D, H d_h] -> [D, H_kv d_h]``.

    Group :math:`j` holds the consecutive query heads :math:`jG, \dots, (j+1)G - 1`;
    :math:`W^{(j)}_\text{new} = \frac1G \sum_{g<G} W^{(jG+g)}` (Ainslie et al., 2023).
    """
    d_model, width = W.shape
    head_dim = width // num_heads
    group = num_heads // num_kv_heads
    w = W.reshape(d_model, num_kv_heads, group, head_dim)  # (D, Hkv, G, d_h)
    return w.mean(dim=2).reshape(d_model, num_kv_heads * head_dim)  # (D, Hkv * d_h)


def _pool_wrong(W, num_heads, num_kv_heads, *, how):
    d_model, width = W.shape
    head_dim = width // num_heads
    group = num_heads // num_kv_heads
    if how == "strided":  # groups j, j + Hkv, j + 2 Hkv, ...
        w = W.reshape(d_model, group, num_kv_heads, head_dim).mean(dim=1)  # (D, Hkv, d_h)
    elif how == "sum":
        w = W.reshape(d_model, num_kv_heads, group, head_dim).sum(dim=2)  # (D, Hkv, d_h)
    elif how == "first":
        w = W.reshape(d_model, num_kv_heads, group, head_dim)[:, :, 0]  # (D, Hkv, d_h)
    elif how == "feature_order":  # each group's columns cut as (d_h, G) instead of (G, d_h)
        w = W.reshape(d_model, num_kv_heads, head_dim, group).mean(dim=-1)  # (D, Hkv, d_h)
    else:  # pragma: no cover
        raise ValueError(how)
    return w.reshape(d_model, num_kv_heads * head_dim)  # (D, Hkv * d_h)


def _pool_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        labelled = torch.arange(4, dtype=DT).repeat_interleave(2)[None, :].expand(3, 8).clone()
        return [
            Case(
                "4 heads of d_h = 2 whose columns hold the head's index, into 2 KV heads: "
                "[0.5, 0.5, 2.5, 2.5]",
                (labelled, 4, 2),
            ),
            Case("W (8, 24): 6 heads of d_h 4 into 2 KV heads", (randn(rng, 8, 24), 6, 2)),
            Case("W (6, 12): 4 heads of d_h 3 into 1 KV head (MQA)", (randn(rng, 6, 12), 4, 1)),
        ]
    return [
        Case("H_kv = H: nothing changes", (randn(rng, 5, 12), 4, 4)),
        Case("Llama-3-8B-like grouping: 32 heads into 8, d_h 4", (randn(rng, 6, 128), 32, 8)),
        Case("W (4, 36): 9 heads of d_h 4 into 3 KV heads", (randn(rng, 4, 36), 9, 3)),
    ]


register(
    Exercise(
        id="04.7",
        title="turn a multi-head checkpoint into grouped-query attention",
        points=2,
        target="mha_to_gqa_weights",
        cases=_pool_cases,
        reference=mha_to_gqa_weights_reference,
        atol=1e-12,
        rtol=1e-10,
        mistakes={
            Hint(
                "you grouped heads j, j + H_kv, j + 2 H_kv, ... together.",
                "GQA's groups are *consecutive* query heads (query head i reads KV head i // G, "
                "as repeat_kv's 0,0,1,1): reshape the columns as (H_kv, G, d_h) and average "
                "over G.",
            ): twin(_pool_wrong, how="strided"),
            Hint(
                "you added the heads of a group instead of averaging them.",
                "Mean-pooling divides by G: the pooled head is the average of the group's heads.",
            ): twin(_pool_wrong, how="sum"),
            Hint(
                "you kept the first head of each group.",
                "That is one of the alternatives Ainslie et al. compare; this exercise asks for "
                "the mean of the group's G heads, which worked best in their uptraining.",
            ): twin(_pool_wrong, how="first"),
            Hint(
                "you cut each group's columns as (d_h, G), averaging features of one head.",
                "A group's G·d_h columns are G heads one after the other, each d_h wide: "
                "reshape to (D, H_kv, G, d_h), then mean over axis 2.",
            ): twin(_pool_wrong, how="feature_order"),
        },
        hint=Hint(
            "check which query heads form a group (and so share a KV head) and how the group's "
            "heads are combined into one.",
            "Every group of G = H / H_kv consecutive heads becomes one head, their average. "
            "W.reshape(D, H_kv, G, d_h).mean(dim=2).reshape(D, H_kv * d_h).",
        ),
    )
)


# --------------------------------------------------------------------------- 04.8 sliding window


def sliding_window_decode_step_reference(q_new, k_new, v_new, k_cache, v_cache, window):
    r"""One decoding step with a sliding-window cache of at most ``window`` tokens.

    Append the new key/value, keep the last ``window`` of them (the new one included), and
    attend over what is kept: the new token sees itself and the ``window - 1`` tokens
    before it, as in Mistral 7B's rolling buffer (Jiang et al., 2023).
    """
    k_all = torch.cat([k_cache, k_new], dim=-2)[..., -window:, :]  # (B, Hkv, <=W, d)
    v_all = torch.cat([v_cache, v_new], dim=-2)[..., -window:, :]  # (B, Hkv, <=W, d)
    g = q_new.shape[1] // k_all.shape[1]
    out, _ = scaled_dot_product_attention(
        q_new, repeat_kv(k_all, g), repeat_kv(v_all, g)
    )  # (B, H, 1, d)
    return out, k_all, v_all


def _window_wrong(q_new, k_new, v_new, k_cache, v_cache, window, *, how):
    k_full = torch.cat([k_cache, k_new], dim=-2)  # (B, Hkv, T+1, d)
    v_full = torch.cat([v_cache, v_new], dim=-2)  # (B, Hkv, T+1, d)
    keep = {
        "first": slice(0, window),
        "one_short": slice(k_full.shape[-2] - window + 1, None)
        if window > 1
        else slice(k_full.shape[-2], None),
    }
    if how == "truncate_first":  # window of the old cache, then append: window + 1 keys
        k_att = torch.cat([k_cache[..., -window:, :], k_new], dim=-2)
        v_att = torch.cat([v_cache[..., -window:, :], v_new], dim=-2)
        k_ret, v_ret = k_att, v_att
    elif how in keep:
        sl = keep[how]
        k_att, v_att = k_full[..., sl, :], v_full[..., sl, :]
        k_ret, v_ret = k_att, v_att
    elif how == "attend_all":  # the cache is trimmed, but the attention saw everything
        k_att, v_att = k_full, v_full
        k_ret, v_ret = k_full[..., -window:, :], v_full[..., -window:, :]
    elif how == "keep_all":  # the attention is windowed, but the cache keeps growing
        k_att, v_att = k_full[..., -window:, :], v_full[..., -window:, :]
        k_ret, v_ret = k_full, v_full
    else:  # pragma: no cover
        raise ValueError(how)
    g = q_new.shape[1] // k_att.shape[1]
    out, _ = scaled_dot_product_attention(q_new, repeat_kv(k_att, g), repeat_kv(v_att, g))
    return out, k_ret, v_ret


def _window_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def case(name, b, h, h_kv, t, d, window):
        return Case(
            name,
            (
                randn(rng, b, h, 1, d),
                randn(rng, b, h_kv, 1, d),
                randn(rng, b, h_kv, 1, d),
                randn(rng, b, h_kv, t, d),
                randn(rng, b, h_kv, t, d),
                window,
            ),
        )

    if not hidden:
        return [
            case("window 4, 2 tokens cached: nothing dropped yet", 1, 2, 2, 2, 4, 4),
            case("window 4, a full cache of 4: the oldest token drops out", 2, 4, 2, 4, 3, 4),
            case("window 3, 7 tokens cached (GQA, 4 query heads, 2 KV heads)", 1, 4, 2, 7, 3, 3),
        ]
    return [
        case("window 1: the token sees only itself", 2, 2, 1, 5, 4, 1),
        case("the first token: an empty cache", 1, 4, 2, 0, 3, 4),
        case("window 16, 40 cached, MQA", 1, 6, 1, 40, 4, 16),
    ]


register(
    Exercise(
        id="04.8",
        title="one decoding step with a sliding-window cache",
        points=2,
        target="sliding_window_decode_step",
        cases=_window_cases,
        reference=sliding_window_decode_step_reference,
        atol=1e-9,
        rtol=1e-7,
        outputs=("output", "k_cache", "v_cache"),
        mistakes={
            Hint(
                "you trimmed the cache before appending: the new token sees window + 1 keys.",
                "Append first, then keep the last `window` keys, the new one included: "
                "cat([k_cache, k_new], dim=-2)[..., -window:, :].",
            ): twin(_window_wrong, how="truncate_first"),
            Hint(
                "you kept the *first* `window` tokens: the oldest ones, not the most recent.",
                "A sliding window keeps the last `window` positions: [..., -window:, :].",
            ): twin(_window_wrong, how="first"),
            Hint(
                "you kept window − 1 tokens: off by one.",
                "The window counts the new token: it sees itself and the window − 1 tokens "
                "before it, `window` keys in all.",
            ): twin(_window_wrong, how="one_short"),
            Hint(
                "your returned caches are trimmed, but the attention still used every token.",
                "Attend over the same `window` keys and values you keep.",
            ): twin(_window_wrong, how="attend_all"),
            Hint(
                "your attention is windowed, but the returned caches keep growing.",
                "Return the trimmed caches, so that the memory stops growing at `window` "
                "tokens: that is the point of the rolling buffer.",
            ): twin(_window_wrong, how="keep_all"),
        },
        errors={
            r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at "
            r"non-singleton dimension 1": Hint(
                "torch could not line up the H query heads with the H_kv key/value heads: "
                "you did not repeat the KV heads.",
                "Repeat each KV head G = H // H_kv times in place (repeat_kv, or "
                "repeat_interleave(G, dim=1)) for the attention, as in 04.5.",
            ),
        },
        hint=Hint(
            "check which keys the new token sees (how many, and which ones) and the length of "
            "the caches you return.",
            "04.5's step, with the cache cut to its last `window` tokens after appending. k = "
            "cat([k_cache, k_new], dim=-2)[..., -window:, :] (the same for v); repeat the KV "
            "heads; attend; return (out, k, v).",
        ),
    )
)


# --------------------------------------------------------------------------- 04.9 predict, measure


def _decode_scores(num_tokens, num_heads, head_dim, seed, *, cached, count_fn=None):
    """Decode ``num_tokens`` tokens (random q, k, v), with or without a KV cache, and count
    the query-key dot products the score products compute."""
    rng = np.random.default_rng(seed)
    q, k, v = (randn(rng, 1, num_heads, num_tokens, head_dim) for _ in range(3))  # (1,H,T,d)
    count = 0
    for t in range(1, num_tokens + 1):  # the sequence holds t tokens at this step
        q_t = q[:, :, t - 1 : t] if cached else q[:, :, :t]  # (1, H, 1 or t, d)
        scores = q_t @ k[:, :, :t].transpose(-2, -1)  # (1, H, 1 or t, t)
        count += scores.numel() if count_fn is None else count_fn(scores, t)
        _ = torch.softmax(scores, -1) @ v[:, :, :t]  # (1, H, 1 or t, d)
    return count


def cache_saving_reference(num_tokens: int, num_heads: int, head_dim: int, seed: int) -> float:
    r"""How many times more query-key dot products decoding computes without a KV cache
    (every step recomputes all :math:`t` queries against :math:`t` keys) than with one
    (one new query against :math:`t` keys): :math:`\sum t^2 / \sum t = (2T+1)/3`."""
    full = _decode_scores(num_tokens, num_heads, head_dim, seed, cached=False)
    return full / _decode_scores(num_tokens, num_heads, head_dim, seed, cached=True)


def _saving_last_step(num_tokens, num_heads, head_dim, seed):
    return float(num_tokens)  # T^2 / T: the last step only


def _saving_causal_half(num_tokens, num_heads, head_dim, seed):
    half = _decode_scores(
        num_tokens,
        num_heads,
        head_dim,
        seed,
        cached=False,
        count_fn=lambda s, t: s.numel() // t * (t + 1) // 2,
    )
    return half / _decode_scores(num_tokens, num_heads, head_dim, seed, cached=True)


def _saving_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("T = 8 tokens, 2 heads of 4", (8, 2, 4, 0)),
            Case("T = 64 tokens, 4 heads of 8", (64, 4, 8, 1)),
        ]
    return [
        Case("T = 100 tokens, 1 head of 2", (100, 1, 2, int(rng.integers(999)))),
        Case("T = 2 tokens, 3 heads of 4", (2, 3, 4, 3)),
    ]


register(
    Exercise(
        id="04.9",
        title="predict, then measure: the work a KV cache saves",
        points=1,
        target="measure_cache_saving",
        cases=_saving_cases,
        reference=cache_saving_reference,
        atol=0.0,
        rtol=1e-9,
        compare=within(1e-9),
        measures="dot products without a cache / with one",
        mistakes={
            Hint(
                "your ratio is T: you compared the last step alone (T x T against 1 x T).",
                "Add up every step t = 1 .. T on both sides before dividing.",
            ): _saving_last_step,
            Hint(
                "you counted only the unmasked half of each recomputed score matrix.",
                "q @ k.T computes all t x t dot products; the causal mask discards half of "
                "them afterwards, but they were computed. Count scores.numel().",
            ): _saving_causal_half,
        },
        hint=Hint(
            "check what you count at each step of each loop (every score computed, masked or "
            "not) and that you add up every step before dividing.",
            "Run both decoding loops and add up scores.numel() over the steps, then divide. At "
            "step t (t = 1 .. T tokens) the cache-less loop computes q[:t] @ k[:t].T (t x t per "
            "head), the cached one q[t-1:t] @ k[:t].T (1 x t); sum t^2 / sum t = (2T+1)/3.",
        ),
    )
)
