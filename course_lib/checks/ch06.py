r"""Checks for chapter 06 (FlashAttention).

Seven exercises, each a function the learner writes:

* 06.1 ``online_softmax_update(m, l, x_block)`` (numpy): one step of the online softmax,
  :math:`m' = \max(m, \max_j x_j)`, :math:`\ell' = e^{m - m'}\ell + \sum_j e^{x_j - m'}`;
* 06.2 ``tiled_attention(Q, K, V, block_size)`` (numpy): the tiled forward loop, returning
  ``(O, L)`` with the log-sum-exp :math:`L`;
* 06.3 ``flash_forward(q, k, v)`` (torch, float32): the Python wrapper that launches the
  learner's own Triton forward kernel (defined in the same cell), checked through Triton's
  interpreter on the CPU;
* 06.4 ``attention_backward(q, k, v, o, lse, do, scale)`` (torch, float64): dQ, dK, dV from
  the saved output and log-sum-exp, with :math:`D = \mathrm{rowsum}(dO \circ O)`;
* 06.5 ``causal_tiles(n, block_m, block_n)``: how many tiles a causal kernel computes;
* 06.6 ``gqa_attention(q, k, v, is_causal)`` (torch): grouped-query attention without
  repeating K and V, causal aligned bottom-right (a KV cache), returning ``(output, lse)``;
* 06.7 ``measure_rescales(n_scores, block_size, rows, seed)``: predict, then measure how
  often the online softmax rescales.

Each reference function takes a keyword for each common mistake (a *slip*); what the checks
say is in ``ch06.md``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .core import Case, Diagnosed, Fixed
from .declare import exercise
from .kit import randn, with_note, within
from .rules import (
    LIBRARY_ATTENTION_CALLS,
    LIBRARY_ATTENTION_NAMES,
    SOFTMAX_CALLS,
    SOFTMAX_NAMES,
    Rule,
    whole_scores,
)
from .texts import text

# --------------------------------------------------------------------------- 06.1 online softmax


def online_softmax_update_reference(
    m, l, x_block, *, running_max=True, rescale="down", raw_exp=False
) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`m' = \max(m, \mathrm{rowmax}\,x)`,
    :math:`\ell' = e^{m-m'}\ell + \mathrm{rowsum}\,e^{x - m'}`."""
    m_new = np.maximum(m, x_block.max(axis=-1)) if running_max else x_block.max(axis=-1)  # (rows,)
    with np.errstate(all="ignore"):  # two slips overflow on purpose
        if raw_exp:  # e^x of raw scores: inf / inf = nan near 1000, 0 near -1000
            return m_new, (np.exp(m) * l + np.exp(x_block).sum(axis=-1)) / np.exp(m_new)
        # the old sum (rows,): rescaled by exp(m - m_new), added as it is, or by exp(m_new - m)
        old = {"down": np.exp(m - m_new) * l, "none": l, "up": np.exp(m_new - m) * l}[rescale]
    return m_new, old + np.exp(x_block - m_new[..., None]).sum(axis=-1)  # (rows,), (rows,)


def _online_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    a = np.array
    if not hidden:
        return [
            Case(
                "the first block: m = -inf, l = 0 (nothing seen yet), 2 rows of 4 scores",
                (np.full(2, -np.inf), np.zeros(2), rng.normal(size=(2, 4))),
            ),
            Fixed(
                "a block whose scores exceed the running max (the old sum must shrink)",
                (a([0.5, 1.0]), a([2.0, 3.0]), a([[3.0, 0.0, 1.0], [2.5, 4.0, -1.0]])),
            ),
            Fixed(
                "scores around 1000: only differences may be exponentiated",
                (a([1000.0]), a([1.0]), a([[1001.0, 999.0, 1002.5]])),
            ),
            Fixed(
                "a block below the running max: the max must not go down",
                (a([4.0, 2.0]), a([1.5, 2.5]), a([[1.0, -0.5, 0.25], [0.0, 1.5, -2.0]])),
            ),
        ]
    return [
        Case(
            "a block entirely below the running max (m stays)",
            (a([5.0, 6.0, 7.0]), a([1.5, 2.0, 1.0]), rng.normal(size=(3, 5)) - 3.0),
        ),
        Fixed(
            "scores around -1000: e^x underflows to 0 unless the max is subtracted",
            (a([-1000.0, -990.0]), a([1.0, 2.0]), a([[-1001.0, -999.5], [-995.0, -1003.0]])),
        ),
        Case(
            "8 rows, a block of 1 score",
            (rng.normal(size=8), rng.uniform(1, 3, size=8), rng.normal(size=(8, 1)) * 3),
        ),
    ]


