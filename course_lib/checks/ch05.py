r"""Checks for chapter 05 (positional information: sinusoids and RoPE).

Six exercises, each a function the learner writes:

* 05.1 ``sinusoidal_table(seq_len, d_model)``: the sinusoidal encoding, ``[N, D]``
* 05.2 ``rope_interleaved(x, positions)``: RoPE with pairs :math:`(2i, 2i+1)`, torch
* 05.3 ``relative_score(q, k, delta)``: the RoPE score from the offset :math:`m-n` alone
* 05.4 ``interleaved_to_half_weights(W, num_heads)``: convert :math:`W_Q`/:math:`W_K`
  columns from the interleaved to the half-split convention, head by head
* 05.5 ``llama3_scaled_frequencies(theta, factor, low_freq_factor, high_freq_factor,
  original_context)``: Llama 3.1's frequency-dependent RoPE scaling (not shown in the
  lecture)
* 05.6 ``count_full_turns(head_dim, base, context_len)``: predict, then count the RoPE pairs
  that turn at least once within a context

Inputs of the torch exercises are float64; the base is always 10 000.
"""

from __future__ import annotations

import numpy as np
import torch

from ..positional import rope_frequencies, rope_permutation
from .core import Case, Diagnosed, Fixed, compare_values
from .declare import exercise
from .kit import DT, randn, refuse_complex, with_note, within
from .texts import text

BASE = 10000.0


# --------------------------------------------------------------------------- 05.1 sinusoids


def sinusoidal_table_reference(
    seq_len: int, d_model: int, *, exponent="2i/d", swapped=False, concat=False
) -> np.ndarray:
    r""":math:`PE_{p,2i} = \sin(p\,\omega_i)`, :math:`PE_{p,2i+1} = \cos(p\,\omega_i)`,
    :math:`\omega_i = 10000^{-2i/d}`; float64 ``[seq_len, d_model]``."""
    p = np.arange(seq_len)[:, None]  # (n, 1)
    j = np.arange(d_model)[None, :]  # (1, d) the feature
    i = j // 2  # (1, d) its pair
    e = {"2i/d": 2 * i, "j/d": j, "i/d": i, "-2i/d": -2 * i}[exponent] / d_model  # (1, d)
    angle = p / BASE**e  # (n, d)
    if concat:  # [sin | cos] of the pairs' angles
        return np.concatenate((np.sin(angle[:, 0::2]), np.cos(angle[:, 0::2])), axis=1)
    sin, cos = np.sin(angle), np.cos(angle)  # (n, d) each
    even, odd = (cos, sin) if swapped else (sin, cos)
    return np.where(j % 2 == 0, even, odd)  # (n, d)


def _sin_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("4 positions, d_model = 6", (4, 6)),
            Fixed("50 positions, d_model = 16", (50, 16)),
        ]
    n = int(rng.integers(5, 30))
    return [
        Fixed("1 position, d_model = 2: [[0, 1]]", (1, 2)),
        Fixed("200 positions, d_model = 64", (200, 64)),
        Case(f"{n} positions, d_model = 10", (n, 10)),
    ]


exercise(
    "05.1",
    sinusoidal_table_reference,
    target="sinusoidal_table",
    title="the sinusoidal position table",
    points=1,
    cases=_sin_cases,
    # A table computed in float32 (torch's default) is off by up to ~1e-5 at position 200;
    # that is rounding, not a mistake. Every slip is off by O(1).
    atol=1e-4,
    rtol=1e-4,
    slips={
        "swapped": dict(swapped=True),
        "feature-index": dict(exponent="j/d"),
        "i-over-d": dict(exponent="i/d"),
        "concat": dict(concat=True),
        "positive-exponent": dict(exponent="-2i/d"),
    },
)


# --------------------------------------------------------------------------- 05.2 RoPE


