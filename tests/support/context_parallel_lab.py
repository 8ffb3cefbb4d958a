"""P ranks of course_lib.context_parallel in one process: one thread per rank, and a stand-in
for :class:`course_lib.context_parallel.Comm` that passes tensors through queues.

And :func:`one_process_group`: a real ``torch.distributed`` group of one process (gloo), in
the test's own process, for what needs ``torch.distributed`` itself.

Shared by tests/course_lib/context_parallel/ (comm, ring, Ulysses, workers): the algorithms run for
P = 2, 3, 4 in a fraction of a second, where real process groups (test_distributed.py) take
seconds per launch. The stand-in counts bytes exactly as ``Comm`` does (the payload handed
over for other ranks), so the counts can be compared with the formulas.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from course_lib.context_parallel import init_process_group, teardown
from course_lib.context_parallel.comm import Comm

TIMEOUT_S = 60.0  # a rank waiting longer than this for a message: a bug, not a slow machine
_current = threading.local()


class _Pending:
    def __init__(self, box: queue.Queue, count: int):
        self.box, self.count = box, count

    def wait(self) -> list[torch.Tensor]:
        return [self.box.get(timeout=TIMEOUT_S) for _ in range(self.count)]


class ThreadComm:
    """The interface of ``Comm`` (``rank``, ``world_size``, ``ring_shift``, ``all_to_all``,
    ``bytes_sent``, ``bytes_by_op``) for ranks that are threads of one process."""

    def __init__(self, boxes: dict, rank: int, world_size: int, all_to_all_impl: str = "auto"):
        self.boxes, self.rank, self.world_size = boxes, rank, world_size
        self.all_to_all_impl = all_to_all_impl
        self.bytes_sent = 0
        self.log: list[tuple[str, int]] = []

    # the byte accounting is Comm's own, so the tests check the real one
    _count = Comm._count
    bytes_by_op = Comm.bytes_by_op

    def ring_shift(self, tensors: list[torch.Tensor]) -> _Pending:
        P, r = self.world_size, self.rank
        if P == 1:
            return _Pending(_filled(tensors), len(tensors))
        outgoing = [t.contiguous() for t in tensors]
        for t in outgoing:
            self.boxes[r, (r + 1) % P].put(t.clone())
        self._count("ring_shift", sum(t.numel() * t.element_size() for t in outgoing))
        return _Pending(self.boxes[(r - 1) % P, r], len(tensors))

    def all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        P, r = self.world_size, self.rank
        if x.shape[0] != P:
            raise ValueError(f"all_to_all: expected a leading dimension of world_size = {P}")
        x = x.contiguous()
        self._count("all_to_all", (P - 1) * x[0].numel() * x.element_size())
        for j in range(P):
            if j != r:
                self.boxes[r, j].put(x[j].clone())
        out = torch.empty_like(x)
        for i in range(P):
            out[i] = x[r] if i == r else self.boxes[i, r].get(timeout=TIMEOUT_S)
        return out


def _filled(tensors) -> queue.Queue:
    box: queue.Queue = queue.Queue()
    for t in tensors:
        box.put(t)
    return box


def current_comm(**options) -> ThreadComm:
    """A new comm of this thread's rank, its count at zero: stands in for ``Comm(...)``
    (``monkeypatch.setattr(module, "Comm", current_comm)``) inside :func:`run_ranks`."""
    comm = _current.comm
    return ThreadComm(comm.boxes, comm.rank, comm.world_size, **options)


def run_ranks(world_size: int, fn: Callable[[int, ThreadComm], object]) -> list:
    """``fn(rank, comm)`` on ``world_size`` threads at once; the results in rank order.

    An exception on any rank is raised here (the first by rank); a rank that waits on a
    message never sent fails after :data:`TIMEOUT_S` instead of hanging the tests.
    """
    boxes = {(i, j): queue.Queue() for i in range(world_size) for j in range(world_size)}
    results: list = [None] * world_size
    errors: list = [None] * world_size

    def body(rank):
        comm = ThreadComm(boxes, rank, world_size)
        _current.comm = comm
        try:
            results[rank] = fn(rank, comm)
        except BaseException as err:  # reported below, in the test's thread
            errors[rank] = err

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=2 * TIMEOUT_S)
    for err in errors:
        if err is not None:
            raise err
    return results


@contextlib.contextmanager
def one_process_group(folder: Path) -> Iterator[None]:
    """A gloo process group of world size 1 in this process, left on exit (and the
    ``GLOO_SOCKET_IFNAME`` that joining on one machine sets, restored)."""
    saved = os.environ.get("GLOO_SOCKET_IFNAME")
    init_process_group(0, 1, init_method=(Path(folder) / "rendezvous").as_uri(), backend="gloo",
                       single_machine=True)  # fmt: skip
    try:
        yield
    finally:
        teardown()
        if saved is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
        else:
            os.environ["GLOO_SOCKET_IFNAME"] = saved
