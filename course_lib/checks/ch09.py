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

from ..context_parallel.comm import ring_comm_bytes, ulysses_comm_bytes
from ..context_parallel.merge import (
    block_attention,
    block_attention_backward,
    causal_mask_from_positions,
)
from ..context_parallel.merge import merge_attention as _merge
from ..context_parallel.sharding import shard_positions
from ..context_parallel.ulysses import all_to_all_seq_to_head
from .core import Case, Exercise, Hint, NotThisMistake, register
from .kit import (
    BROADCAST_ERROR,
    DT,
    NEG_INF,
    byte_compare,
    integer_compare,
    randn,
    twin,
    unless_different,
    within,
)


def _partial(rng, n_q, n_k, d, d_v, mask=None, scale=1.0):
    """A real partial attention (output, lse) of random queries over random keys."""
    q, k, v = randn(rng, n_q, d, std=scale), randn(rng, n_k, d, std=scale), randn(rng, n_k, d_v)
    return block_attention(q, k, v, mask=mask)


# --------------------------------------------------------------------------- 09.1 the merge


def merge_attention_reference(out_a, lse_a, out_b, lse_b):
    r""":math:`L = m + \log(e^{L_a-m} + e^{L_b-m})`, :math:`O = e^{L_a-L}O_a + e^{L_b-L}O_b`."""
    return _merge(out_a, lse_a, out_b, lse_b)


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
                (
                    big_a,
                    torch.tensor([1000.0, 990.0], dtype=DT),
                    big_b,
                    torch.tensor([1001.5, 990.0], dtype=DT),
                ),
            ),
            Case(
                "rows that saw no key yet: LSE -inf and output 0 in one part (row 1), or in "
                "both (row 2: the result must stay 0 and -inf, not NaN)",
                (e_a, le_a, e_b, le_b),
            ),
        ]
    o1, l1 = _partial(rng, 5, 7, 3, 4)
    o2, l2 = _partial(rng, 5, 2, 3, 4, scale=3.0)
    return [
        Case("5 queries, d_v = 4, part b with large scores", (o1, l1, o2, l2)),
        Case(
            "batch and heads: (2, 3, 4, 5) outputs",
            (
                randn(rng, 2, 3, 4, 5),
                randn(rng, 2, 3, 4),
                randn(rng, 2, 3, 4, 5),
                randn(rng, 2, 3, 4),
            ),
        ),
        Case(
            "log-sum-exps near -1000 (e^-1000 underflows to 0)",
            (
                randn(rng, 2, 2),
                torch.tensor([-1000.0, -1003.0], dtype=DT),
                randn(rng, 2, 2),
                torch.tensor([-1000.5, -1001.0], dtype=DT),
            ),
        ),
        Case(
            "part b saw nothing at all",
            (o1, l1, torch.zeros_like(o1), torch.full_like(l1, NEG_INF)),
        ),
        Case(
            "row 0 saw no key in either part: it must stay 0 and -inf, not NaN",
            (
                torch.cat([torch.zeros(1, 4, dtype=DT), o1[1:]]),
                torch.cat([torch.full((1,), NEG_INF, dtype=DT), l1[1:]]),
                torch.cat([torch.zeros(1, 4, dtype=DT), o2[1:]]),
                torch.cat([torch.full((1,), NEG_INF, dtype=DT), l2[1:]]),
            ),
        ),
    ]


