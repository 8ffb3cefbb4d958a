r"""Why attention divides by :math:`\sqrt{d_k}`: the variance argument, measured.

For a query :math:`q` and a key :math:`k` in :math:`\mathbb{R}^{d_k}` whose components are
independent with mean 0 and variance 1,

.. math::

    \mathbb{E}[q \cdot k] = \sum_{i=1}^{d_k} \mathbb{E}[q_i]\,\mathbb{E}[k_i] = 0, \qquad
    \mathrm{Var}(q \cdot k) = \sum_{i=1}^{d_k} \mathbb{E}[q_i^2]\,\mathbb{E}[k_i^2] = d_k,

so the scores :math:`q \cdot k / \sqrt{d_k}` have unit variance whatever :math:`d_k` is
(Vaswani et al., 2017, "Attention Is All You Need", footnote 4). Without the factor,
softmax sees scores of standard deviation :math:`\sqrt{d_k}`, saturates to nearly one-hot
weights, and its Jacobian :math:`\mathrm{diag}(p) - p p^\top` (hence every gradient flowing
through it) goes to zero.

This module holds what chapter 03 measures: the variance sweep over :math:`d_k`, softmax
entropy and Jacobian, saturation statistics, a seconds-long training experiment with and
without the scale, and multi-head scores with the right (and the classic wrong) scale.
Everything accepts an explicit ``torch.Generator`` so that results are reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .timing import single_thread
from .validation import shape_of

__all__ = [
    "RetrievalTask",
    "SaturationStats",
    "TrainResult",
    "adam_update",
    "dot_product_variance",
    "evaluate_retrieval",
    "gaussian_variance_stderr",
    "jacobian_abs_sum",
    "jacobian_entry_bounds",
    "project_and_score",
    "retrieval_loss",
    "sample_qk",
    "saturation_sweep",
    "score_gradients_at_init",
    "softmax_backward",
    "softmax_entropy",
    "softmax_jacobian",
    "train_retrieval",
    "variance_sweep",
]


# --------------------------------------------------------------------------- sampling


def sample_qk(
    n_samples: int,
    d_k: int,
    *,
    distribution: str = "normal",
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``n_samples`` independent pairs ``(q, k)``, each ``[n_samples, d_k]``.

    Components are i.i.d. with mean 0 and variance 1:

    * ``"normal"``: :math:`\mathcal{N}(0, 1)`;
    * ``"uniform"``: :math:`\mathcal{U}(-\sqrt{3}, \sqrt{3})` (variance :math:`3/3 = 1`);
    * ``"rademacher"``: :math:`\pm 1` with probability 1/2 each.

    The variance argument needs only the first two moments, so all three give
    :math:`\mathrm{Var}(q\cdot k) = d_k`.
    """
    if int(n_samples) < 1 or int(d_k) < 1:
        raise ValueError(f"need n_samples >= 1 and d_k >= 1, got {n_samples}, {d_k}")
    shape = (2, int(n_samples), int(d_k))
    if distribution == "normal":
        x = torch.randn(shape, generator=generator, dtype=dtype)  # (2, n, d_k)
    elif distribution == "uniform":
        u = torch.rand(shape, generator=generator, dtype=dtype)  # (2, n, d_k) in [0, 1)
        x = (2.0 * u - 1.0) * math.sqrt(3.0)  # (2, n, d_k) in [-√3, √3)
    elif distribution == "rademacher":
        bits = torch.randint(0, 2, shape, generator=generator)  # (2, n, d_k) in {0, 1}
        x = (2 * bits - 1).to(dtype)  # (2, n, d_k) in {-1, 1}
    else:
        raise ValueError(
            f"unknown distribution {distribution!r}: use 'normal', 'uniform' or 'rademacher'"
        )
    return x[0], x[1]


