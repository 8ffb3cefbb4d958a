r"""Multi-head attention, grouped-query attention (GQA / MQA) and the KV cache.

Multi-head attention (Vaswani et al., 2017, "Attention Is All You Need") runs :math:`H`
attentions side by side, each in its own :math:`d_h = d_\text{model}/H`-dimensional
subspace, and mixes their outputs with one output projection:

.. math::

    \mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)\, W^O,
    \qquad
    \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q,\; K W_i^K,\; V W_i^V).

In code the :math:`H` projections are one matrix each (:math:`W^Q = [W_1^Q \,|\, \dots \,|\,
W_H^Q]`), and the heads are made by a *reshape* of the projected features followed by a
*transpose* that moves the head axis in front of the sequence axis (:func:`split_heads`);
:func:`merge_heads` undoes it.

Grouped-query attention (Ainslie et al., 2023, "GQA: Training Generalized Multi-Query
Transformer Models from Multi-Head Checkpoints") keeps :math:`H` query heads but only
:math:`H_{kv}` key/value heads, each shared by a group of :math:`G = H / H_{kv}`
consecutive query heads; :math:`H_{kv} = 1` is multi-query attention (Shazeer, 2019, "Fast
Transformer Decoding: One Write-Head is All You Need") and :math:`H_{kv} = H` is plain
multi-head attention. Fewer key/value heads means a smaller :class:`KVCache`, which is what
limits decoding speed and batch size in large language models.

Conventions: batch-first tensors, ``query [B, Nq, d_model]``; boolean masks are
**True = may attend**, like ``course_lib.attention`` and torch's SDPA, but *unlike*
``torch.nn.MultiheadAttention``, whose boolean ``attn_mask`` and ``key_padding_mask`` are
True = *blocked*. Pass ``~mask`` when moving a boolean mask between the two.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import scaled_dot_product_attention

__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "kv_cache_bytes",
    "merge_heads",
    "mha_num_params",
    "repeat_kv",
    "split_heads",
]


def _shape(x: torch.Tensor) -> tuple:
    return tuple(int(s) for s in x.shape)


# --------------------------------------------------------------------------- head reshapes


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""``[B, N, H·d_h] → [B, H, N, d_h]``: cut the features into ``num_heads`` heads.

    Feature :math:`f = i\, d_h + c` of token :math:`n` becomes component :math:`c` of head
    :math:`i`: :math:`\mathrm{out}[b, i, n, c] = x[b, n, i\, d_h + c]`. The reshape alone
    would give ``[B, N, H, d_h]``; the transpose puts the heads before the tokens so each
    head is an ordinary ``[N, d_h]`` attention problem in the batch dimensions.
    """
    if x.ndim != 3:
        raise ValueError(f"expected x of shape [B, N, H*d_head], got {_shape(x)}")
    b, n, d = x.shape
    if num_heads < 1 or d % num_heads != 0:
        raise ValueError(
            f"the feature size {d} of x {_shape(x)} is not divisible by num_heads={num_heads}"
        )
    x = x.reshape(b, n, num_heads, d // num_heads)  # (B, N, H, d_h)
    return x.transpose(1, 2)  # (B, H, N, d_h)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    r"""``[B, H, N, d_h] → [B, N, H·d_h]``: concatenate the heads' outputs per token.

    The inverse of :func:`split_heads`:
    :math:`\mathrm{out}[b, n, i\, d_h + c] = x[b, i, n, c]`, i.e.
    :math:`\mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_H)` for every token.
    """
    if x.ndim != 4:
        raise ValueError(f"expected x of shape [B, H, N, d_head], got {_shape(x)}")
    b, h, n, d_h = x.shape
    x = x.transpose(1, 2)  # (B, N, H, d_h)
    return x.reshape(b, n, h * d_h)  # (B, N, H*d_h); reshape copies: x is not contiguous


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    r"""``[B, H_kv, N, d] → [B, H_kv·n_rep, N, d]``: give every query head its key/value head.

    Query head :math:`i` uses key/value head :math:`\lfloor i / G \rfloor` with
    :math:`G` = ``n_rep`` = :math:`H / H_{kv}`: each key/value head is repeated :math:`G`
    times *in place* (heads ``0,0,1,1`` for :math:`H_{kv}=2, G=2`), as in Llama's
    ``repeat_kv``, not tiled (``0,1,0,1``). Uses ``expand``, so no copy is made before
    the final reshape.
    """
    if x.ndim != 4:
        raise ValueError(f"expected x of shape [B, H_kv, N, d_head], got {_shape(x)}")
    if int(n_rep) < 1:
        raise ValueError(f"n_rep must be a positive integer, got {n_rep!r}")
    if n_rep == 1:
        return x
    b, h_kv, n, d = x.shape
    x = x[:, :, None, :, :].expand(b, h_kv, n_rep, n, d)  # (B, H_kv, G, N, d) a view
    return x.reshape(b, h_kv * n_rep, n, d)  # (B, H, N, d)


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

        \text{bytes} = 2 \times L \times H_{kv} \times d_h \times T \times B
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


# --------------------------------------------------------------------------- the KV cache


class KVCache:
    r"""The keys and values of the tokens seen so far, for incremental (autoregressive) decoding.

    With a causal mask, token :math:`t`'s key :math:`k_t = x_t W^K` and value
    :math:`v_t = x_t W^V` never change once computed, so decoding step :math:`t` needs to
    project only the new token and append it:

    .. math:: K_{1..t} = [K_{1..t-1};\ k_t], \qquad V_{1..t} = [V_{1..t-1};\ v_t].

    Holds ``k`` and ``v`` of shape ``[B, H_kv, T, d_h]`` (None before the first update).
    This version grows by concatenation, which is the clearest; production engines
    preallocate ``[B, H_kv, T_max, d_h]`` (or pages of it) and write in place.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else int(self.k.shape[-2])

    @property
    def nbytes(self) -> int:
        """Bytes held by the cached keys and values."""
        if self.k is None:
            return 0
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[B, H_kv, n, d_h]`` keys/values; return all of them ``[B, H_kv, T+n, d_h]``."""
        if k_new.ndim != 4 or v_new.ndim != 4 or k_new.shape[:-1] != v_new.shape[:-1]:
            raise ValueError(
                f"expected k_new and v_new of shape [B, H_kv, n, d_head], got "
                f"{_shape(k_new)} and {_shape(v_new)}"
            )
        if self.k is None:
            self.k, self.v = k_new, v_new  # (B, H_kv, n, d_h)
        else:
            if (
                k_new.shape[:2] != self.k.shape[:2]
                or k_new.shape[-1] != self.k.shape[-1]
                or v_new.shape[-1] != self.v.shape[-1]
            ):
                raise ValueError(
                    f"new keys/values {_shape(k_new)}, {_shape(v_new)} do not "
                    f"match the cache's [B, H_kv, T, d_head] = {_shape(self.k)}, "
                    f"{_shape(self.v)}"
                )
            self.k = torch.cat([self.k, k_new], dim=-2)  # (B, H_kv, T+n, d_h)
            self.v = torch.cat([self.v, v_new], dim=-2)  # (B, H_kv, T+n, d_h)
        return self.k, self.v

    def __repr__(self) -> str:
        shape = None if self.k is None else _shape(self.k)
        return f"KVCache(len={len(self)}, k shape={shape}, bytes={self.nbytes})"


# --------------------------------------------------------------------------- the module


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention with optional grouped-query heads and a KV cache.

    ``MultiHeadAttention(d_model, num_heads, *, num_kv_heads=None, bias=True, dropout=0.0)``
    has :math:`H` = ``num_heads`` query heads of size :math:`d_h = d_\text{model}/H` and
    :math:`H_{kv}` = ``num_kv_heads`` key/value heads (default :math:`H`: plain
    multi-head attention; 1: multi-query attention). Parameters:
    ``q_proj`` :math:`d_\text{model} \to H d_h`, ``k_proj`` and ``v_proj``
    :math:`d_\text{model} \to H_{kv} d_h`, ``out_proj`` :math:`H d_h \to d_\text{model}`.
    ``dropout`` is applied to the attention weights in training mode.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if int(num_heads) != num_heads or num_heads < 1:
            raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}")
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                f"each head gets d_model / num_heads features"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if int(num_kv_heads) != num_kv_heads or num_kv_heads < 1:
            raise ValueError(f"num_kv_heads must be a positive integer, got {num_kv_heads!r}")
        if num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads={num_heads} is not divisible by "
                f"num_kv_heads={num_kv_heads}: each key/value head must serve "
                "the same number of query heads"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.d_model = int(d_model)
        self.num_heads = int(num_heads)
        self.num_kv_heads = int(num_kv_heads)
        self.head_dim = self.d_model // self.num_heads
        self.dropout = float(dropout)
        kv_dim = self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(self.d_model, self.d_model, bias=bias)
        self.k_proj = nn.Linear(self.d_model, kv_dim, bias=bias)
        self.v_proj = nn.Linear(self.d_model, kv_dim, bias=bias)
        self.out_proj = nn.Linear(self.d_model, self.d_model, bias=bias)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # Like torch.nn.MultiheadAttention: Xavier-uniform input projections, zero biases.
        for lin in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    @property
    def num_groups(self) -> int:
        """:math:`G = H / H_{kv}`: query heads per key/value head."""
        return self.num_heads // self.num_kv_heads

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
            f"dropout={self.dropout}"
        )

    # ------------------------------------------------------------------ forward

    def _check_input(self, name: str, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"expected {name} to be a torch.Tensor, got {type(x).__name__}")
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"expected {name} of shape [B, N, d_model={self.d_model}], got {_shape(x)}"
            )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        r"""``(output [B, Nq, d_model], weights [B, H, Nq, Nk] or None)``.

        ``key`` and ``value`` default to ``query`` (self-attention); ``key`` alone sets
        both. ``mask``: boolean, True = may attend (or a float mask added to the scores),
        shaped ``[Nq, Nk]``, ``[B, Nq, Nk]`` (``[B, 1, Nk]`` for key padding) or
        ``[B, H, Nq, Nk]``. ``is_causal``: query :math:`i` sees keys :math:`j \le i`.

        With a ``cache``, the new keys/values are appended to it and the queries attend
        to every cached token as well: ``Nk`` = tokens cached before + new ones. The
        queries are then the *last* ``Nq`` positions, so ``is_causal`` is aligned
        bottom-right (query :math:`i` sees keys :math:`j \le T_\text{past} + i`).
        """
        key = query if key is None else key
        value = key if value is None else value
        for name, x in (("query", query), ("key", key), ("value", value)):
            self._check_input(name, x)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key and value must have the same [B, Nk], got key "
                f"{_shape(key)} and value {_shape(value)}"
            )
        if query.shape[0] != key.shape[0]:
            raise ValueError(
                f"query and key must have the same batch size B, got query "
                f"{_shape(query)} and key {_shape(key)}"
            )

        # Q = X W^Q, K = X W^K, V = X W^V, then cut the features into heads
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, Nq, d_h)
        k = split_heads(self.k_proj(key), self.num_kv_heads)  # (B, H_kv, Nk_new, d_h)
        v = split_heads(self.v_proj(value), self.num_kv_heads)  # (B, H_kv, Nk_new, d_h)
        past = 0
        if cache is not None:
            past = len(cache)
            k, v = cache.update(k, v)  # (B, H_kv, Nk, d_h) with Nk = past + Nk_new
        n_q, n_k = q.shape[-2], k.shape[-2]

        # GQA: query head i reads key/value head i // G
        k = repeat_kv(k, self.num_groups)  # (B, H, Nk, d_h)
        v = repeat_kv(v, self.num_groups)  # (B, H, Nk, d_h)

        mask = self._head_mask(mask, n_q, n_k)  # None or (..., Nq, Nk) broadcastable
        if is_causal and past > 0:
            # the queries are positions past..past+Nq-1: align the triangle bottom-right
            tri = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(past)  # (Nq, Nk)
            mask = tri if mask is None else self._and_mask(mask, tri)
            is_causal = False

        # head_i = softmax(Q_i K_i^T / sqrt(d_h)) V_i, for all heads at once
        heads, weights = scaled_dot_product_attention(
            q, k, v, mask, is_causal=is_causal, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, Nq, d_h), (B, H, Nq, Nk)

        # MultiHead = Concat(head_1, ..., head_H) W^O
        out = self.out_proj(merge_heads(heads))  # (B, Nq, d_model)
        return out, (weights if need_weights else None)

    def _head_mask(self, mask, n_q: int, n_k: int):
        """Give a mask the head axis: ``[B, Nq, Nk]`` → ``[B, 1, Nq, Nk]``."""
        if mask is None:
            return None
        if not isinstance(mask, torch.Tensor):
            mask = torch.as_tensor(mask)
        if mask.ndim == 3:
            mask = mask[:, None]  # (B, 1, Nq or 1, Nk)
        elif mask.ndim not in (2, 4):
            raise ValueError(
                f"expected mask of shape [Nq, Nk], [B, Nq, Nk] or "
                f"[B, H, Nq, Nk] with Nq={n_q}, Nk={n_k}, got {_shape(mask)}"
            )
        if mask.shape[-1] != n_k or mask.shape[-2] not in (1, n_q):
            raise ValueError(
                f"mask of shape {_shape(mask)} does not match the scores "
                f"[..., Nq={n_q}, Nk={n_k}] (with a cache, Nk counts the cached "
                "tokens too)"
            )
        return mask

    @staticmethod
    def _and_mask(mask: torch.Tensor, tri: torch.Tensor) -> torch.Tensor:
        if mask.dtype == torch.bool:
            return mask & tri  # (..., Nq, Nk)
        return mask.masked_fill(~tri, float("-inf"))  # (..., Nq, Nk) additive float mask

    # ------------------------------------------------------------------ torch interop

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        r"""An equal module built from a ``torch.nn.MultiheadAttention``.

        torch packs :math:`W^Q, W^K, W^V` into ``in_proj_weight [3 d, d]`` (rows
        ``0:d``, ``d:2d``, ``2d:3d``) and applies them as ``x @ W.T``, exactly like
        ``nn.Linear``; the copy is therefore a slice per projection. Only the standard
        configuration is supported (``kdim = vdim = embed_dim``, no ``add_bias_kv``, no
        ``add_zero_attn``). The returned module is batch-first whatever ``m.batch_first``
        is (the parameters do not depend on the layout).
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
        d = m.embed_dim
        bias = m.in_proj_bias is not None
        new = cls(d, m.num_heads, bias=bias, dropout=m.dropout)
        new = new.to(device=m.in_proj_weight.device, dtype=m.in_proj_weight.dtype)
        with torch.no_grad():
            w_q, w_k, w_v = m.in_proj_weight.chunk(3, dim=0)  # 3 x (d, d)
            new.q_proj.weight.copy_(w_q)
            new.k_proj.weight.copy_(w_k)
            new.v_proj.weight.copy_(w_v)
            new.out_proj.weight.copy_(m.out_proj.weight)  # (d, d)
            if bias:
                b_q, b_k, b_v = m.in_proj_bias.chunk(3)  # 3 x (d,)
                new.q_proj.bias.copy_(b_q)
                new.k_proj.bias.copy_(b_k)
                new.v_proj.bias.copy_(b_v)
                new.out_proj.bias.copy_(m.out_proj.bias)
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
    d_h = d_model // num_heads
    kv = num_kv_heads * d_h  # H_kv * d_h: the width of K and of V
    n = 2 * d_model * d_model + 2 * d_model * kv
    if bias:
        n += 2 * d_model + 2 * kv
    return int(n)