def _merge_average(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


def _merge_unnormalised(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    return w_a[..., None] * out_a + w_b[..., None] * out_b, _merge(out_a, lse_a, out_b, lse_b)[1]


def _merge_lse_max(out_a, lse_a, out_b, lse_b):
    return _merge(out_a, lse_a, out_b, lse_b)[0], torch.maximum(lse_a, lse_b)


def _merge_swapped(out_a, lse_a, out_b, lse_b):
    out, lse = _merge(out_a, lse_a, out_b, lse_b)
    w_a = torch.exp(lse_a - lse).nan_to_num(0.0)
    w_b = torch.exp(lse_b - lse).nan_to_num(0.0)
    return w_b[..., None] * out_a + w_a[..., None] * out_b, lse


def _merge_nan_when_empty(out_a, lse_a, out_b, lse_b):
    """The safe formula without the guard: max(-inf, -inf) = -inf, and -inf - -inf = NaN."""
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    lse = m + torch.log(w_a + w_b)
    return (w_a / (w_a + w_b))[..., None] * out_a + (w_b / (w_a + w_b))[..., None] * out_b, lse


def _merge_lse_added(out_a, lse_a, out_b, lse_b):
    """The LSEs added: the product of the two denominators, not their sum."""
    return _merge(out_a, lse_a, out_b, lse_b)[0], lse_a + lse_b


def _merge_weighted_by_lse(out_a, lse_a, out_b, lse_b):
    """Each output weighted by its LSE itself, L_a / (L_a + L_b), instead of by e^L."""
    total = lse_a + lse_b
    w_a, w_b = lse_a / total, lse_b / total  # (..., Nq)
    return w_a[..., None] * out_a + w_b[..., None] * out_b, _merge(out_a, lse_a, out_b, lse_b)[1]


def _merge_raw_exp(out_a, lse_a, out_b, lse_b):
    l_a, l_b = torch.exp(lse_a), torch.exp(lse_b)
    total = l_a + l_b
    return (l_a / total)[..., None] * out_a + (l_b / total)[..., None] * out_b, torch.log(total)


register(
    Exercise(
        id="09.1",
        title="merge two partial attentions",
        points=2,
        target="merge_attention",
        cases=_merge_cases,
        reference=merge_attention_reference,
        atol=1e-12,
        rtol=1e-10,
        outputs=("output", "lse"),
        mistakes={
            Hint(
                "you averaged the two outputs.",
                "Each part is weighted by its share of the softmax denominator, "
                "exp(lse_a - lse) and exp(lse_b - lse), which are 1/2 only when the two LSEs are "
                "equal.",
            ): _merge_average,
            Hint(
                "your weights exp(lse_a - m), exp(lse_b - m) do not add up to 1.",
                "Divide by their sum (equivalently, use exp(lse_a - lse) with the merged lse).",
            ): _merge_unnormalised,
            Hint(
                "your merged lse is the larger of the two.",
                "The denominators add: lse = log(exp(lse_a) + exp(lse_b)) = m + "
                "log(exp(lse_a - m) + exp(lse_b - m)).",
            ): _merge_lse_max,
            Hint(
                "you added the two LSEs: that is the log of the *product* of the denominators.",
                "The denominators add, so their logs combine by log-sum-exp: "
                "lse = log(exp(lse_a) + exp(lse_b)), computed as m + log(exp(lse_a - m) + "
                "exp(lse_b - m)).",
            ): _merge_lse_added,
            Hint(
                "you weighted each output by its LSE, L_a / (L_a + L_b).",
                "A part's share of the denominator is e^{L_a} / (e^{L_a} + e^{L_b}) = "
                "exp(lse_a - lse): the LSE is a log, so exponentiate (differences of) it.",
            ): _merge_weighted_by_lse,
            Hint(
                "you swapped the weights.",
                "out_a gets exp(lse_a - lse), the share of part a.",
            ): _merge_swapped,
            Hint(
                "rows where both LSEs are -inf (no key seen yet) become NaN: max is -inf, and "
                "-inf - (-inf) is NaN.",
                "Replace an infinite max by 0 before subtracting (torch.where), and divide by "
                "the weights' sum only where it is > 0; such rows stay out = 0, lse = -inf.",
            ): _merge_nan_when_empty,
            Hint(
                "you exponentiated the LSEs themselves: exp(1000) overflows to inf, and inf/inf "
                "is NaN.",
                "Subtract m = max(lse_a, lse_b) first; every exponent is then <= 0.",
            ): _merge_raw_exp,
        },
        errors={
            BROADCAST_ERROR + r" at non-singleton dimension": Hint(
                "your weights (..., Nq) and outputs (..., Nq, d_v) do not line up.",
                "Give the weights a last axis of 1 before multiplying: w_a[..., None] * out_a.",
            ),
        },
        hint=Hint(
            "check the weight each part's output gets (its share of the combined softmax "
            "denominator), and rows in which neither part saw a key.",
            "Each part's output counts in proportion to its softmax denominator e^L; compute the "
            "proportions without ever exponentiating an L itself. m = torch.maximum(lse_a, "
            "lse_b) (0 where it is -inf); w_a = exp(lse_a - m), w_b = exp(lse_b - m); lse = m + "
            "log(w_a + w_b); out = (w_a * out_a + w_b * out_b) / (w_a + w_b) with [..., None] on "
            "the weights, 0 where w_a + w_b == 0.",
        ),
    )
)

# --------------------------------------------------------------------------- 09.2 one ring step


def ring_step_reference(q, k_block, v_block, out, lse, mask):
    r"""Partial attention over the block (scale $1/\sqrt d$, ``mask`` True = may attend),
    merged into ``(out, lse)``."""
    out_b, lse_b = block_attention(q, k_block, v_block, mask=mask)
    return _merge(out, lse, out_b, lse_b)


def _empty_state(n_q, d_v):
    return torch.zeros(n_q, d_v, dtype=DT), torch.full((n_q,), NEG_INF, dtype=DT)


def _ring_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        q, k0, v0, k1, v1 = (
            randn(rng, 4, 8),
            randn(rng, 4, 8),
            randn(rng, 4, 3),
            randn(rng, 4, 8),
            randn(rng, 4, 3),
        )
        out, lse = ring_step_reference(q, k0, v0, *_empty_state(4, 3), None)
        # zigzag, P = 2, N = 8: rank 0 holds positions [0, 1, 6, 7], rank 1 holds [2, 3, 4, 5]
        pos0, pos1 = shard_positions(8, 2, 0, "zigzag"), shard_positions(8, 2, 1, "zigzag")
        mask_own = causal_mask_from_positions(pos0, pos0)
        mask_other = causal_mask_from_positions(pos0, pos1)  # rows 0, 1 see nothing here
        qz, kz, vz = randn(rng, 4, 4), randn(rng, 4, 4), randn(rng, 4, 2)
        kz1, vz1 = randn(rng, 4, 4), randn(rng, 4, 2)
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
    return [
        Case(
            "large scores (inputs x 3), a random mask with an empty row", (q, k, v, out, lse, mask)
        ),
        Case(
            "one query, one key",
            (randn(rng, 1, 2), randn(rng, 1, 2), randn(rng, 1, 2), *_empty_state(1, 2), None),
        ),
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


def _ring_unscaled(q, k, v, out, lse, mask):
    return ring_step_reference(q * math.sqrt(q.shape[-1]), k, v, out, lse, mask)


def _ring_scale_dv(q, k, v, out, lse, mask):
    if v.shape[-1] == q.shape[-1]:
        raise NotThisMistake
    return ring_step_reference(q * math.sqrt(q.shape[-1] / v.shape[-1]), k, v, out, lse, mask)


def _ring_finite_fill(q, k, v, out, lse, mask):
    """Masked scores set to -1e9: an all-masked row gets a uniform average and a finite lse."""
    s = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return _merge(out, lse, torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1))


def _ring_no_merge(q, k, v, out, lse, mask):
    return block_attention(q, k, v, mask=mask)


def _ring_nan_masked_rows(q, k, v, out, lse, mask):
    s = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, NEG_INF)
    out_b = torch.softmax(s, dim=-1) @ v  # NaN in rows with no visible key
    return _merge(out, lse, out_b, torch.logsumexp(s, dim=-1))


def _ring_mask_inverted(q, k, v, out, lse, mask):
    return ring_step_reference(q, k, v, out, lse, None if mask is None else ~mask)


def _ring_lse_is_max(q, k, v, out, lse, mask):
    s = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, NEG_INF)
    out_b, _ = block_attention(q, k, v, mask=mask)
    return _merge(out, lse, out_b, s.amax(dim=-1))


