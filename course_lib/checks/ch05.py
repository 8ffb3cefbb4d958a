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

from ..positional import (
    apply_rope,
    llama3_scaled_frequencies,
    rope_frequencies,
    rope_permutation,
    sinusoidal_encoding,
)
from .core import Case, Diagnosed, Exercise, Hint, compare_values, register
from .kit import DT, randn, refuse_complex, twin, unless_different, with_note, within

BASE = 10000.0


# --------------------------------------------------------------------------- 05.1 sinusoids


def sinusoidal_table_reference(seq_len: int, d_model: int) -> np.ndarray:
    r""":math:`PE_{p,2i} = \sin(p\,\omega_i)`, :math:`PE_{p,2i+1} = \cos(p\,\omega_i)`,
    :math:`\omega_i = 10000^{-2i/d}`; float64 ``[seq_len, d_model]``."""
    return sinusoidal_encoding(seq_len, d_model, BASE, dtype=DT).numpy()  # (n, d)


def _sin_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("4 positions, d_model = 6", (4, 6)),
            Case("50 positions, d_model = 16", (50, 16)),
        ]
    n = int(rng.integers(5, 30))
    return [
        Case("1 position, d_model = 2: [[0, 1]]", (1, 2)),
        Case("200 positions, d_model = 64", (200, 64)),
        Case(f"{n} positions, d_model = 10", (n, 10)),
    ]


def _sin_table(n, d, exponent, even=np.sin, odd=np.cos):
    p = np.arange(n)[:, None]  # (n, 1)
    j = np.arange(d)[None, :]  # (1, d)
    ang = p / BASE ** exponent(j, d)  # (n, d)
    return np.where(j % 2 == 0, even(ang), odd(ang))  # (n, d)


