r"""Multi-head attention, grouped-query attention (GQA / MQA) and the KV cache.

Multi-head attention (Vaswani et al., 2017, "Attention Is All You Need") runs :math:`H`
attentions side by side, each in its own :math:`d_h = d_\text{model}/H`-dimensional
subspace, and mixes their outputs with one output projection:

.. math::

    \mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)\, W_O,
    \qquad
    \mathrm{head}_i = \mathrm{Attention}(Q W_Q^{(i)},\; K W_K^{(i)},\; V W_V^{(i)}).

In code the :math:`H` projections are one matrix each (:math:`W_Q = [W_Q^{(1)} \,|\, \dots \,|\,
W_Q^{(H)}]`), and the heads are made by a *reshape* of the projected features followed by a
*transpose* that moves the head axis in front of the sequence axis (:func:`split_heads`);
:func:`merge_heads` undoes it.

Grouped-query attention (Ainslie et al., 2023, "GQA: Training Generalized Multi-Query
Transformer Models from Multi-Head Checkpoints") keeps :math:`H` query heads but only
:math:`H_{kv}` key/value heads, each shared by a group of :math:`G = H / H_{kv}`
consecutive query heads; :math:`H_{kv} = 1` is multi-query attention (Shazeer, 2019, "Fast
Transformer Decoding: One Write-Head is All You Need") and :math:`H_{kv} = H` is plain
multi-head attention. Fewer key/value heads means a smaller :class:`KVCache`, which is what
limits decoding speed and batch size in large language models.

Conventions (docs/conventions.md compares them with torch, Hugging Face and flash-attn):
batch-first tensors, ``query [B, Nq, d_model]`` (``batch_first=False`` reads torch's
default ``[Nq, B, d_model]``); the boolean ``mask`` is **True = may attend**, like
``course_lib.attention`` and torch's SDPA, but *unlike* ``torch.nn.MultiheadAttention``,
whose boolean ``attn_mask`` and ``key_padding_mask`` are True = *blocked*. The module takes
torch's ``key_padding_mask`` under torch's name and with torch's meaning (True = padding,
ignored), refuses ``attn_mask`` with a message (pass ``mask=~attn_mask``), and refuses a
two-dimensional ``mask`` that could be read both as ``[Nq, Nk]`` and as a key-padding
``[B, Nk]`` (when B = Nq).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .attention import scaled_dot_product_attention
from .validation import check_head_split, check_mha_config, check_mha_inputs, shape_of

__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "GPU_MEMORY_BYTES",
    "DecodeBytes",
    "decode_step_bytes",
    "kv_cache_bytes",
    "merge_heads",
    "mha_num_params",
    "repeat_kv",
    "split_heads",
]


# --------------------------------------------------------------------------- head reshapes


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""``[B, N, H·d_h] → [B, H, N, d_h]``: cut the features into ``num_heads`` heads.

    Feature :math:`f = i\, d_h + c` of token :math:`n` becomes component :math:`c` of head
    :math:`i`: :math:`\mathrm{out}[b, i, n, c] = x[b, n, i\, d_h + c]`. The reshape alone
    would give ``[B, N, H, d_h]``; the transpose puts the heads before the tokens so each
    head is an ordinary ``[N, d_h]`` attention problem in the batch dimensions.
    """
    check_head_split(x, num_heads)
    batch_size, seq_len, d_model = x.shape
    x = x.reshape(batch_size, seq_len, num_heads, d_model // num_heads)  # (B, N, H, d_h)
    return x.transpose(1, 2)  # (B, H, N, d_h)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    r"""``[B, H, N, d_h] → [B, N, H·d_h]``: concatenate the heads' outputs per token.

    The inverse of :func:`split_heads`:
    :math:`\mathrm{out}[b, n, i\, d_h + c] = x[b, i, n, c]`, i.e.
    :math:`\mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)` for every token.
    """
    if x.ndim != 4:
        raise ValueError(f"expected x of shape [B, H, N, d_h], got {shape_of(x)}")
    batch_size, num_heads, seq_len, head_dim = x.shape
    x = x.transpose(1, 2)  # (B, N, H, d_h)
    return x.reshape(
        batch_size, seq_len, num_heads * head_dim
    )  # (B, N, H*d_h); reshape copies: x is not contiguous


def repeat_kv(x: torch.Tensor, num_groups: int) -> torch.Tensor:
    r"""``[B, Hkv, N, d_h] → [B, Hkv·G, N, d_h]``: give every query head its key/value head.

    Query head :math:`i` uses key/value head :math:`\lfloor i / G \rfloor` with
    :math:`G` = ``num_groups`` = :math:`H / H_{kv}`: each key/value head is repeated :math:`G`
    times *in place* (heads ``0,0,1,1`` for :math:`H_{kv}=2, G=2`), as in Llama's
    ``repeat_kv``, not tiled (``0,1,0,1``). Uses ``expand``, so no copy is made before
    the final reshape.
    """
    if x.ndim != 4:
        raise ValueError(f"expected x of shape [B, Hkv, N, d_h], got {shape_of(x)}")
    if int(num_groups) < 1:
        raise ValueError(f"num_groups must be a positive integer, got {num_groups!r}")
    if num_groups == 1:
        return x
    batch_size, num_kv_heads, seq_len, head_dim = x.shape
    x = x[:, :, None, :, :].expand(
        batch_size, num_kv_heads, num_groups, seq_len, head_dim
    )  # (B, Hkv, G, N, d_h) a view
    return x.reshape(batch_size, num_kv_heads * num_groups, seq_len, head_dim)  # (B, H, N, d_h)


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    seq_len: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
) -> int:
    r"""Bytes of a KV cache: keys **and** values of every layer, head and token.

    .. math::

        \text{bytes} = 2 \times L \times H_{kv} \times d_h \times N \times B
                       \times \text{bytes per value}

    (the leading 2 counts K and V; ``bytes_per_value`` = 2 for bf16/fp16, 4 for fp32).
    """
    for name, val in (
        ("num_layers", num_layers),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
        ("seq_len", seq_len),
        ("batch_size", batch_size),
        ("bytes_per_value", bytes_per_value),
    ):
        if int(val) != val or val < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {val!r}")
    return int(2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value)


# Memory of the accelerators the course's arithmetic uses, in bytes, as ``nvidia-smi`` reports
# the total (MiB = 2**20 bytes). NVIDIA sells both as "80 GB": the A100 80GB has exactly
# 80 GiB (81920 MiB), the H100 80GB (SXM, HBM3) a little less (81559 MiB, 79.6 GiB); neither
# is 80e9 bytes. What a program can use is smaller still (the CUDA context, the framework's
# workspace).
GPU_MEMORY_BYTES = {"A100 80GB": 81920 * 2**20, "H100 80GB": 81559 * 2**20}


class DecodeBytes(NamedTuple):
    """Bytes one decoding step reads from memory: the weights once, every sequence's cache."""

    weights: int
    cache: int

    @property
    def total(self) -> int:
        return self.weights + self.cache

    @property
    def cache_share(self) -> float:
        """The fraction of the step's reads that are the KV cache."""
        return self.cache / self.total if self.total else 0.0


def decode_step_bytes(
    weights_bytes: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    seq_len: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
) -> DecodeBytes:
    r"""What one step of batched decoding reads: every weight once (shared by the batch) and
    each sequence's whole KV cache of ``seq_len`` tokens.

    .. math:: \text{bytes} = \underbrace{\text{weights}}_{\text{any } B, N}
              + \underbrace{2 L H_{kv} d_h N B \cdot \text{bytes per value}}_{\text{cache}}

    Decoding is memory-bound (its arithmetic intensity is far below the GPU's), so a step
    takes about ``total / bandwidth``. Fewer KV heads shrink only the cache term: they help
    where the cache dominates (long contexts, large batches), hardly at all at batch 1 with
    short contexts, where reading the weights dominates.
    """
    cache = kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_value)
    return DecodeBytes(int(weights_bytes), cache)