register(
    Exercise(
        id="09.2",
        title="one step of ring attention",
        points=3,
        target="ring_step",
        cases=_ring_cases,
        reference=ring_step_reference,
        atol=1e-12,
        rtol=1e-10,
        outputs=("output", "lse"),
        mistakes={
            Hint(
                "you forgot the scale of the scores.",
                "S = q k_block^T / sqrt(d_k).",
            ): _ring_unscaled,
            Hint(
                "you scaled the scores by 1/sqrt(d_v), the width of the values.",
                "The scale belongs to the dot product q . k: 1/sqrt(d_k), with d_k = q.shape[-1].",
            ): _ring_scale_dv,
            Hint(
                "you returned the new block's partial result only: every earlier block is lost.",
                "Merge it into the running (out, lse) with merge_attention.",
            ): _ring_no_merge,
            Hint(
                "your mask is inverted.",
                "mask=True means 'may attend' (torch SDPA's convention): fill the scores where "
                "the mask is False, scores.masked_fill(~mask, -inf).",
            ): _ring_mask_inverted,
            Hint(
                "rows whose keys are all masked out become NaN: a softmax over a row of -inf is "
                "0/0.",
                "Such a row's partial result is out_b = 0, lse_b = -inf (so the merge ignores "
                "it): compute lse_b = torch.logsumexp(scores, -1) first, then the weights "
                "exp(scores - lse_b) with lse_b replaced by 0 where it is -inf.",
            ): _ring_nan_masked_rows,
            Hint(
                "you masked with a large negative number (-1e9) instead of -inf: a row that "
                "sees none of the block gets a uniform average of its values and a finite lse, "
                "as if it had seen them.",
                "Use -inf (chapter 02); then such a row's lse_b is -inf and its out_b must be 0 "
                "(exponentiate scores - lse_b with lse_b replaced by 0 there).",
            ): _ring_finite_fill,
            Hint(
                "the block's lse is its row maximum.",
                "The log-sum-exp is logsumexp(scores, -1), not the row maximum.",
            ): _ring_lse_is_max,
        },
        hint=Hint(
            "check the block's own partial result (masked, scaled, and a row that sees nothing), "
            "and that you merge it into the running state.",
            "Attend to the block alone (masked scores, its log-sum-exp, its normalised output), "
            "then merge that partial result into the running state. scores = q @ k_block.T / "
            "sqrt(d), masked with -inf where mask is False; lse_b = torch.logsumexp(scores, -1); "
            "out_b = exp(scores - lse_b[:, None]) @ v_block (0 for rows with lse_b = -inf); "
            "return merge_attention(out, lse, out_b, lse_b).",
        ),
    )
)

