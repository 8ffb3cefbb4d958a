r"""Positional information for attention: sinusoidal encodings and rotary embeddings (RoPE).

Attention by itself sees a *set* of tokens: permute the inputs and the outputs are permuted
the same way. Two ways to tell it where each token sits:

* **Sinusoidal encodings** (Vaswani et al., 2017, "Attention Is All You Need") are *added*
  to the token embeddings. Feature pair :math:`i` of position :math:`p` is
  :math:`(\sin p\,\omega_i, \cos p\,\omega_i)` with :math:`\omega_i = b^{-2i/d}`,
  :math:`b = 10\,000`.
* **Rotary position embeddings** (Su et al., 2021, "RoFormer: Enhanced Transformer with
  Rotary Position Embedding") *rotate* each query and key feature pair
  :math:`(x_{2i}, x_{2i+1})` by the angle :math:`p\,\theta_i`, :math:`\theta_i = b^{-2i/d}`.
  Because rotations compose, :math:`(R_m q)^\top (R_n k) = q^\top R_{n-m} k`: the
  attention score depends on the positions only through :math:`m - n`.

Two pairings of the features are in common use, and they are the same model up to a fixed
permutation of the features (i.e. of the columns of :math:`W_Q` and :math:`W_K`):

* ``interleaved=True``: pairs :math:`(2i, 2i+1)`, as written in the RoFormer paper and in
  Meta's original LLaMA code (``torch.view_as_complex`` on adjacent features);
* ``interleaved=False``: pairs :math:`(i, i + d/2)`, the "rotate half" style of GPT-NeoX and
  the Hugging Face Llama implementation.

:func:`interleaved_to_half` / :func:`half_to_interleaved` convert between them.

For long contexts, :func:`apply_rope` also takes ``scale``: positions are divided by it
before rotating, which is *position interpolation* (Chen et al., 2023, "Extending Context
Window of Large Language Models via Positional Interpolation"); a larger ``base`` (e.g.
500 000 in Llama 3) is the other common knob.
"""

from __future__ import annotations

import math
import operator

import torch

__all__ = [
    "apply_rope",
    "apply_rope_complex",
    "half_to_interleaved",
    "interleaved_to_half",
    "rope_angles",
    "rope_frequencies",
    "rope_permutation",
    "rope_rotation_matrix",
    "rope_wavelengths",
    "sinusoidal_encoding",
    "sinusoidal_frequencies",
    "sinusoidal_shift_matrix",
]


# --------------------------------------------------------------------------- helpers


