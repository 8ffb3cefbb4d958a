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
500 000 in Llama 3) is the other common knob, and frequency-dependent scalings keep the
fast pairs and interpolate only the slow ones: Llama 3.1's
(:func:`llama3_scaled_frequencies`, to pass as ``apply_rope(..., frequencies=...)``) and
YaRN's (:func:`yarn_scaled_frequencies`, as its released code and Hugging Face compute it,
with its temperature :func:`yarn_attention_factor`; :func:`yarn_paper_frequencies` is the
paper's equation, which differs from the code between the kept and the interpolated pairs).
"""

from __future__ import annotations

import math

import torch

from .validation import (
    as_int,
    check_base,
    check_even,
    check_position_scale,
    check_rope_input,
    check_rope_layout,
    positions_for,
)

__all__ = [
    "apply_rope",
    "apply_rope_complex",
    "half_to_interleaved",
    "interleaved_to_half",
    "llama3_scaled_frequencies",
    "per_head_rows",
    "rope_angles",
    "rope_cos_sin",
    "rope_frequencies",
    "rope_permutation",
    "rope_rotation_matrix",
    "rope_wavelengths",
    "rotate_pairs",
    "sinusoidal_encoding",
    "sinusoidal_frequencies",
    "sinusoidal_shift_matrix",
    "yarn_attention_factor",
    "yarn_correction_range",
    "yarn_paper_frequencies",
    "yarn_scaled_frequencies",
]


# --------------------------------------------------------------------------- sinusoidal


def sinusoidal_frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    r"""The angular frequencies of the sinusoidal encoding, one per feature pair.

    .. math:: \omega_i = b^{-2i/d}, \qquad i = 0, \dots, \lceil d/2 \rceil - 1

    Returns a float64 tensor of shape ``[ceil(d/2)]``, from 1 down to about ``1/base``.
    """
    d_model = as_int(d_model, "d_model")
    if d_model <= 0:
        raise ValueError(f"d_model must be a positive int, got {d_model!r}")
    check_base(base)
    i = torch.arange((d_model + 1) // 2, dtype=torch.float64)  # (ceil(d/2),)
    return base ** (-2.0 * i / d_model)  # (ceil(d/2),)


def sinusoidal_encoding(
    seq_len: int,
    d_model: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    r"""The sinusoidal position table of Vaswani et al. (2017), shape ``[seq_len, d_model]``.

    .. math::

        PE_{p,\,2i} = \sin\!\big(p / b^{2i/d}\big), \qquad
        PE_{p,\,2i+1} = \cos\!\big(p / b^{2i/d}\big)

    sin at even features, cos at odd ones; an odd ``d_model`` ends with a sin feature.
    Angles are computed in float64 and the table is cast to ``dtype`` at the end.
    """
    seq_len = as_int(seq_len, "seq_len")
    d_model = as_int(d_model, "d_model")
    if seq_len < 0:
        raise ValueError(f"seq_len must be an int >= 0, got {seq_len!r}")
    omega = sinusoidal_frequencies(d_model, base)  # (ceil(d/2),)
    p = torch.arange(seq_len, dtype=torch.float64)  # (N,)
    angles = p[:, None] * omega[None, :]  # (N, ceil(D/2))
    pe = torch.empty(seq_len, d_model, dtype=torch.float64)  # (N, D)
    pe[:, 0::2] = torch.sin(angles)  # (N, ceil(D/2)) even features
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])  # (N, floor(D/2)) odd features
    return pe.to(dtype=dtype, device=device)  # (N, D)


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
    check_even(d_model, " (the shift matrix pairs sin/cos features)")
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
    check_even(d, "")
    check_base(base)
    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    return base ** (-2.0 * i / d)  # (d/2,)


def rope_wavelengths(d: int, base: float = 10000.0) -> torch.Tensor:
    r"""How many positions each pair needs for a full turn: :math:`\lambda_i = 2\pi/\theta_i`.

    Float64 ``[d/2]``, from :math:`2\pi` up to about :math:`2\pi b`.
    """
    return 2 * math.pi / rope_frequencies(d, base)  # (d/2,)


def rope_angles(
    positions, d: int, base: float = 10000.0, *, scale: float = 1.0, frequencies=None
) -> torch.Tensor:
    r"""The rotation angle of every (position, pair): :math:`\phi_{p,i} = (p/s)\,\theta_i`.

    ``positions`` has shape ``[..., N]`` (any real numbers); ``scale`` :math:`s` is the
    position-interpolation factor (1 = plain RoPE). ``frequencies`` (``[d/2]``) replaces
    :math:`\theta_i = b^{-2i/d}`, e.g. by :func:`llama3_scaled_frequencies`. Returns float64
    ``[..., N, d/2]``.
    """
    check_position_scale(scale)
    theta = rope_frequencies(d, base) if frequencies is None else _frequencies(frequencies, d)
    pos = torch.as_tensor(positions).to(torch.float64)  # (..., N)
    return (pos / scale)[..., None] * theta.to(pos.device)  # (..., N, d/2)


def _frequencies(frequencies, d: int) -> torch.Tensor:
    theta = torch.as_tensor(frequencies, dtype=torch.float64)  # (d/2,)
    if theta.shape != (d // 2,):
        raise ValueError(
            f"expected frequencies of shape [d/2] = [{d // 2}] (one per feature pair), "
            f"got {tuple(theta.shape)}"
        )
    return theta


def apply_rope(
    x: torch.Tensor,
    positions=None,
    *,
    base: float = 10000.0,
    interleaved: bool = True,
    scale: float = 1.0,
    layout: str | None = None,
    frequencies: torch.Tensor | None = None,
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

    **Other libraries' conventions** (docs/conventions.md has the whole table):

    * *Pairing.* The default, ``interleaved=True``, is the RoFormer paper's and Meta's
      original Llama code's. Hugging Face ``transformers`` (``rotate_half``), GPT-NeoX and
      flash-attn's ``apply_rotary_emb`` (its default) pair :math:`(i, i + d/2)`: pass
      ``interleaved=False`` to reproduce them. Both are the same model up to a permutation
      of the columns of :math:`W_Q, W_K` (:func:`rope_permutation`); mixing them up runs
      and is wrong.
    * *Layout.* Tokens are on axis -2: ``[N, d]``, ``[B, N, d]``, ``[B, H, N, d]`` (the
      course, torch SDPA, Hugging Face after its transpose). Meta's Llama code and
      flash-attn hold ``[B, N, H, d]``: say so with ``layout="BNHD"``
      (``layout="BHND"`` states the default). A ``[B, N, H, d]`` tensor passed without it
      would be rotated along the head axis; when positions are given, their length gives
      it away and the error says so, but ``positions=None`` cannot be told apart.
    * *Positions.* ``[N]`` (every sequence), ``[B, N]`` (one row per sequence, Hugging
      Face's ``position_ids``: the first axis is always the batch, even when B equals H),
      or all of x's token axes (``[B, 1, N]``, ``[B, H, N]``).

    Args:
        x: queries or keys, ``[..., N, d]`` with ``d`` even (or ``[B, N, H, d]`` with
            ``layout="BNHD"``).
        positions: see above; any real numbers (e.g. ``torch.arange(t0, t0 + N)`` for
            new tokens appended to a KV cache). Defaults to ``0..N-1``.
        base: :math:`b`; 10 000 in the RoFormer paper and Llama 2, 500 000 in Llama 3.
        interleaved: the pairing convention (see above).
        scale: position interpolation factor :math:`s` (Chen et al., 2023); 1 = none.
        layout: None or ``"BHND"`` (tokens on axis -2), ``"BNHD"`` (tokens on axis 1).
        frequencies: ``[d/2]`` rotation speeds replacing :math:`b^{-2i/d}` (e.g. Llama
            3.1's, :func:`llama3_scaled_frequencies`); ``base`` is then unused.

    Returns a tensor of the same shape and dtype as ``x``. Angles are computed in float64
    and cast to ``x``'s dtype, so long positions stay accurate.
    """
    check_rope_input(x, base, scale)
    check_rope_layout(x, layout)
    if layout == "BNHD":
        x_bhnd = x.transpose(1, 2)  # (B, H, N, d)
        *lead, n, d = x_bhnd.shape
        pos = positions_for(positions, n, tuple(lead), x.device, layout=layout)  # (..., N)
        y = _rotate(x_bhnd, pos, base, interleaved, scale, frequencies)  # (B, H, N, d)
        return y.transpose(1, 2)  # (B, N, H, d)
    *lead, n, d = x.shape
    pos = positions_for(positions, n, tuple(lead), x.device)  # (..., N)
    return _rotate(x, pos, base, interleaved, scale, frequencies)  # (..., N, d)