def rope_interleaved_reference(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    sign=1.0,
    pairs="(2i, 2i+1)",
    rate=2,
    own_positions=False,
    layout="interleaved",
    in_place=False,
) -> torch.Tensor:
    r"""Rotate pair :math:`(x_{2i}, x_{2i+1})` of token t by :math:`p_t\,\theta_i`,
    :math:`\theta_i = 10000^{-2i/d}`."""
    d = x.shape[-1]
    theta = BASE ** (-(rate * torch.arange(d // 2, dtype=DT) / d))  # (d/2,)
    if own_positions:  # 0 .. N-1, whatever `positions` says
        positions = torch.arange(x.shape[-2])
    angle = positions.to(DT)[:, None] * theta  # (N, d/2)
    cos, sin = torch.cos(angle), sign * torch.sin(angle)  # (N, d/2)
    if pairs == "(i, i+d/2)":  # 'rotate half'
        a, b = x[..., : d // 2], x[..., d // 2 :]  # (..., N, d/2)
    else:
        a, b = x[..., 0::2], x[..., 1::2]  # (..., N, d/2)
    ya = a * cos - b * sin  # (..., N, d/2)
    yb = (ya if in_place else a) * sin + b * cos  # (..., N, d/2) in place: from the new a
    if pairs == "(i, i+d/2)" or layout == "cat":
        return torch.cat((ya, yb), dim=-1)  # (..., N, d) as [a' | b']
    return torch.stack((ya, yb), dim=-1).flatten(-2)  # (..., N, d) as a'0 b'0 a'1 b'1 ...


def _rope_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
                "two tokens (1, 0) at positions 1 and 2, d = 2: rotations by 1 and 2 radians",
                (torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=DT), torch.tensor([1, 2])),
            ),
            Case("x (5, 8) at positions 0..4", (randn(rng, 5, 8), torch.arange(5))),
            Case(
                "x (2, 3, 6, 16) at positions 10..15 (new tokens after a KV cache of 10)",
                (randn(rng, 2, 3, 6, 16), torch.arange(10, 16)),
            ),
            Case(
                "x (3, 8) at positions 5000..5002 (deep into a long context)",
                (randn(rng, 3, 8), torch.arange(5000, 5003)),
            ),
        ]
    return [
        Case(
            "positions out of order with a repeat", (randn(rng, 4, 8), torch.tensor([7, 0, 7, 3]))
        ),
        Case(
            "x (2, 4, 9, 64), positions 100..108", (randn(rng, 2, 4, 9, 64), torch.arange(100, 109))
        ),
        Case(
            "random positions below 300",
            (randn(rng, 3, 7, 12), torch.from_numpy(rng.integers(0, 300, size=7))),
        ),
    ]


def _float32_angles(got, expected, case) -> str | None:
    """A clear word when the only problem is float32 angles (right to 1e-2)."""
    if compare_values(got, expected, 1e-2, 0.0) is not None:
        return None
    return Diagnosed("", cause=text("05.2/float32-angles"))


exercise(
    "05.2",
    rope_interleaved_reference,
    target="rope_interleaved",
    title="RoPE, interleaved pairs (2i, 2i+1)",
    points=2,
    cases=_rope_cases,
    atol=1e-6,
    rtol=1e-5,
    compare=with_note(1e-6, 1e-5, _float32_angles),
    slips={
        "clockwise": dict(sign=-1.0),
        "half-split": dict(pairs="(i, i+d/2)"),
        "i-over-d": dict(rate=1),
        "ignored-positions": dict(own_positions=True),
        "cat-layout": dict(layout="cat"),
        "in-place": dict(in_place=True),
    },
)


# --------------------------------------------------------------------------- 05.3 relative score


def relative_score_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    delta: torch.Tensor,
    *,
    sign=1.0,
    conjugate=True,
    rate=2,
    rotate=True,
    part="real",
    pairs="(2i, 2i+1)",
) -> torch.Tensor:
    r""":math:`(R_m q)^\top (R_n k)` with :math:`m - n = \delta`, from the offset alone: with
    each pair read as a complex number, :math:`z_i = x_{2i} + \mathrm{i}\,x_{2i+1}`, it is
    :math:`\mathrm{Re} \sum_i z_{q,i}\, \overline{z_{k,i}}\, e^{\mathrm{i}\,\delta\,\theta_i}`,
    :math:`\theta_i = 10000^{-2i/d}`, for every :math:`n` (tests/course_lib/checks/test_ch05.py
    checks it against q and k rotated to absolute positions). ``q, k [B, d]``, ``delta [B]``
    → ``[B]``."""
    if not rotate:  # the plain dot product
        return (q * k).sum(-1)  # (B,)
    d = q.shape[-1]
    theta = BASE ** (-(rate * torch.arange(d // 2, dtype=DT) / d))  # (d/2,)
    if pairs == "(i, i+d/2)":
        zq = torch.complex(q[:, : d // 2], q[:, d // 2 :])  # (B, d/2)
        zk = torch.complex(k[:, : d // 2], k[:, d // 2 :])  # (B, d/2)
    else:
        zq = torch.complex(q[:, 0::2], q[:, 1::2])  # (B, d/2)
        zk = torch.complex(k[:, 0::2], k[:, 1::2])  # (B, d/2)
    if conjugate:
        zk = zk.conj()
    rot = torch.polar(torch.ones(1, dtype=DT), sign * delta.to(DT)[:, None] * theta)  # (B, d/2)
    total = (zq * zk * rot).sum(-1)  # (B,) complex
    return total.abs() if part == "abs" else total.real  # (B,)


def _rel_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
                "d = 2, rows (q, k, delta) = ((1,0), (1,0), 0), ((1,0), (1,0), 1), "
                "((1,0), (0,1), 1), ((0,1), (0,1), 1); expected [1, cos 1, sin 1, cos 1]",
                (
                    torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=DT),
                    torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=DT),
                    torch.tensor([0, 1, 1, 1]),
                ),
            ),
            Case(
                "4 random (q, k) pairs in d = 8, delta in -20..20",
                (randn(rng, 4, 8), randn(rng, 4, 8), torch.from_numpy(rng.integers(-20, 21, 4))),
            ),
        ]
    return [
        Case(
            "d = 64, delta = 0, -1, 1, 150, -150",
            (randn(rng, 5, 64), randn(rng, 5, 64), torch.tensor([0, -1, 1, 150, -150])),
        ),
        Case(
            "d = 16, random delta below 300 in size",
            (randn(rng, 6, 16), randn(rng, 6, 16), torch.from_numpy(rng.integers(-300, 300, 6))),
        ),
    ]


exercise(
    "05.3",
    relative_score_reference,
    target="relative_score",
    title="the RoPE score from the offset m - n alone",
    points=2,
    cases=_rel_cases,
    atol=1e-6,
    rtol=1e-5,
    compare=refuse_complex(
        1e-6,
        1e-5,
        "but a score is a real number: return the REAL part of the sum, (...).real, a real "
        "tensor of shape (B,).",
    ),
    slips={
        "flipped-sign": dict(sign=-1.0),
        "no-conjugate": dict(conjugate=False),
        "i-over-d": dict(rate=1),
        "plain-dot": dict(rotate=False),
        "modulus": dict(part="abs"),
        "half-split": dict(pairs="(i, i+d/2)"),
    },
)


# --------------------------------------------------------------------------- 05.4 conventions


def interleaved_to_half_weights_reference(
    W: torch.Tensor, num_heads: int, *, inverse=False, per_head=True, axis="columns"
) -> torch.Tensor:
    r"""Permute the columns of each head's block of ``W [d_model, H*d_h]`` by
    ``[0, 2, …, d-2, 1, 3, …, d-1]`` so that half-split RoPE on ``x @ W'`` gives the
    same scores as interleaved RoPE on ``x @ W``."""
    d_model, width = W.shape
    if not per_head:  # one permutation of all H*d_h columns
        return W[:, rope_permutation(width)]  # (d_model, H*d_h)
    head_dim = width // num_heads
    perm = rope_permutation(head_dim)  # (d_h,)
    if inverse:
        perm = torch.argsort(perm)  # (d_h,)
    if axis == "rows":  # the per-head permutation on W's rows (needs a square W)
        if d_model != width:
            raise ValueError("this mistake needs a square W")
        return W.reshape(num_heads, head_dim, width)[:, perm].reshape(d_model, width)
    w = W.reshape(d_model, num_heads, head_dim)  # (d_model, H, d_h)
    return w[..., perm].reshape(d_model, width)  # (d_model, H*d_h)


def _conv_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
                "one head, W = the column indices 0..7 (d_model 1, d_h 8)",
                (torch.arange(8, dtype=DT)[None, :], 1),
            ),
            Case("W (12, 16), 2 heads of d_h 8", (randn(rng, 12, 16), 2)),
            Case("a square W (16, 16), 2 heads of d_h 8", (randn(rng, 16, 16), 2)),
        ]
    return [
        Case("W (6, 24), 4 heads of d_h 6", (randn(rng, 6, 24), 4)),
        Case("W (32, 64), 1 head of d_h 64", (randn(rng, 32, 64), 1)),
        Case("W (8, 48), 3 heads of d_h 16", (randn(rng, 8, 48), 3)),
    ]


exercise(
    "05.4",
    interleaved_to_half_weights_reference,
    target="interleaved_to_half_weights",
    title="convert W_Q / W_K from interleaved to half-split RoPE",
    points=2,
    cases=_conv_cases,
    atol=1e-12,
    rtol=0.0,
    slips={
        "inverse": dict(inverse=True),
        "all-columns": dict(per_head=False),
        "rows": dict(axis="rows"),
    },
    errors={"indexed-rows": r"IndexError: index \d+ is out of bounds for dimension 0"},
)


# --------------------------------------------------------------------------- 05.5 Llama 3.1


def llama3_reference(
    theta,
    factor,
    low_freq_factor,
    high_freq_factor,
    original_context,
    *,
    every_pair=False,
    two_pi=2 * torch.pi,
    new_context=False,
    clip=True,
    swapped=False,
):
    r"""Llama 3.1's scaled frequencies (:func:`course_lib.positional.llama3_scaled_frequencies`):
    with :math:`r_i = L\,\theta_i / 2\pi` the turns pair :math:`i` makes over the original
    context :math:`L` and
    :math:`\gamma_i = \mathrm{clip}\big((r_i - \text{low})/(\text{high} - \text{low}),\,0,\,1\big)`,
    :math:`\theta_i' = (1 - \gamma_i)\,\theta_i/\text{factor} + \gamma_i\,\theta_i`."""
    theta = torch.as_tensor(theta, dtype=DT)  # (d/2,)
    if every_pair:  # position interpolation: every pair slowed down
        return theta / factor  # (d/2,)
    context = original_context * factor if new_context else original_context
    turns = context * theta / two_pi  # (d/2,) r_i: the turns over the context
    gamma = (turns - low_freq_factor) / (high_freq_factor - low_freq_factor)  # (d/2,)
    if clip:
        gamma = gamma.clamp(0.0, 1.0)  # (d/2,) 0 = interpolate, 1 = keep
    if swapped:  # the blend weight applied the other way round
        return gamma * theta / factor + (1 - gamma) * theta  # (d/2,)
    return (1 - gamma) * theta / factor + gamma * theta  # (d/2,)


def _llama3_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
                "Llama 3.1 8B: d_h 128, base 500000, factor 8, low 1, high 4, context 8192",
                (rope_frequencies(128, 500_000.0), 8.0, 1.0, 4.0, 8192),
            ),
            Fixed(
                "four pairs of wavelengths 1000 (kept), 3000 and 6000 (blended) and 20000 "
                "positions (slowed down 8 times)",
                (
                    2 * torch.pi / torch.tensor([1000.0, 3000.0, 6000.0, 20000.0], dtype=DT),
                    8.0,
                    1.0,
                    4.0,
                    8192,
                ),
            ),
        ]
    return [
        Fixed("Llama 3.2 1B: factor 32", (rope_frequencies(64, 500_000.0), 32.0, 1.0, 4.0, 8192)),
        Fixed(
            "base 10000, d_h 64, factor 4, low 2, high 16, context 4096",
            (rope_frequencies(64, 10_000.0), 4.0, 2.0, 16.0, 4096),
        ),
        Fixed("factor 1: nothing changes", (rope_frequencies(32, 10_000.0), 1.0, 1.0, 4.0, 2048)),
        *(_llama3_drawn(rng) for _ in range(2)),
    ]