def _as_int(value, name: str) -> int:
    """An integer argument as a Python int (numpy/torch integers welcome), else a clear error."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {value!r}") from None


def _check_base(base: float) -> None:
    if not (isinstance(base, (int, float)) and math.isfinite(base) and base > 1):
        raise ValueError(f"base must be a finite number > 1 (e.g. 10000.0), got {base!r}")


def _check_scale(scale: float) -> None:
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(
            f"scale must be a finite number > 0 (1.0 = no interpolation), got {scale!r}"
        )


def _check_even(d: int, what: str) -> None:
    if d <= 0 or d % 2:
        raise ValueError(
            f"RoPE rotates features in pairs, so the feature dimension must be "
            f"even and positive; got d={d}{what}"
        )


# --------------------------------------------------------------------------- sinusoidal


def sinusoidal_frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    r"""The angular frequencies of the sinusoidal encoding, one per feature pair.

    .. math:: \omega_i = b^{-2i/d}, \qquad i = 0, \dots, \lceil d/2 \rceil - 1

    Returns a float64 tensor of shape ``[ceil(d/2)]``, from 1 down to about ``1/base``.
    """
    d_model = _as_int(d_model, "d_model")
    if d_model <= 0:
        raise ValueError(f"d_model must be a positive int, got {d_model!r}")
    _check_base(base)
    i = torch.arange((d_model + 1) // 2, dtype=torch.float64)  # (ceil(d/2),)
    return base ** (-2.0 * i / d_model)  # (ceil(d/2),)


def sinusoidal_encoding(
    n_positions: int,
    d_model: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    r"""The sinusoidal position table of Vaswani et al. (2017), shape ``[n_positions, d_model]``.

    .. math::

        PE_{p,\,2i} = \sin\!\big(p / b^{2i/d}\big), \qquad
        PE_{p,\,2i+1} = \cos\!\big(p / b^{2i/d}\big)

    sin at even features, cos at odd ones; an odd ``d_model`` ends with a sin feature.
    Angles are computed in float64 and the table is cast to ``dtype`` at the end.
    """
    n_positions = _as_int(n_positions, "n_positions")
    d_model = _as_int(d_model, "d_model")
    if n_positions < 0:
        raise ValueError(f"n_positions must be an int >= 0, got {n_positions!r}")
    omega = sinusoidal_frequencies(d_model, base)  # (ceil(d/2),)
    p = torch.arange(n_positions, dtype=torch.float64)  # (n,)
    angles = p[:, None] * omega[None, :]  # (n, ceil(d/2))
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)  # (n, d)
    pe[:, 0::2] = torch.sin(angles)  # (n, ceil(d/2)) even features
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])  # (n, floor(d/2)) odd features
    return pe.to(dtype=dtype, device=device)  # (n, d)


def sinusoidal_shift_matrix(
    k: float, d_model: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    r"""The matrix :math:`R_k` with :math:`PE(p + k) = R_k\, PE(p)` for every position p.

    Per pair, by the angle-addition formulas,

    .. math::

        \begin{pmatrix} \sin (p+k)\omega \\ \cos (p+k)\omega \end{pmatrix}
        = \begin{pmatrix} \cos k\omega & \sin k\omega \\ -\sin k\omega & \cos k\omega
          \end{pmatrix}
          \begin{pmatrix} \sin p\omega \\ \cos p\omega \end{pmatrix},

    so :math:`R_k` is block diagonal with one 2×2 rotation per pair and does not depend on
    p: a shift by k is a *linear* map of the encoding. Needs an even ``d_model``.
    Shape ``[d_model, d_model]``; apply to a table as ``pe @ R_k.T``.
    """
    _check_even(d_model, " (the shift matrix pairs sin/cos features)")
    omega = sinusoidal_frequencies(d_model, base)  # (d/2,)
    c, s = torch.cos(k * omega), torch.sin(k * omega)  # (d/2,), (d/2,)
    r = torch.zeros(d_model, d_model, dtype=torch.float64)  # (d, d)
    idx = torch.arange(0, d_model, 2)  # (d/2,) the sin feature of each pair
    r[idx, idx], r[idx, idx + 1] = c, s
    r[idx + 1, idx], r[idx + 1, idx + 1] = -s, c
    return r.to(dtype)  # (d, d)


# --------------------------------------------------------------------------- RoPE


def rope_frequencies(d: int, base: float = 10000.0) -> torch.Tensor:
    r"""RoPE's rotation speeds, one per feature pair: :math:`\theta_i = b^{-2i/d}`.

    Returns float64 ``[d/2]``; pair 0 turns by 1 radian per position, the last pair by
    about ``1/base`` radians per position.
    """
    _check_even(d, "")
    _check_base(base)
    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    return base ** (-2.0 * i / d)  # (d/2,)


def rope_wavelengths(d: int, base: float = 10000.0) -> torch.Tensor:
    r"""How many positions each pair needs for a full turn: :math:`\lambda_i = 2\pi/\theta_i`.

    Float64 ``[d/2]``, from :math:`2\pi` up to about :math:`2\pi b`.
    """
    return 2 * math.pi / rope_frequencies(d, base)  # (d/2,)


def _positions(positions, n: int, lead: tuple, device) -> torch.Tensor:
    """Positions as float64 broadcastable to ``(*lead, n)``, with a clear error if not."""
    if positions is None:
        return torch.arange(n, dtype=torch.float64, device=device)  # (N,)
    pos = torch.as_tensor(positions, device=device)
    if pos.is_complex() or pos.dtype == torch.bool:
        raise TypeError(f"positions must be real numbers, got dtype {pos.dtype}")
    pos = pos.to(torch.float64)
    if pos.ndim == 0 or pos.shape[-1] != n:
        raise ValueError(
            f"expected positions of shape [N] or [..., N] with N={n} (one per "
            f"token of x), got shape {tuple(pos.shape)}"
        )
    try:
        torch.broadcast_shapes(tuple(pos.shape), (*lead, n))
    except RuntimeError as err:
        raise ValueError(
            f"positions of shape {tuple(pos.shape)} do not broadcast against "
            f"x's token axes {(*lead, n)} (they align from the right: for x "
            f"[B, H, N, d] and one row of positions per sequence, pass "
            f"positions[:, None, :] of shape [B, 1, N])"
        ) from err
    return pos


def rope_angles(positions, d: int, base: float = 10000.0, *, scale: float = 1.0) -> torch.Tensor:
    r"""The rotation angle of every (position, pair): :math:`\phi_{p,i} = (p/s)\,\theta_i`.

    ``positions`` has shape ``[..., N]`` (any real numbers); ``scale`` :math:`s` is the
    position-interpolation factor (1 = plain RoPE). Returns float64 ``[..., N, d/2]``.
    """
    _check_scale(scale)
    theta = rope_frequencies(d, base)  # (d/2,)
    pos = torch.as_tensor(positions).to(torch.float64)  # (..., N)
    return (pos / scale)[..., None] * theta.to(pos.device)  # (..., N, d/2)


def apply_rope(
    x: torch.Tensor,
    positions=None,
    *,
    base: float = 10000.0,
    interleaved: bool = True,
    scale: float = 1.0,
) -> torch.Tensor:
    r"""Rotate each feature pair of ``x [..., N, d]`` by its position's angle (RoPE).

    For token position :math:`p` and pair :math:`i` with angle
    :math:`\phi = (p/s)\,\theta_i`, :math:`\theta_i = b^{-2i/d}`:

    .. math::

        \begin{pmatrix} y_a \\ y_b \end{pmatrix} =
        \begin{pmatrix} \cos\phi & -\sin\phi \\ \sin\phi & \cos\phi \end{pmatrix}
        \begin{pmatrix} x_a \\ x_b \end{pmatrix}

    where :math:`(a, b) = (2i, 2i+1)` when ``interleaved`` (RoFormer) and
    :math:`(i, i + d/2)` otherwise ("rotate half", GPT-NeoX / Hugging Face Llama).

    Args:
        x: queries or keys, ``[..., N, d]`` with ``d`` even (e.g. ``[B, H, N, d_head]``).
        positions: one position per token, shape ``[N]`` or broadcastable ``[..., N]``;
            any real numbers (e.g. ``torch.arange(t0, t0 + N)`` for new tokens appended to a
            KV cache). Defaults to ``0..N-1``. Leading axes align from the right, as in
            broadcasting: for ``x [B, H, N, d]`` with one row of positions per sequence,
            pass ``[B, 1, N]``, not ``[B, N]`` (which would pair batch entries with heads).
        base: :math:`b`; 10 000 in the RoFormer paper and Llama 2, 500 000 in Llama 3.
        interleaved: the pairing convention (see above).
        scale: position interpolation factor :math:`s` (Chen et al., 2023); 1 = none.

    Returns a tensor of the same shape and dtype as ``x``. Angles are computed in float64
    and cast to ``x``'s dtype, so long positions stay accurate.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected x to be a torch.Tensor, got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(
            f"expected x of shape [..., N, d] (tokens, then features), got {tuple(x.shape)}"
        )
    if not x.is_floating_point():
        raise TypeError(f"expected a real floating-point x, got dtype {x.dtype}")
    *lead, n, d = x.shape
    _check_even(d, f" (x of shape {tuple(x.shape)})")
    _check_base(base)
    _check_scale(scale)
    pos = _positions(positions, n, tuple(lead), x.device)  # (..., N)
    phi = rope_angles(pos, d, base, scale=scale)  # (..., N, d/2)
    cos = torch.cos(phi).to(x.dtype)  # (..., N, d/2)
    sin = torch.sin(phi).to(x.dtype)  # (..., N, d/2)
    if interleaved:
        xa, xb = x[..., 0::2], x[..., 1::2]  # (..., N, d/2) each: features 2i and 2i+1
    else:
        xa, xb = x[..., : d // 2], x[..., d // 2 :]  # (..., N, d/2) each: features i and i+d/2
    ya = xa * cos - xb * sin  # (..., N, d/2)
    yb = xa * sin + xb * cos  # (..., N, d/2)
    if interleaved:
        return torch.stack((ya, yb), dim=-1).flatten(-2)  # (..., N, d) back to 2i, 2i+1
    return torch.cat((ya, yb), dim=-1)  # (..., N, d)


def apply_rope_complex(
    x: torch.Tensor, positions=None, *, base: float = 10000.0, scale: float = 1.0
) -> torch.Tensor:
    r"""RoPE as complex multiplication (interleaved pairing), the way Meta's LLaMA code does it.

    Read features :math:`(x_{2i}, x_{2i+1})` as :math:`z_i = x_{2i} + \mathrm{i}\,x_{2i+1}`,
    multiply by the unit complex number :math:`e^{\mathrm{i}\phi}`, read the pair back:

    .. math:: z_i' = z_i\, e^{\mathrm{i}\,(p/s)\,\theta_i}

    Equal to ``apply_rope(x, positions, interleaved=True)``; computed in float64/complex128.
    """
    if not isinstance(x, torch.Tensor) or x.ndim < 2:
        raise ValueError(
            f"expected a tensor x of shape [..., N, d], got {tuple(getattr(x, 'shape', ()))}"
        )
    *lead, n, d = x.shape
    _check_even(d, f" (x of shape {tuple(x.shape)})")
    pos = _positions(positions, n, tuple(lead), x.device)  # (..., N)
    phi = rope_angles(pos, d, base, scale=scale)  # (..., N, d/2)
    z = torch.view_as_complex(
        x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2)
    )  # (..., N, d/2)
    rot = torch.polar(torch.ones_like(phi), phi)  # (..., N, d/2) e^{i phi}
    return torch.view_as_real(z * rot).flatten(-2).to(x.dtype)  # (..., N, d)


