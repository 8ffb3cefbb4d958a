r"""Checks for chapter 01 (the RNN bottleneck): six graded exercises.

* 01.1 ``rnn_forward``: the recurrence, step by step (3 points);
* 01.2 ``scale_to_spectral_radius``: eigenvalues, not singular values (1 point);
* 01.3 ``jacobian_norms_through_time``: how much ``h_N`` still feels ``x_t`` (3 points);
* 01.4 ``critical_path``: sequential depth versus total work (2 points);
* 01.5 ``clip_grad_norm``: gradient clipping by the global norm, which the lecture names
  but does not show (2 points);
* 01.6 ``measure_growth_rate``: predict, then measure how fast a recurrence grows or fades
  (1 point).

Each reference takes a keyword per common mistake (its *slips*); the hints and the mistakes'
texts are in ``ch01.md``.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import rnn as R
from .core import Case, Fixed
from .declare import exercise
from .kit import DT, randn, within


def _rnn_args(rng, batch_size, seq_len, d_in, d_hidden, *, h0=False, gain=0.8) -> tuple:
    x = randn(rng, batch_size, seq_len, d_in)  # (B, N, d_in)
    W_xh = randn(rng, d_hidden, d_in) / np.sqrt(d_in)  # (d_hidden, d_in)
    W_hh = randn(rng, d_hidden, d_hidden) * gain / np.sqrt(d_hidden)  # (d_hidden, d_hidden)
    b_h = randn(rng, d_hidden) * 0.5  # (d_hidden,)
    return (x, W_xh, W_hh, b_h) + ((randn(rng, batch_size, d_hidden),) if h0 else ())


# --------------------------------------------------------------------------- 01.1 rnn_forward


def rnn_forward_reference(
    x,
    W_xh,
    W_hh,
    b_h,
    h0=None,
    *,
    float32_zeros=False,
    use_h0=True,
    tanh=True,
    transpose=True,
    recurrent=True,
    bias=True,
    first=0,
    returns="h_1..h_N",
) -> torch.Tensor:
    r"""Every hidden state ``[B, N, d_hidden]`` of a tanh RNN over ``x [B, N, d_in]``,
    row-vector form: :math:`h_t = \tanh(x_t W_{xh}^\top + b_h + h_{t-1} W_{hh}^\top)`, from
    :math:`h_0` = ``h0`` (zeros if None); as :func:`course_lib.rnn.rnn_forward`."""
    batch_size, seq_len, _ = x.shape
    if float32_zeros:  # float32 zeros: h @ W_hh.T then refuses to mix them with float64
        h = torch.zeros(batch_size, W_hh.shape[0])  # (B, d_hidden)
    else:
        h = x.new_zeros(batch_size, W_hh.shape[0])  # (B, d_hidden)
    if h0 is not None and use_h0:
        h = h0
    xw = x @ W_xh.T + (b_h if bias else 0.0)  # (B, N, d_hidden) every step's input at once
    states = [h]
    for t in range(first, seq_len):
        a = xw[:, t]  # (B, d_hidden)
        if recurrent:
            a = a + h @ (W_hh.T if transpose else W_hh)  # (B, d_hidden)
        h = torch.tanh(a) if tanh else a  # (B, d_hidden)
        states.append(h)
    H = torch.stack(states, dim=1)  # (B, 1 + N, d_hidden): h_0 .. h_N
    if returns == "h_N":
        return H[:, -1]  # (B, d_hidden)
    if returns == "h_0..h_N-1":
        return H[:, :-1]  # (B, N, d_hidden)
    if returns == "h_0..h_N":
        return H  # (B, N + 1, d_hidden)
    return H[:, 1:]  # (B, N, d_hidden)


def _rnn_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("B=2, N=5, d_in=3, d_hidden=4, h0=None", _rnn_args(rng, 2, 5, 3, 4)),
            Case(
                "B=3, N=4, d_in=2, d_hidden=5, with an initial state h0",
                _rnn_args(rng, 3, 4, 2, 5, h0=True),
            ),
        ]
    return [
        Case("a single step, N=1", _rnn_args(rng, 2, 1, 3, 4, h0=True)),
        Case("B=1, N=40, d_in=6, d_hidden=8", _rnn_args(rng, 1, 40, 6, 8)),
        Case("B=4, N=12, d_in=7, d_hidden=3, with h0", _rnn_args(rng, 4, 12, 7, 3, h0=True)),
    ]


exercise(
    "01.1",
    rnn_forward_reference,
    target="rnn_forward",
    title="the RNN forward loop",
    points=3,
    cases=_rnn_cases,
    atol=1e-8,
    rtol=1e-6,
    slips={
        "float32-zeros": dict(float32_zeros=True),
        "ignored-h0": dict(use_h0=False),
        "no-tanh": dict(tanh=False),
        "untransposed-w-hh": dict(transpose=False),
        "last-state-only": dict(returns="h_N"),
        "shifted": dict(returns="h_0..h_N-1"),
        "no-recurrence": dict(recurrent=False),
        "no-bias": dict(bias=False),
        "h0-included": dict(returns="h_0..h_N"),
        "skipped-first-input": dict(first=1),
    },
)


# --------------------------------------------------------------------------- 01.2 spectral radius


def scale_to_spectral_radius_reference(W, rho, *, by="eigenvalues", times_rho=True) -> torch.Tensor:
    r"""``W`` rescaled to spectral radius ``rho``: :math:`\rho\, W / \rho(W)`, where
    :math:`\rho(W)` is the largest modulus of an eigenvalue of :math:`W` (complex ones too)."""
    if by == "singular value":  # the matrix 2-norm
        r = torch.linalg.matrix_norm(W, ord=2)
    elif by == "frobenius":
        r = torch.linalg.matrix_norm(W)
    elif by == "real part":
        r = torch.linalg.eigvals(W).real.max()
    elif by == "max entry":
        r = W.abs().max()
    elif by == "eigvalsh":  # symmetric only: reads one triangle of W
        r = torch.linalg.eigvalsh(W).abs().max()
    else:
        r = torch.linalg.eigvals(W).abs().max()
    return W * ((rho if times_rho else 1.0) / r)  # (d, d)


def _nonnormal(rng: np.random.Generator, d: int) -> torch.Tensor:
    """A matrix whose largest singular value differs clearly from its spectral radius."""
    A = randn(rng, d, d)  # (d, d)
    return A + torch.triu(randn(rng, d, d) * 3, diagonal=1)  # a strong upper part: non-normal


def _radius_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
                "2×2 [[0, 4], [0.25, 0]] to rho=0.5 (eigenvalues ±1, largest singular value 4)",
                (torch.tensor([[0.0, 4.0], [0.25, 0.0]], dtype=DT), 0.5),
            ),
            Case("a random non-normal 6×6 matrix to rho=1.2", (_nonnormal(rng, 6), 1.2)),
        ]
    return [
        Fixed(
            "a rotation (complex eigenvalues) to rho=0.9",
            (torch.tensor([[0.0, -2.0], [2.0, 0.0]], dtype=DT), 0.9),
        ),
        Case("a random non-normal 16×16 matrix to rho=1.0", (_nonnormal(rng, 16), 1.0)),
        Fixed(
            "a matrix with a dominant negative eigenvalue to rho=2",
            (
                torch.diag(torch.tensor([-3.0, 1.0, 0.5], dtype=DT))
                + torch.ones(3, 3, dtype=DT).triu(1),
                2.0,
            ),
        ),
    ]


exercise(
    "01.2",
    scale_to_spectral_radius_reference,
    target="scale_to_spectral_radius",
    title="rescale to a spectral radius",
    points=1,
    cases=_radius_cases,
    atol=1e-8,
    rtol=1e-6,
    slips={
        "singular-value": dict(by="singular value"),
        "frobenius": dict(by="frobenius"),
        "real-part": dict(by="real part"),
        "max-entry": dict(by="max entry"),
        "eigvalsh": dict(by="eigvalsh"),
        "rho-forgotten": dict(times_rho=False),
    },
)


# --------------------------------------------------------------------------- 01.3 Jacobian norms


def jacobian_norms_reference(
    x, W_xh, W_hh, b_h, *, of="h_N", summed=False, ord="fro", squared=False, reverse=False
) -> torch.Tensor:
    r"""``[N]`` Frobenius norms :math:`\lVert \partial h_N / \partial x_t \rVert_F` for
    ``x [N, d_in]`` (one sequence, :math:`h_0 = 0`), as
    :func:`course_lib.rnn.jacobian_norms_through_time`. By the chain rule, with
    :math:`D_k = \mathrm{diag}(1 - h_k^2)` the tanh derivative,

    .. math::

        \frac{\partial h_k}{\partial x_k} = D_k W_{xh}, \qquad
        \frac{\partial h_k}{\partial x_t} = D_k W_{hh} \frac{\partial h_{k-1}}{\partial x_t}
        \quad (t < k),

    and 0 for :math:`t > k`; entry :math:`t` is the square root of the sum of the squares of
    :math:`\partial h_N / \partial x_t` (``d_hidden x d_in``)."""
    H = rnn_forward_reference(x[None], W_xh, W_hh, b_h, returns="h_0..h_N")[0]  # (N + 1, d_hidden)
    n = x.shape[0]
    J = x.new_zeros(n + 1, W_hh.shape[0], n, x.shape[1])  # (N + 1, d_hidden, N, d_in) dh_k/dx_t
    for k in range(1, n + 1):
        D = 1 - H[k] ** 2  # (d_hidden,) the tanh derivative at step k
        J[k] = D[:, None, None] * torch.einsum("ij,jtd->itd", W_hh, J[k - 1])  # (d_hidden, N, d_in)
        J[k, :, k - 1] = D[:, None] * W_xh  # (d_hidden, d_in) the step's own input
    t = torch.arange(n)
    if of == "h_t":  # each state against its own input: dh_t/dx_t
        Jt = J[t + 1, :, t]  # (N, d_hidden, d_in)
    elif of == "h_N-1":  # one state before the last (0 for N = 1: h_0 depends on no input)
        Jt = J[-2].transpose(0, 1)  # (N, d_hidden, d_in)
    else:
        Jt = J[-1].transpose(0, 1)  # (N, d_hidden, d_in) dh_N/dx_t
    if summed:  # the gradient of h_N.sum(): the Jacobian's rows added up
        Jt = Jt.sum(dim=1, keepdim=True)  # (N, 1, d_in)
    norms = torch.linalg.matrix_norm(Jt, ord=ord)  # (N,)
    if squared:
        norms = norms**2  # (N,)
    return norms.flip(0) if reverse else norms  # (N,)


def _jac_args(rng, seq_len, d_in, d_hidden, gain, x_scale=1.0) -> tuple:
    x = randn(rng, seq_len, d_in) * x_scale  # (N, d_in)
    W_xh = randn(rng, d_hidden, d_in) / np.sqrt(d_in)  # (d_hidden, d_in)
    W_hh = randn(rng, d_hidden, d_hidden) * gain / np.sqrt(d_hidden)  # (d_hidden, d_hidden)
    b_h = randn(rng, d_hidden) * 0.1  # (d_hidden,)
    return x, W_xh, W_hh, b_h


def _jac_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("N=6, d_in=3, d_hidden=4", _jac_args(rng, 6, 3, 4, 0.9)),
            Case("N=10, d_in=2, d_hidden=5, small inputs", _jac_args(rng, 10, 2, 5, 1.2, 0.1)),
        ]
    return [
        Case("N=1: only dh_1/dx_1", _jac_args(rng, 1, 3, 4, 1.0)),
        Case("N=30, d_in=4, d_hidden=6, large gain", _jac_args(rng, 30, 4, 6, 2.0)),
        Case("N=25, d_in=5, d_hidden=3, small gain", _jac_args(rng, 25, 5, 3, 0.5, 0.1)),
    ]


exercise(
    "01.3",
    jacobian_norms_reference,
    target="jacobian_norms_through_time",
    title="gradient norms through time",
    points=3,
    cases=_jac_cases,
    atol=1e-10,
    rtol=1e-6,
    slips={
        "reversed": dict(reverse=True),
        "sum-gradient": dict(summed=True),
        "spectral-norm": dict(ord=2),
        "own-input": dict(of="h_t"),
        "previous-state": dict(of="h_N-1"),
        "squared": dict(squared=True),
    },
)


# --------------------------------------------------------------------------- 01.4 critical path


def critical_path_reference(parents, *, wait="max", count="nodes", end="any") -> int:
    r"""The number of nodes on the longest chain of a dependency graph (``parents[i]``: the
    earlier nodes node ``i`` waits for): :math:`\max_i \mathrm{depth}(i)` with
    :math:`\mathrm{depth}(i) = 1 + \max_{p \in \mathrm{parents}(i)} \mathrm{depth}(p)` (1
    without parents), 0 for an empty graph; as :func:`course_lib.rnn.critical_path`."""
    if count == "work":  # every node, as if none ran side by side
        return len(parents)
    depth: list[int] = []
    for ps in parents:
        if wait == "sum":  # the parents one after another
            before = sum(depth[p] for p in ps)
        elif wait == "first":
            before = depth[ps[0]] if ps else 0
        elif wait == "min":  # the fastest parent
            before = min((depth[p] for p in ps), default=0)
        else:  # the slowest parent
            before = max((depth[p] for p in ps), default=0)
        depth.append(1 + before)
    if end == "last":  # the chain ending at the last node
        return depth[-1] if depth else 0
    longest = max(depth, default=0)
    return max(longest - 1, 0) if count == "edges" else longest


def _random_dag(rng: np.random.Generator, n: int, p: float) -> list[list[int]]:
    return [[int(j) for j in np.flatnonzero(rng.random(i) < p)] for i in range(n)]


def _path_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("a chain of 5 nodes (an RNN over 5 tokens)", (R.dependency_graph("rnn", 5),)),
            Fixed("an empty graph (no nodes: depth 0)", ([],)),
            Fixed("a diamond [[], [0], [0], [1, 2]]", ([[], [0], [0], [1, 2]],)),
            Fixed(
                "a join whose slowest parent comes second: [[], [], [1], [2], [0, 3], [4], [5]]",
                ([[], [], [1], [2], [0, 3], [4], [5]],),
            ),
            Fixed(
                "a join whose fastest parent comes second: [[], [0], [1], [], [2, 3], [4]]",
                ([[], [0], [1], [], [2, 3], [4]],),
            ),
            Fixed(
                "a chain of 3, then an independent node: [[], [0], [1], []]", ([[], [0], [1], []],)
            ),
            Fixed("3 RNN layers over 6 tokens", (R.dependency_graph("rnn", 6, 3),)),
            Fixed("3 attention layers over 6 tokens", (R.dependency_graph("attention", 6, 3),)),
        ]
    return [
        Fixed(
            "the slowest parent is not the first: [[], [0], [], [2, 1]]", ([[], [0], [], [2, 1]],)
        ),
        Fixed(
            "a chain of 4 joined three times by a shortcut from a free node",
            ([[], [0], [1], [2], [], [3, 4], [5, 4], [6, 4]],),
        ),
        Fixed("4 RNN layers over 50 tokens", (R.dependency_graph("rnn", 50, 4),)),
        Fixed("5 attention layers over 20 tokens", (R.dependency_graph("attention", 20, 5),)),
        Case("a random DAG of 60 nodes", (_random_dag(rng, 60, 0.08),)),
        Fixed("8 independent nodes", ([[] for _ in range(8)],)),
    ]


exercise(
    "01.4",
    critical_path_reference,
    target="critical_path",
    title="sequential depth: the critical path",
    points=2,
    cases=_path_cases,
    slips={
        "sum-of-parents": dict(wait="sum"),
        "every-node": dict(count="work"),
        "edges": dict(count="edges"),
        "first-parent": dict(wait="first"),
        "min-parent": dict(wait="min"),
        "last-node": dict(end="last"),
    },
)


# --------------------------------------------------------------------------- 01.5 clipping


def clip_grad_norm_reference(
    grads,
    max_norm,
    *,
    guard=True,
    clip="global",
    shrink_only=True,
    norm="sqrt of the sum of squares",
    report="before",
    squared=False,
):
    r"""``(clipped, total_norm)``: gradient clipping by the global norm.

    .. math::

        n = \sqrt{\textstyle\sum_i \lVert g_i \rVert_F^2}, \qquad
        g_i \leftarrow g_i \cdot \min\!\left(1, \frac{c}{n}\right),

    the rule of ``torch.nn.utils.clip_grad_norm_`` (which adds 1e-6 to ``n``): one factor
    for all tensors, so the direction of the whole gradient is kept; ``total_norm`` is
    :math:`n` before clipping.
    """

    def norm_of(gs) -> float:
        if norm == "sum of norms":  # the tensors' norms added up
            return float(sum(g.norm() for g in gs))
        return float(torch.sqrt(sum((g.double() ** 2).sum() for g in gs))) if gs else 0.0

    def factor(n: float) -> float:
        if not shrink_only:  # rescales a small gradient up to max_norm too
            return max_norm / n
        if n > 0 or not guard:  # unguarded: max_norm / 0 raises ZeroDivisionError
            return min(1.0, max_norm / n)
        return 1.0

    total = norm_of(grads)
    if clip == "value":  # each entry clamped: torch's clip_grad_value_
        clipped = [g.clamp(-max_norm, max_norm) for g in grads]
    elif clip == "per tensor":  # each tensor by its own norm
        clipped = [g * factor(norm_of([g])) for g in grads]
    else:
        clipped = [g * factor(total) for g in grads]
    if report == "after":
        total = norm_of(clipped)
    return clipped, total**2 if squared else total


def _clip_args(rng: np.random.Generator, shapes, scale: float, max_norm: float) -> tuple:
    return ([randn(rng, *s) * scale for s in shapes], max_norm)


def _clip_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
                "two gradients [3.] and [4.] (global norm 5), max_norm = 1",
                ([torch.tensor([3.0], dtype=DT), torch.tensor([4.0], dtype=DT)], 1.0),
            ),
            Case(
                "a weight (4, 3), a bias (4,) and a (2, 2) matrix of unequal sizes, "
                "global norm far above max_norm = 2",
                ([randn(rng, 4, 3) * 5, randn(rng, 4) * 0.1, randn(rng, 2, 2)], 2.0),
            ),
            Case(
                "a small gradient (global norm below max_norm = 10): unchanged",
                _clip_args(rng, [(3, 3), (3,)], 0.5, 10.0),
            ),
            Fixed(
                "all-zero gradients (norm 0: nothing to divide)",
                ([torch.zeros(3, 2, dtype=DT), torch.zeros(2, dtype=DT)], 1.0),
            ),
        ]
    return [
        Case(
            "five tensors, max_norm = 0.5",
            _clip_args(rng, [(8, 4), (4,), (4, 4), (1,), (2, 3, 2)], 2.0, 0.5),
        ),
        Case(
            "an exploded gradient (entries ~1e6), max_norm = 1",
            _clip_args(rng, [(6, 6), (6,)], 1e6, 1.0),
        ),
        Fixed("one tensor, exactly at the norm", ([torch.tensor([0.6, 0.8], dtype=DT)], 1.0)),
        Case(
            "three small gradients (global norm below max_norm = 5): unchanged",
            _clip_args(rng, [(2, 5), (5,), (3,)], 0.3, 5.0),
        ),
        Fixed(
            "zero gradients in two tensors (a frozen layer): norm 0, nothing to divide",
            ([torch.zeros(4, dtype=DT), torch.zeros(2, 2, dtype=DT)], 0.1),
        ),
    ]


exercise(
    "01.5",
    clip_grad_norm_reference,
    target="clip_grad_norm",
    title="gradient clipping by the global norm",
    points=2,
    cases=_clip_cases,
    atol=1e-9,
    rtol=1e-5,  # torch's own clip_grad_norm_ adds 1e-6 to the norm: it passes too
    outputs=("clipped", "total_norm"),
    slips={
        "zero-norm": dict(guard=False),
        "per-tensor": dict(clip="per tensor"),
        "always-rescale": dict(shrink_only=False),
        "by-value": dict(clip="value"),
        "sum-of-norms": dict(norm="sum of norms"),
        "norm-after-clipping": dict(report="after"),
        "squared": dict(squared=True),
    },
)


# --------------------------------------------------------------------------- 01.6 predict, measure


def growth_rate_reference(
    d_hidden, rho, num_steps, seed, *, scale_by="spectral radius", per_step=True
) -> float:
    r"""The measured growth per step of a linear recurrence :math:`h_t = W h_{t-1}`.

    A random :math:`W` (normal entries) scaled to spectral radius :math:`\rho`, a random
    :math:`h_0`, then :math:`(\lVert h_T\rVert / \lVert h_0\rVert)^{1/T}`; it tends to
    :math:`\rho` (the largest singular value only bounds one step)."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(d_hidden, d_hidden))  # (d, d)
    if scale_by == "singular value":  # the matrix 2-norm, not the spectral radius
        W *= rho / np.linalg.norm(W, 2)
    else:
        W *= rho / np.abs(np.linalg.eigvals(W)).max()
    h0 = rng.normal(size=d_hidden)  # (d,)
    h = h0.copy()
    for _ in range(num_steps):
        h = W @ h  # (d,)
    growth = np.linalg.norm(h) / np.linalg.norm(h0)
    return float(growth ** (1.0 / num_steps)) if per_step else float(growth)


def _growth_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("d = 16, rho = 0.9, 200 steps", (16, 0.9, 200, 0)),
            Fixed("d = 16, rho = 1.1, 200 steps", (16, 1.1, 200, 1)),
            Fixed("d = 64, rho = 1.05, 200 steps", (64, 1.05, 200, 2)),
        ]
    return [
        Case("d = 8, rho = 0.5, 100 steps", (8, 0.5, 100, int(rng.integers(1000)))),
        Case("d = 32, rho = 0.95, 300 steps", (32, 0.95, 300, int(rng.integers(1000)))),
    ]


exercise(
    "01.6",
    growth_rate_reference,
    target="measure_growth_rate",
    title="predict, then measure: how fast a recurrence grows or fades",
    points=1,
    cases=_growth_cases,
    atol=0.0,
    rtol=0.05,
    compare=within(0.05),
    measures="the growth of the state per step",
    slips={
        "singular-value": dict(scale_by="singular value"),
        "total-growth": dict(per_step=False),
    },
)
