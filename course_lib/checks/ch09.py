r"""Checks for chapter 09 (context parallelism: attention split across devices).

Seven exercises, each a pure function on tensors or numbers (no processes, no process group):

* 09.1 ``merge_attention(out_a, lse_a, out_b, lse_b)``: two partial attentions into one,
  :math:`L = \log(e^{L_a} + e^{L_b})`, :math:`O = e^{L_a - L}O_a + e^{L_b - L}O_b`;
* 09.2 ``ring_step(q, k_block, v_block, out, lse, mask)``: attend to one arriving block
  and merge it into the running state;
* 09.3 ``zigzag_positions(seq_len, world_size, rank)``: the tokens rank ``rank`` holds;
* 09.4 ``seq_to_head_all_to_all(xs)``: Ulysses' all-to-all, for all ranks at once;
* 09.5 ``forward_comm_bytes(seq_len, world_size, num_heads, head_dim, bytes_per_element)``:
  bytes one rank sends in the forward pass, ring and Ulysses;
* 09.6 ``ring_backward_step(q, k_block, v_block, out, lse, dout, mask)``: one block's
  gradient contributions, from the *final* output and log-sum-exp;
* 09.7 ``measure_load_imbalance(seq_len, world_size, layout)``: predict, then measure the
  busiest rank's work over the least busy one's, contiguous and zigzag.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..context_parallel.merge import block_attention, causal_mask_from_positions
from ..context_parallel.sharding import shard_positions
from .core import Case, Fixed
from .declare import exercise
from .kit import BROADCAST_ERROR, DT, NEG_INF, byte_compare, integer_compare, randn, within


def _partial(rng, n_q, n_k, d, d_v, mask=None, scale=1.0):
    """A real partial attention (output, lse) of random queries over random keys."""
    q, k, v = randn(rng, n_q, d, std=scale), randn(rng, n_k, d, std=scale), randn(rng, n_k, d_v)
    return block_attention(q, k, v, mask=mask)


def _empty_state(n_q: int, d_v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The state before any block: output 0, log-sum-exp -inf."""
    return torch.zeros(n_q, d_v, dtype=DT), torch.full((n_q,), NEG_INF, dtype=DT)


# --------------------------------------------------------------------------- 09.1 the merge


def merge_attention_reference(
    out_a, lse_a, out_b, lse_b, *, shift=True, guard=True, weights="share", lse="logsumexp"
):
    r"""Merge two partial attentions over disjoint key sets: the denominators
    :math:`e^{L_a}, e^{L_b}` add, and each output counts by its share of the sum,
    :math:`L = m + \log(e^{L_a-m} + e^{L_b-m})`, :math:`O = e^{L_a-L}O_a + e^{L_b-L}O_b`,
    :math:`m = \max(L_a, L_b)`, or 0 where both are :math:`-\infty` (such a row stays 0 with
    :math:`L = -\infty`)."""
    m = torch.maximum(lse_a, lse_b) if shift else torch.zeros_like(lse_a)  # (..., Nq)
    if guard:  # both -inf: any finite shift
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)  # (..., Nq) l_a / e^m, l_b / e^m
    total = w_a + w_b  # (..., Nq)
    merged = {
        "logsumexp": m + torch.log(total),  # -inf where nothing was seen
        "max": torch.maximum(lse_a, lse_b),
        "sum": lse_a + lse_b,
    }[lse]  # (..., Nq)
    if guard:
        total = torch.where(total > 0, total, torch.ones_like(total))
    w_a, w_b = {
        "share": (w_a / total, w_b / total),
        "swapped": (w_b / total, w_a / total),
        "half": (torch.full_like(w_a, 0.5),) * 2,
        "lse": (lse_a / (lse_a + lse_b), lse_b / (lse_a + lse_b)),
        "unnormalised": (w_a, w_b),
    }[weights]  # (..., Nq)
    return w_a[..., None] * out_a + w_b[..., None] * out_b, merged  # (..., Nq, d_v), (..., Nq)


def _lses(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=DT)