def _sin_swapped(n, d):
    return _sin_table(n, d, lambda j, d: 2 * (j // 2) / d, even=np.cos, odd=np.sin)


def _sin_feature_index(n, d):
    return _sin_table(n, d, lambda j, d: j / d)


def _sin_no_two(n, d):
    return _sin_table(n, d, lambda j, d: (j // 2) / d)


def _sin_concat(n, d):
    p = np.arange(n)[:, None]  # (n, 1)
    w = BASE ** (-2 * np.arange(d // 2) / d)  # (d/2,)
    return np.concatenate((np.sin(p * w), np.cos(p * w)), axis=1)  # (n, d)


def _sin_positive_exponent(n, d):
    return _sin_table(n, d, lambda j, d: -2 * (j // 2) / d)


register(
    Exercise(
        id="05.1",
        title="the sinusoidal position table",
        points=1,
        target="sinusoidal_table",
        cases=_sin_cases,
        reference=sinusoidal_table_reference,
        # A table computed in float32 (torch's default) is off by up to ~1e-5 at position 200;
        # that is rounding, not a mistake. Every wrong formula below is off by O(1).
        atol=1e-4,
        rtol=1e-4,
        mistakes={
            Hint(
                "sin and cos are swapped.", "Even features (0, 2, 4, ...) hold sin, odd ones cos."
            ): _sin_swapped,
            Hint(
                "the sin and the cos of a pair turn at different speeds.",
                "Features 2i and 2i+1 must share ONE frequency 10000^(-2i/d); you used the "
                "feature index j itself (10000^(-j/d)).",
            ): _sin_feature_index,
            Hint(
                "your frequencies fall too slowly: the exponent is 2i/d, not i/d.",
                "With i the pair index, omega_i = 10000^(-2i/d).",
            ): _sin_no_two,
            Hint(
                "you put all the sines first and all the cosines second ([sin | cos]).",
                "The table interleaves them: sin at feature 2i, cos at feature 2i+1.",
            ): _sin_concat,
            Hint(
                "you multiplied by 10000^(2i/d) instead of dividing.",
                "The angle is p / 10000^(2i/d), i.e. p times a frequency <= 1.",
            ): _sin_positive_exponent,
        },
        hint=Hint(
            "check one row of your table against the statement's formula: the frequency each "
            "pair uses, and which columns hold sin and which cos.",
            "One angle per (position, pair); sin in the even columns, cos in the odd ones. Build "
            "angles[p, i] = p / 10000**(2*i/d) with shape (n, d/2), then put sin(angles) in the "
            "even columns and cos(angles) in the odd columns.",
        ),
    )
)


# --------------------------------------------------------------------------- 05.2 RoPE


def rope_interleaved_reference(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    r"""Rotate pair :math:`(x_{2i}, x_{2i+1})` of token t by :math:`p_t\,\theta_i`,
    :math:`\theta_i = 10000^{-2i/d}`."""
    return apply_rope(x, positions, base=BASE, interleaved=True)  # (..., N, d)


def _rope_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
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


def _rope_with(
    x, positions, theta_exp, sign=1.0, half=False, pos=None, layout="stack", inplace=False
):
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=DT)  # (d/2,)
    theta = BASE ** (-theta_exp(i, d))  # (d/2,)
    p = positions if pos is None else pos(x, positions)
    ang = p.to(DT)[:, None] * theta  # (N, d/2)
    cos, sin = torch.cos(ang), sign * torch.sin(ang)  # (N, d/2)
    if half:
        a, b = x[..., : d // 2], x[..., d // 2 :]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    ya = a * cos - b * sin  # (..., N, d/2)
    yb = (ya if inplace else a) * sin + b * cos  # (..., N, d/2)
    if half or layout == "cat":
        return torch.cat((ya, yb), dim=-1)  # (..., N, d) as [a' | b']
    return torch.stack((ya, yb), dim=-1).flatten(-2)  # (..., N, d) as a'0 b'0 a'1 b'1 ...


def _float32_angles(got, expected, case) -> str | None:
    """A clear word when the only problem is float32 angles (right to 1e-2)."""
    if compare_values(got, expected, 1e-2, 0.0) is not None:
        return None
    return Diagnosed(
        "",
        cause=Hint(
            "your rotation is right but not precise enough: an angle p * theta computed in "
            "float32 (about 7 significant digits) is off by about p * 1e-7 radian, i.e. 5e-4 at "
            "position 5000.",
            "Compute theta and the angles in float64 (positions.to(torch.float64)), as "
            "long-context code must.",
        ),
    )


_ROPE_ATOL, _ROPE_RTOL = 1e-6, 1e-5
_rope_compare = with_note(_ROPE_ATOL, _ROPE_RTOL, _float32_angles)

register(
    Exercise(
        id="05.2",
        title="RoPE, interleaved pairs (2i, 2i+1)",
        points=2,
        target="rope_interleaved",
        cases=_rope_cases,
        reference=rope_interleaved_reference,
        atol=_ROPE_ATOL,
        rtol=_ROPE_RTOL,
        compare=_rope_compare,
        mistakes={
            Hint(
                "your rotation turns the wrong way (clockwise).",
                "The new pair is (x_a cos - x_b sin, x_a sin + x_b cos).",
            ): lambda x, pos: _rope_with(x, pos, lambda i, d: 2 * i / d, sign=-1.0),
            Hint(
                "you paired features (i, i + d/2) ('rotate half', Hugging Face's convention).",
                "This exercise pairs neighbours (2i, 2i+1): x[..., 0::2] and x[..., 1::2].",
            ): lambda x, pos: _rope_with(x, pos, lambda i, d: 2 * i / d, half=True),
            Hint(
                "your exponent is i/d.", "theta_i = 10000^(-2i/d) with i the pair index."
            ): lambda x, pos: _rope_with(x, pos, lambda i, d: i / d),
            Hint(
                "you ignored `positions` and rotated token t by t * theta (positions 0..N-1).",
                "Use the positions you are given (they may start after a KV cache).",
            ): lambda x, pos: _rope_with(
                x, pos, lambda i, d: 2 * i / d, pos=lambda x, p: torch.arange(x.shape[-2])
            ),
            Hint(
                "your rotated pairs are right but written back in the wrong layout.",
                "torch.cat((a', b'), -1) puts all first coordinates before all second ones. "
                "Interleave them back: torch.stack((a', b'), dim=-1).flatten(-2).",
            ): lambda x, pos: _rope_with(x, pos, lambda i, d: 2 * i / d, layout="cat"),
            Hint(
                "your second coordinate used the already-rotated first one.",
                "Did you overwrite x[..., 0::2] in place before computing x[..., 1::2]? "
                "Compute both new values from the original a and b, into a new tensor.",
            ): lambda x, pos: _rope_with(x, pos, lambda i, d: 2 * i / d, inplace=True),
        },
        hint=Hint(
            "check which features form a pair, the angle each pair turns by (from `positions`), "
            "and the layout you write the pairs back in.",
            "One angle per (token, pair); rotate the even/odd feature pairs; interleave back. "
            "angles = positions[:, None] * theta[None, :] has shape (N, d/2); rotate a = x[..., "
            "0::2], b = x[..., 1::2] and interleave the results back with torch.stack((a', b'), "
            "dim=-1).flatten(-2).",
        ),
    )
)


# --------------------------------------------------------------------------- 05.3 relative score


def relative_score_reference(q: torch.Tensor, k: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    r""":math:`(R_m q)^\top (R_n k)` with :math:`m - n = \delta`, computed the long way: row
    :math:`b` puts the key at :math:`n_b = 17 + 1000 b` and the query at :math:`n_b + \delta_b`
    and rotates both (interleaved pairs). A learner's formula sees only :math:`\delta`, so
    matching this checks the relative property at positions it never saw.
    ``q, k [B, d]``, ``delta [B]`` → ``[B]``."""
    n = 17 + 1000 * torch.arange(q.shape[0])  # (B,) key positions, far from 0
    m = n + delta.to(n.dtype)  # (B,) query positions
    qm = apply_rope(q[:, None, :], m[:, None], base=BASE)[:, 0]  # (B, d) q at position m
    kn = apply_rope(k[:, None, :], n[:, None], base=BASE)[:, 0]  # (B, d) k at position n
    return (qm * kn).sum(-1)  # (B,)


def _rel_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
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


def _rel(
    q, k, delta, sign=1.0, conj=True, theta_exp=lambda i, d: 2 * i / d, half=False, part="real"
):
    d = q.shape[-1]
    theta = BASE ** (-theta_exp(torch.arange(d // 2, dtype=DT), d))  # (d/2,)
    if half:  # pairs (i, i + d/2)
        zq = torch.complex(q[:, : d // 2], q[:, d // 2 :])  # (B, d/2)
        zk = torch.complex(k[:, : d // 2], k[:, d // 2 :])  # (B, d/2)
    else:  # pairs (2i, 2i+1)
        zq = torch.complex(q[:, 0::2], q[:, 1::2])  # (B, d/2)
        zk = torch.complex(k[:, 0::2], k[:, 1::2])  # (B, d/2)
    zk = zk.conj() if conj else zk
    rot = torch.polar(torch.ones(1, dtype=DT), sign * delta.to(DT)[:, None] * theta)  # (B, d/2)
    total = (zq * zk * rot).sum(-1)  # (B,) complex
    return total.abs() if part == "abs" else total.real  # (B,)


def _unless_same(wrong):
    """Never named where it agrees with the reference: a complex result whose real part is
    right would "match" e.g. the i/d-exponent twin on a d = 2 case, where i/d = 2i/d = 0."""
    return unless_different(wrong, relative_score_reference)


_rel_compare = refuse_complex(
    1e-6,
    1e-5,
    "but a score is a real number: return the REAL part of the sum, (...).real, a real "
    "tensor of shape (B,).",
)


register(
    Exercise(
        id="05.3",
        title="the RoPE score from the offset m - n alone",
        points=2,
        target="relative_score",
        cases=_rel_cases,
        reference=relative_score_reference,
        atol=1e-6,
        rtol=1e-5,
        compare=_rel_compare,
        mistakes={
            Hint(
                "the sign of the offset is flipped.",
                "With delta = m - n the factor is e^{+i delta theta} (equivalently, the score "
                "is q^T R_{n-m} k, rotating k by -delta).",
            ): _unless_same(lambda q, k, d: _rel(q, k, d, sign=-1.0)),
            Hint(
                "you forgot the complex conjugate of k.",
                "The real dot product of two pairs is Re(z_q * conj(z_k)), not Re(z_q * z_k).",
            ): _unless_same(twin(_rel, conj=False)),
            Hint(
                "your exponent is i/d (the angles turn too slowly).",
                "theta_i = 10000^(-2i/d) with i the pair index.",
            ): _unless_same(lambda q, k, d: _rel(q, k, d, theta_exp=lambda i, dd: i / dd)),
            Hint(
                "you returned the plain dot product q.k.",
                "The rotation by delta * theta_i is missing: multiply each pair by "
                "e^{i delta theta_i}.",
            ): _unless_same(lambda q, k, d: (q * k).sum(-1)),
            Hint(
                "you took the modulus |…| of the complex sum instead of its real part.",
                "The score is Re(sum_i z_q,i conj(z_k,i) e^{i delta theta_i}): .real, not "
                ".abs(). The modulus is never negative and ignores the rotation's direction.",
            ): _unless_same(twin(_rel, part="abs")),
            Hint(
                "you paired features (i, i + d/2).",
                "This chapter's RoPE pairs neighbours: z_i = x[..., 2i] + 1j * x[..., 2i+1].",
            ): _unless_same(twin(_rel, half=True)),
        },
        hint=Hint(
            "check the statement's formula on one pair: which features pair up, the conjugate, "
            "and the sign of the offset.",
            "Read each pair as a complex number; the score is the real part of a sum of products "
            "with one rotation factor per pair. z = x[..., 0::2] + 1j * x[..., 1::2]; the score "
            "is the real part of sum_i z_q,i * conj(z_k,i) * exp(1j * delta * theta_i).",
        ),
    )
)


# --------------------------------------------------------------------------- 05.4 conventions


def interleaved_to_half_weights_reference(W: torch.Tensor, num_heads: int) -> torch.Tensor:
    r"""Permute the columns of each head's block of ``W [d_model, H*d_h]`` by
    ``[0, 2, …, d-2, 1, 3, …, d-1]`` so that half-split RoPE on ``x @ W'`` gives the
    same scores as interleaved RoPE on ``x @ W``."""
    d_model, width = W.shape
    head_dim = width // num_heads
    w = W.reshape(d_model, num_heads, head_dim)  # (d_model, H, d_h)
    return w[..., rope_permutation(head_dim)].reshape(d_model, width)  # (d_model, H*d_h)


def _conv_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
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


def _conv_inverse(W, num_heads):
    d_model, width = W.shape
    head_dim = width // num_heads
    inv = torch.argsort(rope_permutation(head_dim))
    return W.reshape(d_model, num_heads, head_dim)[..., inv].reshape(d_model, width)


def _conv_rows(W, num_heads):
    """The per-head permutation applied to the rows (needs a square W)."""
    d_model, width = W.shape
    if d_model != width:
        raise ValueError("this mistake needs a square W")
    head_dim = width // num_heads
    perm = rope_permutation(head_dim)
    return W.reshape(num_heads, head_dim, width)[:, perm].reshape(d_model, width)


def _conv_global(W, num_heads):
    return W[:, rope_permutation(W.shape[1])]


register(
    Exercise(
        id="05.4",
        title="convert W_Q / W_K from interleaved to half-split RoPE",
        points=2,
        target="interleaved_to_half_weights",
        cases=_conv_cases,
        reference=interleaved_to_half_weights_reference,
        atol=1e-12,
        rtol=0.0,
        mistakes={
            Hint(
                "you applied the inverse permutation.",
                "New column j must be old column perm[j] with perm = [0, 2, 4, ..., 1, 3, 5, "
                "...] (W_new = W[:, perm]), not W_new[:, perm] = W.",
            ): _conv_inverse,
            Hint(
                "you permuted all H*d_h columns at once.",
                "RoPE pairs features within each head, so permute each head's d_h columns "
                "separately (reshape to (d_model, H, d_h)).",
            ): _conv_global,
            Hint(
                "you permuted the rows of W (its d_model input features), not its columns.",
                "Here q = x @ W, so column j of W makes feature j of q, the feature RoPE "
                "pairs. (In torch's nn.Linear, which stores W^T, the same change permutes "
                "rows: that is why conversion scripts talk about rows.)",
            ): _conv_rows,
        },
        errors={
            r"IndexError: index \d+ is out of bounds for dimension 0": Hint(
                "you indexed the rows of W (its d_model input features), not its columns.",
                "Here q = x @ W, so the features RoPE pairs are W's columns: index the last "
                "axis, W.reshape(d_model, H, d_h)[..., perm].",
            ),
        },
        hint=Hint(
            "check which axis of W holds the features RoPE pairs (here q = x @ W), and that each "
            "head's features are reordered within that head.",
            "Reorder the columns of each head's block so that the even features come first. "
            "Reshape W to (d_model, H, d_h), index the last axis with perm = [0, 2, ..., d_h-2, "
            "1, 3, ..., d_h-1], reshape back.",
        ),
    )
)


# --------------------------------------------------------------------------- 05.5 Llama 3.1


def llama3_reference(theta, factor, low_freq_factor, high_freq_factor, original_context):
    r"""Llama 3.1's scaled frequencies (:func:`course_lib.positional.llama3_scaled_frequencies`)."""
    return llama3_scaled_frequencies(
        theta, factor, low_freq_factor, high_freq_factor, original_context
    )  # (d/2,)


def _llama3_wrong(theta, factor, low, high, context, *, how):
    theta = torch.as_tensor(theta, dtype=DT)  # (d/2,)
    wavelength = 2 * torch.pi / theta  # (d/2,)
    if how == "pi":  # position interpolation: every pair slowed down
        return theta / factor
    if how == "no_two_pi":
        wavelength = 1 / theta
    turns = context / wavelength  # (d/2,) r_i = L / lambda_i
    if how == "new_context":
        turns = context * factor / wavelength
    gamma = (turns - low) / (high - low)  # (d/2,) the ramp, before clipping
    if how != "no_clip":
        gamma = gamma.clamp(0.0, 1.0)
    if how == "swapped":  # the blend weight applied the other way round
        return gamma * theta / factor + (1 - gamma) * theta
    return (1 - gamma) * theta / factor + gamma * theta


def _llama3_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "Llama 3.1 8B: d_h 128, base 500000, factor 8, low 1, high 4, context 8192",
                (rope_frequencies(128, 500_000.0), 8.0, 1.0, 4.0, 8192),
            ),
            Case(
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
        Case("Llama 3.2 1B: factor 32", (rope_frequencies(64, 500_000.0), 32.0, 1.0, 4.0, 8192)),
        Case(
            "base 10000, d_h 64, factor 4, low 2, high 16, context 4096",
            (rope_frequencies(64, 10_000.0), 4.0, 2.0, 16.0, 4096),
        ),
        Case("factor 1: nothing changes", (rope_frequencies(32, 10_000.0), 1.0, 1.0, 4.0, 2048)),
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


register(
    Exercise(
        id="05.5",
        title="Llama 3.1's RoPE scaling",
        points=2,
        target="llama3_scaled_frequencies",
        cases=_llama3_cases,
        reference=llama3_reference,
        atol=1e-15,
        rtol=1e-12,
        mistakes={
            Hint(
                "you slowed every pair down by `factor`: that is plain position interpolation.",
                "Only pairs with a wavelength longer than original_context / low_freq_factor "
                "are divided by factor; pairs shorter than original_context / "
                "high_freq_factor keep their speed; the ones in between are blended.",
            ): twin(_llama3_wrong, how="pi"),
            Hint(
                "your blend runs the wrong way: fast pairs end up slowed, slow pairs kept.",
                "With gamma = (L / lambda - low) / (high - low) clipped to [0, 1], the new "
                "theta is (1 - gamma) * theta / factor + gamma * theta: gamma = 1 (many turns "
                "in the original context) keeps theta.",
            ): twin(_llama3_wrong, how="swapped"),
            Hint(
                "your wavelengths are 1 / theta, without the 2 pi.",
                "A pair turning theta radians per position comes back after "
                "lambda = 2 pi / theta positions.",
            ): twin(_llama3_wrong, how="no_two_pi"),
            Hint(
                "you measured the turns over the *new* context (original_context x factor).",
                "The thresholds are about what the model saw in training: "
                "r = original_context / lambda.",
            ): twin(_llama3_wrong, how="new_context"),
            Hint(
                "you applied the blend to every pair without clipping gamma to [0, 1].",
                "Outside the ramp gamma is 0 (slow pairs: theta / factor) or 1 (fast pairs: "
                "theta): clamp it, or use the three cases.",
            ): twin(_llama3_wrong, how="no_clip"),
        },
        hint=Hint(
            "check your result on the three kinds of pair in the statement: fast ones, slow "
            "ones, and the ones in between.",
            "Three regimes by wavelength: keep the fast pairs, divide the slow ones by the "
            "factor, blend linearly in between. lambda = 2 pi / theta; gamma = "
            "clamp((original_context / lambda - low) / (high - low), 0, 1); return (1 - gamma) * "
            "theta / factor + gamma * theta.",
        ),
    )
)


# --------------------------------------------------------------------------- 05.6 predict, measure


def _turns(head_dim, base, context_len, *, exponent=lambda i, d: 2 * i / d, last=None, turn=1.0):
    theta = base ** (-exponent(torch.arange(head_dim // 2, dtype=DT), head_dim))  # (d/2,)
    p = context_len - 1 if last is None else last
    angle = p * theta  # (d/2,) how far pair i has turned at the last position
    return int((angle >= turn * 2 * torch.pi).sum())


def full_turns_reference(head_dim: int, base: float, context_len: int) -> int:
    r"""How many of RoPE's :math:`d/2` pairs turn at least once (:math:`2\pi`) between
    positions 0 and ``context_len - 1``, with :math:`\theta_i = b^{-2i/d}`."""
    return _turns(head_dim, base, context_len)


def _turns_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("d = 128, base 10000, 2048 positions", (128, 10000.0, 2048)),
            Case("d = 128, base 500000 (Llama 3), 8192 positions", (128, 500000.0, 8192)),
            Case("d = 64, base 10000, 512 positions", (64, 10000.0, 512)),
            Case("d = 32, base 10000, 7 positions: does even pair 0 turn?", (32, 10000.0, 7)),
        ]
    return [
        Case("d = 128, base 10000, 131072 positions", (128, 10000.0, 131072)),
        Case("d = 16, base 100, 64 positions", (16, 100.0, 64)),
        Case("d = 128, base 10000, 7 positions", (128, 10000.0, 7)),
        Case("d = 128, base 10000, 8 positions: pair 0 turns once", (128, 10000.0, 8)),
        *(_turns_drawn(rng) for _ in range(2)),
    ]


def _turns_drawn(rng: np.random.Generator) -> Case:
    """A head size, base and context drawn from ``rng`` (the grader's seed)."""
    d = 2 * int(rng.integers(4, 65))
    base = float(np.round(10 ** rng.uniform(2.0, 6.0)))
    n = int(rng.integers(2, 200_000))
    return Case(f"d = {d}, base {base:g}, {n} positions", (d, base, n))


register(
    Exercise(
        id="05.6",
        title="predict, then measure: how many RoPE pairs turn once within a context",
        points=1,
        target="count_full_turns",
        cases=_turns_cases,
        reference=full_turns_reference,
        atol=0.5,
        rtol=0.0,
        compare=within(0.5, relative=False),
        measures="the pairs that turn at least once",
        mistakes={
            Hint(
                "your frequencies use the exponent i/d: they fall off twice as slowly.",
                "theta_i = base^(-2i/d) for pair i = 0 .. d/2 - 1.",
            ): twin(_turns, exponent=lambda i, d: i / d),
            Hint(
                "you counted half turns (angle >= pi).",
                "A full turn is an angle of 2 pi: after it, the pair points where it started.",
            ): twin(_turns, turn=0.5),
            Hint(
                "you counted the whole context's length as the last position.",
                "Positions run 0 .. context_len - 1: the largest angle is "
                "(context_len - 1) * theta_i.",
            ): unless_different(lambda d, b, n: _turns(d, b, n, last=n), full_turns_reference),
        },
        hint=Hint(
            "check which position is the last one, each pair's frequency, and what counts as a "
            "full turn.",
            "Compute each pair's angle at the last position and count those of at least 2 pi. "
            "theta = base ** (-2 * arange(d // 2) / d); angle = (context_len - 1) * theta; "
            "return int((angle >= 2 * pi).sum()).",
        ),
    )
)
