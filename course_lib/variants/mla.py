r"""Multi-head latent attention (MLA): cache one small latent per token instead of K and V.

DeepSeek-V2 (DeepSeek-AI, 2024, "DeepSeek-V2: A Strong, Economical, and Efficient
Mixture-of-Experts Language Model"), and DeepSeek-V3 after it, compress each token's keys
and values jointly into a latent vector of :math:`d_c \ll H d_h` numbers,

.. math::

    c_t = W_{DKV}\, x_t \in \mathbb{R}^{d_c}, \qquad
    k^C_{t,h} = W_{UK}^{(h)} c_t, \qquad v_{t,h} = W_{UV}^{(h)} c_t ,

and cache :math:`c_t` only. Positions need care: RoPE rotates keys by their position, so a
rotated :math:`k^C` could not be rebuilt from :math:`c_t` by one fixed matrix at decode time
(see below). MLA therefore adds a small **decoupled** RoPE key :math:`k^R_t =
\mathrm{RoPE}(W_{KR}\, x_t) \in \mathbb{R}^{d_h^R}`, shared by all heads and cached too, and
per-head RoPE queries :math:`q^R_{t,h}`. The score of head :math:`h` is

.. math::

    s_{ij} = \frac{q^{C\top}_{i,h} k^C_{j,h} + q^{R\top}_{i,h} k^R_j}{\sqrt{d_h + d_h^R}} .

**Absorption.** At decode time nothing needs to be up-projected: since
:math:`q^{C\top}_{i,h} W_{UK}^{(h)} c_j = (W_{UK}^{(h)\top} q^C_{i,h})^\top c_j`, the query is
moved into the latent space once, and the weighted sum of values is taken in the latent
space too, :math:`o_{i,h} = W_{UV}^{(h)} \sum_j p_{ij} c_j` (and :math:`W_{UV}^{(h)}` can be
folded into :math:`W_O`). Every head then reads the *same* cached
:math:`[c_j; k^R_j]`: multi-query attention over a :math:`d_c + d_h^R`-wide key
(:meth:`MultiHeadLatentAttention.decode_absorbed`). With RoPE on :math:`k^C` instead, the
matrix between :math:`q_i` and :math:`c_j` would be :math:`R_{j-i} W_{UK}`, different for
every distance: no single matrix to absorb.

Cache per token and layer: :math:`d_c + d_h^R` numbers, against :math:`2 H_{kv} d_h` for
MHA/GQA/MQA (:func:`mla_cache_bytes`, :func:`cache_bytes_per_token`). Left out here, as
not needed for the cache or the absorption: the query compression (``q_latent_dim`` keeps
it optional) and the normalisation layers DeepSeek-V2 puts on the latents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..attention import scaled_dot_product_attention
from ..multihead import kv_cache_bytes, merge_heads, split_heads
from ..positional import apply_rope

__all__ = [
    "DEEPSEEK_V2",
    "MLAConfig",
    "MultiHeadLatentAttention",
    "cache_bytes_per_token",
    "mla_cache_bytes",
]


@dataclass(frozen=True)
class MLAConfig:
    r"""The shape of an MLA layer stack.

    ``head_dim`` :math:`d_h` (the non-rotated part of a query/key head, and a value head),
    ``kv_latent_dim`` :math:`d_c` (Hugging Face configs: ``kv_lora_rank``),
    ``rope_head_dim`` :math:`d_h^R` (``qk_rope_head_dim``), ``q_latent_dim`` :math:`d_c'`
    (``q_lora_rank``; None: queries are projected directly from :math:`x`).
    """

    d_model: int
    num_heads: int
    head_dim: int
    kv_latent_dim: int
    rope_head_dim: int
    num_layers: int = 1
    q_latent_dim: int | None = None
    base: float = 10000.0

    def __post_init__(self) -> None:
        for name in (
            "d_model",
            "num_heads",
            "head_dim",
            "kv_latent_dim",
            "rope_head_dim",
            "num_layers",
        ):
            val = getattr(self, name)
            if isinstance(val, bool) or int(val) != val or val < 1:
                raise ValueError(f"MLAConfig.{name} must be a positive integer, got {val!r}")
        if self.rope_head_dim % 2:
            raise ValueError(
                f"rope_head_dim must be even (RoPE rotates pairs), got {self.rope_head_dim}"
            )


# DeepSeek-V2 (DeepSeek-AI, 2024): 60 layers, d_model 5120, 128 heads of 128, d_c = 512,
# d_h^R = 64, d_c' = 1536 (its paper's section 3.1.2; its public config.json agrees).
DEEPSEEK_V2 = MLAConfig(
    d_model=5120,
    num_heads=128,
    head_dim=128,
    kv_latent_dim=512,
    rope_head_dim=64,
    num_layers=60,
    q_latent_dim=1536,
)


def mla_cache_bytes(
    num_layers: int,
    kv_latent_dim: int,
    rope_head_dim: int,
    seq_len: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
) -> int:
    r"""Bytes of an MLA cache: :math:`L \times (d_c + d_h^R) \times N \times B \times`
    bytes per value. One latent and one RoPE key per token and layer, shared by all heads:
    no factor 2 (the latent serves keys *and* values) and no factor :math:`H`."""
    for name, n in (
        ("num_layers", num_layers),
        ("kv_latent_dim", kv_latent_dim),
        ("rope_head_dim", rope_head_dim),
        ("seq_len", seq_len),
        ("batch_size", batch_size),
        ("bytes_per_value", bytes_per_value),
    ):
        if isinstance(n, bool) or int(n) != n or n < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {n!r}")
    return int(
        num_layers * (kv_latent_dim + rope_head_dim) * seq_len * batch_size * bytes_per_value
    )


def cache_bytes_per_token(
    config: MLAConfig, *, gqa_kv_heads: int = 8, bytes_per_value: int = 2
) -> dict[str, int]:
    """Cache bytes per token (all layers) of the same model shape with each kind of attention.

    MHA caches :math:`H` key/value heads of :math:`d_h`, GQA ``gqa_kv_heads``, MQA one
    (chapter 04's :func:`~course_lib.multihead.kv_cache_bytes`); MLA caches
    :math:`d_c + d_h^R` numbers (:func:`mla_cache_bytes`). Keys: ``"MHA"``, ``"GQA"``,
    ``"MQA"``, ``"MLA"``.
    """
    c = config
    return {
        "MHA": kv_cache_bytes(
            c.num_layers, c.num_heads, c.head_dim, 1, bytes_per_value=bytes_per_value
        ),
        "GQA": kv_cache_bytes(
            c.num_layers, gqa_kv_heads, c.head_dim, 1, bytes_per_value=bytes_per_value
        ),
        "MQA": kv_cache_bytes(c.num_layers, 1, c.head_dim, 1, bytes_per_value=bytes_per_value),
        "MLA": mla_cache_bytes(
            c.num_layers, c.kv_latent_dim, c.rope_head_dim, 1, bytes_per_value=bytes_per_value
        ),
    }


class MultiHeadLatentAttention(nn.Module):
    r"""One MLA layer (causal self-attention), with a naive and an absorbed decoding step.

    Parameters (``nn.Linear`` without biases, named as in the maths): ``W_DKV``
    :math:`D \to d_c`, ``W_UK`` and ``W_UV`` :math:`d_c \to H d_h`, ``W_KR``
    :math:`D \to d_h^R`; queries ``W_DQ`` :math:`D \to d_c'` (only with ``q_latent_dim``),
    ``W_UQ`` :math:`\to H d_h`, ``W_QR`` :math:`\to H d_h^R`; ``W_O`` :math:`H d_h \to D`.
    """

    def __init__(self, config: MLAConfig) -> None:
        super().__init__()
        c = self.config = config
        h, head_dim, d_r = c.num_heads, c.head_dim, c.rope_head_dim
        self.W_DKV = nn.Linear(c.d_model, c.kv_latent_dim, bias=False)
        self.W_UK = nn.Linear(c.kv_latent_dim, h * head_dim, bias=False)
        self.W_UV = nn.Linear(c.kv_latent_dim, h * head_dim, bias=False)
        self.W_KR = nn.Linear(c.d_model, d_r, bias=False)
        q_in = c.d_model
        if c.q_latent_dim is not None:
            self.W_DQ = nn.Linear(c.d_model, c.q_latent_dim, bias=False)
            q_in = c.q_latent_dim
        self.W_UQ = nn.Linear(q_in, h * head_dim, bias=False)
        self.W_QR = nn.Linear(q_in, h * d_r, bias=False)
        self.W_O = nn.Linear(h * head_dim, c.d_model, bias=False)
        self.scale = 1.0 / math.sqrt(head_dim + d_r)

    # ------------------------------------------------------------------ pieces

    def _check_x(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[-1] != self.config.d_model:
            raise ValueError(
                f"expected x of shape [B, N, d_model={self.config.d_model}], got "
                f"{getattr(x, 'shape', type(x).__name__)}"
            )

    def _positions(self, n: int, start: int, device) -> torch.Tensor:
        return torch.arange(start, start + n, device=device)  # (N,)

    def compress(self, x: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        r"""What MLA caches for tokens at positions ``start, start+1, ...``:
        ``(c_kv [B, N, d_c], k_rope [B, N, d_h^R])`` with :math:`k^R` already rotated."""
        self._check_x(x)
        pos = self._positions(x.shape[1], start, x.device)  # (N,)
        c_kv = self.W_DKV(x)  # (B, N, d_c)
        k_rope = apply_rope(self.W_KR(x), pos, base=self.config.base)  # (B, N, d_h^R)
        return c_kv, k_rope

    def queries(self, x: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q_nope [B, H, N, d_h], q_rope [B, H, N, d_h^R])``, the latter rotated."""
        self._check_x(x)
        c = self.config
        pos = self._positions(x.shape[1], start, x.device)  # (N,)
        q_in = self.W_DQ(x) if c.q_latent_dim is not None else x  # (B, N, d_c' or D)
        q_nope = split_heads(self.W_UQ(q_in), c.num_heads)  # (B, H, N, d_h)
        q_rope = split_heads(self.W_QR(q_in), c.num_heads)  # (B, H, N, d_h^R)
        return q_nope, apply_rope(q_rope, pos, base=c.base)  # rotated by position

    def expand(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r"""Naive: rebuild every head's keys ``[B, H, N, d_h + d_h^R]`` and values
        ``[B, H, N, d_h]`` from the cache (:math:`k = [W_{UK} c; k^R]`, :math:`v = W_{UV} c`)."""
        h = self.config.num_heads
        k_nope = split_heads(self.W_UK(c_kv), h)  # (B, H, N, d_h)
        v = split_heads(self.W_UV(c_kv), h)  # (B, H, N, d_h)
        k_r = k_rope[:, None].expand(-1, h, -1, -1)  # (B, H, N, d_h^R) shared by all heads
        return torch.cat([k_nope, k_r], dim=-1), v

    # ------------------------------------------------------------------ forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal self-attention over ``x [B, N, D]``: ``[B, N, D]`` (the training path)."""
        c_kv, k_rope = self.compress(x)  # (B, N, d_c), (B, N, d_h^R)
        q_nope, q_rope = self.queries(x)  # (B, H, N, d_h), (B, H, N, d_h^R)
        k, v = self.expand(c_kv, k_rope)  # (B, H, N, d_h + d_h^R), (B, H, N, d_h)
        q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, N, d_h + d_h^R)
        heads, _ = scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.scale
        )  # (B, H, N, d_h)
        return self.W_O(merge_heads(heads))  # (B, N, D)

    def _append(
        self, x_new, c_kv, k_rope
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        self._check_x(x_new)
        if x_new.shape[1] != 1:
            raise ValueError(
                f"decoding takes one new token: expected x_new [B, 1, D], got {tuple(x_new.shape)}"
            )
        pos = 0 if c_kv is None else c_kv.shape[1]
        c_new, kr_new = self.compress(x_new, start=pos)  # (B, 1, d_c), (B, 1, d_h^R)
        if c_kv is not None:
            c_new = torch.cat([c_kv, c_new], dim=1)  # (B, N+1, d_c)
            kr_new = torch.cat([k_rope, kr_new], dim=1)  # (B, N+1, d_h^R)
        q_nope, q_rope = self.queries(x_new, start=pos)  # (B, H, 1, d_h), (B, H, 1, d_h^R)
        return q_nope, q_rope, c_new, kr_new

    def decode_naive(
        self, x_new: torch.Tensor, c_kv: torch.Tensor | None, k_rope: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoding step by up-projecting the whole cache: ``(out [B, 1, D], c_kv, k_rope)``."""
        q_nope, q_rope, c_kv, k_rope = self._append(x_new, c_kv, k_rope)
        k, v = self.expand(c_kv, k_rope)  # (B, H, N, d_h + d_h^R), (B, H, N, d_h)
        q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, 1, d_h + d_h^R)
        heads, _ = scaled_dot_product_attention(q, k, v, scale=self.scale)  # (B, H, 1, d_h)
        return self.W_O(merge_heads(heads)), c_kv, k_rope

    def absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        r"""``(W_UK per head [H, d_h, d_c], W_OV per head [H, D, d_c])`` with
        :math:`W_{OV}^{(h)} = W_O^{(h)} W_{UV}^{(h)}`: the value up-projection folded into the
        output projection."""
        c = self.config
        w_uk = self.W_UK.weight.reshape(c.num_heads, c.head_dim, c.kv_latent_dim)  # (H, d_h, d_c)
        w_uv = self.W_UV.weight.reshape(c.num_heads, c.head_dim, c.kv_latent_dim)  # (H, d_h, d_c)
        W_O_heads = self.W_O.weight.reshape(c.d_model, c.num_heads, c.head_dim)  # (D, H, d_h)
        w_ov = torch.einsum("Dhe,hec->hDc", W_O_heads, w_uv)  # (H, D, d_c)
        return w_uk, w_ov

    def decode_absorbed(
        self, x_new: torch.Tensor, c_kv: torch.Tensor | None, k_rope: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        r"""The same step without rebuilding keys or values: ``(out [B, 1, D], c_kv, k_rope)``.

        .. math::

            \tilde q_h = W_{UK}^{(h)\top} q^C_h,\quad
            s_j = \frac{\tilde q_h^\top c_j + q^{R\top}_h k^R_j}{\sqrt{d_h + d_h^R}},\quad
            \mathrm{out} = \sum_h W_{OV}^{(h)} \textstyle\sum_j p_{hj}\, c_j .
        """
        q_nope, q_rope, c_kv, k_rope = self._append(x_new, c_kv, k_rope)
        w_uk, w_ov = self.absorbed_weights()  # (H, d_h, d_c), (H, D, d_c)
        q_lat = torch.einsum("bhqe,hec->bhqc", q_nope, w_uk)  # (B, H, 1, d_c) query in latent space
        scores = (
            q_lat @ c_kv[:, None].transpose(-2, -1)  # (B, H, 1, N) one latent for all heads
            + q_rope @ k_rope[:, None].transpose(-2, -1)
        ) * self.scale  # (B, H, 1, N)
        weights = torch.softmax(scores, dim=-1)  # (B, H, 1, N)
        o_lat = weights @ c_kv[:, None]  # (B, H, 1, d_c) weighted sum of latents
        out = torch.einsum("bhqc,hDc->bqD", o_lat, w_ov)  # (B, 1, D) sum over heads
        return out, c_kv, k_rope
