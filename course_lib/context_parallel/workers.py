"""Functions that run on every rank: the chapter's experiments, importable so that
:func:`~.processes.launch` can start them from a notebook, and torchrun from a script.

Each takes ``(rank, world_size, ...)``, runs inside an initialised process group, and
returns something small and picklable (numbers, lists, dicts) that the parent collects.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .comm import Comm
from .processes import device
from .ring import RingStats, ring_attention
from .sharding import count_tiles, shard, shard_positions
from .ulysses import ulysses_attention

__all__ = [
    "Config",
    "compare_with_one_device",
    "fail_on_rank",
    "hello",
    "listening_ports",
    "run_all",
    "time_ring",
]


def hello(rank: int, world_size: int) -> dict:
    """The first distributed program: who am I, a sum over all ranks, one ring shift."""
    dev = device()
    x = torch.tensor([float(rank)], device=dev)
    dist.all_reduce(x)  # every rank now holds 0 + 1 + ... + (P - 1)
    comm = Comm()
    (got,) = comm.ring_shift([torch.tensor([rank], device=dev)]).wait()  # from rank - 1
    return {
        "rank": rank,
        "world_size": world_size,
        "pid": os.getpid(),
        "backend": dist.get_backend(),
        "device": str(dev),
        "sum_of_ranks": float(x.item()),
        "received_from": int(got.item()),
        "bytes_sent": comm.bytes_sent,
    }


def run_all(rank: int, world_size: int, calls: list[tuple]) -> list:
    """Several experiments in one set of processes: ``calls`` is a list of ``(fn, *args)``.

    Starting processes that import torch costs seconds each; running every experiment of
    a notebook in one launch pays that once.
    """
    return [fn(rank, world_size, *args) for fn, *args in calls]


def fail_on_rank(rank: int, world_size: int, bad_rank: int = 1) -> None:
    """A broken program: ``bad_rank`` raises, every other rank waits for a message from it
    that never comes. :func:`~.processes.launch` must report the error and stop them all."""
    if rank == bad_rank:
        raise ValueError(f"rank {rank} fails on purpose")
    dist.recv(torch.zeros(1), src=bad_rank)  # blocks: the message is never sent


def listening_ports() -> list[int]:
    """TCP ports this process listens on (the teardown test checks they close)."""
    import psutil

    conns = psutil.Process().net_connections(kind="inet")
    return sorted({c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN})


@dataclass(frozen=True)
class Config:
    """Sizes and choices for :func:`compare_with_one_device` (small defaults for a CPU)."""

    seq_len: int = 64
    batch_size: int = 1
    num_heads: int = 4
    head_dim: int = 8
    dtype: str = "float64"
    seed: int = 0
    tile: int = 4
    methods: tuple[str, ...] = ("ring",)
    layouts: tuple[str, ...] = ("contiguous",)
    causal: tuple[bool, ...] = (False, True)
    all_to_all_impl: str = "auto"
    report_ports: bool = False


def _full_inputs(cfg: Config, dev: torch.device):
    """The same full q, k, v, dO on every rank (same seed): what one device would hold."""
    g = torch.Generator().manual_seed(cfg.seed)
    shape = (cfg.batch_size, cfg.num_heads, cfg.seq_len, cfg.head_dim)
    dtype = getattr(torch, cfg.dtype)
    return [
        torch.randn(shape, generator=g, dtype=torch.float64).to(dev, dtype) for _ in range(4)
    ]  # q, k, v, dO: (B, H, N, d_h) each


def _one_device(q, k, v, dout, is_causal):
    """Output and gradients of ordinary attention on the full sequence (float64)."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)  # (B, H, N, d_h)
    out.backward(dout.double())
    return out.detach(), q.grad, k.grad, v.grad


def _max_err(a, b) -> float:
    return float((a.double() - b.double()).abs().max())