# --------------------------------------------------------------------------- the KV cache


class KVCache:
    r"""The keys and values of the tokens seen so far, for incremental (autoregressive) decoding.

    With a causal mask, token :math:`t`'s key :math:`k_t = x_t W_K` and value
    :math:`v_t = x_t W_V` never change once computed, so decoding step :math:`t` needs to
    project only the new token and append it:

    .. math:: K_{1..t} = [K_{1..t-1};\ k_t], \qquad V_{1..t} = [V_{1..t-1};\ v_t].

    Holds ``k`` and ``v`` of shape ``[B, Hkv, N, d_h]`` (None before the first update).
    This version grows by concatenation, which is the clearest; production engines
    preallocate ``[B, Hkv, N_max, d_h]`` (or pages of it) and write in place.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else int(self.k.shape[-2])

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values."""
        if self.k is None or self.v is None:  # (both None, or neither)
            return 0
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[B, Hkv, n, d_h]`` keys/values; return all of them ``[B, Hkv, N+n, d_h]``."""
        if k_new.ndim != 4 or v_new.ndim != 4 or k_new.shape[:-1] != v_new.shape[:-1]:
            raise ValueError(
                f"expected k_new and v_new of shape [B, Hkv, n, d_h], got "
                f"{shape_of(k_new)} and {shape_of(v_new)}"
            )
        if self.k is None or self.v is None:  # (both None, or neither)
            self.k, self.v = k_new, v_new  # (B, Hkv, n, d_h)
        else:
            if (
                k_new.shape[:2] != self.k.shape[:2]
                or k_new.shape[-1] != self.k.shape[-1]
                or v_new.shape[-1] != self.v.shape[-1]
            ):
                raise ValueError(
                    f"new keys/values {shape_of(k_new)}, {shape_of(v_new)} do not "
                    f"match the cache's [B, Hkv, N, d_h] = {shape_of(self.k)}, "
                    f"{shape_of(self.v)}"
                )
            self.k = torch.cat([self.k, k_new], dim=-2)  # (B, Hkv, N+n, d_h)
            self.v = torch.cat([self.v, v_new], dim=-2)  # (B, Hkv, N+n, d_h)
        return self.k, self.v

    def __repr__(self) -> str:
        shape = None if self.k is None else shape_of(self.k)
        return f"KVCache(len={len(self)}, k shape={shape}, bytes={self.nbytes})"


# --------------------------------------------------------------------------- the module


def _to_batch_first(x, name: str) -> torch.Tensor:
    """``[N, B, D]`` → ``[B, N, D]`` for a module built with ``batch_first=False``."""
    if not isinstance(x, torch.Tensor) or x.ndim != 3:
        raise ValueError(
            f"with batch_first=False expected {name} of shape [N, B, d_model] "
            f"(sequence first, torch.nn.MultiheadAttention's default), got {shape_of(x)}"
        )
    return x.transpose(0, 1)  # (B, N, D)


def _keep_from_padding(key_padding_mask, batch_size: int, n_k: int, device) -> torch.Tensor:
    r"""torch's ``key_padding_mask [B, Nk]`` (True = padding) as a mask for the scores.

    Boolean: returns the course's polarity, ``keep = ~key_padding_mask`` as ``[B, 1, 1, Nk]``
    (True = may attend). Float: returned as it is, ``[B, 1, 1, Nk]``, to add to the scores.
    """
    kpm = torch.as_tensor(key_padding_mask, device=device)
    if kpm.ndim != 2 or tuple(kpm.shape) != (batch_size, n_k):
        raise ValueError(
            f"expected key_padding_mask of shape [B, Nk] = [{batch_size}, {n_k}] (torch's "
            f"meaning: True = padding), got {shape_of(kpm)} (with a cache, Nk counts the "
            "cached tokens too)"
        )
    if kpm.dtype == torch.bool:
        all_padding = kpm.all(dim=-1)  # (B,)
        if bool(all_padding.any()):
            b = int(all_padding.nonzero()[0, 0])
            raise ValueError(
                f"key_padding_mask marks every key of sequence {b} as padding. It follows "
                "torch's meaning, True = padding (ignored); a mask with True = real token "
                "(the course's polarity) must be inverted: key_padding_mask=~keep, or pass "
                "mask=keep[:, None, :] instead."
            )
        return ~kpm[:, None, None, :]  # (B, 1, 1, Nk) True = may attend
    if not kpm.is_floating_point():
        raise TypeError(
            f"expected a boolean key_padding_mask (True = padding) or a float one to add, "
            f"got dtype {kpm.dtype}: use key_padding_mask.bool() for 0/1 masks"
        )
    return kpm[:, None, None, :]  # (B, 1, 1, Nk) added to the scores


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention with optional grouped-query heads and a KV cache.

    ``MultiHeadAttention(d_model, num_heads, *, num_kv_heads=None, bias=True, dropout=0.0)``
    has :math:`H` = ``num_heads`` query heads of size :math:`d_h = d_\text{model}/H` and
    :math:`H_{kv}` = ``num_kv_heads`` key/value heads (default :math:`H`: plain
    multi-head attention; 1: multi-query attention). Parameters, ``nn.Linear`` layers named
    as in the maths: ``W_Q`` :math:`d_\text{model} \to H d_h`, ``W_K`` and ``W_V``
    :math:`d_\text{model} \to H_{kv} d_h`, ``W_O`` :math:`H d_h \to d_\text{model}`.
    ``dropout`` is applied to the attention weights in training mode. ``batch_first``
    (default True, the course's layout ``[B, N, d_model]``) set to False reads and returns
    sequence-first ``[N, B, d_model]`` tensors, like ``torch.nn.MultiheadAttention``'s
    default; the weights stay ``[B, H, Nq, Nk]``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        batch_first: bool = True,
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_mha_config(d_model, num_heads, num_kv_heads, dropout)
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.num_kv_heads = int(num_kv_heads)
        self.head_dim = self.d_model // self.num_heads
        self.dropout = float(dropout)
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first must be True or False, got {batch_first!r}")
        self.batch_first = batch_first
        kv_dim = self.num_kv_heads * self.head_dim
        self.W_Q = nn.Linear(self.d_model, self.d_model, bias=bias)
        self.W_K = nn.Linear(self.d_model, kv_dim, bias=bias)
        self.W_V = nn.Linear(self.d_model, kv_dim, bias=bias)
        self.W_O = nn.Linear(self.d_model, self.d_model, bias=bias)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # Like torch.nn.MultiheadAttention: Xavier-uniform input projections, zero biases.
        for lin in (self.W_Q, self.W_K, self.W_V):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        if self.W_O.bias is not None:
            nn.init.zeros_(self.W_O.bias)

    @property
    def num_groups(self) -> int:
        """:math:`G = H / H_{kv}`: query heads per key/value head."""
        return self.num_heads // self.num_kv_heads

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
            f"dropout={self.dropout}" + ("" if self.batch_first else ", batch_first=False")
        )

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        cache: KVCache | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""``(output [B, Nq, d_model], weights [B, H, Nq, Nk] or None)``.

        ``key`` and ``value`` default to ``query`` (self-attention); ``key`` alone sets
        both. With ``batch_first=False`` inputs and output are ``[N, B, d_model]``.

        ``mask``: boolean, **True = may attend** (or a float mask added to the scores),
        shaped ``[Nq, Nk]``, ``[B, Nq, Nk]`` (``[B, 1, Nk]`` for key padding) or
        ``[B, H, Nq, Nk]``. A two-dimensional mask is ``[Nq, Nk]``; when B = Nq > 1 it
        could also be a ``[B, Nk]`` key-padding mask, so it is refused and the message
        says how to say which (``mask[None]`` or ``key_padding_mask=``).

        ``key_padding_mask``: torch's argument with **torch's meaning**, ``[B, Nk]``,
        boolean **True = padding (ignored)**, or a float mask added to the scores. A row
        that marks every key as padding is refused: that is almost always a True = keep
        mask given the wrong way round (torch returns NaN for such a row).

        ``is_causal``: query :math:`i` sees keys :math:`j \le i`. With a ``cache``, the new
        keys/values are appended to it and the queries attend to every cached token as
        well: ``Nk`` = tokens cached before + new ones. The queries are then the *last*
        ``Nq`` positions, so ``is_causal`` is aligned bottom-right (query :math:`i` sees
        keys :math:`j \le N_\text{past} + i`).

        ``attn_mask`` (torch's name, True = blocked) is refused with a message: the course's
        ``mask`` has the opposite polarity, so pass ``mask=~attn_mask``.
        """
        query, key, value = self._batch_first_inputs(query, key, value, attn_mask)

        # Q = X W_Q, K = X W_K, V = X W_V, then cut the features into heads
        q = split_heads(self.W_Q(query), self.num_heads)  # (B, H, Nq, d_h)
        k = split_heads(self.W_K(key), self.num_kv_heads)  # (B, Hkv, Nk_new, d_h)
        v = split_heads(self.W_V(value), self.num_kv_heads)  # (B, Hkv, Nk_new, d_h)
        past = 0 if cache is None else len(cache)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, Hkv, Nk, d_h) with Nk = past + Nk_new

        # GQA: query head i reads key/value head i // G
        k = repeat_kv(k, self.num_groups)  # (B, H, Nk, d_h)
        v = repeat_kv(v, self.num_groups)  # (B, H, Nk, d_h)
        mask, is_causal = self._one_mask(mask, key_padding_mask, is_causal, past, q, k)

        # head_i = softmax(Q_i K_i^T / sqrt(d_h)) V_i, for all heads at once
        heads, weights = scaled_dot_product_attention(
            q, k, v, mask, is_causal=is_causal, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, Nq, d_h), (B, H, Nq, Nk)

        # MultiHead = Concat(head_1, ..., head_H) W_O
        out = self.W_O(merge_heads(heads))  # (B, Nq, d_model)
        return self._caller_layout(out), (weights if need_weights else None)

    # ------------------------------------------------------------------ torch's conventions
    # What forward() accepts beyond the maths, for torch.nn.MultiheadAttention's callers: the
    # sequence-first layout, default keys and values, torch's masks and its attn_mask.

    def _batch_first_inputs(self, query, key, value, attn_mask):
        """``(query, key, value)``, each ``[B, N, d_model]``: refuses torch's ``attn_mask``,
        reads the sequence-first layout, fills in self-attention's defaults, checks shapes."""
        if attn_mask is not None:
            raise TypeError(
                "attn_mask is torch.nn.MultiheadAttention's argument, where a boolean True "
                "means *blocked*; this module's `mask` means True = may attend (the course's "
                "and torch SDPA's convention). Pass mask=~attn_mask for a boolean mask, or "
                "mask=attn_mask for a float mask (added to the scores in both)."
            )
        if not self.batch_first:  # torch's default layout [N, B, D]: work batch-first
            query = _to_batch_first(query, "query")
            key = None if key is None else _to_batch_first(key, "key")
            value = None if value is None else _to_batch_first(value, "value")
        key = query if key is None else key
        value = key if value is None else value
        check_mha_inputs(query, key, value, self.d_model, batch_first=self.batch_first)
        return query, key, value

    def _one_mask(self, mask, key_padding_mask, is_causal: bool, past: int, q, k):
        """``(mask, is_causal)`` for the attention call: the course's ``mask`` with a head axis,
        and-ed with torch's ``key_padding_mask`` and, after ``past`` cached tokens, with the
        causal triangle aligned bottom-right (then ``is_causal`` is False)."""
        batch_size, n_q, n_k = q.shape[0], q.shape[-2], k.shape[-2]
        mask = self._head_mask(mask, batch_size, n_q, n_k)  # None or (..., Nq, Nk)
        if key_padding_mask is not None:
            keep = _keep_from_padding(key_padding_mask, batch_size, n_k, q.device)
            mask = keep if mask is None else self._and_mask(mask, keep)  # (B, 1, 1, Nk)
        if is_causal and past > 0:
            # the queries are positions past..past+Nq-1: align the triangle bottom-right
            tri = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(past)  # (Nq, Nk)
            mask = tri if mask is None else self._and_mask(mask, tri)
            is_causal = False
        return mask, is_causal

    def _caller_layout(self, out: torch.Tensor) -> torch.Tensor:
        """``[B, Nq, d_model]``, or ``[Nq, B, d_model]`` with ``batch_first=False``."""
        return out if self.batch_first else out.transpose(0, 1)

    def _head_mask(self, mask, batch_size: int, n_q: int, n_k: int):
        """Give a mask the head axis: ``[B, Nq, Nk]`` → ``[B, 1, Nq, Nk]``."""
        if mask is None:
            return None
        if not isinstance(mask, torch.Tensor):
            mask = torch.as_tensor(mask)
        if mask.ndim == 3:
            mask = mask[:, None]  # (B, 1, Nq or 1, Nk)
        elif mask.ndim == 2:
            if mask.shape[-1] == n_k and mask.shape[0] == batch_size != n_q:
                raise ValueError(
                    f"mask of shape {shape_of(mask)} looks like a key-padding mask [B, Nk] "
                    f"(B={batch_size}), but a 2-D mask is read as [Nq, Nk] with Nq={n_q}. "
                    "For padding pass mask=keep[:, None, :] ([B, 1, Nk], True = real token) "
                    "or key_padding_mask=~keep (torch's meaning: True = padding)."
                )
            if mask.shape[-1] == n_k and batch_size == n_q > 1 and mask.shape[0] == n_q:
                raise ValueError(
                    f"mask of shape {shape_of(mask)} is ambiguous here, because the batch "
                    f"size equals the number of queries (B = Nq = {n_q}): it could be one "
                    "[Nq, Nk] mask for every sequence, or a key-padding mask [B, Nk] (one row "
                    "per sequence, as torch's key_padding_mask). Say which: mask[None] "
                    "([1, Nq, Nk], the same for every sequence), mask[:, None, :] ([B, 1, Nk], "
                    "True = real token), or key_padding_mask=~mask (torch's meaning)."
                )
        elif mask.ndim != 4:
            raise ValueError(
                f"expected mask of shape [Nq, Nk], [B, Nq, Nk] or "
                f"[B, H, Nq, Nk] with Nq={n_q}, Nk={n_k}, got {shape_of(mask)}"
            )
        if mask.shape[-1] != n_k or mask.shape[-2] not in (1, n_q):
            raise ValueError(
                f"mask of shape {shape_of(mask)} does not match the scores "
                f"[..., Nq={n_q}, Nk={n_k}] (with a cache, Nk counts the cached "
                "tokens too)"
            )
        return mask

    @staticmethod
    def _and_mask(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Both masks at once: AND of two booleans; otherwise the float masks add and a
        boolean one adds 0 where it allows and -inf where it blocks."""
        if a.dtype == torch.bool and b.dtype == torch.bool:
            return a & b  # (..., Nq, Nk)
        dtype = a.dtype if a.dtype != torch.bool else b.dtype

        def additive(m: torch.Tensor) -> torch.Tensor:
            if m.dtype != torch.bool:
                return m
            zero = torch.zeros((), dtype=dtype, device=m.device)
            return zero.masked_fill(~m, float("-inf"))  # (..., Nq, Nk) 0 or -inf

        return additive(a) + additive(b)  # (..., Nq, Nk)

    # ------------------------------------------------------------------ torch interop

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        r"""An equal module built from a ``torch.nn.MultiheadAttention``.

        torch packs :math:`W_Q, W_K, W_V` into ``in_proj_weight [3 d, d]`` (rows
        ``0:d``, ``d:2d``, ``2d:3d``) and applies them as ``x @ W.T``, exactly like
        ``nn.Linear``; the copy is therefore a slice per projection. Only the standard
        configuration is supported (``kdim = vdim = embed_dim``, no ``add_bias_kv``, no
        ``add_zero_attn``). The returned module takes the same layout as ``m``
        (``batch_first`` is copied: torch's default is sequence-first ``[N, B, D]``).
        Two differences remain in the calls: the boolean ``mask`` is True = may attend
        (torch's ``attn_mask``: True = blocked, so pass ``mask=~attn_mask``;
        ``key_padding_mask`` keeps torch's meaning), and the returned weights are per head,
        ``[B, H, Nq, Nk]`` (torch averages them over heads unless
        ``average_attn_weights=False``).
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(m).__name__}")
        if not m._qkv_same_embed_dim:
            raise ValueError(
                f"kdim={m.kdim} / vdim={m.vdim} different from "
                f"embed_dim={m.embed_dim} are not supported"
            )
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError("add_bias_kv=True and add_zero_attn=True are not supported")
        d_model = m.embed_dim
        bias = m.in_proj_bias is not None
        new = cls(d_model, m.num_heads, bias=bias, dropout=m.dropout, batch_first=m.batch_first)
        new = new.to(device=m.in_proj_weight.device, dtype=m.in_proj_weight.dtype)
        with torch.no_grad():
            W_Q, W_K, W_V = m.in_proj_weight.chunk(3, dim=0)  # 3 x (D, D)
            new.W_Q.weight.copy_(W_Q)
            new.W_K.weight.copy_(W_K)
            new.W_V.weight.copy_(W_V)
            new.W_O.weight.copy_(m.out_proj.weight)  # (D, D)
            if bias:
                b_q, b_k, b_v = m.in_proj_bias.chunk(3)  # 3 x (D,)
                new.W_Q.bias.copy_(b_q)
                new.W_K.bias.copy_(b_k)
                new.W_V.bias.copy_(b_v)
                new.W_O.bias.copy_(m.out_proj.bias)
        new.train(m.training)
        return new


def mha_num_params(
    d_model: int, num_heads: int, num_kv_heads: int | None = None, bias: bool = True
) -> int:
    r"""Parameters of :class:`MultiHeadAttention`, by formula.

    .. math:: 2 d^2 + 2 d \cdot H_{kv} d_h \;(+\; 2d + 2 H_{kv} d_h \text{ biases})

    With :math:`H_{kv} = H` this is :math:`4d^2 + 4d`, whatever :math:`H` is.
    """
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if num_heads < 1 or d_model % num_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
        raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
    head_dim = d_model // num_heads
    kv = num_kv_heads * head_dim  # Hkv * d_h: the width of K and of V
    n = 2 * d_model * d_model + 2 * d_model * kv
    if bias:
        n += 2 * d_model + 2 * kv
    return int(n)
