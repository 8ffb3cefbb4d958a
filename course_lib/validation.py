"""Input checks for course_lib's public functions, kept out of the way of the maths.

Each public function starts with one ``validate_…``/``check_…`` call from here and then
reads like its equation. The checks exist for the learner: a wrong shape says what was
expected, what was given and (where a common mistake explains it) the likely cause.
Shape letters follow ``docs/notation.md`` (B, H, N, Nq, Nk, d_k, d_v, d_h, ...).
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np
import torch

# --------------------------------------------------------------------------- general


def shape_of(x) -> tuple | str:
    """``x``'s shape as a tuple of ints (for messages), or its type's name if it has none."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return type(x).__name__
    return tuple(int(s) for s in shape)


def require_tensor(name: str, x, hint: str = "") -> None:
    """TypeError unless ``x`` is a torch.Tensor (``hint`` is added to the message)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"expected {name} to be a torch.Tensor, got {type(x).__name__}"
            + (f" ({hint})" if hint else "")
        )


def as_int(value, name: str) -> int:
    """An integer argument as a Python int (numpy/torch integers welcome), else a clear error."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {value!r}") from None


def as_scalar(x) -> float | None:
    """A Python float from a real number or a 0-dim array/tensor; None if it is not one."""
    if isinstance(x, bool):
        return None
    if isinstance(x, numbers.Real):
        return float(x)
    if isinstance(x, np.ndarray) and x.ndim == 0 and np.issubdtype(x.dtype, np.number):
        return float(x)
    if isinstance(x, torch.Tensor) and x.ndim == 0 and x.dtype != torch.bool and not x.is_complex():
        return float(x)
    return None


# --------------------------------------------------------------------------- attention