def _merge_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        out_a, lse_a = _partial(rng, 3, 4, 4, 2)
        out_b, lse_b = _partial(rng, 3, 6, 4, 2, scale=1.5)
        big_a, big_b = randn(rng, 2, 3), randn(rng, 2, 3)
        mask_a = torch.tensor([[True, True], [True, False], [False, False]])  # (3, 2)
        mask_b = torch.tensor([[True, False], [False, False], [False, False]])  # (3, 2)
        e_a, le_a = _partial(rng, 3, 2, 4, 2, mask=mask_a)  # row 2 sees nothing here
        e_b, le_b = _partial(rng, 3, 2, 4, 2, mask=mask_b)  # rows 1 and 2 see nothing here
        return [
            Case("3 queries; part a has 4 keys, part b 6 keys", (out_a, lse_a, out_b, lse_b)),
            Case(
                "log-sum-exps near 1000 (e^1000 overflows): only differences may be exponentiated",
                (big_a, _lses(1000.0, 990.0), big_b, _lses(1001.5, 990.0)),
            ),
            Case(
                "rows that saw no key yet: LSE -inf and output 0 in one part (row 1), or in "
                "both (row 2: the result must stay 0 and -inf, not NaN)",
                (e_a, le_a, e_b, le_b),
            ),
        ]
    o1, l1 = _partial(rng, 5, 7, 3, 4)
    o2, l2 = _partial(rng, 5, 2, 3, 4, scale=3.0)
    batched = tuple(randn(rng, *shape) for shape in [(2, 3, 4, 5), (2, 3, 4)] * 2)  # o, l, o, l
    low = randn(rng, 2, 2), _lses(-1000.0, -1003.0), randn(rng, 2, 2), _lses(-1000.5, -1001.0)
    # o1, l1, o2, l2 with row 0 as a part that saw no key leaves it: output 0, LSE -inf
    row_0_empty = tuple(
        torch.cat([e, x[1:]]) for e, x in zip(_empty_state(1, 4) * 2, (o1, l1, o2, l2))
    )
    return [
        Case("5 queries, d_v = 4, part b with large scores", (o1, l1, o2, l2)),
        Case("batch and heads: (2, 3, 4, 5) outputs", batched),
        Case("log-sum-exps near -1000 (e^-1000 underflows to 0)", low),
        Case("part b saw nothing at all", (o1, l1, *_empty_state(5, 4))),
        Case("row 0 saw no key in either part: it must stay 0 and -inf, not NaN", row_0_empty),
    ]


exercise(
    "09.1",
    merge_attention_reference,
    target="merge_attention",
    title="merge two partial attentions",
    points=2,
    cases=_merge_cases,
    atol=1e-12,
    rtol=1e-10,
    outputs=("output", "lse"),
    slips={
        "average": dict(weights="half"),
        "unnormalised": dict(weights="unnormalised"),
        "lse-max": dict(lse="max"),
        "lse-added": dict(lse="sum"),
        "weighted-by-lse": dict(weights="lse"),
        "swapped": dict(weights="swapped"),
        "empty-rows-nan": dict(guard=False),
        "exp-overflow": dict(shift=False, guard=False),
    },
    errors={"weights-axis": BROADCAST_ERROR + r" at non-singleton dimension"},
)

# --------------------------------------------------------------------------- 09.2 one ring step