def dot_product_variance(q, k, scale: float = 1.0) -> float:
    r"""The empirical variance of the scaled dot products of paired rows.

    .. math::

        s_n = c\; q_n \cdot k_n, \qquad
        \widehat{\mathrm{Var}} = \frac{1}{N} \sum_{n=1}^{N} (s_n - \bar s)^2

    with :math:`c` = ``scale``. ``q`` and ``k`` are ``[N, d_k]`` (numpy or torch); row
    :math:`n` of ``q`` pairs with row :math:`n` of ``k``. The :math:`1/N` ("population")
    estimator is numpy's default ``np.var``.
    """
    q_np = q.detach().cpu().double().numpy() if isinstance(q, torch.Tensor) else np.asarray(q)
    k_np = k.detach().cpu().double().numpy() if isinstance(k, torch.Tensor) else np.asarray(k)
    if q_np.ndim != 2 or q_np.shape != k_np.shape:
        raise ValueError(
            f"expected q and k of the same shape [N, d_k], got q {q_np.shape} and k {k_np.shape}"
        )
    s = scale * np.einsum("nd,nd->n", q_np.astype(np.float64), k_np.astype(np.float64))  # (N,)
    return float(np.var(s))


def gaussian_variance_stderr(d_k: int, n_samples: int, scale: float = 1.0) -> float:
    r"""Standard error of :func:`dot_product_variance` for Gaussian ``q, k``.

    With :math:`X = q\cdot k`, :math:`\mathbb{E}[X^2] = d_k` and (Gaussian components,
    :math:`\mathbb{E}[q_i^4] = 3`) :math:`\mathbb{E}[X^4] = 9 d_k + 3 d_k (d_k - 1)
    = 3 d_k^2 + 6 d_k`, so :math:`\mathrm{Var}(X^2) = 2 d_k^2 + 6 d_k` and the variance
    estimated from :math:`N` samples has standard error

    .. math:: \mathrm{se} \approx c^2 \sqrt{(2 d_k^2 + 6 d_k) / N}.
    """
    d, n = float(d_k), float(n_samples)
    return scale**2 * math.sqrt((2.0 * d * d + 6.0 * d) / n)


def variance_sweep(
    d_ks: Sequence[int],
    n_samples: int = 10_000,
    *,
    distribution: str = "normal",
    generator: torch.Generator | None = None,
) -> dict[str, np.ndarray]:
    r"""Measure :math:`\mathrm{Var}(q\cdot k)` and :math:`\mathrm{Var}(q\cdot k/\sqrt{d_k})`.

    Returns arrays over ``d_ks``: ``d_k``, ``var`` (unscaled), ``var_scaled``,
    ``stderr`` and ``stderr_scaled`` (Gaussian standard errors from
    :func:`gaussian_variance_stderr`), and ``mean`` (the sample mean of :math:`q\cdot k`).
    """
    out: dict[str, list[float]] = {
        k: [] for k in ("d_k", "var", "var_scaled", "stderr", "stderr_scaled", "mean")
    }
    for d_k in d_ks:
        q, k = sample_qk(n_samples, d_k, distribution=distribution, generator=generator)
        dots = (q * k).double().sum(-1).numpy()  # (n,) q_n · k_n, summed in float64
        scale = 1.0 / math.sqrt(d_k)
        out["d_k"].append(d_k)
        out["var"].append(float(np.var(dots)))  # same estimator as dot_product_variance
        out["var_scaled"].append(float(np.var(scale * dots)))
        out["stderr"].append(gaussian_variance_stderr(d_k, n_samples))
        out["stderr_scaled"].append(gaussian_variance_stderr(d_k, n_samples, scale))
        out["mean"].append(float(dots.mean()))
    return {k: np.asarray(v) for k, v in out.items()}


# --------------------------------------------------------------------------- softmax