def _llama3_drawn(rng: np.random.Generator) -> Case:
    """A configuration drawn from ``rng`` (the grader's seed): head size, base, factor,
    ramp and context all vary, so no table of answers covers the hidden cases."""
    d = int(rng.choice([32, 64, 128]))
    base = float(np.round(10 ** rng.uniform(3.5, 6.0)))
    factor = float(rng.choice([2.0, 4.0, 8.0, 16.0, 32.0]))
    low = float(rng.choice([1.0, 2.0]))
    high = low + float(rng.integers(2, 16))
    context = int(rng.choice([1024, 2048, 4096, 8192]))
    return Case(
        f"d_h {d}, base {base:g}, factor {factor:g}, low {low:g}, high {high:g}, context {context}",
        (rope_frequencies(d, base), factor, low, high, context),
    )


exercise(
    "05.5",
    llama3_reference,
    target="llama3_scaled_frequencies",
    title="Llama 3.1's RoPE scaling",
    points=2,
    cases=_llama3_cases,
    atol=1e-15,
    rtol=1e-12,
    slips={
        "interpolation": dict(every_pair=True),
        "swapped": dict(swapped=True),
        "no-two-pi": dict(two_pi=1.0),
        "new-context": dict(new_context=True),
        "no-clip": dict(clip=False),
    },
)