exercise(
    "06.1",
    online_softmax_update_reference,
    target="online_softmax_update",
    title="one step of the online softmax",
    points=2,
    cases=_online_cases,
    atol=1e-10,
    rtol=1e-8,
    outputs=("m_new", "l_new"),
    slips={
        "no-rescale": dict(rescale="none"),
        "inverted-rescale": dict(rescale="up"),
        "block-max": dict(running_max=False),
        "raw-exp": dict(raw_exp=True),
    },
)

# --------------------------------------------------------------------------- 06.2 tiled forward


def tiled_attention_reference(
    Q,
    K,
    V,
    block_size,
    *,
    scaled=True,
    running_max=True,
    rescale_acc=True,
    rescale_l=True,
    lse="m+log(l)",
) -> tuple[np.ndarray, np.ndarray]:
    r"""Tiled attention: :math:`O = \mathrm{softmax}(QK^\top/\sqrt{d_h})V` and
    :math:`L = \mathrm{logsumexp}(QK^\top/\sqrt{d_h}) = m + \log \ell`, one query tile at a
    time, the key tiles folded in by the online softmax: :math:`m' = \max(m, \mathrm{rowmax}\,S)`,
    :math:`\alpha = e^{m - m'}`, :math:`\ell' = \alpha\ell + \mathrm{rowsum}\,e^{S - m'}`,
    :math:`A' = \alpha A + e^{S - m'} V_j`."""
    N, head_dim = Q.shape
    O = np.empty((N, V.shape[1]))  # (N, d_v)
    L = np.empty(N)  # (N,)
    s = 1.0 / math.sqrt(head_dim) if scaled else 1.0
    for i in range(0, N, block_size):
        Qi = Q[i : i + block_size]  # (Br, d_h)
        m = np.full(len(Qi), -np.inf)  # (Br,)
        l = np.zeros(len(Qi))  # (Br,)
        A = np.zeros((len(Qi), V.shape[1]))  # (Br, d_v)
        for j in range(0, K.shape[0], block_size):
            S = Qi @ K[j : j + block_size].T * s  # (Br, Bc)
            m_new = np.maximum(m, S.max(axis=1)) if running_max else S.max(axis=1)  # (Br,)
            alpha = np.exp(m - m_new)  # (Br,)
            P = np.exp(S - m_new[:, None])  # (Br, Bc)
            l = (alpha * l if rescale_l else l) + P.sum(axis=1)  # (Br,)
            A = (alpha[:, None] * A if rescale_acc else A) + P @ V[j : j + block_size]  # (Br, d_v)
            m = m_new
        O[i : i + block_size] = A / l[:, None]  # (Br, d_v)
        if lse == "m":  # the running max alone
            L[i : i + block_size] = m  # (Br,)
        elif lse == "log(l)":  # log(l) without the max it was summed relative to
            L[i : i + block_size] = np.log(l)  # (Br,)
        else:
            L[i : i + block_size] = m + np.log(l)  # (Br,)
    return O, L


def _plus_minus_750(rng: np.random.Generator) -> tuple:
    """2 queries, 8 keys, tiles of 4: the first key tile scores about +750, the next -750.

    With the running max the second block's weights are exp(-1500) = 0 and nothing breaks.
    A max taken from the current tile alone drops to -750, and exp(m - m_new) = exp(1500)
    overflows to inf: inf / inf = nan.
    """
    Q = np.ones((2, 4))  # (Nq, d_h): scores = sum of a key's entries / sqrt(4)
    K = np.concatenate([np.full((4, 4), 375.0), np.full((4, 4), -375.0)])  # (Nk, d_h)
    K = K + rng.normal(size=K.shape) * 0.01
    return (Q, K, rng.normal(size=(8, 3)), 4)


