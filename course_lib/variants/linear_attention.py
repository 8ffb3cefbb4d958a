r"""Linear attention: attention with a kernel feature map, which is an RNN.

Softmax attention weighs value :math:`v_j` by :math:`\exp(q_i^\top k_j/\sqrt{d_k})`.
Katharopoulos, Vyas, Pappas and Fleuret (2020, "Transformers are RNNs: Fast Autoregressive
Transformers with Linear Attention") replace the exponential by a dot product of
features, :math:`\phi(q_i)^\top \phi(k_j)`, with :math:`\phi(x) = \mathrm{elu}(x) + 1 > 0`:

.. math::

    o_i = \frac{\sum_{j \le i} \phi(q_i)^\top \phi(k_j)\; v_j^\top}
               {\sum_{j \le i} \phi(q_i)^\top \phi(k_j)}
        = \frac{\phi(q_i)^\top \overbrace{\textstyle\sum_{j \le i} \phi(k_j) v_j^\top}^{S_i}}
               {\phi(q_i)^\top \underbrace{\textstyle\sum_{j \le i} \phi(k_j)}_{z_i}} .

The *parallel* form (left, :func:`linear_attention`) is attention with an
:math:`N \times N` weight matrix, trained like any Transformer. The *recurrent* form
(right) moves the sum inside: the state :math:`S_i = S_{i-1} + \phi(k_i) v_i^\top`
(:math:`d_k \times d_v`) and :math:`z_i = z_{i-1} + \phi(k_i)` (:math:`d_k`) are updated
once per token (:func:`linear_attention_step`), exactly chapter 01's recurrence
:math:`h_t = f(h_{t-1}, x_t)` with a matrix for a hidden state. Decoding then costs
:math:`O(d_k d_v)` time and memory per token, whatever the position: no KV cache.

The price: every past token is folded into one fixed-size state. A softmax KV cache keeps
all :math:`N` keys apart; :math:`S_i` can keep at most :math:`d_k` of them perfectly apart
(with :math:`\phi \ge 0`, keys that do not interfere need disjoint supports, and there are
only :math:`d_k` features; Schlag, Irie and Schmidhuber, 2021, "Linear Transformers Are
Secretly Fast Weight Programmers", study this capacity). ``course_lib.experiments.recall`` measures the
consequence.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = [
    "elu_feature_map",
    "linear_attention",
    "linear_attention_recurrent",
    "linear_attention_step",
    "linear_state_bytes",
]

FeatureMap = Callable[[torch.Tensor], torch.Tensor]


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    r""":math:`\phi(x) = \mathrm{elu}(x) + 1`: positive everywhere, :math:`\approx e^x` for
    :math:`x < 0` and :math:`x + 1` for :math:`x \ge 0` (Katharopoulos et al., 2020)."""
    return F.elu(x) + 1.0


def _check(q, k, v) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.ndim < 2:
            raise ValueError(
                f"expected {name} of shape [..., N, d], got {getattr(x, 'shape', type(x).__name__)}"
            )
    if q.shape[-1] != k.shape[-1] or q.shape[-2] != k.shape[-2] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"expected q, k [..., N, d_k] and v [..., N, d_v] with the same N "
            f"and d_k, got q {tuple(q.shape)}, k {tuple(k.shape)}, v "
            f"{tuple(v.shape)}"
        )


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    feature_map: FeatureMap = elu_feature_map,
    causal: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    r"""The parallel form: ``[..., N, d_v]`` from ``q, k [..., N, d_k]``, ``v [..., N, d_v]``.

    .. math:: A = \phi(Q)\phi(K)^\top \odot M, \qquad O = \frac{A V}{A \mathbf{1}}

    with :math:`M` the causal mask when ``causal`` (all ones otherwise). ``eps`` guards
    the denominator. Costs :math:`O(N^2 d)` like softmax attention: this is the form for
    training, the recurrent one is for decoding.
    """
    _check(q, k, v)
    fq, fk = feature_map(q), feature_map(k)  # (..., N, d_k)
    a = fq @ fk.transpose(-2, -1)  # (..., N, N) unnormalised weights phi(q_i).phi(k_j)
    if causal:
        a = a.tril()  # (..., N, N) key j <= query i
    return (a @ v) / (a.sum(dim=-1, keepdim=True) + eps)  # (..., N, d_v)


def linear_attention_step(
    q_t: torch.Tensor,
    k_t: torch.Tensor,
    v_t: torch.Tensor,
    state: torch.Tensor,
    normalizer: torch.Tensor,
    *,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""One token of the recurrent form: ``(o_t [..., d_v], state, normalizer)``.

    .. math::

        S_t = S_{t-1} + \phi(k_t)\, v_t^\top, \qquad z_t = z_{t-1} + \phi(k_t), \qquad
        o_t = \frac{S_t^\top \phi(q_t)}{z_t^\top \phi(q_t)}

    ``q_t, k_t [..., d_k]``, ``v_t [..., d_v]``, ``state [..., d_k, d_v]``,
    ``normalizer [..., d_k]`` (zeros before the first token). The token is added to the
    state *before* it is read, so it attends to itself, as in causal attention.
    """
    fq, fk = feature_map(q_t), feature_map(k_t)  # (..., d_k)
    state = state + fk[..., :, None] * v_t[..., None, :]  # (..., d_k, d_v) outer product
    normalizer = normalizer + fk  # (..., d_k)
    num = (fq[..., None, :] @ state)[..., 0, :]  # (..., d_v)  phi(q)^T S
    den = (fq * normalizer).sum(dim=-1, keepdim=True)  # (..., 1) phi(q)^T z
    return num / (den + eps), state, normalizer


def linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The recurrent form, one :func:`linear_attention_step` per token.

    Returns ``(output [..., N, d_v], state [..., d_k, d_v], normalizer [..., d_k])``: the
    outputs equal :func:`linear_attention` with ``causal=True``; the final state is all a
    decoder needs to continue.
    """
    _check(q, k, v)
    *lead, n, d_k = q.shape
    d_v = v.shape[-1]
    state = q.new_zeros(*lead, d_k, d_v)  # (..., d_k, d_v)
    normalizer = q.new_zeros(*lead, d_k)  # (..., d_k)
    outs = []
    for t in range(n):
        o_t, state, normalizer = linear_attention_step(
            q[..., t, :],
            k[..., t, :],
            v[..., t, :],
            state,
            normalizer,
            feature_map=feature_map,
            eps=eps,
        )  # (..., d_v)
        outs.append(o_t)
    out = torch.stack(outs, dim=-2) if outs else q.new_zeros(*lead, 0, d_v)  # (..., N, d_v)
    return out, state, normalizer


def linear_state_bytes(
    num_layers: int,
    num_heads: int,
    d_k: int,
    d_v: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
) -> int:
    r"""Bytes of linear attention's decoding state: :math:`L \times H \times (d_k d_v + d_k)
    \times B \times` bytes per value, the same at token 10 as at token 10 million."""
    for name, n in (
        ("num_layers", num_layers),
        ("num_heads", num_heads),
        ("d_k", d_k),
        ("d_v", d_v),
        ("batch_size", batch_size),
        ("bytes_per_value", bytes_per_value),
    ):
        if isinstance(n, bool) or int(n) != n or n < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {n!r}")
    return int(num_layers * num_heads * (d_k * d_v + d_k) * batch_size * bytes_per_value)