def rope_rotation_matrix(
    position: float, d: int, base: float = 10000.0, *, interleaved: bool = True, scale: float = 1.0
) -> torch.Tensor:
    r"""The ``[d, d]`` orthogonal matrix :math:`R_p` with ``apply_rope(x)[p] == R_p @ x[p]``.

    Block diagonal (one 2×2 rotation by :math:`(p/s)\theta_i` per pair) when interleaved;
    the same blocks spread over rows/columns :math:`(i, i+d/2)` otherwise. float64.
    """
    phi = rope_angles(torch.tensor([float(position)]), d, base, scale=scale)[0]  # (d/2,)
    c, s = torch.cos(phi), torch.sin(phi)  # (d/2,), (d/2,)
    i = torch.arange(d // 2)  # (d/2,)
    a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)  # (d/2,), (d/2,)
    r = torch.zeros(d, d, dtype=torch.float64)  # (d, d)
    r[a, a], r[a, b] = c, -s
    r[b, a], r[b, b] = s, c
    return r  # (d, d)


# --------------------------------------------------------------------------- conventions


def rope_permutation(d: int) -> torch.Tensor:
    r"""The feature permutation taking the interleaved layout to the half-split layout.

    ``perm = [0, 2, 4, …, d-2, 1, 3, …, d-1]``: pair :math:`(2i, 2i+1)` lands on
    :math:`(i, i+d/2)`, keeping its frequency :math:`\theta_i`. Hence

    ``apply_rope(x, interleaved=True)[..., perm] == apply_rope(x[..., perm], interleaved=False)``,

    and a model using one convention equals a model using the other whose
    :math:`W_Q, W_K` output columns are permuted by ``perm``.
    """
    _check_even(d, "")
    return torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))  # (d,)


def interleaved_to_half(x: torch.Tensor) -> torch.Tensor:
    """Reorder the last axis from pairs (2i, 2i+1) to pairs (i, i + d/2)."""
    d = x.shape[-1]
    _check_even(d, f" (x of shape {tuple(x.shape)})")
    return x[..., rope_permutation(d).to(x.device)]  # (..., d)


def half_to_interleaved(x: torch.Tensor) -> torch.Tensor:
    """Reorder the last axis from pairs (i, i + d/2) back to pairs (2i, 2i+1)."""
    d = x.shape[-1]
    _check_even(d, f" (x of shape {tuple(x.shape)})")
    inverse = torch.argsort(rope_permutation(d))  # (d,)
    return x[..., inverse.to(x.device)]  # (..., d)
