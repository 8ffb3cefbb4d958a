r"""Context parallelism: attention over a sequence split across P processes (chapter 09).

Chapter 06's online softmax made attention divisible across tiles of one GPU's SRAM; the
same log-sum-exp merge makes it divisible across machines. The modules, in reading order:

* :mod:`.merge` — partial attention ``(output, lse)`` and its exact merge; one ring step.
* :mod:`.sharding` — which tokens each rank holds (contiguous, zigzag, striped) and the
  causal work that gives it, counted in tiles.
* :mod:`.comm` — every message, counted in bytes; the communication-volume formulas.
* :mod:`.ring` — ring attention, forward and backward, over ``torch.distributed``; and the
  same algorithm simulated in one process.
* :mod:`.ulysses` — DeepSpeed-Ulysses: all-to-all from a sequence split to a head split.
* :mod:`.processes` — start P processes and a process group from a notebook (and stop them),
  or join one started by ``torchrun``.
* :mod:`.workers` — the experiments each rank runs.

Run on a multi-GPU node (one process per GPU, NCCL)::

    torchrun --nproc-per-node=8 -m course_lib.context_parallel --seq-len 16384 --causal

or on a laptop (processes started for you, gloo on the CPU)::

    python -m course_lib.context_parallel --nproc 4
"""

from .comm import Comm, ring_comm_bytes, ulysses_comm_bytes
from .merge import (
    block_attention,
    block_attention_backward,
    causal_mask_from_positions,
    merge_attention,
    merge_many,
    ring_step,
)
from .processes import (
    WorkerError,
    device,
    init_from_env,
    init_process_group,
    launch,
    pick_backend,
    teardown,
)
from .ring import RingStats, ring_attention, simulate_ring_attention
from .sharding import (
    LAYOUTS,
    count_tiles,
    shard,
    shard_positions,
    unshard,
    visible_pairs,
    work_per_rank,
)
from .ulysses import (
    all_to_all_head_to_seq,
    all_to_all_seq_to_head,
    head_to_seq,
    seq_to_head,
    ulysses_attention,
)

__all__ = [
    "LAYOUTS",
    "Comm",
    "RingStats",
    "WorkerError",
    "all_to_all_head_to_seq",
    "all_to_all_seq_to_head",
    "block_attention",
    "block_attention_backward",
    "causal_mask_from_positions",
    "count_tiles",
    "device",
    "head_to_seq",
    "init_from_env",
    "init_process_group",
    "launch",
    "merge_attention",
    "merge_many",
    "pick_backend",
    "ring_attention",
    "ring_comm_bytes",
    "ring_step",
    "seq_to_head",
    "shard",
    "shard_positions",
    "simulate_ring_attention",
    "teardown",
    "ulysses_attention",
    "ulysses_comm_bytes",
    "unshard",
    "visible_pairs",
    "work_per_rank",
]
