r"""The messages a context-parallel rank sends: a thin wrapper over ``torch.distributed``
that counts bytes, and the formulas those counts must equal.

Every byte the ring and Ulysses send goes through :class:`Comm`, which calls
``torch.distributed`` and adds up the payload it hands over for *other* ranks (tensor
elements times their size; a chunk a rank keeps for itself in an all-to-all never crosses
the wire and is not counted; transport headers are not counted either). So "bytes measured"
is what the algorithm asked the network to carry, and it can be compared exactly with the
formulas below.

Per rank, with $n = N/P$ tokens per shard, $B$ sequences, $H$ query heads, $H_{kv}$
key/value heads of width $d_h$, $b$ bytes per element:

.. math::

    \text{ring, forward} = 2\,(P-1)\; B H_{kv} n d_h\, b
    \qquad(K \text{ and } V \text{ pass } P-1 \text{ neighbours})

    \text{Ulysses, forward} = \tfrac{P-1}{P}\,(2H + 2H_{kv})\, B n d_h\, b
    \qquad(\text{all-to-all of } Q, K, V \text{, and of } O \text{ back})

The ring's volume per rank does not shrink as $P$ grows ($2(P-1)n \approx 2N$ tokens of K/V
pass through every rank); Ulysses' does ($\approx 4n$ tokens' worth). The backward sends
$K, V$ around again ($P-1$ hops) plus the gradient accumulators $dK, dV$ ($P$ hops: the
last one brings them home) for the ring, and the same four all-to-alls (of $dO$, then
$dQ, dK, dV$) for Ulysses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

__all__ = ["Comm", "ring_comm_bytes", "ulysses_comm_bytes"]


@dataclass
class _Pending:
    """Messages in flight: ``wait()`` blocks until they arrived and returns the tensors."""

    requests: list
    received: list[torch.Tensor]

    def wait(self) -> list[torch.Tensor]:
        for req in self.requests:
            req.wait()
        return self.received


@dataclass
class Comm:
    """This rank's communication, counted. ``Comm()`` uses the default process group.

    ``all_to_all="auto"`` uses ``torch.distributed.all_to_all_single`` where the backend has
    it (gloo and NCCL do in current PyTorch) and point-to-point messages otherwise;
    ``"p2p"`` forces the point-to-point version (P-1 rounds of send-to-(r+s), receive-from-(r-s)).
    """

    group: dist.ProcessGroup | None = None
    all_to_all_impl: str = "auto"
    bytes_sent: int = 0
    log: list[tuple[str, int]] = field(default_factory=list)

    def __post_init__(self):
        if not dist.is_initialized():
            raise RuntimeError(
                "Comm needs an initialised process group: call "
                "course_lib.context_parallel.launch(...) (which starts the "
                "processes and the group) or init_process_group() first"
            )
        if self.all_to_all_impl not in ("auto", "collective", "p2p"):
            raise ValueError(
                f"all_to_all_impl must be 'auto', 'collective' or 'p2p', got "
                f"{self.all_to_all_impl!r}"
            )
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)

    # ---------------------------------------------------------------- bookkeeping
    def _global(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def _count(self, op: str, nbytes: int) -> None:
        self.bytes_sent += nbytes
        self.log.append((op, nbytes))

    def bytes_by_op(self) -> dict[str, int]:
        """Bytes sent, per kind of operation (``ring_shift``, ``all_to_all``)."""
        totals: dict[str, int] = {}
        for op, nbytes in self.log:
            totals[op] = totals.get(op, 0) + nbytes
        return totals

    def reset(self) -> None:
        self.bytes_sent = 0
        self.log.clear()

    # ---------------------------------------------------------------- the two patterns
    def ring_shift(self, tensors: list[torch.Tensor]) -> _Pending:
        """Send each tensor to rank+1, receive the same shapes from rank-1; returns at once.

        Call ``.wait()`` on the result to get the received tensors. Between the two, this
        rank is free to compute: that is how the ring hides communication behind work.
        """
        if self.world_size == 1:
            return _Pending([], list(tensors))
        nxt = self._global((self.rank + 1) % self.world_size)
        prv = self._global((self.rank - 1) % self.world_size)
        outgoing = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in outgoing]
        ops = [dist.P2POp(dist.isend, t, nxt, self.group) for t in outgoing] + [
            dist.P2POp(dist.irecv, t, prv, self.group) for t in received
        ]
        requests = dist.batch_isend_irecv(ops)
        self._count("ring_shift", sum(t.numel() * t.element_size() for t in outgoing))
        return _Pending(requests, received)

    def all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        """``x [P, ...]``: chunk ``x[j]`` goes to rank j; returns ``y`` with ``y[i]`` from rank i."""
        if x.shape[0] != self.world_size:
            raise ValueError(
                f"all_to_all: expected a leading dimension of world_size = "
                f"{self.world_size} (one chunk per rank), got {tuple(x.shape)}"
            )
        x = x.contiguous()
        chunk_bytes = x[0].numel() * x.element_size()
        self._count("all_to_all", (self.world_size - 1) * chunk_bytes)
        if self.world_size == 1:
            return x.clone()
        if self.all_to_all_impl != "p2p":
            out = torch.empty_like(x)
            try:
                dist.all_to_all_single(out, x, group=self.group)
                return out
            except (RuntimeError, NotImplementedError) as err:  # a backend without it
                if self.all_to_all_impl == "collective" or "support" not in str(err).lower():
                    raise
                self.all_to_all_impl = "p2p"
        return self._all_to_all_p2p(x)

    def _all_to_all_p2p(self, x: torch.Tensor) -> torch.Tensor:
        """All-to-all from point-to-point messages: in round s, send to r+s, receive from r-s."""
        out = torch.empty_like(x)
        out[self.rank] = x[self.rank]  # the chunk this rank keeps
        ops = []
        for s in range(1, self.world_size):
            dst = (self.rank + s) % self.world_size
            src = (self.rank - s) % self.world_size
            ops.append(dist.P2POp(dist.isend, x[dst], self._global(dst), self.group))
            ops.append(dist.P2POp(dist.irecv, out[src], self._global(src), self.group))
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return out


# --------------------------------------------------------------------------- the formulas


def _check_sizes(seq_len, world_size, num_heads, num_kv_heads):
    if world_size < 1 or seq_len % world_size:
        raise ValueError(
            f"seq_len = {seq_len} must split evenly over world_size = {world_size} ranks"
        )
    if num_kv_heads is not None and num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads = {num_heads} must be a multiple of num_kv_heads = {num_kv_heads}"
        )


def ring_comm_bytes(
    seq_len: int,
    world_size: int,
    *,
    num_heads: int,
    head_dim: int,
    batch_size: int = 1,
    bytes_per_element: int = 4,
    num_kv_heads: int | None = None,
    backward: bool = False,
    grad_bytes_per_element: int | None = None,
) -> int:
    r"""Bytes one rank sends in ring attention: forward, or backward with ``backward=True``.

    Forward: $2(P-1)\,B H_{kv} n d_h b$. Backward: $K, V$ again ($P-1$ hops) and the
    gradient accumulators $dK, dV$ ($P$ hops) in ``grad_bytes_per_element`` (default: the
    float32 accumulators course_lib uses, float64 for float64 inputs).
    """
    _check_sizes(seq_len, world_size, num_heads, num_kv_heads)
    hkv = num_heads if num_kv_heads is None else num_kv_heads
    shard = batch_size * hkv * (seq_len // world_size) * head_dim  # elements of K (or V)
    if not backward:
        return 2 * (world_size - 1) * shard * bytes_per_element
    grad_b = max(4, bytes_per_element) if grad_bytes_per_element is None else grad_bytes_per_element
    return (
        (2 * (world_size - 1) * shard * bytes_per_element + 2 * world_size * shard * grad_b)
        if world_size > 1
        else 0
    )


def ulysses_comm_bytes(
    seq_len: int,
    world_size: int,
    *,
    num_heads: int,
    head_dim: int,
    batch_size: int = 1,
    bytes_per_element: int = 4,
    num_kv_heads: int | None = None,
    backward: bool = False,
) -> int:
    r"""Bytes one rank sends in Ulysses: $\tfrac{P-1}{P}(2H + 2H_{kv})\,B n d_h b$.

    The same in the backward (all-to-all of $dO$ to the head split, of $dQ, dK, dV$ back).
    Needs $H$ and $H_{kv}$ divisible by $P$.
    """
    _check_sizes(seq_len, world_size, num_heads, num_kv_heads)
    hkv = num_heads if num_kv_heads is None else num_kv_heads
    if num_heads % world_size or hkv % world_size:
        raise ValueError(
            f"Ulysses gives each rank num_heads / world_size heads: "
            f"num_heads = {num_heads} (and num_kv_heads = {hkv}) must be "
            f"divisible by world_size = {world_size}"
        )
    n = seq_len // world_size
    per_head = batch_size * n * head_dim * bytes_per_element  # one head's (n, d_h) slice
    # each all-to-all keeps 1/P of the tensor and sends (P-1)/P of it
    return (world_size - 1) * (2 * num_heads + 2 * hkv) * per_head // world_size