def _rotate(x, pos, base, interleaved, scale, frequencies) -> torch.Tensor:
    """RoPE on ``x [..., N, d]`` with float64 positions broadcastable to ``[..., N]``."""
    cos, sin = rope_cos_sin(
        pos, x.shape[-1], base, scale=scale, frequencies=frequencies,
        interleaved=interleaved, dtype=x.dtype,
    )  # fmt: skip
    return rotate_pairs(x, cos, sin, interleaved=interleaved)  # (..., N, d)


def rope_cos_sin(
    positions,
    d: int,
    base: float = 10000.0,
    *,
    scale: float = 1.0,
    frequencies=None,
    interleaved: bool = True,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``(cos φ, sin φ)``, each ``[..., N, d]`` in ``dtype``: the rotations of :func:`apply_rope`.

    Feature :math:`j` gets the angle of its pair, so each pair's angle appears twice: at
    :math:`2i, 2i+1` when ``interleaved``, at :math:`i, i + d/2` otherwise. The angles
    :math:`\phi_{p,i}` (:func:`rope_angles`) are computed in float64; only their cosines
    and sines are cast. They depend on the position alone, not on the layer or the head: a
    model computes them once per forward pass and hands them to every layer
    (:func:`rotate_pairs`), instead of recomputing them in each.
    """
    phi = rope_angles(positions, d, base, scale=scale, frequencies=frequencies)  # (..., N, d/2)
    if interleaved:
        phi = phi.repeat_interleave(2, dim=-1)  # (..., N, d): pair i at features 2i, 2i+1
    else:
        phi = torch.cat((phi, phi), dim=-1)  # (..., N, d): pair i at features i, i + d/2
    return torch.cos(phi).to(dtype), torch.sin(phi).to(dtype)  # (..., N, d) each


def rotate_pairs(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = True
) -> torch.Tensor:
    r"""Rotate the feature pairs of ``x [..., N, d]`` by the angles of ``cos, sin [N, d]``.

    The rotation of :func:`apply_rope` written for a whole vector at once: with
    :math:`\tilde x` holding :math:`(-x_b, x_a)` where :math:`x` holds :math:`(x_a, x_b)`,

    .. math:: y = x \odot \cos\phi + \tilde x \odot \sin\phi,

    which is :math:`y_a = x_a\cos\phi - x_b\sin\phi`, :math:`y_b = x_b\cos\phi +
    x_a\sin\phi` for every pair. ``cos, sin`` come from :func:`rope_cos_sin` (with the same
    ``interleaved``) and broadcast against ``x``. No input checks: this is the inner step a
    model calls in every layer, after it checked its inputs once.
    """
    d = x.shape[-1]
    if interleaved:  # pairs (2i, 2i+1)
        swapped = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)  # (..., N, d)
    else:  # pairs (i, i + d/2)
        swapped = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)  # (..., N, d)
    return x * cos + swapped * sin  # (..., N, d)


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
    check_even(d, f" (x of shape {tuple(x.shape)})")
    pos = positions_for(positions, n, tuple(lead), x.device)  # (..., N)
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


# --------------------------------------------------------------------------- long context


def _ramp_interpolation(theta, factor, original_context, low, high) -> torch.Tensor:
    r"""Interpolate the slow pairs, keep the fast ones, blend linearly in between.

    With :math:`r_i = L/\lambda_i` the number of turns pair i makes over the original
    context :math:`L` (:math:`\lambda_i = 2\pi/\theta_i`) and
    :math:`\gamma_i = \mathrm{clip}\big((r_i - \text{low})/(\text{high} - \text{low}),\,0,\,1\big)`:

    .. math:: \theta_i' = (1 - \gamma_i)\,\frac{\theta_i}{s} + \gamma_i\,\theta_i .
    """
    theta = torch.as_tensor(theta, dtype=torch.float64)  # (d/2,)
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor >= 1):
        raise ValueError(f"factor must be a number >= 1 (1 = no scaling), got {factor!r}")
    if not (0 < low < high):
        raise ValueError(f"need 0 < low < high for the ramp, got low={low!r}, high={high!r}")
    if not original_context > 0:
        raise ValueError(f"original_context must be positive, got {original_context!r}")
    turns = original_context * theta / (2 * math.pi)  # (d/2,) r_i = L / lambda_i
    gamma = ((turns - low) / (high - low)).clamp(0.0, 1.0)  # (d/2,) 0 = interpolate, 1 = keep
    return (1 - gamma) * theta / factor + gamma * theta  # (d/2,)


def llama3_scaled_frequencies(
    theta,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_context: int = 8192,
) -> torch.Tensor:
    r"""Llama 3.1's frequency-dependent RoPE scaling, ``[d/2]`` float64.

    A pair whose wavelength :math:`\lambda_i = 2\pi/\theta_i` is shorter than
    :math:`L/\text{high\_freq\_factor}` (it turned many times within the original context
    :math:`L`) keeps its speed; one longer than :math:`L/\text{low\_freq\_factor}` is slowed
    down by ``factor``, as position interpolation would; in between the two speeds are
    blended with weight :math:`\gamma_i = (L/\lambda_i - \text{low})/(\text{high} - \text{low})`:

    .. math:: \theta_i' = (1 - \gamma_i)\,\frac{\theta_i}{\text{factor}} + \gamma_i\,\theta_i .

    The defaults are the constants of Meta's Llama 3.1 release (``rope_scaling`` in the
    models' ``config.json``: factor 8, low_freq_factor 1, high_freq_factor 4,
    original_max_position_embeddings 8192, with ``rope_theta`` 500 000); Llama 3.2's small
    models use factor 32. It is YaRN's "NTK-by-parts" ramp (Peng et al., 2023) with
    :math:`\alpha = 1, \beta = 4`, without YaRN's attention temperature.
    """
    return _ramp_interpolation(theta, factor, original_context, low_freq_factor, high_freq_factor)


def yarn_correction_range(
    d: int,
    original_context: int,
    *,
    base: float = 10000.0,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> tuple[float, float]:
    r"""The pair indices between which YaRN's ramp runs, as YaRN's reference code and
    Hugging Face find them (``find_correction_range``).

    Pair :math:`i` turns :math:`r_i = L\,b^{-2i/d}/2\pi` times over the original context
    :math:`L`; solving :math:`r_i = \beta` for :math:`i` gives the *correction dimension*

    .. math:: i(\beta) = \frac{d\,\ln\!\big(L / (2\pi\beta)\big)}{2 \ln b} .

    The ramp starts at :math:`i(\beta_\text{fast})` (pairs that turn :math:`\beta_\text{fast}`
    = 32 times or more keep their speed) and ends at :math:`i(\beta_\text{slow})` (pairs that
    turn less than :math:`\beta_\text{slow}` = 1 time are interpolated). With ``truncate``
    (the default in both codes) the start is rounded down and the end up; both are then
    clipped to :math:`[0, d-1]`. Returns ``(low, high)``.
    """
    d = as_int(d, "d")
    check_even(d, "")
    check_base(base)
    if not original_context > 0:
        raise ValueError(f"original_context must be positive, got {original_context!r}")
    if not (0 < beta_slow < beta_fast):
        raise ValueError(
            "need 0 < beta_slow < beta_fast (turns over the original context: beta_fast = 32 "
            f"marks the fast pairs kept, beta_slow = 1 the slow ones interpolated), got "
            f"beta_fast={beta_fast!r}, beta_slow={beta_slow!r}"
        )

    def dim_for(turns: float) -> float:
        return d * math.log(original_context / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_for(beta_fast), dim_for(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, d - 1)


def yarn_scaled_frequencies(
    d: int,
    factor: float,
    original_context: int,
    *,
    base: float = 10000.0,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> torch.Tensor:
    r"""YaRN's "NTK-by-parts" frequencies as YaRN's reference code (Peng et al., 2023,
    "YaRN: Efficient Context Window Extension of Large Language Models", github
    jquesnelle/yarn), Hugging Face (``rope_type="yarn"``) and vLLM compute them;
    ``[d/2]`` float64.

    With ``(low, high)`` from :func:`yarn_correction_range`, the ramp is linear in the
    **pair index** :math:`i`:

    .. math:: \gamma_i = 1 - \mathrm{clip}\!\Big(\frac{i - \text{low}}{\text{high} - \text{low}},
              0, 1\Big), \qquad \theta_i' = (1 - \gamma_i)\,\frac{\theta_i}{s} + \gamma_i\,\theta_i ,

    :math:`\theta_i = b^{-2i/d}`, :math:`s` = ``factor``. Since :math:`i` is linear in
    :math:`\ln r_i`, this is a ramp in the *logarithm* of the turns, not in the turns
    :math:`r_i` themselves as the paper's equation writes it
    (:func:`yarn_paper_frequencies`); both keep the same fast pairs and interpolate the same
    slow ones, and differ in between. Checkpoints trained with YaRN (``rope_scaling`` type
    ``"yarn"`` in ``config.json``) were trained with this one. The model also multiplies
    :math:`q` and :math:`k` by :func:`yarn_attention_factor`.
    """
    if (isinstance(d, torch.Tensor) and d.ndim > 0) or isinstance(d, (list, tuple)):
        raise TypeError(
            "yarn_scaled_frequencies takes the head dimension d (an int) and finds the ramp "
            "from d and base, as YaRN's reference code and Hugging Face do; for the paper's "
            "ramp in r over given frequencies use yarn_paper_frequencies(theta, factor, "
            "original_context, alpha=..., beta=...)"
        )
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor >= 1):
        raise ValueError(f"factor must be a number >= 1 (1 = no scaling), got {factor!r}")
    low, high = yarn_correction_range(
        d, original_context, base=base, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate
    )
    if low == high:
        high += 0.001  # as both codes do: a ramp of zero width is a step
    theta = rope_frequencies(d, base)  # (d/2,)
    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    gamma = 1 - ((i - low) / (high - low)).clamp(0.0, 1.0)  # (d/2,) 1 = keep, 0 = interpolate
    return (1 - gamma) * theta / factor + gamma * theta  # (d/2,)


def yarn_paper_frequencies(
    theta, factor: float, original_context: int, *, alpha: float = 1.0, beta: float = 32.0
) -> torch.Tensor:
    r"""YaRN's "NTK-by-parts" frequencies as the paper's equation writes them: the ramp of
    :func:`llama3_scaled_frequencies`, linear in the turns :math:`r_i = L/\lambda_i`,
    between :math:`r = \alpha` and :math:`r = \beta` (the paper: :math:`\alpha = 1,
    \beta = 32` for Llama). The released code ramps in the pair index instead
    (:func:`yarn_scaled_frequencies`); use that one to run a YaRN checkpoint."""
    return _ramp_interpolation(theta, factor, original_context, alpha, beta)


def yarn_attention_factor(factor: float) -> float:
    r"""YaRN's temperature, as the factor :math:`\sqrt{1/t} = 0.1 \ln s + 1` that multiplies
    both :math:`q` and :math:`k` (so the logits by :math:`1/t`), for a context extended
    :math:`s` times (Peng et al., 2023, who fit it for Llama models). Longer contexts
    spread a softmax over more keys; the factor sharpens it back. 1 for :math:`s \le 1`.
    YaRN's reference code (``mscale``) and Hugging Face (``attention_factor``, when the
    config gives none) compute the same number and multiply cos and sin by it."""
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
        raise ValueError(f"factor must be a positive number, got {factor!r}")
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


# --------------------------------------------------------------------------- conventions


def rope_permutation(d: int) -> torch.Tensor:
    r"""The feature permutation taking the interleaved layout to the half-split layout.

    ``perm = [0, 2, 4, …, d-2, 1, 3, …, d-1]``: pair :math:`(2i, 2i+1)` lands on
    :math:`(i, i+d/2)`, keeping its frequency :math:`\theta_i`. Hence

    ``apply_rope(x, interleaved=True)[..., perm] == apply_rope(x[..., perm], interleaved=False)``,

    and a model using one convention equals a model using the other whose
    :math:`W_Q, W_K` output columns are permuted by ``perm``.
    """
    check_even(d, "")
    return torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))  # (d,)


def interleaved_to_half(x: torch.Tensor) -> torch.Tensor:
    """Reorder the last axis from pairs (2i, 2i+1) to pairs (i, i + d/2)."""
    d = x.shape[-1]
    check_even(d, f" (x of shape {tuple(x.shape)})")
    return x[..., rope_permutation(d).to(x.device)]  # (..., d)


def half_to_interleaved(x: torch.Tensor) -> torch.Tensor:
    """Reorder the last axis from pairs (i, i + d/2) back to pairs (2i, 2i+1)."""
    d = x.shape[-1]
    check_even(d, f" (x of shape {tuple(x.shape)})")
    inverse = torch.argsort(rope_permutation(d))  # (d,)
    return x[..., inverse.to(x.device)]  # (..., d)


def per_head_rows(w: torch.Tensor, num_heads: int, reorder) -> torch.Tensor:
    """The rows of a projection weight ``w [H d_h, d]`` reordered within each head by
    ``reorder`` (:func:`interleaved_to_half` or :func:`half_to_interleaved`): a checkpoint's
    :math:`W_Q, W_K` moved from one RoPE pairing to the other."""
    out_features, d = w.shape
    if out_features % num_heads:
        raise ValueError(f"{out_features} rows do not split into {num_heads} heads")
    heads = w.reshape(num_heads, out_features // num_heads, d)  # (H, d_h, d)
    return reorder(heads.transpose(1, 2)).transpose(1, 2).reshape(out_features, d)  # (H d_h, d)