# --------------------------------------------------------------------------- 09.3 zigzag


def zigzag_positions_reference(seq_len: int, world_size: int, rank: int) -> torch.Tensor:
    """Chunk ``rank`` then chunk ``2P - 1 - rank`` of ``2P`` chunks of ``seq_len / (2P)``."""
    return shard_positions(seq_len, world_size, rank, "zigzag")


def _zigzag_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("N = 16, P = 4, rank 0: chunks 0 and 7", (16, 4, 0)),
            Case("N = 16, P = 4, rank 2: chunks 2 and 5", (16, 4, 2)),
            Case("N = 24, P = 3, rank 1: chunks of 4 tokens", (24, 3, 1)),
            Case("N = 12, P = 2, rank 1", (12, 2, 1)),
        ]
    return [
        Case("P = 1: the two halves of the sequence", (10, 1, 0)),
        Case("N = 64, P = 8, rank 5", (64, 8, 5)),
        Case("N = 12, P = 6, rank 3: chunks of one token", (12, 6, 3)),
        *(_zigzag_drawn(rng) for _ in range(2)),
    ]


def _zigzag_drawn(rng: np.random.Generator) -> Case:
    """A world size, chunk size and rank drawn from ``rng`` (the grader's seed)."""
    p = int(rng.integers(1, 17))
    n = 2 * p * int(rng.integers(1, 33))
    rank = int(rng.integers(0, p))
    return Case(f"N = {n}, P = {p}, rank {rank}", (n, p, rank))


_positions_compare = integer_compare(
    "positions",
    "positions index tensors (x[..., positions, :]), which needs integers; torch.arange of ints "
    "(use `//`, not `/`, for the chunk size) gives int64.",
    accept_lists=True,  # a list of ints is a right answer too (torch.tensor(list) indexes)
)


def _zigzag_contiguous(seq_len, world_size, rank):
    n = seq_len // world_size
    return torch.arange(rank * n, (rank + 1) * n)


def _zigzag_off_by_one(seq_len, world_size, rank):
    c = seq_len // (2 * world_size)
    back = 2 * world_size - rank
    return torch.cat(
        [torch.arange(rank * c, (rank + 1) * c), torch.arange(back * c, (back + 1) * c)]
    )


def _zigzag_reversed(seq_len, world_size, rank):
    pos = zigzag_positions_reference(seq_len, world_size, rank)
    c = len(pos) // 2
    return torch.cat([pos[c:], pos[:c]])


def _zigzag_p_chunks(seq_len, world_size, rank):
    c = seq_len // world_size // 2  # half a shard, but counted from P chunks of N/P
    return torch.cat(
        [
            torch.arange(rank * c, (rank + 1) * c),
            torch.arange((world_size - 1 - rank) * c, (world_size - rank) * c),
        ]
    )


def _zigzag_striped(seq_len, world_size, rank):
    return torch.arange(rank, seq_len, world_size)


register(
    Exercise(
        id="09.3",
        title="the tokens of a zigzag shard",
        points=1,
        target="zigzag_positions",
        cases=_zigzag_cases,
        reference=zigzag_positions_reference,
        atol=0.0,
        rtol=0.0,
        compare=_positions_compare,
        mistakes={
            Hint(
                "that is the plain (contiguous) split.",
                "Zigzag cuts the sequence into 2P chunks and gives rank r chunks r and 2P - 1 - r.",
            ): _zigzag_contiguous,
            Hint(
                "your second chunk is one chunk too far.",
                "Chunks are numbered 0 .. 2P - 1: the mirror of chunk r is 2P - 1 - r, not 2P - r.",
            ): _zigzag_off_by_one,
            Hint(
                "the chunks are in the wrong order.",
                "Chunk r (the early tokens) first, then chunk 2P - 1 - r.",
            ): _zigzag_reversed,
            Hint(
                "you mirrored among P chunks.",
                "The second chunk is counted from the end of the whole sequence: chunk "
                "2P - 1 - r of 2P chunks of seq_len / (2P) tokens.",
            ): _zigzag_p_chunks,
            Hint(
                "that is the striped layout (token t on rank t mod P), not zigzag.",
                "Zigzag gives each rank two contiguous chunks, r and 2P - 1 - r.",
            ): _zigzag_striped,
        },
        hint=Hint(
            "work P = 2 and 8 tokens by hand: how many chunks are there, and which two does each "
            "rank hold, in which order?",
            "2P chunks of equal length; rank r takes one from the front and its mirror image "
            "from the back. c = seq_len // (2 * world_size); torch.cat([torch.arange(rank * c, "
            "(rank + 1) * c), torch.arange(b * c, (b + 1) * c)]) with b = 2 * world_size - 1 - "
            "rank.",
        ),
    )
)

