"""Does ring attention hide its communication? Time it on P GPUs, with and without overlap.

On a node with two or more CUDA GPUs (one process per GPU, NCCL)::

    torchrun --nproc-per-node=4 benchmarks/context_parallel_overlap.py
    python benchmarks/context_parallel_overlap.py            # starts one process per GPU itself
    python benchmarks/context_parallel_overlap.py --shard-lens 1024 4096 --heads 16

For each shard length n (tokens per GPU) it times course_lib's ring attention forward pass
(non-causal, so every step is a full block) four ways, each the median of ``--repeats``
runs on the slowest rank:

* ``overlap_s``: the next block's transfer starts before the step's attention (the ring as
  Liu et al., 2023, describe it);
* ``serial_s``: the transfer starts only after the attention;
* ``compute_s``: the time inside the P attention steps alone;
* ``comm_s``: the P - 1 transfers of K and V alone.

Overlap works when ``overlap_s`` falls towards ``max(compute_s, comm_s)`` while
``serial_s`` stays near their sum. Attention grows like n^2 and transfers like n, so the
gain appears once n is long enough. Note: course_lib's block attention is the readable
dense version computing in float32, not a fused kernel, so the compute is slower than a
production kernel's and overlap sets in at shorter shards than it would there.

Writes ``benchmarks/results/context_parallel_overlap_<gpu>_<date>.json`` (chapter 09's
notebook prints the newest one). With fewer than two GPUs it says so and exits 0 without
writing anything. ``--cpu-smoke --out PATH`` runs the same code on 2 CPU processes (gloo)
with tiny sizes: no performance meaning, it proves the script works end to end (a test
runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS_DIR = ROOT / "benchmarks" / "results"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--shard-lens",
        type=int,
        nargs="+",
        default=[512, 1024, 2048, 4096, 8192],
        help="tokens per GPU to try (default 512 .. 8192)",
    )
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="output JSON path")
    p.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="2 CPU processes (gloo), tiny sizes: checks the script, measures nothing",
    )
    return p


def _meta(world_size: int, backend: str, args) -> dict:
    import torch

    gpu = (
        torch.cuda.get_device_name(0) if torch.cuda.is_available() and backend == "nccl" else "cpu"
    )
    return {
        "gpu": gpu,
        "gpus": world_size,
        "backend": backend,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
        "heads": args.heads,
        "head_dim": args.head_dim,
        "dtype": args.dtype,
        "repeats": args.repeats,
        "cpu_smoke": bool(args.cpu_smoke),
        "attention": "course_lib.context_parallel block_attention (dense, float32 math)",
    }


def _slowest(per_rank: list[list[dict]]) -> list[dict]:
    """One row per shard length: every time taken from the slowest rank."""
    rows = []
    for same_n in zip(*per_rank):
        row = dict(same_n[0])
        row.pop("rank")
        for key in ("overlap_s", "serial_s", "compute_s", "comm_s"):
            row[key] = max(r[key] for r in same_n)
        rows.append(row)
    return rows


def _write(args, meta: dict, rows: list[dict]) -> Path:
    out = args.out
    if out is None:
        slug = re.sub(r"[^a-z0-9]+", "_", meta["gpu"].lower()).strip("_")
        out = RESULTS_DIR / f"context_parallel_overlap_{slug}_{meta['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
    return out


def _print(rows: list[dict]) -> None:
    print(
        f"{'n/GPU':>7} {'overlap ms':>11} {'serial ms':>10} {'attention ms':>13} "
        f"{'transfers ms':>13} {'hidden':>7}"
    )
    for r in rows:
        hideable = min(r["compute_s"], r["comm_s"])  # at most this much can be hidden
        hidden = (r["serial_s"] - r["overlap_s"]) / hideable if hideable > 0 else 0.0
        print(
            f"{r['shard_len']:7d} {r['overlap_s'] * 1e3:11.2f} {r['serial_s'] * 1e3:10.2f} "
            f"{r['compute_s'] * 1e3:13.2f} {r['comm_s'] * 1e3:13.2f} {hidden:7.0%}"
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    from course_lib.context_parallel import workers
    from course_lib.context_parallel.processes import init_from_env, launch, teardown

    if args.cpu_smoke:
        args.shard_lens, args.heads, args.head_dim, args.dtype = [8, 16], 2, 8, "float32"
        args.repeats, args.warmup = 2, 1
    call = (args.shard_lens, args.heads, args.head_dim, args.dtype, args.repeats, args.warmup)

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        import torch.distributed as dist

        rank, world_size, _ = init_from_env()
        try:
            if dist.get_backend() != "nccl" and not args.cpu_smoke:
                if rank == 0:
                    print(
                        "context_parallel_overlap: needs one CUDA GPU per process; "
                        "skipping (nothing written)."
                    )
                return 0
            mine = workers.time_ring(rank, world_size, *call)
            per_rank = [None] * world_size
            dist.all_gather_object(per_rank, mine)
            backend = dist.get_backend()
        finally:
            teardown()
        if rank != 0:
            return 0
    else:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if args.cpu_smoke:
            world_size, backend = 2, "gloo"
        elif gpus >= 2:
            world_size, backend = gpus, "nccl"
        else:
            print(
                f"context_parallel_overlap: needs at least 2 CUDA GPUs, found {gpus}; "
                "skipping (nothing written). Use --cpu-smoke to check the script on CPUs."
            )
            return 0
        per_rank = launch(workers.time_ring, world_size, *call, timeout=1800, backend=backend)
    rows = _slowest(per_rank)
    meta = _meta(world_size, backend, args)
    _print(rows)
    print(f"written to {_write(args, meta, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
