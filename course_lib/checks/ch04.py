"""Checks for chapter 04 (multi-head attention, GQA/MQA and the KV cache).

Six exercises, each a function the learner writes, on torch tensors in float64:

* 04.1 ``split_heads(x, num_heads)``: ``[B, N, H*d_h] -> [B, H, N, d_h]``
* 04.2 ``merge_heads(x)``: ``[B, H, N, d_h] -> [B, N, H*d_h]``
* 04.3 ``mha_forward(x, W_q, W_k, W_v, W_o, num_heads)``: multi-head self-attention
* 04.4 ``repeat_kv(x, n_rep)``: GQA's key/value heads for every query head
* 04.5 ``decode_step(q_new, k_new, v_new, k_cache, v_cache)``: one cached decoding step
* 04.6 ``kv_cache_bytes_from_config(config, seq_len, batch_size, bytes_per_value)``
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..attention import scaled_dot_product_attention
from ..multihead import merge_heads, repeat_kv, split_heads
from .core import Case, Exercise, register

DT = torch.float64


def _t(rng: np.random.Generator, *shape: int) -> torch.Tensor:
    return torch.from_numpy(rng.normal(size=shape)).to(DT)


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
            Case("x of shape (2, 5, 12) into 4 heads", (_t(rng, 2, 5, 12), 4)),
        ]
    return [
        Case("one head: only a new axis", (_t(rng, 2, 3, 6), 1)),
        Case("d_head = 1: one feature per head", (_t(rng, 3, 4, 5), 5)),
        Case("x of shape (2, 7, 24) into 3 heads", (_t(rng, 2, 7, 24), 3)),
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
            "you reshaped straight to (B, H, N, d_head). The shape is right but the numbers are "
            "not: a reshape keeps the memory order, so it cuts the token axis, not the features. "
            "Reshape to (B, N, H, d_head) first, then transpose axes 1 and 2.": _split_no_transpose,
            "you split the features as (d_head, H): head i then gets features i, i+H, i+2H, ... "
            "Head i must get the contiguous block i*d_head ... (i+1)*d_head-1, so reshape to "
            "(B, N, H, d_head).": _split_wrong_order,
        },
        hint="x.reshape(B, N, H, D // H) then .transpose(1, 2).",
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
            Case("x of shape (2, 4, 5, 3)", (_t(rng, 2, 4, 5, 3),)),
        ]
    return [
        Case("one head", (_t(rng, 2, 1, 3, 6),)),
        Case("x of shape (3, 6, 7, 2)", (_t(rng, 3, 6, 7, 2),)),
        Case("a single token", (_t(rng, 2, 3, 1, 4),)),
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
            "you reshaped (B, H, N, d_head) straight to (B, N, H*d_head) without moving the head "
            "axis: tokens and heads get mixed up. Transpose axes 1 and 2 first.": _merge_no_transpose,
            "you interleaved the heads' features (feature c of every head, then c+1, ...). "
            "Concat puts head 1's d_head features first, then head 2's: transpose(1, 2), then "
            "reshape.": _merge_wrong_order,
        },
        hint="x.transpose(1, 2).reshape(B, N, H * d_head) (reshape, not view: the transpose is "
        "not contiguous).",
    )
)


# --------------------------------------------------------------------------- 04.3 MHA forward


def _mha(
    x,
    W_q,
    W_k,
    W_v,
    W_o,
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
    q = split(x @ t(W_q), num_heads)  # (B, H, N, d_h)
    k = split(x @ t(W_k), num_heads)  # (B, H, N, d_h)
    v = split(x @ t(W_v), num_heads)  # (B, H, N, d_h)
    d = q.shape[-1] if scale_dim is None else scale_dim
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, N, N)
    heads = torch.softmax(scores, dim=softmax_dim) @ v  # (B, H, N, d_h)
    merged = merge(heads)  # (B, N, D)
    return merged @ t(W_o) if use_wo else merged  # (B, N, D)


def mha_forward_reference(x, W_q, W_k, W_v, W_o, num_heads):
    q = split_heads(x @ W_q, num_heads)  # (B, H, N, d_h)
    k = split_heads(x @ W_k, num_heads)  # (B, H, N, d_h)
    v = split_heads(x @ W_v, num_heads)  # (B, H, N, d_h)
    heads, _ = scaled_dot_product_attention(q, k, v)  # (B, H, N, d_h)
    return merge_heads(heads) @ W_o  # (B, N, D)


def _mha_case(rng, name, b, n, d, h):
    ws = tuple(_t(rng, d, d) / math.sqrt(d) for _ in range(4))
    return Case(name, (_t(rng, b, n, d),) + ws + (h,))


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
            "you scaled the scores by 1/sqrt(d_model). Each head is an attention in d_head = "
            "d_model / H dimensions: divide by sqrt(d_head).": lambda x, a, b, c, o, h: _mha(
                x, a, b, c, o, h, scale_dim=x.shape[-1]
            ),
            "you forgot the output projection: MultiHead = Concat(heads) @ W_o.": lambda x, a, b, c, o, h: (
                _mha(x, a, b, c, o, h, use_wo=False)
            ),
            "you applied the weights transposed (x @ W.T, as nn.Linear stores them). Here the "
            "matrices are (d_in, d_out) and the projection is x @ W.": lambda x, a, b, c, o, h: (
                _mha(x, a, b, c, o, h, transpose=True)
            ),
            "your softmax normalises over the queries (dim=-2). Each query's weights over the "
            "keys must sum to 1: softmax over the last axis.": lambda x, a, b, c, o, h: _mha(
                x, a, b, c, o, h, softmax_dim=-2
            ),
            "you computed one big head (no split): that is attention with d_k = d_model, not "
            "multi-head attention. Split Q, K and V into heads before the scores.": lambda x, a, b, c, o, h: (
                _mha(x, a, b, c, o, 1)
            ),
            "you split the heads by reshaping straight to (B, H, N, d_head), without the "
            "transpose: the shape is right, but each 'head' is then a slice of the tokens. "
            "Reshape to (B, N, H, d_head), then transpose(1, 2) (exercise 04.1).": lambda x, a, b, c, o, h: (
                _mha(x, a, b, c, o, h, split=_split_no_transpose, merge=_merge_no_transpose)
            ),
            "the heads are split correctly but merged by a plain reshape of (B, H, N, d_head) to "
            "(B, N, D): tokens and heads get mixed up. transpose(1, 2) before the reshape "
            "(exercise 04.2).": lambda x, a, b, c, o, h: _mha(
                x, a, b, c, o, h, merge=_merge_no_transpose
            ),
        },
        hint="Q = x @ W_q, split into heads; the same for K and V; softmax(Q K^T / sqrt(d_head)) "
        "V per head; merge the heads; @ W_o.",
    )
)


# --------------------------------------------------------------------------- 04.4 repeat KV


def repeat_kv_reference(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return repeat_kv(x, n_rep)  # (B, H_kv * n_rep, N, d)


def _repeat_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    labelled = torch.arange(2, dtype=DT).reshape(1, 2, 1, 1).expand(1, 2, 3, 2).clone()
    if not hidden:
        return [
            Case("2 KV heads filled with their index, n_rep=2: heads 0,0,1,1", (labelled, 2)),
            Case("x of shape (2, 3, 4, 5), n_rep=2", (_t(rng, 2, 3, 4, 5), 2)),
        ]
    return [
        Case("n_rep=1: plain multi-head attention, unchanged", (_t(rng, 2, 4, 3, 2), 1)),
        Case("multi-query: one KV head for 6 query heads", (_t(rng, 2, 1, 5, 4), 6)),
        Case("Llama-3-8B-like grouping: 8 KV heads, n_rep=4", (_t(rng, 1, 8, 3, 2), 4)),
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
            "you tiled the heads (0,1,0,1: x.repeat(1, n_rep, 1, 1)). Query heads 0..G-1 share KV "
            "head 0, so each KV head must be repeated in place: 0,0,1,1 "
            "(repeat_interleave on dim 1).": lambda x, n: x.repeat(1, n, 1, 1),
            "you repeated along the token axis (dim 2) instead of the head axis (dim 1).": lambda x, n: (
                x.repeat_interleave(n, dim=2)
            ),
        },
        hint="x.repeat_interleave(n_rep, dim=1), or x[:, :, None].expand(B, H_kv, n_rep, N, d) "
        "reshaped to (B, H_kv * n_rep, N, d).",
    )
)


# --------------------------------------------------------------------------- 04.5 decode step


def decode_step_reference(q_new, k_new, v_new, k_cache, v_cache):
    k_all = torch.cat([k_cache, k_new], dim=-2)  # (B, H_kv, T+1, d)
    v_all = torch.cat([v_cache, v_new], dim=-2)  # (B, H_kv, T+1, d)
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
):
    if prepend:
        k_all = torch.cat([k_new, k_cache], dim=-2)  # (B, H_kv, T+1, d) new token first
        v_all = torch.cat([v_new, v_cache], dim=-2)  # (B, H_kv, T+1, d)
    else:
        k_all = torch.cat([k_cache, k_new], dim=-2)  # (B, H_kv, T+1, d)
        v_all = torch.cat([v_cache, v_new], dim=-2)  # (B, H_kv, T+1, d)
    k_att, v_att = (k_all, v_all) if append_first else (k_cache, v_cache)
    if only_new:
        k_att, v_att = k_new, v_new
    g = q_new.shape[1] // k_att.shape[1]
    rep = (lambda t: t.repeat(1, g, 1, 1)) if tile else (lambda t: repeat_kv(t, g))
    out, _ = scaled_dot_product_attention(
        q_new, rep(k_att), rep(v_att), is_causal=top_left_causal
    )  # (B, H, 1, d)
    return out, k_all, v_all


def _decode_case(rng, name, b, h, h_kv, t, d):
    return Case(
        name,
        (
            _t(rng, b, h, 1, d),
            _t(rng, b, h_kv, 1, d),
            _t(rng, b, h_kv, 1, d),
            _t(rng, b, h_kv, t, d),
            _t(rng, b, h_kv, t, d),
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
        mistakes={
            "the new token does not attend to itself: append k_new and v_new to the cache "
            "*before* attending (key j <= i includes j = i).": lambda *a: _decode_wrong(
                *a, append_first=False
            ),
            "the new token attends only to itself: it must attend to every cached token plus "
            "itself.": lambda *a: _decode_wrong(*a, only_new=True),
            "you tiled the KV heads (0,1,0,1) instead of repeating each in place (0,0,1,1): query "
            "head i reads KV head i // G.": lambda *a: _decode_wrong(*a, tile=True),
            "you passed is_causal=True: its triangle is aligned top-left, so the single new query "
            "(row 0) sees only key 0, the oldest cached token. The new token is the *last* "
            "position, T: it may see all T+1 keys, so no mask is needed here (with several new "
            "tokens the triangle must be shifted by the cache length T, bottom-right).": lambda *a: (
                _decode_wrong(*a, top_left_causal=True)
            ),
            "your attention output is right but the returned caches put the new key/value "
            "first: append at the end, cat([k_cache, k_new], dim=-2), so that position t stays "
            "at index t.": lambda *a: _decode_wrong(*a, prepend=True),
        },
        hint="k_all = cat([k_cache, k_new], dim=-2) (the same for v); repeat the KV heads for the "
        "query heads; attention of q_new over all of them; return (out, k_all, v_all).",
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
        mistakes={
            "you counted only the keys (or only the values): the cache holds both K and V, "
            "a factor 2.": lambda c, n, b, p: _bytes(c, n, b, p, kv_factor=1),
            "your cache is as wide as hidden_size per layer and token, as in plain multi-head "
            "attention: with GQA only num_key_value_heads heads are cached, each of size "
            "head_dim = hidden_size // num_attention_heads (not hidden_size // num_kv_heads).": lambda c, n, b, p: (
                _bytes(c, n, b, p, kv_key="num_attention_heads")
            ),
            "you forgot the layers: every layer caches its own keys and values.": lambda c, n, b, p: (
                _bytes(c, n, b, p, layers=False)
            ),
            "you forgot the batch: each of the batch_size sequences has its own cache.": lambda c, n, b, p: (
                _bytes(c, n, b, p, batch=False)
            ),
            "your answer is 8 times too large: that is bits. bytes_per_value already counts "
            "bytes (2 for bf16/fp16, 4 for fp32).": lambda c, n, b, p: _bytes(
                c, n, b, p, bits=True
            ),
        },
        hint="bytes = 2 (K and V) x layers x KV heads x head_dim x tokens x batch x "
        "bytes_per_value, with head_dim = hidden_size // num_attention_heads.",
    )
)
