"""course_lib.context_parallel.comm: every message counted in bytes, and the formulas the
counts must equal.

Comm is driven three ways here: with no process group (it refuses), with a real gloo group
of one process, and over a stand-in for torch.distributed that records the point-to-point
messages of one rank among P (who sends what to whom). Real groups of 2 and 4 processes
compare the counts with the formulas in test_distributed.py.
"""

from __future__ import annotations

import pytest
import torch
from context_parallel_lab import one_process_group

from course_lib.context_parallel import Comm, comm, ring_comm_bytes, ulysses_comm_bytes

# --------------------------------------------------------------------------- the formulas


def test_communication_formulas():
    kw = dict(num_heads=8, head_dim=64, batch_size=2, bytes_per_element=2)
    N, P = 4096, 4
    shard_bytes = 2 * 8 * (N // P) * 64 * 2
    assert ring_comm_bytes(N, P, **kw) == 2 * (P - 1) * shard_bytes
    assert ring_comm_bytes(N, P, **kw, backward=True) == (
        2 * (P - 1) * shard_bytes + 2 * P * shard_bytes * 2
    )
    assert ulysses_comm_bytes(N, P, **kw) == 4 * shard_bytes * (P - 1) // P
    assert ulysses_comm_bytes(N, P, **kw, backward=True) == ulysses_comm_bytes(N, P, **kw)
    for P in (2, 4, 8):  # ring sends P/2 times more than Ulysses (H = H_kv)
        assert ring_comm_bytes(N, P, **kw) == P // 2 * ulysses_comm_bytes(N, P, **kw)
    assert ring_comm_bytes(N, 1, **kw) == ulysses_comm_bytes(N, 1, **kw) == 0
    assert ring_comm_bytes(N, 1, **kw, backward=True) == 0
    gqa = dict(kw, num_kv_heads=2)  # K, V with 2 heads: the ring sends 4x less
    assert ring_comm_bytes(N, 2, **gqa) * 4 == ring_comm_bytes(N, 2, **kw)
    # Ulysses: Q and O with H heads, K and V with H_kv
    assert ulysses_comm_bytes(N, 2, **gqa) == (2 * 8 + 2 * 2) * 2 * (N // 2) * 64 * 2 // 2
    with pytest.raises(ValueError, match="divisible by world_size = 16"):
        ulysses_comm_bytes(N, 16, **kw)


def test_the_backward_accumulators_are_float32_at_least():
    kw = dict(num_heads=1, head_dim=1, bytes_per_element=2)
    shard = 8 // 2
    fwd = 2 * 1 * shard * 2  # K and V, one hop, in bf16
    assert ring_comm_bytes(8, 2, **kw, backward=True) == fwd + 2 * 2 * shard * 4  # dK, dV fp32
    assert ring_comm_bytes(8, 2, **kw, backward=True, grad_bytes_per_element=2) == 3 * fwd
    kw64 = dict(kw, bytes_per_element=8)
    assert ring_comm_bytes(8, 2, **kw64, backward=True) == 2 * shard * 8 + 4 * shard * 8


def test_formula_inputs_are_checked():
    with pytest.raises(ValueError, match="must split evenly over world_size = 3"):
        ring_comm_bytes(8, 3, num_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="must split evenly"):
        ulysses_comm_bytes(8, 0, num_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="multiple of num_kv_heads = 3"):
        ring_comm_bytes(8, 2, num_heads=4, head_dim=4, num_kv_heads=3)


# --------------------------------------------------------------------------- Comm


def test_comm_needs_a_process_group():
    with pytest.raises(RuntimeError, match="needs an initialised process group"):
        Comm()


def test_comm_with_one_process_sends_nothing(tmp_path):
    with one_process_group(tmp_path):
        with pytest.raises(ValueError, match="all_to_all_impl must be"):
            Comm(all_to_all_impl="ring")
        c = Comm()
        assert (c.rank, c.world_size, c.bytes_sent) == (0, 1, 0)
        k, v = torch.randn(2, 3), torch.randn(2, 3)
        got = c.ring_shift([k, v]).wait()
        assert got[0] is k and got[1] is v  # the block comes back to its own rank
        x = torch.randn(1, 4, 2)
        y = c.all_to_all(x)
        assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()
        assert c.bytes_sent == 0 and c.bytes_by_op() == {"all_to_all": 0}
        with pytest.raises(ValueError, match="leading dimension of world_size = 1"):
            c.all_to_all(torch.randn(2, 4))


class _FakeDist:
    """torch.distributed as rank ``rank`` of ``world_size`` sees it: records the messages;
    a received tensor is filled with the sender's rank."""

    isend, irecv = "isend", "irecv"

    def __init__(self, rank, world_size, all_to_all_error=None):
        self.rank, self.world_size, self.error = rank, world_size, all_to_all_error
        self.sent, self.received = [], []

    def is_initialized(self):
        return True

    def get_rank(self, group=None):
        return self.rank

    def get_world_size(self, group=None):
        return self.world_size

    def get_global_rank(self, group, rank):
        return 100 + rank  # a sub-group: its ranks have other global numbers

    def P2POp(self, op, tensor, peer, group=None):
        return (op, tensor, peer)

    def batch_isend_irecv(self, ops):
        for op, tensor, peer in ops:
            if op == "isend":
                self.sent.append((peer, tensor.clone()))
            else:
                tensor.fill_(peer)
                self.received.append(peer)
        return [type("Request", (), {"wait": lambda self: None})()]

    def all_to_all_single(self, out, x, group=None):
        raise self.error


def test_ring_shift_sends_to_the_next_rank_and_receives_from_the_previous(monkeypatch):
    fake = _FakeDist(rank=1, world_size=3)
    monkeypatch.setattr(comm, "dist", fake)
    c = Comm()
    k, v = torch.randn(2, 5), torch.randn(2, 5).double().t()  # a non-contiguous one
    got = c.ring_shift([k, v]).wait()
    assert [peer for peer, _ in fake.sent] == [2, 2] and fake.received == [0, 0]
    assert torch.equal(fake.sent[0][1], k) and torch.equal(fake.sent[1][1], v)
    assert [g.shape for g in got] == [k.shape, v.shape] and (got[0] == 0).all()
    assert c.bytes_sent == 10 * 4 + 10 * 8 and c.bytes_by_op() == {"ring_shift": 120}
    c.reset()
    assert c.bytes_sent == 0 and c.log == []
    in_group = Comm(group="a sub-group")
    in_group.ring_shift([k])
    assert fake.sent[-1][0] == 102 and fake.received[-1] == 100  # global ranks


def test_all_to_all_falls_back_to_point_to_point_messages(monkeypatch):
    """A backend without all_to_all_single: P - 1 rounds, in round s send chunk r + s to
    rank r + s and receive chunk r - s from rank r - s; the chunk r stays (not counted)."""
    P, r = 4, 1
    fake = _FakeDist(r, P, RuntimeError("all_to_all is not supported by this backend"))
    monkeypatch.setattr(comm, "dist", fake)
    c = Comm()
    x = torch.arange(P * 3, dtype=torch.float32).reshape(P, 3)
    y = c.all_to_all(x)
    assert c.all_to_all_impl == "p2p"  # and it stays so
    assert [peer for peer, _ in fake.sent] == [(r + s) % P for s in range(1, P)]
    assert all(torch.equal(t, x[peer]) for peer, t in fake.sent)
    assert fake.received == [(r - s) % P for s in range(1, P)]
    assert torch.equal(y[r], x[r]) and all((y[i] == i).all() for i in range(P) if i != r)
    assert c.bytes_sent == (P - 1) * 3 * 4
    for impl, error in (("collective", fake.error), ("auto", RuntimeError("connection reset"))):
        monkeypatch.setattr(comm, "dist", _FakeDist(r, P, error))
        with pytest.raises(RuntimeError, match=str(error)):
            Comm(all_to_all_impl=impl).all_to_all(x)
