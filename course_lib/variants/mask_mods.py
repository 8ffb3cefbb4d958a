r"""Masks as functions: FlexAttention's ``mask_mod(b, h, q_idx, kv_idx) -> bool``.

Chapter 02 built masks as tensors ``[..., Nq, Nk]``. Current models use many masks, and
writing each as a tensor does not scale: a 128k-token document mask is :math:`2^{34}`
booleans. FlexAttention (Dong, Feng, Guessous, Liang and He, 2024, "Flex Attention: A
Programming Model for Generating Optimized Attention Kernels"; ``torch.nn.attention.
flex_attention``) describes a mask instead by a *function* of the indices,

.. math:: M_{b,h,i,j} = \mathrm{mask\_mod}(b, h, i, j) \in \{\text{True}, \text{False}\},

True = may attend (chapter 02's polarity). The function is data: it can be combined
(:func:`and_masks`, :func:`or_masks`), turned into a tensor when one is wanted
(:func:`materialize`), or summarised per tile to skip work (``course_lib.variants.flex``).

Every ``mask_mod`` here is written with tensor operations only (``&``, ``|``, ``~``,
comparisons, indexing a captured tensor), never Python's ``and``/``or``/``if``, so the same
function works two ways:

* FlexAttention calls it on 0-dimensional index tensors (through ``torch.vmap``);
* :func:`materialize` calls it once on *broadcast* index tensors ``b (B,1,1,1)``,
  ``h (1,H,1,1)``, ``q_idx (1,1,Nq,1)``, ``kv_idx (1,1,1,Nk)`` and gets the whole mask.

The masks of this module:

* :func:`causal`: key :math:`j \le i` (top-left, as everywhere in the course);
* :func:`sliding_window`: causal and :math:`i - j < W`: the last :math:`W` tokens, the
  query's own included (Mistral, Gemma 2's local layers);
* :func:`padding`: key :math:`j <` the length of sequence :math:`b`;
* :func:`document`: query and key in the same document of a packed sequence;
* :func:`prefix_lm`: every query sees the whole prefix (bidirectional), causal after it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch

__all__ = [
    "MaskMod",
    "and_masks",
    "causal",
    "document",
    "document_ids",
    "index_grids",
    "materialize",
    "or_masks",
    "padding",
    "prefix_lm",
    "sliding_window",
]

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _named(fn, name: str):
    fn.__name__ = fn.__qualname__ = name
    return fn


def _on(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` on the device of the index tensor ``like`` (a mask built on the CPU still works
    when FlexAttention evaluates it on a GPU)."""
    return t if t.device == like.device else t.to(like.device)


def _as_long(x, what: str, ndim: int) -> torch.Tensor:
    x = torch.as_tensor(x)
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        raise TypeError(f"expected integer {what}, got dtype {x.dtype}")
    if x.ndim != ndim:
        shape = "[B]" if ndim == 1 else "[B, N]"
        raise ValueError(f"expected {what} of shape {shape}, got {tuple(x.shape)}")
    return x.long()


# --------------------------------------------------------------------------- the masks


def causal(b, h, q_idx, kv_idx):
    r"""Causal: query :math:`i` sees key :math:`j` when :math:`j \le i` (top-left)."""
    return q_idx >= kv_idx


def sliding_window(window: int) -> MaskMod:
    r"""Causal attention to the last ``window`` tokens, the query's own included.

    .. math:: M_{ij} = [\, j \le i \,] \wedge [\, i - j < W \,]

    Query :math:`i` sees keys :math:`i - W + 1, \dots, i`: exactly :math:`W` keys once
    :math:`i \ge W - 1`, which is what a ring buffer of :math:`W` slots holds
    (``course_lib.variants.sliding_window``). ``window = 1`` sees only itself.
    """
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    w = int(window)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < w)

    return _named(mask_mod, f"sliding_window_{w}")


def padding(lengths) -> MaskMod:
    r"""Key padding: key :math:`j` of sequence :math:`b` is real when :math:`j < \mathrm{len}_b`.

    ``lengths [B]`` integers. Queries on padding positions still see the real keys (their
    outputs are ignored later); combine with :func:`causal` by :func:`and_masks`.
    """
    lengths = _as_long(lengths, "lengths", 1)  # (B,)

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx < _on(lengths, kv_idx)[b]

    return _named(mask_mod, "padding")


def document(doc_ids) -> MaskMod:
    r"""Packed sequences: query and key must belong to the same document.

    .. math:: M_{b,i,j} = [\, \mathrm{doc}_{b,i} = \mathrm{doc}_{b,j} \,]

    ``doc_ids [B, N]`` gives each token's document number (:func:`document_ids` builds it
    from document lengths). Alone this mask is bidirectional inside each document; a
    decoder uses ``and_masks(causal, document(doc_ids))``.
    """
    doc_ids = _as_long(doc_ids, "doc_ids", 2)  # (B, N)

    def mask_mod(b, h, q_idx, kv_idx):
        d = _on(doc_ids, kv_idx)
        return d[b, q_idx] == d[b, kv_idx]

    return _named(mask_mod, "document")