def ring_step_reference(
    q,
    k_block,
    v_block,
    out,
    lse,
    mask,
    *,
    scale="d_k",
    fill=NEG_INF,
    invert=False,
    softmax=False,
    block_lse="logsumexp",
    merge=True,
):
    r"""Partial attention over the block, :math:`S = q k^\top / \sqrt{d_k}` (``mask`` True =
    may attend), :math:`L_b = \log \sum_j e^{S_j}`, :math:`O_b = e^{S - L_b} V` (0 for a row
    that sees no key), merged into ``(out, lse)``."""
    d = {"d_k": q.shape[-1], "d_v": v_block.shape[-1], None: 1}[scale]
    s = (q @ k_block.transpose(-2, -1)) * (1.0 / math.sqrt(d))  # (Nq, Nk)
    if mask is not None:
        s = s.masked_fill(mask if invert else ~mask, fill)  # (Nq, Nk)
    lse_b = torch.logsumexp(s, dim=-1)  # (Nq,) -inf for a row that sees no key
    shift = torch.where(torch.isfinite(lse_b), lse_b, torch.zeros_like(lse_b))  # (Nq,)
    p = torch.softmax(s, dim=-1) if softmax else torch.exp(s - shift[..., None])  # (Nq, Nk)
    out_b = p @ v_block  # (Nq, d_v) 0 for a row that sees no key (the softmax: 0/0 = NaN)
    if block_lse == "max":
        lse_b = s.amax(dim=-1)  # (Nq,)
    return merge_attention_reference(out, lse, out_b, lse_b) if merge else (out_b, lse_b)


def _ring_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        q, k0, v0, k1, v1 = (randn(rng, 4, d) for d in (8, 8, 3, 8, 3))
        out, lse = ring_step_reference(q, k0, v0, *_empty_state(4, 3), None)
        # zigzag, P = 2, N = 8: rank 0 holds positions [0, 1, 6, 7], rank 1 holds [2, 3, 4, 5]
        pos0, pos1 = shard_positions(8, 2, 0, "zigzag"), shard_positions(8, 2, 1, "zigzag")
        mask_own = causal_mask_from_positions(pos0, pos0)
        mask_other = causal_mask_from_positions(pos0, pos1)  # rows 0, 1 see nothing here
        qz, kz, vz, kz1, vz1 = (randn(rng, 4, d) for d in (4, 4, 2, 4, 2))
        z_out, z_lse = ring_step_reference(qz, kz, vz, *_empty_state(4, 2), mask_own)
        return [
            Case(
                "the first step (out = 0, lse = -inf), no mask, 4 queries, d = 8",
                (q, k0, v0, *_empty_state(4, 3), None),
            ),
            Case(
                "the second step: merge a new block into the state of the first",
                (q, k1, v1, out, lse, None),
            ),
            Case(
                "causal, zigzag: rank 0 (positions 0, 1, 6, 7) receives rank 1's block "
                "(positions 2..5); queries 0 and 1 may see none of it",
                (qz, kz1, vz1, z_out, z_lse, mask_other),
            ),
            Case(
                "causal, first step on the own block, mask True = may attend",
                (qz, kz, vz, *_empty_state(4, 2), mask_own),
            ),
            Case(
                "a first step (out = 0, lse = -inf) on a block that queries 0 and 1 may not "
                "see at all: they must stay out = 0, lse = -inf",
                (qz, kz1, vz1, *_empty_state(4, 2), mask_other),
            ),
        ]
    q, k, v = randn(rng, 6, 4, std=3.0), randn(rng, 5, 4, std=3.0), randn(rng, 5, 4)
    out, lse = _partial(rng, 6, 3, 4, 4)
    mask = torch.from_numpy(rng.random((6, 5)) < 0.5)
    mask[0] = False
    one = tuple(randn(rng, 1, 2) for _ in range(3))
    return [
        Case(
            "large scores (inputs x 3), a random mask with an empty row", (q, k, v, out, lse, mask)
        ),
        Case("one query, one key", (*one, *_empty_state(1, 2), None)),
        Case(
            "the block is masked out entirely: the state must not change",
            (q, k, v, out, lse, torch.zeros(6, 5, dtype=torch.bool)),
        ),
        Case(
            "a first step (out = 0, lse = -inf), d_v = 3 != d = 4, on a block that query 0 "
            "may not see: it must stay out = 0, lse = -inf",
            (q, k, v[:, :3], *_empty_state(6, 3), mask),
        ),
    ]