def _tiled_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def qkv(
        n_q, n_k, head_dim, d_v, block_size, scale=1.0
    ):  # Q [Nq, d_h], K [Nk, d_h], V [Nk, d_v]
        q, k = rng.normal(size=(n_q, head_dim)) * scale, rng.normal(size=(n_k, head_dim)) * scale
        return q, k, rng.normal(size=(n_k, d_v)), block_size

    if not hidden:
        return [
            Case("N = 8 queries and keys, d_h = 4, tiles of 4", qkv(8, 8, 4, 4, 4)),
            Case("N = 10, d_h = 6, tiles of 3 (the last tile has 1 row)", qkv(10, 10, 6, 6, 3)),
            Case(
                "one key tile scores about +750, the next about -750 (tiles of 4)",
                _plus_minus_750(rng),
            ),
            Case(
                "160 queries and keys in tiles of 16: never all the scores at once",
                qkv(160, 160, 4, 4, 16),
            ),
        ]
    return [
        Case("7 queries, 13 keys, d_v = 5 != d_h = 3, tiles of 4", qkv(7, 13, 3, 5, 4)),
        Case("a single query and key", qkv(1, 1, 2, 2, 2)),
        Case("large scores (inputs x 6): needs the running max", qkv(12, 12, 8, 8, 5, scale=6)),
        Case("one tile holds everything", qkv(6, 6, 4, 4, 16)),
        Case(
            "a key tile scoring about +750 before one about -750, another draw",
            _plus_minus_750(rng),
        ),
        Case(
            "176 queries, 160 keys in tiles of 16: never all the scores at once",
            qkv(176, 160, 4, 4, 16),
        ),
    ]


exercise(
    "06.2",
    tiled_attention_reference,
    target="tiled_attention",
    title="the tiled forward loop",
    points=3,
    cases=_tiled_cases,
    atol=1e-10,
    rtol=1e-8,
    outputs=("O", "L"),
    rules=(Rule("whole-scores", largest=whole_scores(margin=8)),),
    slips={
        "acc-not-rescaled": dict(rescale_acc=False),
        "unscaled": dict(scaled=False),
        "lse-max-only": dict(lse="m"),
        "lse-without-max": dict(lse="log(l)"),
        "tile-max": dict(running_max=False),
    },
)

# --------------------------------------------------------------------------- 06.3 Triton forward

TRITON_BLOCK = 16  # the block size the exercise asks for (the slips assume it)
_FLASH_ATOL, _FLASH_RTOL = 1e-5, 1e-4  # float32 accumulation over <= 50 keys: errors ~1e-6


def _kernel_device() -> str:
    """Where a learner's Triton kernel can read tensors: a CUDA GPU when Triton compiles,
    the CPU when it interprets (a compiled kernel cannot read CPU memory)."""
    from ..flash import triton_mode

    return "cuda" if triton_mode() == "compiled" else "cpu"


def flash_forward_reference(
    q, k, v, *, keys="masked", scaled=True, exp_base=math.e, rescale_acc=True, rescale_l=True
) -> torch.Tensor:
    r""":math:`\mathrm{softmax}(qk^\top/\sqrt{d_h})\,v` for ``q, k, v [N, d_h]`` (float32).

    A kernel that leaves a state unrescaled is 06.2's loop with tiles of ``TRITON_BLOCK``; one
    that lets zero-filled keys past the end into the softmax, the same softmax over the keys
    padded with zeros. Computed as that loop is (in float64, a tile at a time): the
    reference keeps the rules it checks, no softmax call and no (N, N) tensor."""
    n, pad = k.shape[0], 0  # pad: zero keys past the end that take part in the softmax
    if keys == "unmasked":  # loaded with other=0.0 and left unmasked: the last tile's padding
        pad = -n % TRITON_BLOCK
    elif keys == "off-by-one" and n % TRITON_BLOCK:  # cols <= n: key n, in a partial tile only
        pad = 1
    Q, K, V = (t.detach().double().cpu().numpy() for t in (q, k, v))  # (N, d_h) each
    K = np.concatenate([K, np.zeros((pad, K.shape[1]))])  # (N + pad, d_h)
    V = np.concatenate([V, np.zeros((pad, V.shape[1]))])  # (N + pad, d_h)
    Q = Q * math.log(exp_base)  # base ** s = e ** (s ln base): tl.exp2 gives base 2
    out = tiled_attention_reference(
        Q, K, V, TRITON_BLOCK, scaled=scaled, rescale_acc=rescale_acc, rescale_l=rescale_l
    )[0]  # (N, d_h)
    return torch.from_numpy(out).float().to(q.device)


