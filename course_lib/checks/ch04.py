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
from .core import Case, Fixed
from .declare import exercise
from .kit import DT, byte_compare, randn, within
from .rules import LIBRARY_ATTENTION_CALLS, LIBRARY_ATTENTION_NAMES, Rule

# torch's message when the H query heads meet H_kv < H key/value heads (04.5, 04.8)
UNREPEATED_HEADS = (
    r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at "
    r"non-singleton dimension 1"
)

# --------------------------------------------------------------------------- 04.1 split heads


def split_heads_reference(x: torch.Tensor, num_heads: int, *, via="(B, N, H, d_h)"):
    r"""``[B, N, H d_h] -> [B, H, N, d_h]``, :math:`\mathrm{out}[b, i, n, c] = x[b, n, i d_h + c]`:
    a reshape to ``via``, then the head axis moved in front of the tokens."""
    b, n, d = x.shape
    if via == "(B, H, N, d_h)":  # straight to the output's shape: cuts the token axis
        return x.reshape(b, num_heads, n, d // num_heads)  # (B, H, N, d_h)
    if via == "(B, N, d_h, H)":  # head i gets features i, i + H, i + 2H, ...
        return x.reshape(b, n, d // num_heads, num_heads).permute(0, 3, 1, 2)  # (B, H, N, d_h)
    return split_heads(x, num_heads)  # (B, H, N, d_h)


def _split_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
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


exercise(
    "04.1",
    split_heads_reference,
    target="split_heads",
    title="split the features into heads",
    points=1,
    cases=_split_cases,
    atol=1e-12,
    rtol=1e-10,
    slips={"no-transpose": dict(via="(B, H, N, d_h)"), "interleaved": dict(via="(B, N, d_h, H)")},
)


# --------------------------------------------------------------------------- 04.2 merge heads


def merge_heads_reference(x: torch.Tensor, *, via="(B, N, H, d_h)") -> torch.Tensor:
    r"""``[B, H, N, d_h] -> [B, N, H d_h]``, the inverse of 04.1: token :math:`n`'s features
    are :math:`\mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)`; the heads are
    moved to ``via`` before the last two axes are joined."""
    b, h, n, d = x.shape
    if via == "(B, H, N, d_h)":  # reshaped as it is: tokens and heads mixed up
        return x.reshape(b, n, h * d)  # (B, N, H*d_h)
    if via == "(B, N, d_h, H)":  # feature c of every head, then c + 1, ...
        return x.permute(0, 2, 3, 1).reshape(b, n, h * d)  # (B, N, H*d_h)
    return merge_heads(x)  # (B, N, H*d_h)


def _merge_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
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


exercise(
    "04.2",
    merge_heads_reference,
    target="merge_heads",
    title="merge the heads back (Concat)",
    points=1,
    cases=_merge_cases,
    atol=1e-12,
    rtol=1e-10,
    slips={"no-transpose": dict(via="(B, H, N, d_h)"), "interleaved": dict(via="(B, N, d_h, H)")},
)


# --------------------------------------------------------------------------- 04.3 MHA forward


def mha_forward_reference(
    x,
    W_Q,
    W_K,
    W_V,
    W_O,
    num_heads,
    *,
    scale_by="d_h",
    project_out=True,
    transposed=False,
    softmax_dim=-1,
    split=True,
    split_via="(B, N, H, d_h)",
    merge_via="(B, N, H, d_h)",
):
    r"""Multi-head self-attention from its ``(d_in, d_out)`` weights:
    :math:`\mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)\,W_O` with
    :math:`\mathrm{head}_h = \mathrm{softmax}(Q_h K_h^\top / \sqrt{d_h})\,V_h`, where
    :math:`Q_h` is head :math:`h`'s block of :math:`x W_Q` (04.1), and so for :math:`K, V`."""
    if transposed:  # nn.Linear's layout: x @ W.T
        W_Q, W_K, W_V, W_O = W_Q.T, W_K.T, W_V.T, W_O.T
    heads = num_heads if split else 1  # one big head: d_k = d_model
    q, k, v = (split_heads_reference(x @ w, heads, via=split_via) for w in (W_Q, W_K, W_V))
    d = x.shape[-1] if scale_by == "d_model" else q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, N, N)
    out = torch.softmax(scores, dim=softmax_dim) @ v  # (B, H, N, d_h)
    merged = merge_heads_reference(out, via=merge_via)  # (B, N, D)
    return merged @ W_O if project_out else merged  # (B, N, D)


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


exercise(
    "04.3",
    mha_forward_reference,
    target="mha_forward",
    title="multi-head self-attention from its weights",
    points=2,
    cases=_mha_cases,
    atol=1e-9,
    rtol=1e-7,
    rules=(
        Rule("no-library-attention", calls=LIBRARY_ATTENTION_CALLS, names=LIBRARY_ATTENTION_NAMES),
    ),
    slips={
        "d-model-scale": dict(scale_by="d_model"),
        "no-w-o": dict(project_out=False),
        "transposed-weights": dict(transposed=True),
        "softmax-over-queries": dict(softmax_dim=-2),
        "one-head": dict(split=False),
        "split-no-transpose": dict(split_via="(B, H, N, d_h)", merge_via="(B, H, N, d_h)"),
        "merge-no-transpose": dict(merge_via="(B, H, N, d_h)"),
    },
)


# --------------------------------------------------------------------------- 04.4 repeat KV


def repeat_kv_reference(x: torch.Tensor, num_groups: int, *, tiled=False, dim=1):
    r"""``[B, H_kv, N, d_h] -> [B, H_kv G, N, d_h]``: query head :math:`i` reads key/value
    head :math:`\lfloor i / G \rfloor`, each KV head repeated :math:`G` times in place."""
    if tiled:  # heads 0, 1, 0, 1
        return x.repeat(1, num_groups, 1, 1)  # (B, Hkv * G, N, d_h)
    if dim != 1:  # along another axis than the heads'
        return x.repeat_interleave(num_groups, dim=dim)
    return repeat_kv(x, num_groups)  # (B, Hkv * G, N, d_h)


def _repeat_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    labelled = torch.arange(2, dtype=DT).reshape(1, 2, 1, 1).expand(1, 2, 3, 2).clone()
    if not hidden:
        return [
            Fixed("2 KV heads filled with their index, G=2: heads 0,0,1,1", (labelled, 2)),
            Case("x of shape (2, 3, 4, 5), G=2", (randn(rng, 2, 3, 4, 5), 2)),
        ]
    return [
        Case("G=1: plain multi-head attention, unchanged", (randn(rng, 2, 4, 3, 2), 1)),
        Case("multi-query: one KV head for 6 query heads", (randn(rng, 2, 1, 5, 4), 6)),
        Case("Llama-3-8B-like grouping: 8 KV heads, G=4", (randn(rng, 1, 8, 3, 2), 4)),
    ]


exercise(
    "04.4",
    repeat_kv_reference,
    target="repeat_kv",
    title="repeat key/value heads for grouped-query attention",
    points=1,
    cases=_repeat_cases,
    atol=1e-12,
    rtol=1e-10,
    slips={"tiled": dict(tiled=True), "token-axis": dict(dim=2)},
)


# --------------------------------------------------------------------------- 04.5 decode step


def decode_step_reference(
    q_new,
    k_new,
    v_new,
    k_cache,
    v_cache,
    *,
    attend="cache and new",
    tiled=False,
    is_causal=False,
    return_repeated=False,
    new_first=False,
):
    r"""One decoding step with a KV cache: append the new key and value, then the new query
    (the last position, :math:`T`) attends to all :math:`T + 1` keys, query head :math:`i`
    reading KV head :math:`\lfloor i / G \rfloor`. Returns ``(out [B, H, 1, d], k_all, v_all)``
    with the caches ``[B, H_kv, T+1, d]``."""
    # (B, Hkv, T+1, d): the cache, then the new key and value (new_first: the other way round)
    k_all = torch.cat([k_new, k_cache] if new_first else [k_cache, k_new], dim=-2)
    v_all = torch.cat([v_new, v_cache] if new_first else [v_cache, v_new], dim=-2)
    k_att, v_att = {
        "cache and new": (k_all, v_all),
        "cache": (k_cache, v_cache),  # appended after attending
        "new": (k_new, v_new),
    }[attend]
    g = q_new.shape[1] // k_att.shape[1]
    k_rep = repeat_kv_reference(k_att, g, tiled=tiled)  # (B, H, T+1, d)
    v_rep = repeat_kv_reference(v_att, g, tiled=tiled)  # (B, H, T+1, d)
    out, _ = scaled_dot_product_attention(q_new, k_rep, v_rep, is_causal=is_causal)  # (B, H, 1, d)
    if return_repeated:  # the caches grown G times
        return out, repeat_kv_reference(k_all, g), repeat_kv_reference(v_all, g)
    return out, k_all, v_all


def _decode_case(rng, name, b, h, h_kv, t, d, *more):
    """``q_new, k_new, v_new, k_cache, v_cache`` for ``t`` cached tokens, then ``more``."""
    shapes = [(b, h, 1, d), (b, h_kv, 1, d), (b, h_kv, 1, d), (b, h_kv, t, d), (b, h_kv, t, d)]
    return Case(name, tuple(randn(rng, *shape) for shape in shapes) + more)


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


exercise(
    "04.5",
    decode_step_reference,
    target="decode_step",
    title="one cached decoding step",
    points=2,
    cases=_decode_cases,
    atol=1e-9,
    rtol=1e-7,
    outputs=("output", "k_cache", "v_cache"),
    slips={
        "not-itself": dict(attend="cache"),
        "only-itself": dict(attend="new"),
        "tiled": dict(tiled=True),
        "top-left-causal": dict(is_causal=True),
        "repeated-caches": dict(return_repeated=True),
        "new-first": dict(new_first=True),
    },
    errors={"unrepeated-heads": UNREPEATED_HEADS},
)


# --------------------------------------------------------------------------- 04.6 cache bytes


def kv_cache_bytes_from_config(
    config: dict,
    seq_len: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
    *,
    tensors=2,
    heads_key="num_key_value_heads",
    every_layer=True,
    every_sequence=True,
    bits=False,
) -> int:
    r"""The KV cache's size in bytes: :math:`2 \times L \times H_{kv} \times d_h \times N
    \times B \times` ``bytes_per_value`` (K and V, every layer, every KV head of
    :math:`d_h` = ``hidden_size // num_attention_heads``, every token of every sequence)."""
    layers = config["num_hidden_layers"] if every_layer else 1
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    sequences = batch_size if every_sequence else 1
    unit = 8 if bits else 1  # bits instead of bytes
    per_token = tensors * layers * config[heads_key] * head_dim
    return int(per_token * seq_len * sequences * bytes_per_value * unit)


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
            Fixed(
                "a tiny GQA model: 3 layers, d_model=64, 8 heads, 2 KV heads, 5 sequences of "
                "10 tokens, fp32",
                (_config(3, 64, 8, 2), 10, 5, 4),
            ),
            Fixed(
                "a Llama-3-8B-like config, one token in bf16", (_config(32, 4096, 32, 8), 1, 1, 2)
            ),
        ]
    n = int(rng.integers(100, 5000))
    return [
        Fixed(
            "Llama-3-8B-like, 128k tokens (131072) in bf16",
            (_config(32, 4096, 32, 8), 131072, 1, 2),
        ),
        Case(f"MQA, 12 layers, batch 3, {n} tokens, fp16", (_config(12, 768, 12, 1), n, 3, 2)),
        Fixed(
            "plain MHA, 6 layers, 2 sequences of 512 tokens, fp32",
            (_config(6, 512, 8, 8), 512, 2, 4),
        ),
    ]