exercise(
    "09.2",
    ring_step_reference,
    target="ring_step",
    title="one step of ring attention",
    points=3,
    cases=_ring_cases,
    atol=1e-12,
    rtol=1e-10,
    outputs=("output", "lse"),
    slips={
        "unscaled": dict(scale=None),
        "scaled-by-dv": dict(scale="d_v"),
        "no-merge": dict(merge=False),
        "mask-inverted": dict(invert=True),
        "empty-rows-nan": dict(softmax=True),
        "finite-fill": dict(fill=-1e9, softmax=True),
        "lse-is-max": dict(block_lse="max"),
    },
)

# --------------------------------------------------------------------------- 09.3 zigzag


def zigzag_positions_reference(
    seq_len: int, world_size: int, rank: int, *, layout="zigzag", mirror="2P-1-r", front_first=True
) -> torch.Tensor:
    """Chunk ``rank`` then chunk ``2P - 1 - rank`` of ``2P`` chunks of ``seq_len / (2P)``."""
    if layout != "zigzag":  # another split of chapter 09: "contiguous" or "striped"
        return shard_positions(seq_len, world_size, rank, layout)
    P = world_size
    c = seq_len // (2 * P)  # tokens per chunk
    back = {"2P-1-r": 2 * P - 1 - rank, "2P-r": 2 * P - rank, "P-1-r": P - 1 - rank}[mirror]
    chunks = [torch.arange(rank * c, (rank + 1) * c), torch.arange(back * c, (back + 1) * c)]
    return torch.cat(chunks if front_first else chunks[::-1])  # (2c,)


def _zigzag_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("N = 16, P = 4, rank 0: chunks 0 and 7", (16, 4, 0)),
            Fixed("N = 16, P = 4, rank 2: chunks 2 and 5", (16, 4, 2)),
            Fixed("N = 24, P = 3, rank 1: chunks of 4 tokens", (24, 3, 1)),
            Fixed("N = 12, P = 2, rank 1", (12, 2, 1)),
        ]
    return [
        Fixed("P = 1: the two halves of the sequence", (10, 1, 0)),
        Fixed("N = 64, P = 8, rank 5", (64, 8, 5)),
        Fixed("N = 12, P = 6, rank 3: chunks of one token", (12, 6, 3)),
        *(_zigzag_drawn(rng) for _ in range(2)),
    ]


def _zigzag_drawn(rng: np.random.Generator) -> Case:
    """A world size, chunk size and rank drawn from ``rng`` (the grader's seed)."""
    p = int(rng.integers(1, 17))
    n = 2 * p * int(rng.integers(1, 33))
    rank = int(rng.integers(0, p))
    return Case(f"N = {n}, P = {p}, rank {rank}", (n, p, rank))


exercise(
    "09.3",
    zigzag_positions_reference,
    target="zigzag_positions",
    title="the tokens of a zigzag shard",
    points=1,
    cases=_zigzag_cases,
    atol=0.0,
    rtol=0.0,
    compare=integer_compare(
        "positions",
        "positions index tensors (x[..., positions, :]), which needs integers; torch.arange of "
        "ints (use `//`, not `/`, for the chunk size) gives int64.",
        accept_lists=True,  # a list of ints is a right answer too (torch.tensor(list) indexes)
    ),
    slips={
        "contiguous": dict(layout="contiguous"),
        "mirror-too-far": dict(mirror="2P-r"),
        "chunks-reversed": dict(front_first=False),
        "mirror-among-p": dict(mirror="P-1-r"),
        "striped": dict(layout="striped"),
    },
)

# --------------------------------------------------------------------------- 09.4 all-to-all


def seq_to_head_all_to_all_reference(
    xs: list[torch.Tensor], *, heads="blocks", join="tokens", reverse=False, stack=False
) -> list[torch.Tensor] | torch.Tensor:
    """``xs[i] (B, H, n, d_h)`` → ``ys[j] (B, H/P, P*n, d_h)``: head group j of every rank's
    tokens, rank 0's first."""
    P = len(xs)
    B, H, n, head_dim = xs[0].shape
    h = H // P
    xs = list(xs)[::-1] if reverse else list(xs)
    ys = []
    for j in range(P):
        # head group j: heads j*h .. (j+1)*h - 1, or "strided": every P-th head from j
        group = slice(j * h, (j + 1) * h) if heads == "blocks" else slice(j, None, P)
        parts = [x[:, group] for x in xs]  # P x (B, H/P, n, d_h)
        if join == "interleaved":  # the rank axis after the token axis
            ys.append(torch.stack(parts, dim=3).reshape(B, h, P * n, head_dim))
        else:  # "tokens": (B, H/P, P*n, d_h), rank 0's tokens first; "heads": (B, H, n, d_h)
            ys.append(torch.cat(parts, dim=2 if join == "tokens" else 1))
    return torch.stack(ys) if stack else ys


