"""Starting P processes that form one ``torch.distributed`` process group, and stopping them.

Two ways in, same worker code:

* **From a notebook or a test** (one machine): :func:`launch` starts ``world_size`` fresh
  Python processes with ``torch.multiprocessing`` ("spawn": a new interpreter each, which
  works the same on Linux, macOS and Windows and inside Jupyter), lets them meet through a
  file in a temporary folder (no network port to choose), runs ``fn(rank, world_size,
  *args)`` in each, and returns their results in rank order. It never hangs: past
  ``timeout`` seconds, or as soon as one rank fails, every process is stopped, the temporary
  folder removed, and an error says which rank failed and why.
* **On a multi-GPU node**: ``torchrun --nproc-per-node=8 -m course_lib.context_parallel``
  starts the processes itself and passes rank and world size in environment variables;
  :func:`init_from_env` reads them (see ``course_lib/context_parallel/__main__.py``).

The backend is chosen by :func:`pick_backend`: NCCL when every rank can have its own CUDA
GPU, gloo (CPU tensors, TCP between processes) otherwise. Functions run by :func:`launch`
must be importable (defined in a module, not in a notebook cell), because a spawned process
starts from an empty interpreter and finds the function by its module and name.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = [
    "WorkerError",
    "device",
    "init_from_env",
    "init_process_group",
    "launch",
    "pick_backend",
    "teardown",
]


class WorkerError(RuntimeError):
    """A rank raised an exception or died; the message carries its traceback."""


def pick_backend(world_size: int) -> str:
    """``"nccl"`` when there are at least ``world_size`` CUDA GPUs and NCCL is built in,
    ``"gloo"`` otherwise (NCCL cannot put two ranks on one GPU)."""
    if (
        torch.cuda.is_available()
        and dist.is_nccl_available()
        and torch.cuda.device_count() >= world_size
    ):
        return "nccl"
    return "gloo"


def device() -> torch.device:
    """Where this rank's tensors live: its GPU under NCCL, the CPU under gloo."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _loopback_interface() -> str | None:
    """The loopback network interface ("lo" on Linux, "lo0" on macOS), if there is one."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):  # pragma: no cover - platforms without it
        return None
    return next((n for n in names if n.startswith("lo")), None)


def init_process_group(
    rank: int,
    world_size: int,
    *,
    init_method: str,
    backend: str | None = None,
    timeout_s: float = 120.0,
    local_rank: int | None = None,
    single_machine: bool = False,
) -> torch.device:
    """Join the process group; returns this rank's device.

    ``single_machine=True`` (what :func:`launch` passes) tells gloo to talk over the
    loopback interface unless ``GLOO_SOCKET_IFNAME`` is already set: on some laptops the
    host name resolves to an address the processes cannot reach.
    """
    backend = backend or pick_backend(world_size)
    unix = sys.platform.startswith(("linux", "darwin"))
    if backend == "gloo" and single_machine and unix and "GLOO_SOCKET_IFNAME" not in os.environ:
        lo = _loopback_interface()
        if lo:
            os.environ["GLOO_SOCKET_IFNAME"] = lo
    if backend == "nccl":
        torch.cuda.set_device(rank if local_rank is None else local_rank)
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    return device()


def init_from_env(
    backend: str | None = None, timeout_s: float = 600.0
) -> tuple[int, int, torch.device]:
    """Join the group torchrun described in RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if backend is None:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        backend = pick_backend(local_world)
    dev = init_process_group(
        rank,
        world_size,
        init_method="env://",
        backend=backend,
        timeout_s=timeout_s,
        local_rank=local_rank,
    )
    return rank, world_size, dev


def teardown() -> None:
    """Leave the process group (safe to call when there is none)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _worker(fn, rank, world_size, init_file, backend, conn, args, threads):
    """What each spawned process runs: join, call ``fn``, report, leave.

    A failure is reported *before* leaving the group: leaving closes this rank's
    connections, which makes its neighbours fail too, and the parent should hear about
    the cause first.
    """
    try:
        if threads:
            torch.set_num_threads(threads)
        init_process_group(
            rank,
            world_size,
            init_method=Path(init_file).as_uri(),
            backend=backend,
            single_machine=True,
        )
        result = fn(rank, world_size, *args)
        dist.barrier()  # nobody leaves while a neighbour may still be sending to it
        report = (True, pickle.dumps(result))
    except BaseException:  # report anything, even KeyboardInterrupt, to the parent
        report = (False, traceback.format_exc().encode())
    try:
        if not report[0]:
            conn.send_bytes(pickle.dumps(report))
        teardown()
        if report[0]:
            conn.send_bytes(pickle.dumps(report))
    finally:
        conn.close()


def _stop(procs) -> None:
    """Ask each process to stop (SIGTERM), then force it (SIGKILL); reap them all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 3.0
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=5.0)