def check_qkv(q, k, v) -> tuple:
    """Validate the shapes of q, k, v; return the scores' shape ``[..., Nq, Nk]``.

    Shapes are plain tuples, so numpy's ``broadcast_shapes`` serves torch too (torch's
    own imports sympy on first use: seconds on a slow machine).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2:
            what = {"q": "[..., Nq, d_k]", "k": "[..., Nk, d_k]", "v": "[..., Nk, d_v]"}[name]
            raise ValueError(
                f"expected {name} of shape {what} (at least 2 dimensions), got {shape_of(x)}"
            )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share the last dimension d_k: expected q [..., Nq, d_k] "
            f"and k [..., Nk, d_k], got q {shape_of(q)} and k {shape_of(k)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys Nk: expected k "
            f"[..., Nk, d_k] and v [..., Nk, d_v], got k {shape_of(k)} and "
            f"v {shape_of(v)}"
        )
    try:
        batch = tuple(
            np.broadcast_shapes(tuple(q.shape[:-2]), tuple(k.shape[:-2]), tuple(v.shape[:-2]))
        )
    except (RuntimeError, ValueError) as err:
        raise ValueError(
            f"the batch dimensions of q, k and v do not broadcast: got q "
            f"{shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}"
        ) from err
    return batch + (int(q.shape[-2]), int(k.shape[-2]))


def check_mask(mask, scores_shape: tuple) -> None:
    try:
        np.broadcast_shapes(tuple(mask.shape), scores_shape)
    except (RuntimeError, ValueError) as err:
        raise ValueError(
            f"mask of shape {shape_of(mask)} does not broadcast to the scores' "
            f"shape [..., Nq, Nk] = {scores_shape}"
        ) from err


def check_scale_dropout(scale, dropout_p) -> tuple[float | None, float]:
    """Validate ``scale`` and ``dropout_p``; return them as Python floats."""
    if scale is not None:
        value = as_scalar(scale)
        if value is None or not math.isfinite(value):
            raise ValueError(f"scale must be a finite number or None, got {scale!r}")
        scale = value
    p = as_scalar(dropout_p)
    if p is None or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")
    return scale, p


def validate_attention(q, k, v, mask, scale, dropout_p, *, numpy: bool = False):
    """All checks of (numpy_)scaled_dot_product_attention; returns ``(mask, scale,
    dropout_p)`` with the mask as a tensor (array) and the numbers as floats."""
    if numpy:
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    else:
        for name, x in (("q", q), ("k", k), ("v", v)):
            require_tensor(name, x, "use numpy_attention for numpy arrays")
    scores_shape = check_qkv(q, k, v)
    scale, dropout_p = check_scale_dropout(scale, dropout_p)
    if mask is not None:
        if numpy:
            mask = np.asarray(mask)
            ok = mask.dtype == bool or np.issubdtype(mask.dtype, np.floating)
            fix = "mask.astype(bool)"
        else:
            if not isinstance(mask, torch.Tensor):
                mask = torch.as_tensor(mask, device=q.device)
            ok = mask.dtype == torch.bool or mask.is_floating_point()
            fix = "mask.bool()"
        check_mask(mask, scores_shape)
        if not ok:
            raise TypeError(
                f"expected a boolean mask (True = may attend) or a float mask to "
                f"add, got dtype {mask.dtype}: use {fix} for 0/1 masks"
            )
    return mask, scale, dropout_p


# --------------------------------------------------------------------------- multi-head


def check_head_split(x, num_heads: int) -> None:
    if x.ndim != 3:
        raise ValueError(f"expected x of shape [B, N, H*d_h], got {shape_of(x)}")
    if num_heads < 1 or x.shape[-1] % num_heads != 0:
        raise ValueError(
            f"the feature size {x.shape[-1]} of x {shape_of(x)} is not divisible "
            f"by num_heads={num_heads}"
        )


def _check_divides(name: str, divisor, dividend_name: str, dividend, why: str) -> None:
    """``divisor`` a positive integer that divides ``dividend``, or a ValueError saying why."""
    if int(divisor) != divisor or divisor < 1:
        raise ValueError(f"{name} must be a positive integer, got {divisor!r}")
    if dividend % divisor != 0:
        raise ValueError(f"{dividend_name}={dividend} is not divisible by {name}={divisor}: {why}")


def check_mha_config(d_model, num_heads, num_kv_heads, dropout) -> None:
    _check_divides(
        "num_heads", num_heads, "d_model", d_model, "each head gets d_model / num_heads features"
    )
    _check_divides(
        "num_kv_heads",
        num_kv_heads,
        "num_heads",
        num_heads,
        "each key/value head must serve the same number of query heads",
    )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


def check_mha_inputs(query, key, value, d_model: int, *, batch_first: bool = True) -> None:
    """query, key, value of a MultiHeadAttention: ``[B, N, d_model]``, same B, key ~ value.

    (Given batch-first: a ``batch_first=False`` module has transposed them already.)
    """
    layout = "[B, N, d_model" if batch_first else "[N, B, d_model"
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_tensor(name, x)
        if x.ndim != 3 or x.shape[-1] != d_model:
            shape = shape_of(x) if batch_first or x.ndim != 3 else shape_of(x.transpose(0, 1))
            raise ValueError(f"expected {name} of shape {layout}={d_model}], got {shape}")
    if key.shape[:2] != value.shape[:2]:
        raise ValueError(
            f"key and value must have the same [B, Nk], got key "
            f"{shape_of(key)} and value {shape_of(value)}"
        )
    if query.shape[0] != key.shape[0]:
        hint = (
            " If your tensors are sequence-first [N, B, d_model] (torch.nn.MultiheadAttention's "
            "default), build the module with batch_first=False or transpose them."
            if batch_first and query.shape[1] == key.shape[1]
            else ""
        )
        raise ValueError(
            f"query and key must have the same batch size B, got query "
            f"{shape_of(query)} and key {shape_of(key)} (read as {layout}]).{hint}"
        )


# --------------------------------------------------------------------------- the RNN


def check_rnn_inputs(x, W_xh, W_hh, b_h, h0) -> None:
    """Clear errors naming the expected and the actual shapes (and dtypes)."""
    for name, t in (("x", x), ("W_xh", W_xh), ("W_hh", W_hh), ("b_h", b_h)):
        require_tensor(name, t)
    if x.dim() != 3:
        raise ValueError(f"expected x of shape [B, N, d_in], got {shape_of(x)}")
    d_in = x.shape[-1]
    if W_hh.dim() != 2 or W_hh.shape[0] != W_hh.shape[1]:
        raise ValueError(
            f"expected W_hh of shape [d_hidden, d_hidden] (square), got {shape_of(W_hh)}"
        )
    d_hidden = W_hh.shape[0]
    if W_xh.dim() != 2 or tuple(W_xh.shape) != (d_hidden, d_in):
        raise ValueError(
            f"expected W_xh of shape [d_hidden, d_in] = [{d_hidden}, {d_in}] "
            f"(d_hidden from W_hh, d_in from x), got {shape_of(W_xh)}"
        )
    if tuple(b_h.shape) != (d_hidden,):
        raise ValueError(f"expected b_h of shape [d_hidden] = [{d_hidden}], got {shape_of(b_h)}")
    if h0 is not None:
        require_tensor("h0", h0, "or None")
        if tuple(h0.shape) != (x.shape[0], d_hidden):
            raise ValueError(
                f"expected h0 of shape [B, d_hidden] = [{x.shape[0]}, {d_hidden}], "
                f"got {shape_of(h0)}"
            )
    for name, t in (("W_xh", W_xh), ("W_hh", W_hh), ("b_h", b_h), ("h0", h0)):
        if t is not None and t.dtype != x.dtype:
            raise TypeError(
                f"expected {name} to have x's dtype {x.dtype}, got {t.dtype} "
                f"(convert with .to(x.dtype))"
            )


# --------------------------------------------------------------------------- positions


def check_base(base: float) -> None:
    if not (isinstance(base, (int, float)) and math.isfinite(base) and base > 1):
        raise ValueError(f"base must be a finite number > 1 (e.g. 10000.0), got {base!r}")


def check_position_scale(scale: float) -> None:
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(
            f"scale must be a finite number > 0 (1.0 = no interpolation), got {scale!r}"
        )


def check_even(d: int, what: str) -> None:
    if d <= 0 or d % 2:
        raise ValueError(
            f"RoPE rotates features in pairs, so the feature dimension must be "
            f"even and positive; got d={d}{what}"
        )


def check_rope_input(x, base: float, scale: float) -> None:
    """``x [..., N, d]``, real floating point, d even; a valid base and scale."""
    require_tensor("x", x)
    if x.ndim < 2:
        raise ValueError(
            f"expected x of shape [..., N, d] (tokens, then features), got {shape_of(x)}"
        )
    if not x.is_floating_point():
        raise TypeError(f"expected a real floating-point x, got dtype {x.dtype}")
    check_even(x.shape[-1], f" (x of shape {shape_of(x)})")
    check_base(base)
    check_position_scale(scale)


ROPE_LAYOUTS = ("BHND", "BNHD")


def check_rope_layout(x, layout) -> None:
    """``layout`` is None (tokens on axis -2) or one of ROPE_LAYOUTS for a 4-D ``x``."""
    if layout is None:
        return
    if layout not in ROPE_LAYOUTS:
        raise ValueError(
            f"layout must be None, 'BHND' (x [B, H, N, d]: heads before tokens, the course's, "
            f"torch SDPA's and Hugging Face's after its transpose) or 'BNHD' (x [B, N, H, d]: "
            f"Meta's Llama code, flash-attn); got {layout!r}"
        )
    if x.ndim != 4:
        raise ValueError(
            f"layout={layout!r} names the four axes of x, but x has shape {shape_of(x)}; "
            "for x [..., N, d] leave layout=None"
        )


def positions_for(positions, n: int, lead: tuple, device, *, layout=None) -> torch.Tensor:
    """Positions as float64 broadcastable to ``(*lead, n)``, with a clear error if not;
    ``0 .. n-1`` when None.

    ``lead`` are x's axes before the token axis in the ``[..., N, d]`` view (for a
    ``'BNHD'`` x the caller has moved the heads in front of the tokens). The rules, the
    same for every layout:

    * ``[N]``: the same positions for every sequence and head;
    * ``[B, N]``: one row per sequence (Hugging Face's ``position_ids``), its first axis is
      x's batch axis, never the heads, whatever the sizes;
    * as many axes as ``lead`` plus one, broadcastable to ``(*lead, N)`` (e.g.
      ``[B, 1, N]`` or ``[B, H, N]`` for x ``[B, H, N, d]``).
    """
    if positions is None:
        return torch.arange(n, dtype=torch.float64, device=device)  # (N,)
    pos = torch.as_tensor(positions, device=device)
    if pos.is_complex() or pos.dtype == torch.bool:
        raise TypeError(f"positions must be real numbers, got dtype {pos.dtype}")
    pos = pos.to(torch.float64)
    tokens = "x.shape[1]" if layout == "BNHD" else "x.shape[-2]"
    if pos.ndim == 0 or pos.shape[-1] != n:
        hint = ""
        if layout is None and len(lead) == 2 and pos.ndim >= 1 and pos.shape[-1] == lead[1]:
            hint = (
                f" Your positions match x.shape[1] = {lead[1]} instead: is x laid out "
                "[B, N, H, d] (Meta's Llama code, flash-attn)? Pass layout='BNHD' (or "
                "x.transpose(1, 2)); without a layout x is read as [..., N, d], here "
                "[B, H, N, d]."
            )
        raise ValueError(
            f"expected positions of shape [N], [B, N] or [..., N] with N={n} (one per "
            f"token of x, {tokens}), got shape {shape_of(pos)}.{hint}"
        )
    if pos.ndim == 2 and len(lead) >= 2:
        # [B, N]: one row per sequence, as Hugging Face's position_ids
        if pos.shape[0] not in (1, lead[0]):
            raise ValueError(
                f"positions of shape {shape_of(pos)} are read as [B, N], one row per "
                f"sequence (Hugging Face's position_ids), but x has batch size B={lead[0]} "
                f"(x's axes before the tokens: {lead}). For per-head positions pass "
                f"[B, H, N]; to broadcast them as numpy would, give every axis: "
                f"{(*lead, n)}."
            )
        return pos.reshape(pos.shape[0], *([1] * (len(lead) - 1)), n)  # (B, 1, ..., N)
    if pos.ndim not in (1, len(lead) + 1):
        raise ValueError(
            f"positions of shape {shape_of(pos)} are ambiguous for x with token axes "
            f"{(*lead, n)}: pass [N] (shared), [B, N] (one row per sequence) or all "
            f"{len(lead) + 1} axes, broadcastable to {(*lead, n)}"
        )
    try:
        torch.broadcast_shapes(tuple(pos.shape), (*lead, n))
    except RuntimeError as err:
        raise ValueError(
            f"positions of shape {shape_of(pos)} do not broadcast against "
            f"x's token axes {(*lead, n)} (for x [B, H, N, d] and one row of positions "
            f"per sequence, pass [B, N] or [B, 1, N])"
        ) from err
    return pos


# --------------------------------------------------------------------------- FlashAttention


def check_flash_inputs(q, k, v, scale, *, who: str) -> float:
    """The checks both FlashAttention implementations share; returns the scale."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{who}: expected {name} to be a torch.Tensor, got {type(x).__name__}")
    try:  # the shape rules of chapter 02's attention, with the same messages
        check_qkv(q, k, v)
    except ValueError as err:
        raise ValueError(f"{who}: {err}") from None
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"{who}: q, k and v must have the same batch dimensions: got q "
            f"{shape_of(q)}, k {shape_of(k)}, v {shape_of(v)}"
        )
    if k.shape[-2] == 0:
        raise ValueError(f"{who}: there are no keys (Nk = 0): attention is undefined")
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"{who}: q, k and v must be on the same device: got {q.device}, {k.device}, {v.device}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"{who}: q, k and v must share one dtype: got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not q.dtype.is_floating_point:
        raise TypeError(f"{who}: expected floating-point q, k, v, got {q.dtype}")
    if scale is None:
        return 1.0 / math.sqrt(q.shape[-1])
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"{who}: scale must be a finite number or None, got {scale!r}")
    return float(scale)