def _a2a_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def ranks(p, *shape):  # the argument: a list of p ranks' tensors
        return ([randn(rng, *shape) for _ in range(p)],)

    if not hidden:
        ids = [torch.arange(24, dtype=DT).reshape(1, 4, 3, 2) + 100 * r for r in range(2)]
        return [
            Fixed(
                "P = 2 ranks, B = 1, H = 4, n = 3, d = 2 (rank r's entries are 100r + index)",
                (ids,),
            ),
            Case("P = 4, B = 2, H = 8, n = 2, d = 3", ranks(4, 2, 8, 2, 3)),
            Case("P = 3, H = 3: one head per rank", ranks(3, 1, 3, 4, 2)),
        ]
    return [
        Case("P = 1: nothing moves", ranks(1, 2, 4, 3, 2)),
        Case("P = 2, H = 2, n = 5", ranks(2, 1, 2, 5, 3)),
        Case("P = 4, H = 16", ranks(4, 1, 16, 2, 2)),
    ]


exercise(
    "09.4",
    seq_to_head_all_to_all_reference,
    target="seq_to_head_all_to_all",
    title="Ulysses' all-to-all: from a sequence split to a head split",
    points=2,
    cases=_a2a_cases,
    atol=0.0,
    rtol=0.0,
    slips={
        "stacked": dict(stack=True),
        "strided-heads": dict(heads="strided"),
        "head-axis": dict(join="heads"),
        "ranks-reversed": dict(reverse=True),
        "tokens-interleaved": dict(join="interleaved"),
    },
)

# --------------------------------------------------------------------------- 09.5 bytes


def forward_comm_bytes_reference(
    N,
    P,
    H,
    head_dim,
    b,
    *,
    hops="P-1",
    ring_tensors=2,
    message="shard",
    all_to_alls=4,
    sent="(P-1)/P",
) -> tuple[int, int]:
    r"""(ring, Ulysses) bytes one rank sends in the forward pass, B = 1, H_kv = H: with a
    shard of :math:`s = H (N/P) d_h b` bytes, the ring sends K and V on :math:`P - 1` hops,
    :math:`2 (P-1) s`; Ulysses' four all-to-alls (Q, K, V in, O out) each send
    :math:`(P-1)/P` of a shard, :math:`4 s (P-1) / P`."""
    tokens = N // P if message == "shard" else N  # in one ring message
    shard = H * (N // P) * head_dim * b  # one (H, N/P, d_h)
    n_hops = P - 1 if hops == "P-1" else P
    ring = ring_tensors * n_hops * H * tokens * head_dim * b
    if sent == "(P-1)/P":  # each rank keeps the 1/P addressed to itself
        return ring, all_to_alls * shard * (P - 1) // P
    copies = P - 1 if sent == "all to each" else 1  # "all to each": the whole to each other rank
    return ring, all_to_alls * copies * shard


def _bytes_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("N = 4096, P = 4, H = 8, d_h = 64, bfloat16", (4096, 4, 8, 64, 2)),
            Fixed("N = 1536, P = 3, H = 6, d_h = 32, float32", (1536, 3, 6, 32, 4)),
            Fixed("N = 131072, P = 8, H = 32, d_h = 128, bfloat16", (131072, 8, 32, 128, 2)),
        ]
    return [
        Fixed("P = 1: nothing to send", (512, 1, 4, 16, 4)),
        Fixed("N = 65536, P = 16, H = 16, d_h = 128, float16", (65536, 16, 16, 128, 2)),
        Fixed("N = 96, P = 3, H = 6, d_h = 8, float64", (96, 3, 6, 8, 8)),
        *(_bytes_drawn(rng) for _ in range(2)),
    ]