def _check_importable(fn) -> None:
    """A spawned process finds ``fn`` by module and name: it must be defined at the top of a
    module, or of a script run as a file (not in a notebook cell or inside a function)."""
    name = getattr(fn, "__qualname__", repr(fn))
    interactive_main = getattr(fn, "__module__", None) == "__main__" and not getattr(
        sys.modules.get("__main__"), "__file__", None
    )
    if interactive_main or "<locals>" in name or "<lambda>" in name:
        raise ValueError(
            f"launch: {name!r} is defined in a notebook cell or inside another "
            f"function, so a spawned process cannot import it. Define it at the "
            f"top of a .py module and import it from there, like "
            f"course_lib.context_parallel.workers.hello."
        )


def launch(
    fn: Callable, world_size: int, *args, timeout: float = 120.0, backend: str | None = None
) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes; results in rank order.

    ``fn`` must be importable (a module-level function), its arguments and result
    picklable. Raises :class:`WorkerError` with the failing rank's traceback if any rank
    raises or dies, :class:`TimeoutError` after ``timeout`` seconds (start-up included);
    either way no process outlives the call.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    _check_importable(fn)
    backend = backend or pick_backend(world_size)
    threads = max(1, (os.cpu_count() or 1) // world_size) if backend == "gloo" else 0
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix=f"course_cp_{os.getpid()}_") as tmp:
        init_file = os.path.join(tmp, "rendezvous")  # the processes meet here
        procs, readers = [], {}
        try:
            for rank in range(world_size):
                reader, writer = ctx.Pipe(duplex=False)
                p = ctx.Process(
                    target=_worker,
                    name=f"rank{rank}",
                    daemon=True,
                    args=(fn, rank, world_size, init_file, backend, writer, args, threads),
                )
                p.start()
                writer.close()  # the child holds its own copy
                procs.append(p)
                readers[reader] = rank
            return _collect(procs, readers, world_size, timeout)
        finally:
            _stop(procs)
            for reader in readers:
                reader.close()
            for p in procs:
                if not p.is_alive():
                    p.close()


def _collect(procs, readers, world_size, timeout) -> list:
    """Wait for one report per rank; fail fast when a rank fails, dies, or time runs out."""
    results: dict[int, object] = {}
    deadline = time.monotonic() + timeout
    pending = dict(readers)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            missing = sorted(pending.values())
            raise TimeoutError(
                f"launch: ranks {missing} of {world_size} did not finish within {timeout:g} s "
                f"and were stopped. Usual causes: a send without the matching receive on "
                f"the neighbour, or a collective that only some ranks call."
            )
        sentinels = {procs[r].sentinel: r for r in pending.values()}
        ready = wait(list(pending) + list(sentinels), timeout=left)
        for conn in [c for c in pending if c in ready]:  # readers with a result (or EOF)
            rank = pending.pop(conn)
            try:
                ok, payload = pickle.loads(conn.recv_bytes())
            except EOFError:
                raise WorkerError(
                    f"rank {rank} exited without a result (exit code {procs[rank].exitcode})"
                ) from None
            if not ok:
                raise WorkerError(
                    f"rank {rank} of {world_size} failed (other ranks may fail next, "
                    f"because it left):\n{payload.decode(errors='replace')}"
                )
            results[rank] = pickle.loads(payload)
        for obj in ready:
            rank = sentinels.get(obj)
            if rank is not None and rank in pending.values():
                reader = next(c for c, r in pending.items() if r == rank)
                if not reader.poll():  # died before reporting: killed, or crashed hard
                    raise WorkerError(
                        f"rank {rank} of {world_size} died (exit code "
                        f"{procs[rank].exitcode}) without reporting a result"
                    )
    for p in procs:
        p.join(timeout=max(1.0, deadline - time.monotonic()))
    return [results[r] for r in range(world_size)]
