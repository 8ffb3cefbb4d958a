"""Check ring attention and Ulysses against one device, as a script.

On a multi-GPU node, one process per GPU (NCCL), started by torchrun::

    torchrun --nproc-per-node=8 -m course_lib.context_parallel --seq-len 8192 --heads 16

On a laptop, with the processes started for you (gloo on the CPU)::

    python -m course_lib.context_parallel --nproc 4

Every rank builds the same random q, k, v (same seed), keeps its shard, runs the
distributed attention forward and backward, and compares its rows of the output and of
the gradients with ordinary attention over the full sequence, computed on the rank itself
in float64 (so keep --seq-len moderate: that reference holds an N x N matrix per head).
Rank 0 prints one line per (method, layout, causal): the largest errors, the bytes each
rank sent against the formula, and the causal work per rank in tiles. The exit status is 1
when an error exceeds the tolerance of the dtype.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "bfloat16": 5e-2, "float16": 1e-2}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m course_lib.context_parallel",
        description="Ring attention and Ulysses over torch.distributed, checked against "
        "attention on one device (gloo on CPUs, NCCL with one GPU per rank).",
        epilog="Under torchrun the number of processes comes from --nproc-per-node; "
        "without torchrun, --nproc processes are started on this machine.",
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=2,
        help="processes to start when not run by torchrun (default 2)",
    )
    p.add_argument("--seq-len", type=int, default=256, help="tokens N (default 256)")
    p.add_argument("--batch-size", type=int, default=1, help="sequences B (default 1)")
    p.add_argument(
        "--heads",
        type=int,
        default=4,
        help="heads H; Ulysses needs H divisible by the number of ranks",
    )
    p.add_argument("--head-dim", type=int, default=16, help="head width d_h (default 16)")
    p.add_argument("--dtype", choices=sorted(TOLERANCE), default="float32")
    p.add_argument("--methods", nargs="+", choices=["ring", "ulysses"], default=["ring", "ulysses"])
    p.add_argument(
        "--layouts",
        nargs="+",
        choices=["contiguous", "zigzag", "striped"],
        default=["contiguous", "zigzag"],
    )
    p.add_argument("--causal", choices=["yes", "no", "both"], default="both")
    p.add_argument("--tile", type=int, default=16, help="tile size for counting work")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds before started processes are stopped (default 300)",
    )
    return p


def config_from_args(args):
    from .workers import Config

    causal = {"yes": (True,), "no": (False,), "both": (False, True)}[args.causal]
    return Config(
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        num_heads=args.heads,
        head_dim=args.head_dim,
        dtype=args.dtype,
        tile=args.tile,
        methods=tuple(args.methods),
        layouts=tuple(args.layouts),
        causal=causal,
    )


def report(results: list[dict], cfg, world_size: int, backend: str) -> bool:
    """Print the table; True when every error is within tolerance."""
    from .comm import ring_comm_bytes, ulysses_comm_bytes

    elem = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}[cfg.dtype]
    sizes = dict(
        num_heads=cfg.num_heads,
        head_dim=cfg.head_dim,
        batch_size=cfg.batch_size,
        bytes_per_element=elem,
    )
    tol = TOLERANCE[cfg.dtype]
    print(
        f"P = {world_size} ranks ({backend}), N = {cfg.seq_len}, B = {cfg.batch_size}, "
        f"H = {cfg.num_heads}, d_h = {cfg.head_dim}, {cfg.dtype}; tolerance {tol:g}"
    )
    print(
        f"{'method':8} {'layout':10} {'causal':6} {'max error':>10} "
        f"{'fwd bytes/rank':>15} {'formula':>12} {'work per rank (tiles)':>24}"
    )
    ok = True
    for i, run in enumerate(results[0]["runs"]):
        runs = [r["runs"][i] for r in results]
        err = max(max(r["errors"].values()) for r in runs)
        ok &= err <= tol
        if run["method"] == "ring":
            formula = ring_comm_bytes(cfg.seq_len, world_size, **sizes)
        else:
            formula = ulysses_comm_bytes(cfg.seq_len, world_size, **sizes)
        sent = {r["forward_bytes"] for r in runs}
        work = [r["head_tiles"] for r in runs]
        print(
            f"{run['method']:8} {run['layout']:10} {run['is_causal']!s:6} {err:10.1e} "
            f"{'/'.join(map(str, sorted(sent))):>15} {formula:>12} "
            f"{min(work):>11} .. {max(work):<11}"
        )
    print("all within tolerance" if ok else "ERROR: some results exceed the tolerance")
    return ok


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    from .workers import compare_with_one_device

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        import torch.distributed as dist

        from .processes import init_from_env, teardown

        rank, world_size, _ = init_from_env(timeout_s=args.timeout)
        try:
            mine = compare_with_one_device(rank, world_size, cfg)
            results: list[Any] = [None] * world_size  # all_gather_object fills it
            dist.all_gather_object(results, mine)
            backend = dist.get_backend()
            ok = report(results, cfg, world_size, backend) if rank == 0 else True
        finally:
            teardown()
        return 0 if ok else 1
    from .processes import launch, pick_backend

    results = launch(compare_with_one_device, args.nproc, cfg, timeout=args.timeout)
    return 0 if report(results, cfg, args.nproc, pick_backend(args.nproc)) else 1


if __name__ == "__main__":
    sys.exit(main())