def _bytes_drawn(rng: np.random.Generator) -> Case:
    """A configuration drawn from ``rng`` (the grader's seed); N a multiple of P, H of P."""
    p = int(rng.integers(2, 17))
    n, h = p * int(rng.integers(1, 4097)), p * int(rng.integers(1, 5))
    d, b = int(rng.choice([16, 32, 64, 128])), int(rng.choice([2, 4, 8]))
    return Case(f"N = {n}, P = {p}, H = {h}, d_h = {d}, {b} bytes", (n, p, h, d, b))


exercise(
    "09.5",
    forward_comm_bytes_reference,
    target="forward_comm_bytes",
    title="communication volume of ring attention and Ulysses",
    points=2,
    cases=_bytes_cases,
    atol=0.5,
    rtol=0.0,
    outputs=("ring", "ulysses"),
    compare=byte_compare(
        "Divide with `//` (N // P, and (P - 1) // P only after multiplying), "
        "as the statement asks.",
        names=("ring", "ulysses"),
    ),
    slips={
        "ring-p-hops": dict(hops="P"),
        "ring-k-only": dict(ring_tensors=1),
        "ring-whole-sequence": dict(message="sequence"),
        "ulysses-sends-all": dict(sent="all"),
        "ulysses-to-each": dict(sent="all to each"),
        "ulysses-no-output": dict(all_to_alls=3),
        "ulysses-kv-only": dict(all_to_alls=2),
    },
)

# --------------------------------------------------------------------------- 09.6 backward step