# --------------------------------------------------------------------------- 09.4 all-to-all


def seq_to_head_all_to_all_reference(xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """``xs[i] (B, H, n, d_h)`` → ``ys[j] (B, H/P, P*n, d_h)``: head group j, all ranks' tokens."""
    return all_to_all_seq_to_head(list(xs))


def _a2a_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        ids = [
            torch.arange(r * 100, r * 100 + 4 * 3 * 2, dtype=DT).reshape(1, 4, 3, 2)
            for r in range(2)
        ]  # rank r's values start at 100 r: easy to trace
        return [
            Case(
                "P = 2 ranks, B = 1, H = 4, n = 3, d = 2 (rank r's entries are 100r + index)",
                (ids,),
            ),
            Case(
                "P = 4, B = 2, H = 8, n = 2, d = 3", ([randn(rng, 2, 8, 2, 3) for _ in range(4)],)
            ),
            Case("P = 3, H = 3: one head per rank", ([randn(rng, 1, 3, 4, 2) for _ in range(3)],)),
        ]
    return [
        Case("P = 1: nothing moves", ([randn(rng, 2, 4, 3, 2)],)),
        Case("P = 2, H = 2, n = 5", ([randn(rng, 1, 2, 5, 3) for _ in range(2)],)),
        Case("P = 4, H = 16", ([randn(rng, 1, 16, 2, 2) for _ in range(4)],)),
    ]


def _a2a_stacked(xs):
    return torch.stack(seq_to_head_all_to_all_reference(xs))  # (P, B, H/P, P*n, d_h)


def _a2a_strided_heads(xs):
    P = len(xs)
    return [torch.cat([x[:, j::P] for x in xs], dim=2) for j in range(P)]


def _a2a_head_dim(xs):
    P = len(xs)
    h = xs[0].shape[1] // P
    return [torch.cat([x[:, j * h : (j + 1) * h] for x in xs], dim=1) for j in range(P)]


def _a2a_reversed_ranks(xs):
    return seq_to_head_all_to_all_reference(list(reversed(xs)))


def _a2a_interleaved_tokens(xs):
    P = len(xs)
    B, H, n, head_dim = xs[0].shape
    h = H // P
    return [
        torch.stack([x[:, j * h : (j + 1) * h] for x in xs], dim=3).reshape(B, h, P * n, head_dim)
        for j in range(P)
    ]


register(
    Exercise(
        id="09.4",
        title="Ulysses' all-to-all: from a sequence split to a head split",
        points=2,
        target="seq_to_head_all_to_all",
        cases=_a2a_cases,
        reference=seq_to_head_all_to_all_reference,
        atol=0.0,
        rtol=0.0,
        mistakes={
            Hint(
                "you returned one stacked tensor.",
                "Return a list with one tensor per rank, ys[j] of shape (B, H/P, P*n, d_h): "
                "each rank holds its own tensor.",
            ): _a2a_stacked,
            Hint(
                "rank j got every P-th head (x[:, j::P]).",
                "Rank j gets the contiguous head group j*H/P .. (j+1)*H/P - 1.",
            ): _a2a_strided_heads,
            Hint(
                "you concatenated along the head axis.",
                "The pieces from different ranks are different tokens: they go along the "
                "sequence axis (dim 2), giving (B, H/P, P*n, d_h).",
            ): _a2a_head_dim,
            Hint(
                "the sequence is not in rank order.",
                "Rank 0's tokens first, then rank 1's (that is position order for a contiguous "
                "split).",
            ): _a2a_reversed_ranks,
            Hint(
                "the tokens of different ranks are interleaved: you stacked the rank axis after "
                "the token axis before reshaping.",
                "Stack (or concatenate) so that all of rank 0's n tokens come first, then "
                "rank 1's.",
            ): _a2a_interleaved_tokens,
        },
        hint=Hint(
            "check what rank j holds after the exchange: which heads, which tokens, and in what "
            "order along the sequence.",
            "Rank j collects head group j from every rank and lines the pieces up along the "
            "sequence, in rank order. h = H // P; ys[j] = torch.cat([x[:, j*h:(j+1)*h] for x in "
            "xs], dim=2) for j in range(P).",
        ),
    )
)

# --------------------------------------------------------------------------- 09.5 bytes


def forward_comm_bytes_reference(
    seq_len, world_size, num_heads, head_dim, bytes_per_element
) -> tuple[int, int]:
    """(ring, Ulysses) bytes one rank sends in the forward pass, B = 1, H_kv = H."""
    kw = dict(num_heads=num_heads, head_dim=head_dim, bytes_per_element=bytes_per_element)
    return (
        ring_comm_bytes(seq_len, world_size, **kw),
        ulysses_comm_bytes(seq_len, world_size, **kw),
    )


def _bytes_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("N = 4096, P = 4, H = 8, d_h = 64, bfloat16", (4096, 4, 8, 64, 2)),
            Case("N = 1536, P = 3, H = 6, d_h = 32, float32", (1536, 3, 6, 32, 4)),
            Case("N = 131072, P = 8, H = 32, d_h = 128, bfloat16", (131072, 8, 32, 128, 2)),
        ]
    return [
        Case("P = 1: nothing to send", (512, 1, 4, 16, 4)),
        Case("N = 65536, P = 16, H = 16, d_h = 128, float16", (65536, 16, 16, 128, 2)),
        Case("N = 96, P = 3, H = 6, d_h = 8, float64", (96, 3, 6, 8, 8)),
        *(_bytes_drawn(rng) for _ in range(2)),
    ]