# --------------------------------------------------------------------------- 05.6 predict, measure


def full_turns_reference(
    head_dim: int, base: float, context_len: int, *, rate=2, turn=1.0, last_is_length=False
) -> int:
    r"""How many of RoPE's :math:`d/2` pairs turn at least once (:math:`2\pi`) between
    positions 0 and ``context_len - 1``, with :math:`\theta_i = b^{-2i/d}`."""
    theta = base ** (-(rate * torch.arange(head_dim // 2, dtype=DT) / head_dim))  # (d/2,)
    last = context_len if last_is_length else context_len - 1
    angle = last * theta  # (d/2,) how far pair i has turned at the last position
    return int((angle >= turn * 2 * torch.pi).sum())


def _turns_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("d = 128, base 10000, 2048 positions", (128, 10000.0, 2048)),
            Fixed("d = 128, base 500000 (Llama 3), 8192 positions", (128, 500000.0, 8192)),
            Fixed("d = 64, base 10000, 512 positions", (64, 10000.0, 512)),
            Fixed("d = 32, base 10000, 7 positions: does even pair 0 turn?", (32, 10000.0, 7)),
        ]
    return [
        Fixed("d = 128, base 10000, 131072 positions", (128, 10000.0, 131072)),
        Fixed("d = 16, base 100, 64 positions", (16, 100.0, 64)),
        Fixed("d = 128, base 10000, 7 positions", (128, 10000.0, 7)),
        Fixed("d = 128, base 10000, 8 positions: pair 0 turns once", (128, 10000.0, 8)),
        *(_turns_drawn(rng) for _ in range(2)),
    ]


def _turns_drawn(rng: np.random.Generator) -> Case:
    """A head size, base and context drawn from ``rng`` (the grader's seed)."""
    d = 2 * int(rng.integers(4, 65))
    base = float(np.round(10 ** rng.uniform(2.0, 6.0)))
    n = int(rng.integers(2, 200_000))
    return Case(f"d = {d}, base {base:g}, {n} positions", (d, base, n))


exercise(
    "05.6",
    full_turns_reference,
    target="count_full_turns",
    title="predict, then measure: how many RoPE pairs turn once within a context",
    points=1,
    cases=_turns_cases,
    atol=0.5,
    rtol=0.0,
    compare=within(0.5, relative=False),
    measures="the pairs that turn at least once",
    slips={
        "i-over-d": dict(rate=1),
        "half-turns": dict(turn=0.5),
        "whole-length": dict(last_is_length=True),
    },
)