exercise(
    "04.6",
    kv_cache_bytes_from_config,
    target="kv_cache_bytes_from_config",
    title="KV-cache bytes from a model config",
    points=1,
    cases=_bytes_cases,
    atol=0.0,
    rtol=1e-12,
    compare=byte_compare(
        "In Python 3, `/` always returns a float (hidden_size / num_attention_heads is 128.0): "
        "use `//` for head_dim, or wrap the product in int()."
    ),
    slips={
        "keys-only": dict(tensors=1),
        "all-heads": dict(heads_key="num_attention_heads"),
        "no-layers": dict(every_layer=False),
        "no-batch": dict(every_sequence=False),
        "bits": dict(bits=True),
    },
)


# --------------------------------------------------------------------------- 04.7 MHA -> GQA


def mha_to_gqa_weights_reference(
    W: torch.Tensor, num_heads: int, num_kv_heads: int, *, groups="consecutive", pool="mean"
):
    r"""Mean-pool the key (or value) heads of each group: ``[D, H d_h] -> [D, H_kv d_h]``.

    Group :math:`j` holds the consecutive query heads :math:`jG, \dots, (j+1)G - 1`;
    :math:`W^{(j)}_\text{new} = \frac1G \sum_{g<G} W^{(jG+g)}` (Ainslie et al., 2023).
    """
    d_model, width = W.shape
    head_dim = width // num_heads
    group = num_heads // num_kv_heads
    if groups == "strided":  # groups j, j + Hkv, j + 2 Hkv, ...
        w = W.reshape(d_model, group, num_kv_heads, head_dim).transpose(1, 2)  # (D, Hkv, G, d_h)
    elif groups == "(d_h, G)":  # each group's columns cut as (d_h, G) instead of (G, d_h)
        w = W.reshape(d_model, num_kv_heads, head_dim, group).transpose(2, 3)  # (D, Hkv, G, d_h)
    else:
        w = W.reshape(d_model, num_kv_heads, group, head_dim)  # (D, Hkv, G, d_h)
    if pool == "sum":
        w = w.sum(dim=2)  # (D, Hkv, d_h)
    elif pool == "first":
        w = w[:, :, 0]  # (D, Hkv, d_h)
    else:
        w = w.mean(dim=2)  # (D, Hkv, d_h)
    return w.reshape(d_model, num_kv_heads * head_dim)  # (D, Hkv * d_h)