def _bytes_drawn(rng: np.random.Generator) -> Case:
    """A configuration drawn from ``rng`` (the grader's seed); N a multiple of P, H of P."""
    p = int(rng.integers(2, 17))
    n, h = p * int(rng.integers(1, 4097)), p * int(rng.integers(1, 5))
    d, b = int(rng.choice([16, 32, 64, 128])), int(rng.choice([2, 4, 8]))
    return Case(f"N = {n}, P = {p}, H = {h}, d_h = {d}, {b} bytes", (n, p, h, d, b))


def _per(seq_len, world_size, num_heads, head_dim, b):
    return num_heads * (seq_len // world_size) * head_dim * b  # one (H, n, d_h) tensor


def _bytes_ring_p_hops(n, p, h, d, b):
    return 2 * p * _per(n, p, h, d, b), forward_comm_bytes_reference(n, p, h, d, b)[1]


def _bytes_ring_k_only(n, p, h, d, b):
    return (p - 1) * _per(n, p, h, d, b), forward_comm_bytes_reference(n, p, h, d, b)[1]


def _bytes_ring_full_sequence(n, p, h, d, b):
    return 2 * (p - 1) * h * n * d * b, forward_comm_bytes_reference(n, p, h, d, b)[1]


def _bytes_ulysses_keeps_nothing(n, p, h, d, b):
    return forward_comm_bytes_reference(n, p, h, d, b)[0], 4 * _per(n, p, h, d, b)


def _bytes_ulysses_to_each(n, p, h, d, b):
    return forward_comm_bytes_reference(n, p, h, d, b)[0], 4 * (p - 1) * _per(n, p, h, d, b)


def _bytes_ulysses_kv_only(n, p, h, d, b):
    return forward_comm_bytes_reference(n, p, h, d, b)[0], 2 * (p - 1) * _per(n, p, h, d, b) // p


_bytes_compare = byte_compare(
    "Divide with `//` (N // P, and (P - 1) // P only after multiplying), as the statement asks.",
    names=("ring", "ulysses"),
)


def _bytes_ulysses_no_output(n, p, h, d, b):
    return forward_comm_bytes_reference(n, p, h, d, b)[0], 3 * (p - 1) * _per(n, p, h, d, b) // p


register(
    Exercise(
        id="09.5",
        title="communication volume of ring attention and Ulysses",
        points=2,
        target="forward_comm_bytes",
        cases=_bytes_cases,
        reference=forward_comm_bytes_reference,
        atol=0.5,
        rtol=0.0,
        outputs=("ring", "ulysses"),
        compare=_bytes_compare,
        mistakes={
            Hint(
                "your ring makes P hops, one too many.",
                "After P - 1 shifts every rank has seen every block, and a rank's own block "
                "needs no message.",
            ): _bytes_ring_p_hops,
            Hint(
                "your ring passes only K.",
                "Both K and V travel: two tensors of H * (N / P) * d_h numbers per hop.",
            ): _bytes_ring_k_only,
            Hint(
                "each of your ring messages holds the whole sequence.",
                "A message is one shard, N / P tokens.",
            ): _bytes_ring_full_sequence,
            Hint(
                "in your all-to-all a rank sends its whole tensor.",
                "A rank keeps the 1/P addressed to itself and sends (P - 1) / P of it.",
            ): _bytes_ulysses_keeps_nothing,
            Hint(
                "in your all-to-all a rank sends its whole tensor to *each* other rank.",
                "It sends each rank only the chunk addressed to it, 1/P of the tensor: "
                "(P - 1) / P of the tensor in all.",
            ): _bytes_ulysses_to_each,
            Hint(
                "your Ulysses forward has three all-to-alls.",
                "Four: Q, K and V to the head split, and the output back to the sequence split.",
            ): _bytes_ulysses_no_output,
            Hint(
                "your Ulysses forward moves only K and V.",
                "The queries need the head split too, and the output goes back: four "
                "all-to-alls (Q, K, V in; O out).",
            ): _bytes_ulysses_kv_only,
        },
        hint=Hint(
            "count one rank's shard first (its size in bytes), then how many shards (or which "
            "fraction of one) leave the rank in each scheme.",
            "Count one rank's tensor of H * (N/P) * d_h numbers, then how many times (or what "
            "fraction of it) leaves the rank. shard = H * (N // P) * d_h * bytes; ring = 2 * (P "
            "- 1) * shard; ulysses = 4 * shard * (P - 1) // P.",
        ),
    )
)

# --------------------------------------------------------------------------- 09.6 backward step


def ring_backward_step_reference(q, k_block, v_block, out, lse, dout, mask):
    r"""``(dq_part, dk_block, dv_block)`` with $P = e^{S - L}$ from the *final* LSE."""
    return block_attention_backward(q, k_block, v_block, out, lse, dout, mask=mask)


def _backward_case(rng, name, n_q, n_k, d, split, mask_fn=None, scale=1.0):
    """Queries attend to n_k keys; the block is keys [split:]. ``out``, ``lse`` are final."""
    q, k, v = randn(rng, n_q, d, std=scale), randn(rng, n_k, d, std=scale), randn(rng, n_k, d)
    dout = randn(rng, n_q, d)
    mask = None if mask_fn is None else mask_fn(n_q, n_k)
    out, lse = block_attention(q, k, v, mask=mask)  # over all keys: the final result
    block_mask = None if mask is None else mask[:, split:]
    return Case(name, (q, k[split:], v[split:], out, lse, dout, block_mask))


def _causal(n_q, n_k):
    return causal_mask_from_positions(torch.arange(n_q), torch.arange(n_k))


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _backward_case(rng, "5 queries over 8 keys; the block is keys 3..7", 5, 8, 4, 3),
            _backward_case(
                rng,
                "causal, 6 queries and keys; the block is keys 2..5 (row 0 and 1 see none of it)",
                6,
                6,
                4,
                2,
                _causal,
            ),
        ]
    return [
        _backward_case(rng, "large scores, block = the last key", 4, 7, 3, 6, scale=3.0),
        _backward_case(rng, "causal, the block is everything", 5, 5, 2, 0, _causal),
    ]