def _last_block_missing(got, expected, case: Case) -> str | None:
    """Only the last, partial query block is wrong: the grid launched n // 16 programs
    instead of cdiv(n, 16)."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return None
    n = expected.shape[0]
    full = n // TRITON_BLOCK * TRITON_BLOCK  # rows covered by whole blocks
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()  # (N, d_h)
    bad_rows = (~torch.isclose(g, e, rtol=_FLASH_RTOL, atol=_FLASH_ATOL)).any(dim=1).nonzero()
    if n % TRITON_BLOCK and bad_rows.numel() and int(bad_rows.min()) >= full:
        return Diagnosed(
            f"Rows {full}..{n - 1} are wrong, the rows before them right.",
            cause=text("06.3/last-block"),
        )
    return None


def _flash_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    device = _kernel_device()

    def t(*shape, scale=1.0):
        return torch.from_numpy(rng.normal(size=shape) * scale).float().to(device)

    if not hidden:
        return [
            Case("N = 16 (one tile), d_h = 16", (t(16, 16), t(16, 16), t(16, 16))),
            Case("N = 37 (ragged last tile), d_h = 32", (t(37, 32), t(37, 32), t(37, 32))),
            Case(
                "N = 100, d_h = 16: the scores stay in the kernel",
                (t(100, 16), t(100, 16), t(100, 16)),
            ),
        ]
    return [
        Case("N = 1, d_h = 16", (t(1, 16), t(1, 16), t(1, 16))),
        Case(
            "N = 50, d_h = 16, large scores (inputs x 3)",
            (t(50, 16, scale=3.0), t(50, 16, scale=3.0), t(50, 16)),
        ),
        Case("N = 80, d_h = 16", (t(80, 16), t(80, 16), t(80, 16))),
    ]


exercise(
    "06.3",
    flash_forward_reference,
    target="flash_forward",
    title="a FlashAttention forward kernel in Triton",
    points=3,
    cases=_flash_cases,
    atol=_FLASH_ATOL,
    rtol=_FLASH_RTOL,
    compare=with_note(_FLASH_ATOL, _FLASH_RTOL, _last_block_missing),
    rules=(
        Rule(
            "no-library-attention",
            calls=LIBRARY_ATTENTION_CALLS | SOFTMAX_CALLS,
            names=LIBRARY_ATTENTION_NAMES | SOFTMAX_NAMES,
        ),
        Rule("whole-scores", largest=whole_scores(margin=1), numpy=False),
    ),
    slips={
        "unmasked": dict(keys="unmasked"),
        "acc-not-rescaled": dict(rescale_acc=False),
        "unscaled": dict(scaled=False),
        "mask-off-by-one": dict(keys="off-by-one"),
        "l-not-rescaled": dict(rescale_l=False),
        "exp2": dict(exp_base=2.0),
    },
)

# --------------------------------------------------------------------------- 06.4 backward


def attention_backward_reference(
    q, k, v, o, lse, do, scale, *, delta="dO.O", inside=True, scaled=True, transpose_p=True
):
    r"""dQ, dK, dV of attention from the saved O and LSE.

    .. math::

        P = e^{\text{scale}\,QK^\top - L},\ dV = P^\top dO,\ dP = dO\,V^\top,\
        D = \mathrm{rowsum}(dO\circ O),\ dS = P\circ(dP - D),\
        dQ = \text{scale}\,dS\,K,\ dK = \text{scale}\,dS^\top Q
    """
    P = torch.exp(scale * q @ k.transpose(-2, -1) - lse[..., None])  # (..., Nq, Nk)
    dV = (P.transpose(-2, -1) if transpose_p else P) @ do  # (..., Nk, d_v)
    dP = do @ v.transpose(-2, -1)  # (..., Nq, Nk)
    if delta == "none":  # the softmax Jacobian's second term left out
        D = torch.zeros_like(lse)  # (..., Nq)
    else:  # rowsum(dO ∘ O), or "dO": rowsum(dO), without O
        D = (do * o if delta == "dO.O" else do).sum(dim=-1)  # (..., Nq)
    dS = P * (dP - D[..., None]) if inside else P * dP - D[..., None]  # (..., Nq, Nk)
    s = scale if scaled else 1.0
    dQ, dK = s * dS @ k, s * dS.transpose(-2, -1) @ q  # (..., Nq, d_h), (..., Nk, d_h)
    return dQ, dK, dV


def _backward_case(rng, name, shape_q, n_k, scale=None):
    *batch_shape, n_q, head_dim = shape_q
    q, k, v, do = (randn(rng, *batch_shape, n, head_dim) for n in (n_q, n_k, n_k, n_q))
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    s = scale * q @ k.transpose(-2, -1)  # (..., Nq, Nk)
    lse = torch.logsumexp(s, dim=-1)  # (..., Nq)
    o = torch.softmax(s, dim=-1) @ v  # (..., Nq, d_h)
    return Case(name, (q, k, v, o, lse, do, scale))


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _backward_case(rng, "N = 5, d_h = 4", (5, 4), 5),
            _backward_case(rng, "N = 9, d_h = 8, scale = 0.5", (9, 8), 9, scale=0.5),
        ]
    return [
        _backward_case(rng, "6 queries, 11 keys (P is not square)", (6, 4), 11),
        _backward_case(rng, "batch and heads: q of shape (2, 3, 7, 4)", (2, 3, 7, 4), 7),
    ]


exercise(
    "06.4",
    attention_backward_reference,
    target="attention_backward",
    title="the backward pass from the log-sum-exp",
    points=3,
    cases=_backward_cases,
    atol=1e-10,
    rtol=1e-8,
    outputs=("dq", "dk", "dv"),
    slips={
        "no-delta": dict(delta="none"),
        "delta-without-o": dict(delta="dO"),
        "delta-outside": dict(inside=False),
        "unscaled": dict(scaled=False),
        "p-not-transposed": dict(transpose_p=False),
    },
)

# --------------------------------------------------------------------------- 06.5 causal tiles


def causal_tiles_reference(
    n, block_m, block_n, *, causal=True, clip=True, floor_plus_one=False, triangle=False
) -> int:
    r"""Tiles (query tile, key tile) a causal forward computes: the query tile starting at
    :math:`s` visits the key tiles up to its last query,
    :math:`\sum_{s = 0, B_m, 2B_m, \dots < n} \lceil \min(n, s + B_m) / B_n \rceil`."""
    if triangle:  # T(T + 1)/2 for T square tiles
        t = math.ceil(n / block_m)
        return t * (t + 1) // 2
    total = 0
    for start in range(0, n, block_m):
        end = min(n, start + block_m) if clip else start + block_m  # past its last query
        if not causal:  # every key tile
            end = n
        total += end // block_n + 1 if floor_plus_one else math.ceil(end / block_n)
    return total


def _tiles_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("n = 256, block_m = 64, block_n = 64", (256, 64, 64)),
            Fixed("n = 1000, block_m = 128, block_n = 64", (1000, 128, 64)),
            Fixed(
                "n = 1000, block_m = 128, block_n = 48: a ragged last query tile", (1000, 128, 48)
            ),
        ]
    return [
        Fixed("n = 1", (1, 128, 64)),
        Fixed("n = 4096, block_m = 128, block_n = 32", (4096, 128, 32)),
        Fixed("n = 300, block_m = 32, block_n = 128", (300, 32, 128)),
        *(_tiles_drawn(rng) for _ in range(2)),
    ]


def _tiles_drawn(rng: np.random.Generator) -> Case:
    """A length and tile sizes drawn from ``rng`` (the grader's seed)."""
    n = int(rng.integers(1, 5000))
    block_m, block_n = (int(rng.choice([16, 32, 48, 64, 128])) for _ in range(2))
    return Case(f"n = {n}, block_m = {block_m}, block_n = {block_n}", (n, block_m, block_n))


exercise(
    "06.5",
    causal_tiles_reference,
    target="causal_tiles",
    title="count the tiles a causal kernel computes",
    points=1,
    cases=_tiles_cases,
    atol=1e-9,
    rtol=0.0,
    slips={
        "every-tile": dict(causal=False),
        "triangle": dict(triangle=True),
        "floor-plus-one": dict(floor_plus_one=True),
        "no-min": dict(clip=False),
    },
)

# --------------------------------------------------------------------------- 06.6 GQA


def gqa_attention_reference(
    q, k, v, is_causal, *, interleaved=False, top_left=False, masked=True, scaled=True
):
    r"""Grouped-query attention, causal aligned bottom-right: ``(output, lse)``.

    Query head :math:`h` reads key/value head :math:`\lfloor h/G \rfloor`,
    :math:`G = H/H_{kv}`; query :math:`i` sees keys :math:`j \le i + N_k - N_q` when causal.
    """
    B, H, n_q, head_dim = q.shape
    h_kv, n_k = k.shape[1], k.shape[2]
    g = H // h_kv
    if interleaved:  # head h paired with key/value head h % H_kv, as .repeat() would do
        qg = q.view(B, g, h_kv, n_q, head_dim).transpose(1, 2)  # (B, H_kv, G, Nq, d)
    else:
        qg = q.view(B, h_kv, g, n_q, head_dim)  # (B, H_kv, G, Nq, d): heads h*G .. h*G+G-1
    s = qg @ k[:, :, None].transpose(-2, -1)  # (B, H_kv, G, Nq, Nk)
    if scaled:
        s = s / math.sqrt(head_dim)
    if is_causal and masked:
        allowed = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
        allowed = allowed.tril(0 if top_left else n_k - n_q)  # (Nq, Nk) j <= i + Nk - Nq
        s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (B, H_kv, G, Nq)
    out = torch.exp(s - lse[..., None]) @ v[:, :, None]  # (B, H_kv, G, Nq, d_v)
    if interleaved:
        out, lse = out.transpose(1, 2), lse.transpose(1, 2)  # back to (B, G, H_kv, ...)
    return out.reshape(B, H, n_q, v.shape[-1]), lse.reshape(B, H, n_q)


def _gqa_case(rng, name, B, H, h_kv, n_q, n_k, head_dim, is_causal):
    q = randn(rng, B, H, n_q, head_dim)  # (B, H, Nq, d)
    k = randn(rng, B, h_kv, n_k, head_dim)  # (B, H_kv, Nk, d)
    v = randn(rng, B, h_kv, n_k, head_dim)  # (B, H_kv, Nk, d)
    return Case(name, (q, k, v, is_causal))


def _gqa_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _gqa_case(rng, "H = 4, H_kv = 2, 3 new queries, 7 keys in the cache, causal", 1, 4, 2, 3, 7, 8, True),
            _gqa_case(rng, "B = 2, H = 6, H_kv = 3, Nq = Nk = 5, not causal", 2, 6, 3, 5, 5, 4, False),
        ]  # fmt: skip
    return [
        _gqa_case(rng, "multi-query: H_kv = 1, one new query against 9 keys, causal", 1, 4, 1, 1, 9, 8, True),
        _gqa_case(rng, "H = 8, H_kv = 2, Nq = Nk = 6, causal", 2, 8, 2, 6, 6, 4, True),
        _gqa_case(rng, "H = H_kv = 3 (plain multi-head), 4 queries, 10 keys, causal", 1, 3, 3, 4, 10, 4, True),
    ]  # fmt: skip