def _pool_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        labelled = torch.arange(4, dtype=DT).repeat_interleave(2)[None, :].expand(3, 8).clone()
        return [
            Fixed(
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


exercise(
    "04.7",
    mha_to_gqa_weights_reference,
    target="mha_to_gqa_weights",
    title="turn a multi-head checkpoint into grouped-query attention",
    points=2,
    cases=_pool_cases,
    atol=1e-12,
    rtol=1e-10,
    slips={
        "strided": dict(groups="strided"),
        "sum": dict(pool="sum"),
        "first-head": dict(pool="first"),
        "feature-order": dict(groups="(d_h, G)"),
    },
)


# --------------------------------------------------------------------------- 04.8 sliding window


def sliding_window_decode_step_reference(
    q_new, k_new, v_new, k_cache, v_cache, window, *, kept="last W", read_all=False, keep_all=False
):
    r"""One decoding step with a sliding-window cache of at most ``window`` tokens.

    Append the new key/value, keep the last ``window`` of them (the new one included), and
    attend over what is kept: the new token sees itself and the ``window - 1`` tokens
    before it, as in Mistral 7B's rolling buffer (Jiang et al., 2023).
    """
    k_all = torch.cat([k_cache, k_new], dim=-2)  # (B, Hkv, T+1, d)
    v_all = torch.cat([v_cache, v_new], dim=-2)  # (B, Hkv, T+1, d)
    n = k_all.shape[-2]  # T + 1
    # the cache keeps the last W tokens ("last W+1": trimmed before appending), or the first W
    size = {"last W": window, "last W+1": window + 1, "last W-1": window - 1}
    keep = slice(0, window) if kept == "first W" else slice(max(n - size[kept], 0), None)
    k_win, v_win = k_all[..., keep, :], v_all[..., keep, :]  # (B, Hkv, <=W, d)
    k_att, v_att = (k_all, v_all) if read_all else (k_win, v_win)
    g = q_new.shape[1] // k_att.shape[1]
    out, _ = scaled_dot_product_attention(q_new, repeat_kv(k_att, g), repeat_kv(v_att, g))
    return (out, k_all, v_all) if keep_all else (out, k_win, v_win)  # (B, H, 1, d), caches


def _window_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def case(name, b, h, h_kv, t, d, window):
        return _decode_case(rng, name, b, h, h_kv, t, d, window)

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


exercise(
    "04.8",
    sliding_window_decode_step_reference,
    target="sliding_window_decode_step",
    title="one decoding step with a sliding-window cache",
    points=2,
    cases=_window_cases,
    atol=1e-9,
    rtol=1e-7,
    outputs=("output", "k_cache", "v_cache"),
    slips={
        "trimmed-first": dict(kept="last W+1"),
        "oldest": dict(kept="first W"),
        "one-short": dict(kept="last W-1"),
        "attends-all": dict(read_all=True),
        "keeps-all": dict(keep_all=True),
    },
    errors={"unrepeated-heads": UNREPEATED_HEADS},
)


# --------------------------------------------------------------------------- 04.9 predict, measure


def cache_saving_reference(
    num_tokens: int, num_heads: int, head_dim: int, seed: int, *, last_step=False, causal_half=False
) -> float:
    r"""How many times more query-key dot products decoding computes without a KV cache
    (every step recomputes all :math:`t` queries against :math:`t` keys) than with one
    (one new query against :math:`t` keys): :math:`\sum t^2 / \sum t = (2T+1)/3`. Both
    loops decode ``num_tokens`` tokens of random q, k, v and count what the score products
    compute."""
    rng = np.random.default_rng(seed)
    q, k, v = (randn(rng, 1, num_heads, num_tokens, head_dim) for _ in range(3))  # (1,H,T,d)
    full = cached = 0
    for t in [num_tokens] if last_step else range(1, num_tokens + 1):  # t tokens so far
        k_t, v_t = k[:, :, :t], v[:, :, :t]  # (1, H, t, d)
        scores = q[:, :, :t] @ k_t.transpose(-2, -1)  # (1, H, t, t) no cache: every query again
        _ = torch.softmax(scores, -1) @ v_t  # (1, H, t, d)
        full += scores.numel() // t * (t + 1) // 2 if causal_half else scores.numel()
        scores = q[:, :, t - 1 : t] @ k_t.transpose(-2, -1)  # (1, H, 1, t) the new query only
        _ = torch.softmax(scores, -1) @ v_t  # (1, H, 1, d)
        cached += scores.numel()
    return full / cached


def _saving_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("T = 8 tokens, 2 heads of 4", (8, 2, 4, 0)),
            Fixed("T = 64 tokens, 4 heads of 8", (64, 4, 8, 1)),
        ]
    return [
        Case("T = 100 tokens, 1 head of 2", (100, 1, 2, int(rng.integers(999)))),
        Fixed("T = 2 tokens, 3 heads of 4", (2, 3, 4, 3)),
    ]


exercise(
    "04.9",
    cache_saving_reference,
    target="measure_cache_saving",
    title="predict, then measure: the work a KV cache saves",
    points=1,
    cases=_saving_cases,
    atol=0.0,
    rtol=1e-9,
    compare=within(1e-9),
    measures="dot products without a cache / with one",
    slips={"last-step": dict(last_step=True), "causal-half": dict(causal_half=True)},
)