def softmax_entropy(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""Entropy in nats of distributions along ``dim``, with :math:`0 \log 0 = 0`.

    .. math:: H(p) = -\sum_j p_j \log p_j \;\in [0, \log n]

    :math:`H = \log n` for uniform weights and :math:`H = 0` for one-hot weights; masked
    (exactly zero) weights contribute nothing instead of NaN.
    """
    p = torch.as_tensor(p)
    if not p.is_floating_point():
        p = p.double()
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))  # (..., n) 0 where p == 0
    return -(p * logp).sum(dim)  # (...)


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    r"""The Jacobian of softmax at weights ``p [..., n]``: ``[..., n, n]``.

    For :math:`p = \mathrm{softmax}(s)`, :math:`\partial p_i / \partial s_j
    = p_i(\delta_{ij} - p_j)`, i.e.

    .. math:: J = \mathrm{diag}(p) - p\, p^\top .

    It is symmetric, its rows sum to 0 (adding a constant to every score changes
    nothing), and it vanishes as :math:`p` approaches a one-hot vector.
    """
    p = torch.as_tensor(p)
    if p.ndim < 1:
        raise ValueError(f"expected weights p of shape [..., n], got {shape_of(p)}")
    return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., n, n)


def jacobian_abs_sum(p: torch.Tensor) -> torch.Tensor:
    r"""The sum of absolute entries of :func:`softmax_jacobian`, in closed form.

    Row :math:`i` of :math:`J` has :math:`|J_{ii}| = p_i(1-p_i)` and off-diagonal
    entries summing to :math:`p_i(1-p_i)` in absolute value, so, with
    :math:`m = p_{\max}` and :math:`n` keys,

    .. math::

        2(1 - m) \;\le\; \sum_{ij} |J_{ij}| = 2\Big(1 - \sum_i p_i^2\Big)
        \;\le\; 2\Big(1 - m^2 - \frac{(1-m)^2}{n-1}\Big) \;\le\; 4\,(1 - m).

    (:math:`\sum_i p_i^2 \le m \sum_i p_i = m` gives the lower bound; the upper one is
    reached when the other :math:`n-1` weights are equal.) That bound of 4(1 − m) is for
    the *sum*; each entry obeys the sharper :func:`jacobian_entry_bounds`.
    """
    p = torch.as_tensor(p)
    return 2.0 * (1.0 - (p * p).sum(-1))  # (...)


def jacobian_entry_bounds(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The largest entry and the largest row sum of :math:`|J|`, both exact.

    With :math:`m = p_{\max}`: every :math:`p_i(1-p_i) \le m(1-m)` (for the argmax it is
    :math:`m(1-m)`; any other :math:`p_i \le \min(m, 1-m)`, where :math:`p(1-p)` is
    increasing), and every :math:`p_ip_j \le m(1-m)` for :math:`i \ne j`. Hence

    .. math::

        \max_{ij} |J_{ij}| = m(1 - m), \qquad
        \max_i \sum_j |J_{ij}| = 2\max_i p_i(1-p_i) = 2m(1 - m),

    both attained at the argmax's row: equalities, not just bounds. The second is the
    :math:`\infty`-norm of :math:`J`, so the gradient reaching the scores obeys
    :math:`\max_j |\partial L/\partial s_j| \le 2m(1-m)\,\max_i |\partial L/\partial p_i|
    \le 2(1-m)\,\max_i |\partial L/\partial p_i|`. Returns ``(m(1 - m), 2m(1 - m))``,
    each of shape ``[...]``.
    """
    m = torch.as_tensor(p).amax(-1)  # (...)
    return m * (1 - m), 2 * m * (1 - m)


def softmax_backward(p: torch.Tensor, grad_p: torch.Tensor) -> torch.Tensor:
    r"""The gradient with respect to the scores, without building the Jacobian.

    For :math:`p = \mathrm{softmax}(s)` and :math:`g = \partial L/\partial p`,
    :math:`J^\top g = (\mathrm{diag}(p) - pp^\top) g`, i.e.

    .. math:: \frac{\partial L}{\partial s_j} = p_j\,\big(g_j - \textstyle\sum_i p_i g_i\big),

    :math:`O(n)` memory and work per row instead of the :math:`O(n^2)` of :math:`J`. This is
    what autograd computes for ``softmax`` (and, with :math:`\sum_i p_i g_i` written as a
    row sum, what FlashAttention's backward pass does: chapter 06).
    """
    p, grad_p = torch.as_tensor(p), torch.as_tensor(grad_p)
    if p.shape != grad_p.shape:
        raise ValueError(
            f"p and grad_p must have the same shape [..., n], got {shape_of(p)} and "
            f"{shape_of(grad_p)}"
        )
    return p * (grad_p - (p * grad_p).sum(-1, keepdim=True))  # (..., n)


@dataclass
class SaturationStats:
    """Softmax statistics over ``d_k`` for random unit-variance queries and keys."""

    d_k: np.ndarray
    max_weight: np.ndarray  # mean over queries of the largest weight
    entropy: np.ndarray  # mean entropy (nats)
    jacobian_abs: np.ndarray  # mean of sum |J_ij| (see jacobian_abs_sum)
    n_keys: int

    @property
    def max_entropy(self) -> float:
        """:math:`\\log n`: the entropy of uniform weights over ``n_keys``."""
        return math.log(self.n_keys)


def saturation_sweep(
    d_ks: Sequence[int],
    *,
    scaled: bool,
    n_keys: int = 64,
    n_queries: int = 256,
    generator: torch.Generator | None = None,
) -> SaturationStats:
    r"""Attention weights for random q, k with unit-variance components, as ``d_k`` grows.

    For each :math:`d_k`, ``n_queries`` queries attend to ``n_keys`` keys with scores
    :math:`s = q k^\top` (``scaled=False``) or :math:`q k^\top/\sqrt{d_k}` (``scaled=True``).
    Returns the mean largest weight, the mean entropy and the mean :math:`\sum|J|`.
    """
    rows: dict[str, list[float]] = {"max": [], "ent": [], "jac": []}
    for d_k in d_ks:
        q = torch.randn(n_queries, d_k, generator=generator)  # (Nq, d_k)
        k = torch.randn(n_keys, d_k, generator=generator)  # (Nk, d_k)
        scores = q @ k.T  # (Nq, Nk)
        if scaled:
            scores = scores / math.sqrt(d_k)  # (Nq, Nk)
        p = scores.double().softmax(-1)  # (Nq, Nk)
        rows["max"].append(float(p.amax(-1).mean()))
        rows["ent"].append(float(softmax_entropy(p).mean()))
        rows["jac"].append(float(jacobian_abs_sum(p).mean()))
    return SaturationStats(
        np.asarray(list(d_ks)),
        np.asarray(rows["max"]),
        np.asarray(rows["ent"]),
        np.asarray(rows["jac"]),
        n_keys,
    )


# --------------------------------------------------------------------------- multi-head


def project_and_score(
    x: torch.Tensor,
    W_Q: torch.Tensor,
    W_K: torch.Tensor,
    num_heads: int,
    *,
    scale_by: str = "head_dim",
) -> torch.Tensor:
    r"""Per-head attention scores ``[B, H, N, N]`` from the *inputs* ``x [B, N, d_model]``
    and the projections: it projects (:math:`Q = XW_Q, K = XW_K`), splits into heads, and
    scores. (Exercise 03.5's ``multihead_scores(q, k, num_heads)`` starts one step later,
    from ``q`` and ``k`` already projected.)

    .. math::

        Q = X W_Q,\; K = X W_K \in \mathbb{R}^{N \times d_\text{model}}, \qquad
        S_h = \frac{Q_h K_h^\top}{\sqrt{d_h}}, \quad
        d_h = d_\text{model} / H,

    where :math:`Q_h` are the :math:`d_h` columns of head :math:`h`. Each head's
    dot product sums :math:`d_h` terms, so :math:`\sqrt{d_h}` (``scale_by="head_dim"``) is
    the right divisor. ``scale_by="d_model"`` reproduces the classic bug of dividing by
    :math:`\sqrt{d_\text{model}}`, which shrinks every score by :math:`\sqrt{H}`.
    """
    if x.ndim != 3:
        raise ValueError(f"expected x of shape [B, N, d_model], got {shape_of(x)}")
    batch_size, seq_len, d_model = x.shape
    if W_Q.shape != (d_model, d_model) or W_K.shape != (d_model, d_model):
        raise ValueError(
            f"expected W_Q and W_K of shape [d_model, d_model] = "
            f"{(d_model, d_model)}, got {shape_of(W_Q)} and {shape_of(W_K)}"
        )
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    head_dim = d_model // num_heads
    divisor = {"head_dim": head_dim, "d_model": d_model}.get(scale_by)
    if divisor is None:
        raise ValueError(f"scale_by must be 'head_dim' or 'd_model', got {scale_by!r}")
    q = (x @ W_Q).view(batch_size, seq_len, num_heads, head_dim).transpose(1, 2)  # (B, H, N, d_h)
    k = (x @ W_K).view(batch_size, seq_len, num_heads, head_dim).transpose(1, 2)  # (B, H, N, d_h)
    return q @ k.transpose(-2, -1) / math.sqrt(divisor)  # (B, H, N, N)


# --------------------------------------------------------------------------- training


@dataclass
class TrainResult:
    """Loss curve and final parameters of :func:`train_retrieval`."""

    losses: np.ndarray  # (steps,)
    scale: float
    W_Q: torch.Tensor = field(repr=False)
    W_K: torch.Tensor = field(repr=False)
    grad_norms: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    def final_loss(self, last: int = 30) -> float:
        """Mean loss over the last ``last`` steps (smooths minibatch noise)."""
        return float(self.losses[-last:].mean())


class RetrievalTask:
    r"""A key–value lookup that only attention can solve, with fixed random embeddings.

    Each example has ``n_keys`` distinct tokens (from a vocabulary of ``vocab_size``) with a
    random value token each; the query is one of the ``n_keys`` tokens, and the target is
    its value vector. A model that attends to the key equal to the query scores 0.
    """

    def __init__(
        self,
        *,
        d_model: int = 64,
        n_keys: int = 8,
        vocab_size: int = 32,
        d_v: int = 16,
        seed: int = 0,
    ):
        g = torch.Generator().manual_seed(seed)
        self.n_keys, self.vocab_size = n_keys, vocab_size
        self.embed = torch.randn(vocab_size, d_model, generator=g)  # (V, d_model) unit variance
        self.values = torch.randn(vocab_size, d_v, generator=g) / 4.0  # (V, d_v)

    def batch(self, batch_size: int, generator: torch.Generator):
        """``(x_q [B, d_model], x_k [B, n_keys, d_model], v [B, n_keys, d_v], target [B, d_v])``."""
        tok = torch.argsort(torch.rand(batch_size, self.vocab_size, generator=generator), dim=-1)[
            :, : self.n_keys
        ]  # (B, Nk) distinct tokens per row
        rows = torch.arange(batch_size)  # (B,)
        j = torch.randint(self.n_keys, (batch_size,), generator=generator)  # (B,)
        val = torch.randint(
            self.vocab_size, (batch_size, self.n_keys), generator=generator
        )  # (B, Nk)
        x_q = self.embed[tok[rows, j]]  # (B, d_model)
        x_k = self.embed[tok]  # (B, Nk, d_model)
        v = self.values[val]  # (B, Nk, d_v)
        target = v[rows, j]  # (B, d_v)
        return x_q, x_k, v, target


def retrieval_loss(
    task_batch, W_Q: torch.Tensor, W_K: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Mean squared error of one attention read-out, and the weights ``[B, Nk]``.

    .. math::

        w = \mathrm{softmax}\big(c\,(x_q W_Q)(X_k W_K)^\top\big), \quad
        o = \sum_j w_j v_j, \quad L = \lVert o - v^\ast \rVert^2 .

    The loss sits *behind* the softmax (as in a transformer, where the weighted values
    flow on), so its gradient with respect to the scores is :math:`J^\top \partial L/\partial w`.
    """
    x_q, x_k, v, target = task_batch
    q = x_q @ W_Q  # (B, d_k)
    k = x_k @ W_K  # (B, Nk, d_k)
    scores = (k @ q[:, :, None]).squeeze(-1) * scale  # (B, Nk)
    w = scores.softmax(-1)  # (B, Nk)
    out = (w[:, :, None] * v).sum(1)  # (B, d_v)
    return ((out - target) ** 2).sum(-1).mean(), w


def _init_retrieval(d_k: int, d_model: int, seed: int):
    task = RetrievalTask(d_model=d_model, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    W_Q = (
        torch.randn(d_model, d_k, generator=g) / math.sqrt(d_model)
    ).requires_grad_()  # (d_model, d_k)
    W_K = (
        torch.randn(d_model, d_k, generator=g) / math.sqrt(d_model)
    ).requires_grad_()  # (d_model, d_k)
    return task, W_Q, W_K


def score_gradients_at_init(
    scale: float | None = None,
    *,
    d_k: int = 256,
    d_model: int = 64,
    batch_size: int = 512,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Per-example :math:`\lVert \partial L_n / \partial s_n \rVert` and :math:`\max_j w_{nj}` at initialisation.

    Same task and initial weights as :func:`train_retrieval` with the same ``seed``. The
    gradient reaching the scores is :math:`J^\top \partial L/\partial w`, so it is small
    whenever the example's softmax is saturated (:math:`\max_j w_j \to 1`).
    """
    scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
    task, W_Q, W_K = _init_retrieval(d_k, d_model, seed)
    x_q, x_k, v, target = task.batch(batch_size, torch.Generator().manual_seed(seed + 3))
    q = x_q @ W_Q.detach()  # (B, d_k)
    k = x_k @ W_K.detach()  # (B, Nk, d_k)
    scores = ((k @ q[:, :, None]).squeeze(-1) * scale).requires_grad_()  # (B, Nk)
    w = scores.softmax(-1)  # (B, Nk)
    out = (w[:, :, None] * v).sum(1)  # (B, d_v)
    ((out - target) ** 2).sum().backward()  # sum: each example's own gradient
    return scores.grad.norm(dim=-1).numpy(), w.detach().amax(-1).numpy()  # (B,), (B,)


def adam_update(
    param: torch.Tensor,
    grad: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    step: int,
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> None:
    r"""One Adam step (Kingma & Ba, 2015, "Adam: A Method for Stochastic Optimization"), in place.

    .. math::

        m \leftarrow \beta_1 m + (1-\beta_1) g, \qquad
        v \leftarrow \beta_2 v + (1-\beta_2) g^2, \qquad
        \theta \leftarrow \theta - \frac{\eta}{1-\beta_1^t}\,
        \frac{m}{\sqrt{v}/\sqrt{1-\beta_2^t} + \epsilon}

    with :math:`t` = ``step`` (counted from 1). The same arithmetic, in the same order, as
    ``torch.optim.Adam`` with its defaults (a unit test compares them). Written out because
    constructing any ``torch.optim`` optimizer imports ``torch._dynamo``, which costs
    seconds on a small CPU: more than this chapter's whole training run.
    """
    beta1, beta2 = betas
    with torch.no_grad():
        m.lerp_(grad, 1 - beta1)  # (same as param) running mean of g
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)  # (same as param) running mean of g²
        denom = (v.sqrt() / (1 - beta2**step) ** 0.5).add_(eps)  # (same as param)
        param.addcdiv_(m, denom, value=-lr / (1 - beta1**step))


def train_retrieval(
    scale: float | None = None,
    *,
    d_k: int = 256,
    d_model: int = 64,
    steps: int = 150,
    batch_size: int = 64,
    lr: float = 1e-2,
    optimizer: str = "adam",
    seed: int = 0,
) -> TrainResult:
    r"""Train :math:`W_Q, W_K` on :class:`RetrievalTask` with a given score scale.

    ``scale=None`` means :math:`1/\sqrt{d_k}`; ``scale=1.0`` is "no scaling". Weights
    start as :math:`\mathcal{N}(0, 1/d_\text{model})`, so with unit-variance embeddings
    :math:`q` and :math:`k` have unit-variance components (the assumption of the variance
    argument). The task and the minibatches depend only on ``seed``, so runs that differ
    only in ``scale`` see exactly the same data. ``optimizer`` is ``"adam"``
    (:func:`adam_update`, the default hyperparameters of ``torch.optim.Adam``) or
    ``"sgd"`` (:math:`\theta \leftarrow \theta - \eta g`).
    """
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    scale = 1.0 / math.sqrt(d_k) if scale is None else float(scale)
    task, W_Q, W_K = _init_retrieval(d_k, d_model, seed)
    params = [W_Q, W_K]
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]  # Adam's m, v
    data_g = torch.Generator().manual_seed(seed + 2)
    losses, grad_norms = [], []
    with single_thread():  # tiny matrices: one thread is faster than several competing
        for step in range(1, steps + 1):
            loss, _ = retrieval_loss(task.batch(batch_size, data_g), W_Q, W_K, scale)
            grads = torch.autograd.grad(loss, params)  # (d_model, d_k) each
            grad_norms.append(float(torch.stack([(g**2).sum() for g in grads]).sum().sqrt()))
            for p, g, (m, v) in zip(params, grads, moments):
                if optimizer == "adam":
                    adam_update(p, g, m, v, step, lr=lr)
                else:
                    with torch.no_grad():
                        p.add_(g, alpha=-lr)  # (d_model, d_k)
            losses.append(loss.item())
    return TrainResult(
        np.asarray(losses), scale, W_Q.detach(), W_K.detach(), np.asarray(grad_norms)
    )


def evaluate_retrieval(
    result: TrainResult,
    scale: float | None = None,
    *,
    seed: int = 0,
    batch_size: int = 512,
    eval_seed: int = 12345,
) -> float:
    """Loss of trained weights on a fresh batch, optionally with a different ``scale``."""
    task = RetrievalTask(d_model=result.W_Q.shape[0], seed=seed)
    g = torch.Generator().manual_seed(eval_seed)
    with torch.no_grad():
        loss, _ = retrieval_loss(
            task.batch(batch_size, g),
            result.W_Q,
            result.W_K,
            result.scale if scale is None else float(scale),
        )
    return float(loss)