def ring_backward_step_reference(
    q,
    k_block,
    v_block,
    out,
    lse,
    dout,
    mask,
    *,
    lse_of="final",
    out_of="final",
    delta="dO*O",
    masked=True,
    scaled=True,
    dv_transposed=True,
):
    r"""``(dq_part, dk_block, dv_block)``, chapter 06's backward on this block's keys with
    :math:`P = e^{S - L}` from the *final* LSE: :math:`dV = P^\top dO`, :math:`dP = dO\,V^\top`,
    :math:`D = \mathrm{rowsum}(dO \circ O)` (final O), :math:`dS = P \circ (dP - D)`,
    :math:`dQ = dS\,K / \sqrt d`, :math:`dK = dS^\top Q / \sqrt d`."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k_block.transpose(-2, -1)) * scale  # (Nq, Nk)
    if mask is not None and masked:
        s = s.masked_fill(~mask, NEG_INF)
    if lse_of == "block":
        lse = torch.logsumexp(s, dim=-1)  # (Nq,) over this block alone
    if out_of == "block":
        out = block_attention(q, k_block, v_block, mask=mask)[0]  # (Nq, d_v) the partial one
    lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))  # (Nq,)
    p = torch.exp(s - lse_safe[..., None])  # (Nq, Nk) the true weights of these keys
    dv = p.transpose(-2, -1) @ dout if dv_transposed else p @ dout  # (Nk, d_v)
    dp = dout @ v_block.transpose(-2, -1)  # (Nq, Nk)
    d_row = {
        "dO*O": (dout * out).sum(dim=-1),  # rowsum(dO * O)
        "dO": dout.sum(dim=-1),
        "block": (p * dp).sum(dim=-1),  # rowsum(P * dP) over this block's keys only
    }[delta]  # (Nq,)
    ds = p * (dp - d_row[..., None])  # (Nq, Nk)
    g = scale if scaled else 1.0
    return g * ds @ k_block, g * ds.transpose(-2, -1) @ q, dv  # (Nq, d), (Nk, d), (Nk, d_v)


def _backward_case(rng, name, n_q, n_k, d, split, causal=False, scale=1.0):
    """Queries attend to n_k keys; the block is keys [split:]. ``out``, ``lse`` are final."""
    q, k, v = randn(rng, n_q, d, std=scale), randn(rng, n_k, d, std=scale), randn(rng, n_k, d)
    dout = randn(rng, n_q, d)
    mask = causal_mask_from_positions(torch.arange(n_q), torch.arange(n_k)) if causal else None
    out, lse = block_attention(q, k, v, mask=mask)  # over all keys: the final result
    block_mask = None if mask is None else mask[:, split:]
    return Case(name, (q, k[split:], v[split:], out, lse, dout, block_mask))


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _backward_case(rng, "5 queries over 8 keys; the block is keys 3..7", 5, 8, 4, 3),
            _backward_case(rng, "causal, 6 queries and keys; the block is keys 2..5 (row 0 and 1 see none of it)", 6, 6, 4, 2, True),
        ]  # fmt: skip
    return [
        _backward_case(rng, "large scores, block = the last key", 4, 7, 3, 6, scale=3.0),
        _backward_case(rng, "causal, the block is everything", 5, 5, 2, 0, causal=True),
    ]


exercise(
    "09.6",
    ring_backward_step_reference,
    target="ring_backward_step",
    title="one block of the ring backward",
    points=2,
    cases=_backward_cases,
    atol=1e-12,
    rtol=1e-10,
    outputs=("dq_part", "dk_block", "dv_block"),
    slips={
        "block-lse": dict(lse_of="block"),
        "block-out": dict(out_of="block"),
        "d-without-out": dict(delta="dO"),
        "d-from-block": dict(delta="block"),
        "unmasked": dict(masked=False),
        "unscaled": dict(scaled=False),
        "dv-untransposed": dict(dv_transposed=False),
    },
)

# --------------------------------------------------------------------------- 09.7 predict, measure


def load_imbalance_reference(
    seq_len: int, world_size: int, layout: str, *, causal=True, inverted=False
) -> float:
    r"""Causal attention's work on the busiest rank over the least busy one: the query-key
    pairs each rank's queries may attend to, for the ``"contiguous"`` or ``"zigzag"`` split."""
    work = []
    for rank in range(world_size):
        pos = shard_positions(seq_len, world_size, rank, layout)  # (N / P,) this rank's queries
        keys = torch.arange(seq_len)  # every key of the sequence reaches the rank in a ring
        mask = causal_mask_from_positions(pos, keys) if causal else torch.ones(len(pos), seq_len)
        work.append(int(mask.sum()))  # query-key pairs this rank must score
    w = np.array(work, dtype=np.float64)
    return float(w.min() / w.max() if inverted else w.max() / w.min())


def _imbalance_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("N = 1024, P = 4, contiguous", (1024, 4, "contiguous")),
            Fixed("N = 1024, P = 4, zigzag", (1024, 4, "zigzag")),
            Fixed("N = 64, P = 2, contiguous", (64, 2, "contiguous")),
        ]
    return [
        Fixed("N = 2048, P = 8, contiguous", (2048, 8, "contiguous")),
        Fixed("N = 2048, P = 8, zigzag", (2048, 8, "zigzag")),
        Fixed("N = 48, P = 3, contiguous", (48, 3, "contiguous")),
        *(_imbalance_drawn(rng, layout) for layout in ("contiguous", "zigzag")),
    ]


def _imbalance_drawn(rng: np.random.Generator, layout: str) -> Case:
    """A world size and length drawn from ``rng`` (the grader's seed)."""
    p = int(rng.integers(2, 9))
    n = 2 * p * int(rng.integers(2, 65))
    return Case(f"N = {n}, P = {p}, {layout}", (n, p, layout))


exercise(
    "09.7",
    load_imbalance_reference,
    target="measure_load_imbalance",
    title="predict, then measure: the busiest rank's share of causal attention",
    points=1,
    cases=_imbalance_cases,
    atol=0.0,
    rtol=1e-9,
    compare=within(1e-9),
    measures="the busiest rank's work over the least busy rank's",
    slips={"not-causal": dict(causal=False), "inverted": dict(inverted=True)},
)
