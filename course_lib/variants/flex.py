r"""FlexAttention and its readable twin; block masks as chapter 06's tile map.

One attention, any mask and any score modification (``course_lib.variants.mask_mods``,
``course_lib.variants.score_mods``):

.. math::

    S_{bhij} = \mathrm{score\_mod}(\mathrm{scale}\cdot q_{bhi}^\top k_{bhj}, b, h, i, j),
    \quad P = \mathrm{softmax}_j\big(S \text{ where } \mathrm{mask\_mod}(b, h, i, j)
    \text{, else } -\infty\big), \quad O = PV.

Two implementations:

* :func:`mod_attention`: the formula above, written out with the whole score matrix, in
  plain torch: the course's reference (it returns the weights too, like chapter 02's
  ``scaled_dot_product_attention``, and gives zeros on fully masked rows);
* :func:`flex_attention`: PyTorch's FlexAttention (``torch.nn.attention.flex_attention``,
  PyTorch 2.5 and later; Dong, Feng, Guessous, Liang and He, 2024, "Flex Attention: A
  Programming Model for Generating Optimized Attention Kernels"). On a CUDA GPU it is
  compiled by ``torch.compile`` into one fused Triton kernel, FlashAttention-style, that
  calls the ``score_mod`` inside the kernel and skips the tiles the mask rules out. On a
  CPU we run it *eagerly*: correct, but it materialises the scores like
  :func:`mod_attention` (PyTorch warns about that; :func:`flex_attention` silences that
  one warning because here it is intended).

The tiles: a kernel works on tiles of ``block_m`` queries by ``block_n`` keys (chapter 06).
A tile where the mask is False everywhere is *skipped*, one where it is True everywhere
is computed without evaluating the mask, and only tiles that cross the mask's boundary
need the mask element by element. :func:`tile_map` classifies the tiles from a mask
(0 skipped, 1 partial, 2 full: chapter 06's colours); FlexAttention's ``BlockMask`` stores
exactly this per query tile (:func:`tile_map_from_block_mask`).
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import torch

from ..attention import masked_softmax
from ..validation import check_qkv
from .mask_mods import MaskMod, materialize
from .score_mods import ScoreMod, apply_score_mod

__all__ = [
    "FLEX_MISSING",
    "TILE_COLORS",
    "TILE_LABELS",
    "block_mask",
    "flex_attention",
    "flex_available",
    "fraction_skipped",
    "mod_attention",
    "plot_tile_map",
    "tile_map",
    "tile_map_from_block_mask",
]

FLEX_MISSING = (
    "FlexAttention (torch.nn.attention.flex_attention) needs PyTorch 2.5 or "
    "newer; this PyTorch does not have it, so the cells that use it are skipped "
    "and the course's own mod_attention does the work."
)

# chapter 06's tile map: skipped (light grey, hatched), partial (orange: crosses the mask's
# boundary), full (blue); every tile outlined, so that skipped tiles never read as background
TILE_COLORS = ("#f4f4f4", "#f39c34", "#3b6ea5")
TILE_LABELS = ("skipped", "partial (masked)", "full (no mask)")
SKIPPED, PARTIAL, FULL = 0, 1, 2


@functools.lru_cache(maxsize=1)
def flex_available() -> bool:
    """True when this PyTorch has ``torch.nn.attention.flex_attention`` (2.5+)."""
    try:
        from torch.nn.attention import flex_attention as _  # noqa: F401
    except ImportError:
        return False
    return True


def _need_flex() -> None:
    if not flex_available():
        raise RuntimeError(FLEX_MISSING)


# --------------------------------------------------------------------------- the reference


def mod_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(output [B, H, Nq, d_v], weights [B, H, Nq, Nk])`` with a score_mod and a mask_mod.

    ``q [B, H, Nq, d_k]``, ``k [B, H, Nk, d_k]``, ``v [B, H, Nk, d_v]``. The scores are
    scaled (default :math:`1/\sqrt{d_k}`), then modified, then masked, then softmaxed:
    the order FlexAttention uses. Fully masked rows give zeros (chapter 02).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.ndim != 4:
            raise ValueError(
                f"expected {name} of shape [B, H, N, d], got "
                f"{getattr(x, 'shape', type(x).__name__)}"
            )
    check_qkv(q, k, v)
    b, h, n_q, d_k = q.shape
    n_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Nq, Nk)
    if score_mod is not None:
        scores = apply_score_mod(scores, score_mod)  # (B, H, Nq, Nk)
    mask = None
    if mask_mod is not None:
        mask = materialize(mask_mod, b, h, n_q, n_k, device=q.device)  # (B, H, Nq, Nk)
    weights = masked_softmax(scores, mask)  # (B, H, Nq, Nk)
    return weights @ v, weights  # (B, H, Nq, d_v), (B, H, Nq, Nk)


# --------------------------------------------------------------------------- FlexAttention


def block_mask(
    mask_mod: MaskMod,
    batch_size: int | None,
    num_heads: int | None,
    n_q: int,
    n_k: int | None = None,
    *,
    block_m: int = 128,
    block_n: int | None = None,
    device=None,
):
    """FlexAttention's ``BlockMask`` for ``mask_mod`` with tiles ``block_m x block_n``.

    ``batch_size`` / ``num_heads`` may be None when the mask does not depend on them
    (then one tile map serves every sequence and head).
    """
    _need_flex()
    from torch.nn.attention.flex_attention import create_block_mask

    n_k = n_q if n_k is None else n_k
    block_n = block_m if block_n is None else block_n
    device = "cpu" if device is None else device
    return create_block_mask(
        mask_mod,
        batch_size,
        num_heads,
        int(n_q),
        int(n_k),
        device=device,
        BLOCK_SIZE=(int(block_m), int(block_n)),
    )


_block_mask = block_mask  # flex_attention's argument of the same name shadows it there


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention as flex

    return torch.compile(flex)


def flex_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    score_mod: ScoreMod | None = None,
    mask_mod: MaskMod | None = None,
    scale: float | None = None,
    block_m: int = 128,
    block_n: int | None = None,
    block_mask=None,
    compile: bool | None = None,
) -> torch.Tensor:
    """PyTorch's FlexAttention on ``q, k, v [B, H, N, d]``: ``output [B, H, Nq, d_v]``.

    Builds the block mask from ``mask_mod`` (tiles ``block_m x block_n``), or takes a
    prebuilt ``block_mask`` (:func:`block_mask`: build it once, use it for every layer and
    step), and calls ``torch.nn.attention.flex_attention``. ``compile`` defaults to True
    on CUDA tensors (the fused kernel) and False on the CPU (eager: a reference, not a fast
    path).
    """
    _need_flex()
    from torch.nn.attention.flex_attention import flex_attention as flex

    b, h, n_q, _ = q.shape
    n_k = k.shape[-2]
    bm = block_mask
    if mask_mod is not None and bm is not None:
        raise ValueError("give mask_mod or block_mask, not both")
    if mask_mod is not None:
        bm = _block_mask(
            mask_mod, b, h, n_q, n_k, block_m=block_m, block_n=block_n, device=q.device
        )
    compile = q.is_cuda if compile is None else compile
    fn = _compiled_flex() if compile else flex
    with warnings.catch_warnings():
        # eager flex_attention warns that it is not fused: here that is the point
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        return fn(q, k, v, score_mod=score_mod, block_mask=bm, scale=scale)


# --------------------------------------------------------------------------- tile maps


def tile_map(mask: torch.Tensor, block_m: int, block_n: int) -> torch.Tensor:
    r"""Classify the tiles of a boolean mask ``[..., Nq, Nk]``: 0 skipped, 1 partial, 2 full.

    Tile :math:`(I, J)` covers queries :math:`I\,B_r \dots (I+1)\,B_r - 1` and keys
    :math:`J\,B_c \dots (J+1)\,B_c - 1`, cut at the edges when :math:`N_q` or :math:`N_k`
    is not a multiple of the tile size (the last tiles are smaller, and still tiles).
    Returns an ``int64`` tensor ``[..., ceil(Nq/block_m), ceil(Nk/block_n)]``.
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.ndim < 2:
        raise ValueError(
            f"expected a boolean mask [..., Nq, Nk], got "
            f"{getattr(mask, 'dtype', type(mask).__name__)} "
            f"{tuple(getattr(mask, 'shape', ()))}"
        )
    for name, s in (("block_m", block_m), ("block_n", block_n)):
        if isinstance(s, bool) or int(s) != s or s < 1:
            raise ValueError(f"{name} must be a positive integer, got {s!r}")
    n_q, n_k = mask.shape[-2:]
    t_q, t_k = -(-n_q // block_m), -(-n_k // block_n)  # ceil
    lead = mask.shape[:-2]
    # pad to whole tiles; padding counts as "True" for "all" and "False" for "any"
    pad_q, pad_k = t_q * block_m - n_q, t_k * block_n - n_k
    m = mask.reshape(-1, n_q, n_k)  # (X, Nq, Nk)
    inside = torch.zeros(t_q * block_m, t_k * block_n, dtype=torch.bool, device=mask.device)
    inside[:n_q, :n_k] = True
    padded = torch.nn.functional.pad(m, (0, pad_k, 0, pad_q))  # (X, Tq*bm, Tk*bn)
    tiles = padded.reshape(-1, t_q, block_m, t_k, block_n)  # (X, Tq, bm, Tk, bn)
    inside_t = inside.reshape(t_q, block_m, t_k, block_n)  # (Tq, bm, Tk, bn)
    any_true = tiles.any(dim=4).any(dim=2)  # (X, Tq, Tk)
    all_true = (tiles | ~inside_t).all(dim=4).all(dim=2)  # (X, Tq, Tk)
    out = torch.where(all_true, FULL, torch.where(any_true, PARTIAL, SKIPPED))  # (X, Tq, Tk)
    return out.reshape(*lead, t_q, t_k).long()


def tile_map_from_block_mask(bm) -> torch.Tensor:
    """The same classification read from FlexAttention's ``BlockMask``.

    A ``BlockMask`` lists, for every query tile, the key tiles that are *partial*
    (``kv_num_blocks``/``kv_indices``: the mask must be applied there) and those that are
    *full* (``full_kv_num_blocks``/``full_kv_indices``); every other tile is skipped.
    Returns ``int64 [B, H, Tq, Tk]`` (B, H are 1 when the mask ignores them).
    """
    n_q, n_k = getattr(bm, "seq_lengths", None) or tuple(bm.shape[-2:])  # older PyTorch: shape
    block_m, block_n = bm.BLOCK_SIZE
    t_q, t_k = -(-n_q // block_m), -(-n_k // block_n)
    lead = tuple(bm.kv_num_blocks.shape[:2])
    out = torch.zeros(*lead, t_q, t_k, dtype=torch.long)
    for num, idx, code in (
        (bm.kv_num_blocks, bm.kv_indices, PARTIAL),
        (bm.full_kv_num_blocks, bm.full_kv_indices, FULL),
    ):
        if num is None:
            continue
        num, idx = num.cpu(), idx.cpu()
        for b in range(lead[0]):
            for h in range(lead[1]):
                for i in range(t_q):
                    for j in idx[b, h, i, : int(num[b, h, i])].tolist():
                        if j < t_k:
                            out[b, h, i, j] = code
    return out


def fraction_skipped(tiles) -> float:
    """The fraction of tiles a kernel skips: tiles classified 0 over all tiles."""
    tiles = torch.as_tensor(tiles)
    return float((tiles == SKIPPED).sum()) / tiles.numel()


def plot_tile_map(
    tiles, block_m: int, block_n: int, *, ax=None, title: str | None = None, legend: bool = False
):
    """Draw a tile map ``[Tq, Tk]`` in chapter 06's colours; returns the axes.

    Skipped tiles are light grey and hatched, every tile is outlined (so a skipped tile never
    looks like empty background); ``legend=True`` names the three classes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch, Rectangle

    tiles = np.asarray(torch.as_tensor(tiles).cpu())
    if tiles.ndim != 2:
        raise ValueError(f"expected a tile map [Tq, Tk], got shape {tiles.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(3, 3))
    ax.imshow(tiles, cmap=ListedColormap(list(TILE_COLORS)), vmin=0, vmax=2)
    for i, j in zip(*np.nonzero(tiles == SKIPPED)):
        ax.add_patch(
            Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.7", lw=0)
        )
    t_q, t_k = tiles.shape
    ax.set_xticks(np.arange(-0.5, t_k, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, t_q, 1), minor=True)
    ax.grid(which="minor", color="0.55", lw=0.5)
    ax.grid(which="major", visible=False)
    ax.tick_params(which="both", length=0, labelsize=7)
    for side in ax.spines.values():
        side.set_visible(True)
        side.set_color("0.35")
    step_k, step_q = max(1, t_k // 4), max(1, t_q // 4)
    ax.set_xticks(range(0, t_k, step_k), [str(j * block_n) for j in range(0, t_k, step_k)])
    ax.set_yticks(range(0, t_q, step_q), [str(i * block_m) for i in range(0, t_q, step_q)])
    ax.set_xlabel("key tile (first key)", fontsize=8)
    ax.set_ylabel("query tile (first query)", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    if legend:
        handles = [
            Patch(facecolor=c, edgecolor="0.35", hatch="///" if k == SKIPPED else None, label=lab)
            for k, (c, lab) in enumerate(zip(TILE_COLORS, TILE_LABELS))
        ]
        ax.legend(handles=handles, fontsize=7, loc="upper right")
    return ax