def prefix_lm(prefix_lengths) -> MaskMod:
    r"""Prefix-LM: every key of the prefix is visible to every query; causal after it.

    .. math:: M_{b,i,j} = [\, j < P_b \,] \vee [\, j \le i \,]

    ``prefix_lengths [B]`` (or one integer for the whole batch). The prefix (a prompt, an
    image, the input of a translation) is read bidirectionally, the rest is generated
    left to right (Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a
    Unified Text-to-Text Transformer").
    """
    p = torch.as_tensor(prefix_lengths)
    if p.ndim == 0:
        p = p.reshape(1)
    p = _as_long(p, "prefix_lengths", 1)  # (B,) or (1,)
    if p.numel() == 1:

        def mask_mod(b, h, q_idx, kv_idx):
            return (kv_idx < _on(p, kv_idx)[0]) | (q_idx >= kv_idx)
    else:

        def mask_mod(b, h, q_idx, kv_idx):
            return (kv_idx < _on(p, kv_idx)[b]) | (q_idx >= kv_idx)

    return _named(mask_mod, "prefix_lm")


def document_ids(lengths: list[int] | tuple[int, ...], seq_len: int | None = None) -> torch.Tensor:
    """Document numbers ``[N]`` of a packed sequence from its documents' lengths.

    ``document_ids([3, 2, 4])`` is ``[0, 0, 0, 1, 1, 2, 2, 2, 2]``. When ``seq_len`` is
    larger than the sum, the tail is padding and gets its own number (one past the last).
    """
    lengths = [int(n) for n in lengths]
    if any(n < 0 for n in lengths):
        raise ValueError(f"document lengths must be >= 0, got {lengths}")
    total = sum(lengths)
    seq_len = total if seq_len is None else int(seq_len)
    if seq_len < total:
        raise ValueError(f"the documents hold {total} tokens, more than seq_len={seq_len}")
    ids = torch.repeat_interleave(
        torch.arange(len(lengths)), torch.tensor(lengths, dtype=torch.long)
    )
    pad = torch.full((seq_len - total,), len(lengths), dtype=torch.long)
    return torch.cat([ids, pad])  # (N,)


# --------------------------------------------------------------------------- combinators


def and_masks(*mask_mods: MaskMod) -> MaskMod:
    r"""A ``mask_mod`` that allows :math:`(i, j)` only when every one of ``mask_mods`` does."""
    return _combined(mask_mods, operator.and_, "&", "and_masks")


def or_masks(*mask_mods: MaskMod) -> MaskMod:
    r"""A ``mask_mod`` that allows :math:`(i, j)` when any one of ``mask_mods`` does."""
    return _combined(mask_mods, operator.or_, "|", "or_masks")


def _combined(mask_mods, op, symbol: str, caller: str) -> MaskMod:
    if not mask_mods:
        raise ValueError(f"{caller} needs at least one mask_mod")

    def mask_mod(b, h, q_idx, kv_idx):
        out = mask_mods[0](b, h, q_idx, kv_idx)
        for m in mask_mods[1:]:
            out = op(out, m(b, h, q_idx, kv_idx))
        return out

    return _named(mask_mod, f" {symbol} ".join(m.__name__ for m in mask_mods))


# --------------------------------------------------------------------------- to a tensor


def index_grids(
    batch_size: int, num_heads: int, n_q: int, n_k: int, *, device=None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Broadcastable index tensors ``b (B,1,1,1)``, ``h (1,H,1,1)``, ``q (1,1,Nq,1)``,
    ``kv (1,1,1,Nk)``: call a ``mask_mod`` or ``score_mod`` on them to evaluate every entry."""
    for name, n in (
        ("batch_size", batch_size),
        ("num_heads", num_heads),
        ("n_q", n_q),
        ("n_k", n_k),
    ):
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}")
    ar = lambda n: torch.arange(int(n), device=device)  # noqa: E731
    return (
        ar(batch_size).view(-1, 1, 1, 1),
        ar(num_heads).view(1, -1, 1, 1),
        ar(n_q).view(1, 1, -1, 1),
        ar(n_k).view(1, 1, 1, -1),
    )


def materialize(
    mask_mod: MaskMod,
    batch_size: int,
    num_heads: int,
    n_q: int,
    n_k: int | None = None,
    *,
    device=None,
) -> torch.Tensor:
    r"""The boolean mask ``[B, H, Nq, Nk]`` that ``mask_mod`` describes (True = may attend).

    One call on broadcast index tensors (:func:`index_grids`), the result expanded to the
    full shape. This is what chapter 02 passed to attention as ``mask``; FlexAttention's
    ``create_mask`` computes the same tensor.
    """
    n_k = n_q if n_k is None else n_k
    b, h, q, kv = index_grids(batch_size, num_heads, n_q, n_k, device=device)
    out = mask_mod(b, h, q, kv)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.bool:
        raise TypeError(
            f"mask_mod {getattr(mask_mod, '__name__', mask_mod)!r} must return a "
            f"boolean tensor (True = may attend), got "
            f"{getattr(out, 'dtype', type(out).__name__)}"
        )
    shape = (int(batch_size), int(num_heads), int(n_q), int(n_k))
    try:
        return out.expand(shape).clone()  # (B, H, Nq, Nk)
    except RuntimeError as err:
        raise ValueError(
            f"mask_mod {mask_mod.__name__!r} returned shape {tuple(out.shape)}, "
            f"which does not broadcast to [B, H, Nq, Nk] = {shape}: use only "
            "elementwise tensor operations on b, h, q_idx, kv_idx"
        ) from err
