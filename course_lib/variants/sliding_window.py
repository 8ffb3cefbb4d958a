r"""Sliding-window attention: a KV cache of constant size, and a receptive field that grows
with depth.

With a window of :math:`W` tokens, query :math:`i` attends to keys
:math:`i - W + 1, \dots, i` only (``course_lib.variants.mask_mods.sliding_window``). At decoding
time a key older than :math:`W` tokens is never read again, so the KV cache needs
:math:`W` slots, not :math:`N`: a **ring buffer** where token :math:`t` goes to slot
:math:`t \bmod W`, overwriting token :math:`t - W`, the one that just left the window.
Softmax attention does not care in which order the keys sit (chapter 05: without
positions it is permutation-equivariant; RoPE is applied *before* a key enters the cache),
so attending over the slots in ring order gives the same output as attending over the
last :math:`W` keys in time order (:class:`RingKVCache`).

Mistral 7B (Jiang et al., 2023, "Mistral 7B") uses :math:`W = 4096` in all of its 32
layers, and a rolling buffer cache. Gemma 2 alternates sliding-window (4096) and global
layers. One layer sees :math:`W` tokens back, but layer :math:`\ell` reads outputs of layer
:math:`\ell - 1`, which already mixed :math:`W` tokens each: after :math:`L` layers
information can travel :math:`L (W - 1)` positions (:func:`receptive_field`), measured by
:func:`reachable`.
"""

from __future__ import annotations

import math

import torch

from ..attention import masked_softmax
from ..multihead import kv_cache_bytes, repeat_kv

__all__ = [
    "RingKVCache",
    "reachable",
    "receptive_field",
    "sliding_window_cache_bytes",
]


def sliding_window_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    seq_len: int,
    window: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
) -> int:
    r"""Bytes of a sliding-window KV cache: chapter 04's formula with :math:`\min(N, W)` tokens.

    .. math:: 2 \times L \times H_{kv} \times d_h \times \min(N, W) \times B \times
              \text{bytes per value}
    """
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    return kv_cache_bytes(
        num_layers,
        num_kv_heads,
        head_dim,
        min(int(seq_len), int(window)),
        batch_size=batch_size,
        bytes_per_value=bytes_per_value,
    )


def receptive_field(window: int, num_layers: int) -> int:
    r"""How many positions back layer :math:`L`'s output at :math:`i` can depend on, plus one.

    Each layer reaches :math:`W - 1` positions further back, so after :math:`L` layers
    position :math:`i` depends on positions :math:`i - L(W-1), \dots, i`:
    :math:`L(W - 1) + 1` tokens (roughly :math:`L \times W`, the figure usually quoted).
    """
    for name, n in (("window", window), ("num_layers", num_layers)):
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    return int(num_layers) * (int(window) - 1) + 1


def reachable(mask: torch.Tensor, num_layers: int) -> torch.Tensor:
    r"""Which inputs can influence which outputs after ``num_layers`` layers of one mask.

    ``mask [N, N]`` (True = query :math:`i` reads key :math:`j`). One layer connects
    :math:`j \to i` when :math:`M_{ij}`; :math:`L` layers connect :math:`j \to i` when some
    chain :math:`j = j_0 \to j_1 \to \dots \to j_L = i` exists: the boolean matrix power
    :math:`M^L`. Returns ``bool [N, N]``.
    """
    if mask.ndim != 2 or mask.shape[0] != mask.shape[1] or mask.dtype != torch.bool:
        raise ValueError(
            f"expected a square boolean mask [N, N], got {mask.dtype} {tuple(mask.shape)}"
        )
    m = mask.to(torch.float64)  # (N, N)
    r = torch.eye(mask.shape[0], dtype=torch.float64)  # (N, N) zero layers: only itself
    for _ in range(int(num_layers)):
        r = ((m @ r) > 0).to(torch.float64)  # (N, N) one more layer
    return r > 0


class RingKVCache:
    r"""A KV cache of ``window`` slots for sliding-window decoding: a ring buffer.

    ``k`` and ``v`` are preallocated ``[B, H_kv, W, d_h]``; ``positions [W]`` says which
    token each slot holds (-1: empty). :meth:`update` writes token :math:`t` into slot
    :math:`t \bmod W`; :meth:`attend` lets one new query attend to every filled slot. The
    memory is fixed when the cache is built: it never grows, whatever the number of tokens.
    """

    def __init__(
        self,
        window: int,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        device=None,
    ) -> None:
        for name, n in (
            ("window", window),
            ("batch_size", batch_size),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
        ):
            if isinstance(n, bool) or int(n) != n or n < 1:
                raise ValueError(f"{name} must be a positive integer, got {n!r}")
        self.window = int(window)
        shape = (int(batch_size), int(num_kv_heads), self.window, int(head_dim))
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (B, H_kv, W, d_h)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (B, H_kv, W, d_h)
        self.positions = torch.full((self.window,), -1, dtype=torch.long)  # (W,)
        self.seen = 0  # tokens written so far = the position of the next one

    @property
    def nbytes(self) -> int:
        """Bytes held by the keys and values (fixed at construction)."""
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> int:
        r"""Write one token's ``k_new, v_new [B, H_kv, 1, d_h]`` into slot :math:`t \bmod W`.

        Returns the slot. The token that was there, :math:`t - W`, has just left the window.
        """
        expected = self.k.shape[:2] + (1,) + self.k.shape[3:]
        for name, x in (("k_new", k_new), ("v_new", v_new)):
            if tuple(x.shape) != tuple(expected):
                raise ValueError(
                    f"expected {name} of shape [B, H_kv, 1, d_h] = "
                    f"{tuple(expected)}, got {tuple(x.shape)} (one token at a "
                    "time: loop over a prompt's tokens)"
                )
        slot = self.seen % self.window
        self.k[:, :, slot] = k_new[:, :, 0]  # (B, H_kv, d_h) overwrite in place
        self.v[:, :, slot] = v_new[:, :, 0]
        self.positions[slot] = self.seen
        self.seen += 1
        return slot

    def attend(self, q_new: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        r"""One new query ``[B, H, 1, d_h]`` over the filled slots: ``[B, H, 1, d_h]``.

        Query heads share key/value heads as in chapter 04 (:math:`G = H / H_{kv}`). Call
        after :meth:`update` so the token sees itself.
        """
        g = q_new.shape[1] // self.k.shape[1]
        if q_new.ndim != 4 or q_new.shape[2] != 1 or g * self.k.shape[1] != q_new.shape[1]:
            raise ValueError(
                f"expected q_new of shape [B, H, 1, d_h] with H a multiple of "
                f"H_kv={self.k.shape[1]}, got {tuple(q_new.shape)}"
            )
        scale = 1.0 / math.sqrt(q_new.shape[-1]) if scale is None else scale
        k, v = repeat_kv(self.k, g), repeat_kv(self.v, g)  # (B, H, W, d_h)
        scores = (q_new @ k.transpose(-2, -1)) * scale  # (B, H, 1, W)
        filled = (self.positions >= 0).to(q_new.device)  # (W,) empty slots are masked out
        weights = masked_softmax(scores, filled)  # (B, H, 1, W)
        return weights @ v  # (B, H, 1, d_h)

    def __repr__(self) -> str:
        return (
            f"RingKVCache(window={self.window}, seen={self.seen}, "
            f"k shape={tuple(self.k.shape)}, bytes={self.nbytes})"
        )
