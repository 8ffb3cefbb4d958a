r"""Which tokens each rank holds, and how much causal work that gives it, counted in tiles.

Three layouts of a sequence of ``seq_len`` tokens over ``world_size`` ranks ($P$):

* ``"contiguous"``: rank $r$ holds tokens $[rN/P, (r+1)N/P)$. Simple, and unbalanced under
  a causal mask: the last rank's queries see every key, the first rank's only its own.
* ``"zigzag"``: cut the sequence into $2P$ chunks; rank $r$ holds chunk $r$ and chunk
  $2P-1-r$, one from the cheap start and one from the expensive end. Every rank gets the
  same causal work (the split of Llama 3's context parallelism, Dubey et al., 2024, "The
  Llama 3 Herd of Models", whose ranks then all-gather K and V rather than pass them
  around a ring).
* ``"striped"``: token $t$ goes to rank $t \bmod P$ (Brandon et al., 2023, "Striped
  Attention: Faster Ring Attention for Causal Transformers"): every block a rank meets is
  roughly half visible, so work is balanced step by step.

Work is counted as chapter 06 counted it: a kernel walks over tiles of ``tile`` queries by
``tile`` keys and skips a tile in which no query may see any key. Tiles follow each rank's
*local* order of tokens (the order its tensors hold them). With ``tile`` equal to the
shard length, a tile is a whole ring step: "did this step have any work at all".
"""

from __future__ import annotations

import math

import torch

from .merge import causal_mask_from_positions

__all__ = [
    "LAYOUTS",
    "count_tiles",
    "shard",
    "shard_positions",
    "unshard",
    "visible_pairs",
    "work_per_rank",
]

LAYOUTS = ("contiguous", "zigzag", "striped")


def _check_split(seq_len: int, world_size: int, rank: int | None, layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if rank is not None and not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    parts = 2 * world_size if layout == "zigzag" else world_size
    if seq_len % parts:
        what = "2 * world_size chunks" if layout == "zigzag" else "world_size shards"
        raise ValueError(
            f"the {layout} layout cuts the sequence into {what}: seq_len = "
            f"{seq_len} is not divisible by {parts}. Pad the sequence to a "
            f"multiple of {parts}."
        )


def shard_positions(
    seq_len: int, world_size: int, rank: int, layout: str = "contiguous"
) -> torch.Tensor:
    """The token positions rank ``rank`` holds, in its local order: a ``(seq_len // P,)``
    LongTensor."""
    _check_split(seq_len, world_size, rank, layout)
    if layout == "contiguous":
        n = seq_len // world_size
        return torch.arange(rank * n, (rank + 1) * n)
    if layout == "striped":
        return torch.arange(rank, seq_len, world_size)
    c = seq_len // (2 * world_size)  # zigzag: chunk r, then chunk 2P - 1 - r
    back = 2 * world_size - 1 - rank
    return torch.cat(
        [torch.arange(rank * c, (rank + 1) * c), torch.arange(back * c, (back + 1) * c)]
    )


def shard(
    x: torch.Tensor, world_size: int, rank: int, layout: str = "contiguous", dim: int = -2
) -> torch.Tensor:
    """Rank ``rank``'s shard of ``x`` along the sequence dimension ``dim`` (default -2)."""
    pos = shard_positions(x.shape[dim], world_size, rank, layout)
    return x.index_select(dim, pos.to(x.device))


def unshard(shards: list[torch.Tensor], layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """Put every rank's shard back in sequence order: the inverse of :func:`shard`."""
    world_size = len(shards)
    seq_len = shards[0].shape[dim] * world_size
    shape = list(shards[0].shape)
    shape[dim] = seq_len
    full = shards[0].new_empty(shape)
    for rank, part in enumerate(shards):
        pos = shard_positions(seq_len, world_size, rank, layout).to(part.device)
        full.index_copy_(dim % full.dim(), pos, part)
    return full


def count_tiles(
    q_positions: torch.Tensor, k_positions: torch.Tensor, *, tile: int, is_causal: bool = True
) -> int:
    """Tiles of ``tile`` x ``tile`` (in local order) with at least one visible pair.

    This is what a tiled kernel with block skipping computes for one (query shard, key
    block) pair. Without a causal mask every tile counts.
    """
    if tile < 1:
        raise ValueError(f"tile must be a positive number of tokens, got {tile}")
    n_q, n_k = len(q_positions), len(k_positions)
    if not is_causal:
        return math.ceil(n_q / tile) * math.ceil(n_k / tile)
    mask = causal_mask_from_positions(q_positions, k_positions)  # (Nq, Nk)
    tq, tk = math.ceil(n_q / tile), math.ceil(n_k / tile)
    padded = mask.new_zeros(tq * tile, tk * tile)  # (Tq*tile, Tk*tile) padding is masked out
    padded[:n_q, :n_k] = mask
    per_tile = padded.view(tq, tile, tk, tile).any(dim=3).any(dim=1)  # (Tq, Tk)
    return int(per_tile.sum())


def visible_pairs(
    q_positions: torch.Tensor, k_positions: torch.Tensor, is_causal: bool = True
) -> int:
    """(query, key) pairs that are not masked out: the work at the finest granularity."""
    if not is_causal:
        return len(q_positions) * len(k_positions)
    return int(causal_mask_from_positions(q_positions, k_positions).sum())


def work_per_rank(
    seq_len: int,
    world_size: int,
    layout: str = "contiguous",
    *,
    tile: int | None = None,
    is_causal: bool = True,
) -> list[int]:
    """Tiles each rank computes over a whole ring pass (its queries against every block).

    ``tile=None`` counts single (query, key) pairs, i.e. tiles of one token.
    """
    _check_split(seq_len, world_size, None, layout)
    positions = [shard_positions(seq_len, world_size, r, layout) for r in range(world_size)]
    work = []
    for q_pos in positions:
        if tile is None:
            work.append(sum(visible_pairs(q_pos, k_pos, is_causal) for k_pos in positions))
        else:
            work.append(
                sum(
                    count_tiles(q_pos, k_pos, tile=tile, is_causal=is_causal) for k_pos in positions
                )
            )
    return work