exercise(
    "06.6",
    gqa_attention_reference,
    target="gqa_attention",
    title="grouped-query attention over a KV cache, without repeating K and V",
    points=2,
    cases=_gqa_cases,
    atol=1e-10,
    rtol=1e-8,
    outputs=("output", "lse"),
    slips={
        "interleaved-heads": dict(interleaved=True),
        "top-left": dict(top_left=True),
        "unmasked": dict(masked=False),
        "unscaled": dict(scaled=False),
    },
)

# --------------------------------------------------------------------------- 06.7 predict, measure


def rescale_count_reference(
    n_scores, block_size, rows, seed, *, per_score=False, count_first=True
) -> float:
    r"""How many key blocks raise the running maximum of an online softmax (so that the
    accumulator is rescaled), per row of ``n_scores`` i.i.d. :math:`N(0,1)` scores taken
    ``block_size`` at a time, the first block included (it replaces :math:`-\infty`);
    averaged over ``rows`` rows. In expectation :math:`H_{n/B} = \sum_{j=1}^{n/B} 1/j`."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, n_scores // block_size, block_size))  # (R, T, B) scores
    block_max = x.reshape(rows, -1, 1) if per_score else x.max(-1, keepdims=True)  # (R, T, 1)
    running = np.maximum.accumulate(block_max[..., 0], axis=1)  # (R, T) m after each block
    raised = (running[:, 1:] > running[:, :-1]).sum(axis=1)  # (R,) blocks after the first
    return float(raised.mean() + (1.0 if count_first else 0.0))


def _rescale_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("1024 scores, one at a time (blocks of 1), 2000 rows", (1024, 1, 2000, 0)),
            Fixed("1024 scores in blocks of 64, 2000 rows", (1024, 64, 2000, 1)),
        ]
    return [
        Case("4096 scores in blocks of 128, 1000 rows", (4096, 128, 1000, int(rng.integers(999)))),
        Case("256 scores in blocks of 16, 4000 rows", (256, 16, 4000, int(rng.integers(999)))),
        Fixed("64 scores in one block", (64, 64, 100, 5)),
    ]


exercise(
    "06.7",
    rescale_count_reference,
    target="measure_rescales",
    title="predict, then measure: how often the online softmax rescales",
    points=1,
    cases=_rescale_cases,
    atol=0.0,
    rtol=0.05,
    compare=within(0.05),
    measures="key blocks that raise the running max, per row",
    slips={
        "per-score": dict(per_score=True),
        "first-block-uncounted": dict(count_first=False),
    },
)