def _bwd_local_lse(q, k, v, out, lse, dout, mask):
    s = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, NEG_INF)
    return block_attention_backward(q, k, v, out, torch.logsumexp(s, -1), dout, mask=mask)


def _bwd_no_mask(q, k, v, out, lse, dout, mask):
    return block_attention_backward(q, k, v, out, lse, dout, mask=None)


def _bwd_local_out(q, k, v, out, lse, dout, mask):
    out_b, _ = block_attention(q, k, v, mask=mask)
    return block_attention_backward(q, k, v, out_b, lse, dout, mask=mask)


def _bwd_weights(q, k, lse, mask):
    s = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, NEG_INF)
    return torch.exp(s - lse[:, None])  # (Nq, Nk)


def _bwd_with_D(q, k, v, out, lse, dout, mask, D):
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = _bwd_weights(q, k, lse, mask)  # (Nq, Nk)
    ds = p * (dout @ v.T - D[:, None])  # (Nq, Nk)
    return ds @ k * scale, ds.T @ q * scale, p.T @ dout


def _bwd_D_rowsum_dout(q, k, v, out, lse, dout, mask):
    return _bwd_with_D(q, k, v, out, lse, dout, mask, dout.sum(-1))


def _bwd_D_from_block(q, k, v, out, lse, dout, mask):
    p = _bwd_weights(q, k, lse, mask)
    return _bwd_with_D(q, k, v, out, lse, dout, mask, (p * (dout @ v.T)).sum(-1))


def _bwd_dv_untransposed(q, k, v, out, lse, dout, mask):
    dq, dk, _ = block_attention_backward(q, k, v, out, lse, dout, mask=mask)
    return dq, dk, _bwd_weights(q, k, lse, mask) @ dout  # (Nq, Nk) @ (Nq, d_v)


def _bwd_unscaled(q, k, v, out, lse, dout, mask):
    dq, dk, dv = block_attention_backward(q, k, v, out, lse, dout, mask=mask)
    return dq * math.sqrt(q.shape[-1]), dk * math.sqrt(q.shape[-1]), dv