def compare_with_one_device(rank: int, world_size: int, cfg: Config | None = None) -> dict:
    """Run ring and/or Ulysses on this rank's shard; compare with one device; count work
    and bytes. Returns ``{"rank", "runs": [...], "ports"}``, one run per (method, layout,
    causal)."""
    cfg = Config() if cfg is None else cfg
    dev = device()
    q, k, v, dout = _full_inputs(cfg, dev)
    runs = []
    for is_causal in cfg.causal:
        ref = _one_device(q, k, v, dout, is_causal)  # out, dq, dk, dv over all N tokens
        for method in cfg.methods:
            for layout in cfg.layouts:
                mine = [shard(t, world_size, rank, layout) for t in (q, k, v, dout)]
                ql, kl, vl = (t.detach().clone().requires_grad_() for t in mine[:3])
                comm = Comm(all_to_all_impl=cfg.all_to_all_impl)
                stats = RingStats(tile=cfg.tile)
                if method == "ring":
                    out = ring_attention(
                        ql, kl, vl, is_causal=is_causal, layout=layout, comm=comm, stats=stats
                    )
                elif method == "ulysses":
                    out = ulysses_attention(
                        ql, kl, vl, is_causal=is_causal, layout=layout, comm=comm
                    )
                else:
                    raise ValueError(f"unknown method {method!r}: 'ring' or 'ulysses'")
                forward_bytes = comm.bytes_sent
                out.backward(mine[3])
                expected = [shard(t, world_size, rank, layout) for t in ref]
                got = (out.detach(), ql.grad, kl.grad, vl.grad)
                if method == "ring":  # (batch, head)-tiles: every head, this rank's queries
                    head_tiles = cfg.batch_size * cfg.num_heads * sum(stats.tiles)
                    tiles = stats.tiles
                else:  # H / P heads, every query against every key
                    pos = torch.cat(
                        [
                            shard_positions(cfg.seq_len, world_size, i, layout)
                            for i in range(world_size)
                        ]
                    )
                    tiles = [count_tiles(pos, pos, tile=cfg.tile, is_causal=is_causal)]
                    head_tiles = cfg.batch_size * cfg.num_heads // world_size * tiles[0]
                runs.append(
                    {
                        "method": method,
                        "layout": layout,
                        "is_causal": is_causal,
                        "errors": {
                            name: _max_err(a, b)
                            for name, a, b in zip(("out", "dq", "dk", "dv"), got, expected)
                        },
                        "forward_bytes": forward_bytes,
                        "backward_bytes": comm.bytes_sent - forward_bytes,
                        "bytes_by_op": comm.bytes_by_op(),
                        "tiles_per_step": tiles,
                        "head_tiles": head_tiles,
                    }
                )
    ports = listening_ports() if cfg.report_ports else []
    return {"rank": rank, "pid": os.getpid(), "runs": runs, "ports": ports}


def time_ring(
    rank: int,
    world_size: int,
    shard_lens: list[int],
    num_heads: int,
    head_dim: int,
    dtype: str = "float32",
    repeats: int = 5,
    warmup: int = 2,
) -> list[dict]:
    """Time ring attention's forward (non-causal) on this rank, for each shard length n.

    Per n: median seconds with the next block's transfer started before the step's
    attention (``overlap_s``) and after it (``serial_s``); the attention alone
    (``compute_s``: the serial run's time inside the P attention steps) and the P - 1
    transfers alone (``comm_s``); the bytes this rank sent per forward.
    """
    dev = device()
    g = torch.Generator().manual_seed(rank)
    comm = Comm()
    rows = []
    for n in shard_lens:
        q, k, v = (
            torch.randn(1, num_heads, n, head_dim, generator=g).to(dev, getattr(torch, dtype))
            for _ in range(3)
        )  # (1, H, n, d_h) this rank's shard
        row: dict[str, float] = {"rank": rank, "shard_len": n, "seq_len": n * world_size}
        for overlap in (True, False):
            times: list[float] = []
            for i in range(warmup + repeats):
                stats = RingStats(tile=n)
                dist.barrier()
                t0 = time.perf_counter()
                with torch.no_grad():
                    ring_attention(q, k, v, comm=comm, overlap=overlap, stats=stats)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                if i >= warmup:
                    times.append(time.perf_counter() - t0)
            row["overlap_s" if overlap else "serial_s"] = sorted(times)[len(times) // 2]
            if not overlap:
                row["compute_s"] = stats.compute_s
        times = []
        for _ in range(repeats):  # the transfers alone: P - 1 shifts of K and V
            dist.barrier()
            t0 = time.perf_counter()
            blocks = [k, v]
            for _ in range(world_size - 1):
                blocks = comm.ring_shift(blocks).wait()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            times.append(time.perf_counter() - t0)
        row["comm_s"] = sorted(times)[len(times) // 2]
        row["bytes_per_forward"] = 2 * (world_size - 1) * k.numel() * k.element_size()
        rows.append(row)
    return rows