register(
    Exercise(
        id="09.6",
        title="one block of the ring backward",
        points=2,
        target="ring_backward_step",
        cases=_backward_cases,
        reference=ring_backward_step_reference,
        atol=1e-12,
        rtol=1e-10,
        outputs=("dq_part", "dk_block", "dv_block"),
        mistakes={
            Hint(
                "you recomputed the weights with the block's own log-sum-exp: they then sum to "
                "1 over this block alone.",
                "Use the final lse you were given (over all keys), so that P = exp(S - lse) are "
                "the true attention weights of these keys.",
            ): _bwd_local_lse,
            Hint(
                "D must use the final output (given), not the block's partial output.",
                "D = rowsum(dout * out) with the out argument.",
            ): _bwd_local_out,
            Hint(
                "your D is rowsum(dO): the output O is missing.",
                "D = rowsum(dO ∘ O) = (dout * out).sum(-1), with the final out.",
            ): _bwd_D_rowsum_dout,
            Hint(
                "your D sums P ∘ dP over this block only.",
                "D = rowsum(P ∘ dP) holds over *all* keys, which this rank does not have; the "
                "equal form rowsum(dO ∘ O) needs only the final output: (dout * out).sum(-1).",
            ): _bwd_D_from_block,
            Hint(
                "masked-out keys got a weight.",
                "Apply the mask to the scores (-inf where it is False) before exponentiating.",
            ): _bwd_no_mask,
            Hint(
                "your dq and dk miss the scale 1/sqrt(d).",
                "S = scale * q k^T, so dq = scale * dS k and dk = scale * dS^T q.",
            ): _bwd_unscaled,
            Hint(
                "your dv is P @ dout: the weights are not transposed.",
                "dV_j = sum_i P_ij dO_i: dv = P.T @ dout, shape (Nk, d_v).",
            ): _bwd_dv_untransposed,
        },
        hint=Hint(
            "check which log-sum-exp and which output your weights and D use: the final ones you "
            "are given, not this block's own.",
            "Chapter 06's backward restricted to this block's keys, with the *final* lse and out "
            "given to you. S = q @ k_block.T / sqrt(d) (masked with -inf); P = exp(S - lse[:, "
            "None]); dv = P.T @ dout; dP = dout @ v_block.T; D = (dout * out).sum(-1); dS = P * "
            "(dP - D[:, None]); dq = dS @ k_block / sqrt(d); dk = dS.T @ q / sqrt(d).",
        ),
    )
)


# --------------------------------------------------------------------------- 09.7 predict, measure


def _work(seq_len, world_size, layout, *, causal=True, ratio=lambda w: w.max() / w.min()):
    work = []
    for rank in range(world_size):
        pos = shard_positions(seq_len, world_size, rank, layout)  # (N / P,) this rank's queries
        keys = torch.arange(seq_len)  # every key of the sequence reaches the rank in a ring
        mask = causal_mask_from_positions(pos, keys) if causal else torch.ones(len(pos), seq_len)
        work.append(int(mask.sum()))  # query-key pairs this rank must score
    return float(ratio(np.array(work, dtype=np.float64)))


def load_imbalance_reference(seq_len: int, world_size: int, layout: str) -> float:
    r"""Causal attention's work on the busiest rank over the least busy one: the query-key
    pairs each rank's queries may attend to, for the ``"contiguous"`` or ``"zigzag"`` split."""
    return _work(seq_len, world_size, layout)


def _imbalance_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("N = 1024, P = 4, contiguous", (1024, 4, "contiguous")),
            Case("N = 1024, P = 4, zigzag", (1024, 4, "zigzag")),
            Case("N = 64, P = 2, contiguous", (64, 2, "contiguous")),
        ]
    return [
        Case("N = 2048, P = 8, contiguous", (2048, 8, "contiguous")),
        Case("N = 2048, P = 8, zigzag", (2048, 8, "zigzag")),
        Case("N = 48, P = 3, contiguous", (48, 3, "contiguous")),
        *(_imbalance_drawn(rng, layout) for layout in ("contiguous", "zigzag")),
    ]


def _imbalance_drawn(rng: np.random.Generator, layout: str) -> Case:
    """A world size and length drawn from ``rng`` (the grader's seed)."""
    p = int(rng.integers(2, 9))
    n = 2 * p * int(rng.integers(2, 65))
    return Case(f"N = {n}, P = {p}, {layout}", (n, p, layout))


register(
    Exercise(
        id="09.7",
        title="predict, then measure: the busiest rank's share of causal attention",
        points=1,
        target="measure_load_imbalance",
        cases=_imbalance_cases,
        reference=load_imbalance_reference,
        atol=0.0,
        rtol=1e-9,
        compare=within(1e-9),
        measures="the busiest rank's work over the least busy rank's",
        mistakes={
            Hint(
                "you counted every key for every query: without the causal mask all ranks "
                "do the same work whatever the split.",
                "Count only the pairs a query may attend to (key position <= query position).",
            ): unless_different(twin(_work, causal=False), load_imbalance_reference),
            Hint(
                "your ratio is the least busy rank over the busiest (below 1).",
                "Divide the busiest rank's work by the least busy rank's: max / min.",
            ): unless_different(
                twin(_work, ratio=lambda w: w.min() / w.max()), load_imbalance_reference
            ),
        },
        hint=Hint(
            "check what you count per rank (the pairs the causal mask allows) and which way "
            "round your ratio goes.",
            "For each rank, count the (query, key) pairs its queries may attend to; divide the "
            "largest count by the smallest. pos = shard_positions(N, P, rank, layout); work = "
            "causal_mask_from_positions(pos, torch.arange(N)).sum(); return max(work) / "
            "min(work).",
        ),
    )
)
