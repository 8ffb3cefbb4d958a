"""Checks for chapter 01 (the RNN bottleneck): four graded exercises.

* 01.1 ``rnn_forward``: the recurrence, step by step (3 points);
* 01.2 ``scale_to_spectral_radius``: eigenvalues, not singular values (1 point);
* 01.3 ``jacobian_norms_through_time``: how much ``h_T`` still feels ``x_t`` (3 points);
* 01.4 ``critical_path``: sequential depth versus total work (2 points).
"""

from __future__ import annotations

import numpy as np
import torch

from .. import rnn as R
from .core import Case, Exercise, register


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


def _rnn_args(
    rng: np.random.Generator,
    B: int,
    T: int,
    d_in: int,
    d_h: int,
    *,
    h0: bool = False,
    gain: float = 0.8,
) -> tuple:
    x = _t(rng.normal(size=(B, T, d_in)))  # (B, T, d_in)
    W_xh = _t(rng.normal(size=(d_h, d_in)) / np.sqrt(d_in))  # (d_h, d_in)
    W_hh = _t(rng.normal(size=(d_h, d_h)) * gain / np.sqrt(d_h))  # (d_h, d_h) not symmetric
    b_h = _t(rng.normal(size=(d_h,)) * 0.5)  # (d_h,)
    return (x, W_xh, W_hh, b_h) + ((_t(rng.normal(size=(B, d_h))),) if h0 else ())


# --------------------------------------------------------------------------- 01.1 rnn_forward


def _rnn_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("B=2, T=5, d_in=3, d_h=4, h0=None", _rnn_args(rng, 2, 5, 3, 4)),
            Case(
                "B=3, T=4, d_in=2, d_h=5, with an initial state h0",
                _rnn_args(rng, 3, 4, 2, 5, h0=True),
            ),
        ]
    return [
        Case("a single step, T=1", _rnn_args(rng, 2, 1, 3, 4, h0=True)),
        Case("B=1, T=40, d_in=6, d_h=8", _rnn_args(rng, 1, 40, 6, 8)),
        Case("B=4, T=12, d_in=7, d_h=3, with h0", _rnn_args(rng, 4, 12, 7, 3, h0=True)),
    ]


def _zero_h0(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x, W_xh, W_hh, b_h)


def _no_tanh(x, W_xh, W_hh, b_h, h0=None):
    h = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0  # (B, d_h)
    out = []
    for t in range(x.shape[1]):
        h = x[:, t] @ W_xh.T + h @ W_hh.T + b_h  # (B, d_h)
        out.append(h)
    return torch.stack(out, 1)  # (B, T, d_h)


def _untransposed_W_hh(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x, W_xh, W_hh.T, b_h, h0)


def _last_state_only(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x, W_xh, W_hh, b_h, h0)[:, -1]  # (B, d_h)


def _shifted_states(x, W_xh, W_hh, b_h, h0=None):
    H = R.rnn_forward(x, W_xh, W_hh, b_h, h0)  # (B, T, d_h)
    first = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0  # (B, d_h)
    return torch.cat([first[:, None], H[:, :-1]], dim=1)  # (B, T, d_h): h_0 .. h_{T-1}


def _no_recurrence(x, W_xh, W_hh, b_h, h0=None):
    return torch.tanh(x @ W_xh.T + b_h)  # (B, T, d_h)


def _no_bias(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x, W_xh, W_hh, torch.zeros_like(b_h), h0)  # (B, T, d_h)


def _h0_included(x, W_xh, W_hh, b_h, h0=None):
    H = R.rnn_forward(x, W_xh, W_hh, b_h, h0)  # (B, T, d_h)
    first = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0  # (B, d_h)
    return torch.cat([first[:, None], H], dim=1)  # (B, T + 1, d_h): h_0 .. h_T


def _skipped_first_input(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x[:, 1:], W_xh, W_hh, b_h, h0)  # (B, T - 1, d_h): range(1, T)


register(
    Exercise(
        id="01.1",
        title="the RNN forward loop",
        points=3,
        target="rnn_forward",
        cases=_rnn_cases,
        reference=R.rnn_forward,
        atol=1e-8,
        rtol=1e-6,
        mistakes={
            "you ignored h0: when an initial state is given, the loop must start from it "
            "(zeros only when h0 is None).": _zero_h0,
            "you forgot the tanh: h_t = tanh(x_t W_xhᵀ + h_{t-1} W_hhᵀ + b_h).": _no_tanh,
            "you multiplied h_{t-1} by W_hh instead of W_hhᵀ. With row vectors (one row per "
            "sequence) the product is h @ W_hh.T, as in torch.nn.RNN.": _untransposed_W_hh,
            "you returned only the last hidden state h_T: return all of them, stacked along "
            "dim 1, shape [B, T, d_h].": _last_state_only,
            "your states are shifted by one step: you stored h_{t-1} at position t. Append the "
            "new state after computing it, so position t holds h_t.": _shifted_states,
            "your h_t does not depend on h_{t-1}: the recurrence term h_{t-1} W_hhᵀ is missing, "
            "or h is never updated inside the loop.": _no_recurrence,
            "you left out the bias: add b_h inside the tanh at every step.": _no_bias,
            "you returned T + 1 states, starting with h0. h0 is the state before the first "
            "input; return h_1 .. h_T only (append each new state after computing it).": _h0_included,
            "you returned T - 1 states and skipped the first input: loop over every t in "
            "range(T) (x[:, 0] is x_1, the first input).": _skipped_first_input,
        },
        hint="start from h = h0 (or x.new_zeros(B, d_h) if h0 is None); for each t in "
        "range(T), compute the new h from x[:, t] and the previous h with the formula of "
        "the statement, keep it, and stack all T states along dim 1.",
    )
)


# --------------------------------------------------------------------------- 01.2 spectral radius


def _nonnormal(rng: np.random.Generator, d: int) -> torch.Tensor:
    """A matrix whose largest singular value differs clearly from its spectral radius."""
    A = rng.normal(size=(d, d))
    A = A + np.triu(rng.normal(size=(d, d)) * 3, k=1)  # a strong upper part: non-normal
    return _t(A)


def _radius_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "2×2 [[0, 4], [0.25, 0]] to rho=0.5 (eigenvalues ±1, largest singular value 4)",
                (_t(np.array([[0.0, 4.0], [0.25, 0.0]])), 0.5),
            ),
            Case("a random non-normal 6×6 matrix to rho=1.2", (_nonnormal(rng, 6), 1.2)),
        ]
    return [
        Case(
            "a rotation (complex eigenvalues) to rho=0.9",
            (_t(np.array([[0.0, -2.0], [2.0, 0.0]])), 0.9),
        ),
        Case("a random non-normal 16×16 matrix to rho=1.0", (_nonnormal(rng, 16), 1.0)),
        Case(
            "a matrix with a dominant negative eigenvalue to rho=2",
            (_t(np.diag([-3.0, 1.0, 0.5]) + np.triu(np.ones((3, 3)), 1)), 2.0),
        ),
    ]


def _by_singular_value(W, rho):
    return W * (rho / torch.linalg.matrix_norm(W, ord=2))


def _by_frobenius(W, rho):
    return W * (rho / torch.linalg.matrix_norm(W))


def _by_real_part(W, rho):
    return W * (rho / torch.linalg.eigvals(W).real.max())


def _by_max_entry(W, rho):
    return W * (rho / W.abs().max())


def _by_eigvalsh(W, rho):
    return W * (rho / torch.linalg.eigvalsh(W).abs().max())


def _rho_forgotten(W, rho):
    return W / R.spectral_radius(W)


register(
    Exercise(
        id="01.2",
        title="rescale to a spectral radius",
        points=1,
        target="scale_to_spectral_radius",
        cases=_radius_cases,
        reference=R.scale_to_spectral_radius,
        atol=1e-8,
        rtol=1e-6,
        mistakes={
            "you divided by the largest singular value (the matrix 2-norm). The spectral radius "
            "is the largest |eigenvalue|: torch.linalg.eigvals(W).abs().max(). The two agree "
            "only for normal matrices.": _by_singular_value,
            "you divided by the Frobenius norm; the spectral radius is the largest |eigenvalue|.": _by_frobenius,
            "you took the largest real part of the eigenvalues; take the largest modulus "
            ".abs() (eigenvalues can be negative or complex).": _by_real_part,
            "you divided by the largest entry of W; the spectral radius is the largest "
            "|eigenvalue|.": _by_max_entry,
            "you used torch.linalg.eigvalsh, which assumes a symmetric matrix and reads only one "
            "triangle of W. For a general W use torch.linalg.eigvals (complex eigenvalues).": _by_eigvalsh,
            "your result has spectral radius 1, not rho: you divided by rho(W) but did not "
            "multiply by rho.": _rho_forgotten,
        },
        hint="rho(W) = max_i |lambda_i(W)| = torch.linalg.eigvals(W).abs().max(); return "
        "W * (rho / rho(W)).",
    )
)


# --------------------------------------------------------------------------- 01.3 Jacobian norms


def _jac_args(
    rng: np.random.Generator, T: int, d_in: int, d_h: int, gain: float, x_scale: float = 1.0
) -> tuple:
    x = _t(rng.normal(size=(T, d_in)) * x_scale)  # (T, d_in)
    W_xh = _t(rng.normal(size=(d_h, d_in)) / np.sqrt(d_in))  # (d_h, d_in)
    W_hh = _t(rng.normal(size=(d_h, d_h)) * gain / np.sqrt(d_h))  # (d_h, d_h)
    b_h = _t(rng.normal(size=(d_h,)) * 0.1)  # (d_h,)
    return x, W_xh, W_hh, b_h


def _jac_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("T=6, d_in=3, d_h=4", _jac_args(rng, 6, 3, 4, 0.9)),
            Case("T=10, d_in=2, d_h=5, small inputs", _jac_args(rng, 10, 2, 5, 1.2, 0.1)),
        ]
    return [
        Case("T=1: only dh_1/dx_1", _jac_args(rng, 1, 3, 4, 1.0)),
        Case("T=30, d_in=4, d_h=6, large gain", _jac_args(rng, 30, 4, 6, 2.0)),
        Case("T=25, d_in=5, d_h=3, small gain", _jac_args(rng, 25, 5, 3, 0.5, 0.1)),
    ]


def _reversed(x, W_xh, W_hh, b_h):
    return R.jacobian_norms_through_time(x, W_xh, W_hh, b_h).flip(0)


def _sum_gradient(x, W_xh, W_hh, b_h):
    xx = x.detach().clone().requires_grad_(True)  # (T, d_in)
    h_T = R.rnn_forward(xx[None], W_xh, W_hh, b_h)[0, -1]  # (d_h,)
    (g,) = torch.autograd.grad(h_T.sum(), xx)  # (T, d_in)
    return g.norm(dim=1)  # (T,)


def _spectral_norm(x, W_xh, W_hh, b_h):
    J = torch.autograd.functional.jacobian(
        lambda xx: R.rnn_forward(xx[None], W_xh, W_hh, b_h)[0, -1], x, vectorize=True
    )  # (d_h, T, d_in)
    return torch.linalg.matrix_norm(J.permute(1, 0, 2), ord=2)  # (T,)


def _previous_state(x, W_xh, W_hh, b_h):
    n = R.jacobian_norms_through_time(x[:-1], W_xh, W_hh, b_h)  # (T-1,) dh_{T-1}/dx_t
    return torch.cat([n, n.new_zeros(1)])  # (T,): h_{T-1} does not depend on x_T


def _squared_norm(x, W_xh, W_hh, b_h):
    return R.jacobian_norms_through_time(x, W_xh, W_hh, b_h).pow(2)  # (T,)


def _local_jacobian(x, W_xh, W_hh, b_h):
    H = R.rnn_forward(x[None], W_xh, W_hh, b_h)[0]  # (T, d_h)
    # dh_t/dx_t = D_t W_xh with D_t = diag(1 - h_t^2): row i is scaled by D_t[i]
    return ((1 - H**2).pow(2) @ W_xh.pow(2).sum(dim=1)).sqrt()  # (T,)


register(
    Exercise(
        id="01.3",
        title="gradient norms through time",
        points=3,
        target="jacobian_norms_through_time",
        cases=_jac_cases,
        reference=lambda x, W_xh, W_hh, b_h: R.jacobian_norms_through_time(x, W_xh, W_hh, b_h),
        atol=1e-10,
        rtol=1e-6,
        mistakes={
            "your norms are in reverse order: entry t must be ‖∂h_T/∂x_t‖ for t = 1..T "
            "(position in the sequence), not ordered by the distance T − t.": _reversed,
            "you differentiated h_T.sum(): that is one gradient (the sum of the Jacobian's rows), "
            "not the whole d_h × d_in Jacobian. Differentiate every component of h_T, e.g. with "
            "torch.autograd.functional.jacobian, and take the Frobenius norm.": _sum_gradient,
            "you took the spectral norm (largest singular value) of each Jacobian; the exercise "
            "asks for the Frobenius norm, sqrt of the sum of squared entries.": _spectral_norm,
            "you measured ∂h_t/∂x_t (each state against its own input); the question is how much "
            "the LAST state h_T depends on each x_t.": _local_jacobian,
            "you differentiated h_{T-1}, the state one step before the last (an off-by-one, "
            "e.g. H[0, -2]). The last state is H[0, -1]; only it depends on the last input "
            "x_T, so your last entry is 0.": _previous_state,
            "you returned the squared Frobenius norm: take the square root of the sum of "
            "squares.": _squared_norm,
        },
        hint="the Jacobian of h_T (shape (d_h,)) with respect to x (shape (T, d_in)) has shape "
        "(d_h, T, d_in); for each t, square its entries, sum over the d_h and d_in axes "
        "and take the square root.",
    )
)


# --------------------------------------------------------------------------- 01.4 critical path


def _random_dag(rng: np.random.Generator, n: int, p: float) -> list[list[int]]:
    return [[int(j) for j in np.flatnonzero(rng.random(i) < p)] for i in range(n)]


def _path_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("a chain of 5 nodes (an RNN over 5 tokens)", (R.dependency_graph("rnn", 5),)),
            Case("an empty graph (no nodes: depth 0)", ([],)),
            Case("a diamond [[], [0], [0], [1, 2]]", ([[], [0], [0], [1, 2]],)),
            Case(
                "a join whose slowest parent comes second: [[], [], [1], [2], [0, 3], [4], [5]]",
                ([[], [], [1], [2], [0, 3], [4], [5]],),
            ),
            Case(
                "a join whose fastest parent comes second: [[], [0], [1], [], [2, 3], [4]]",
                ([[], [0], [1], [], [2, 3], [4]],),
            ),
            Case(
                "a chain of 3, then an independent node: [[], [0], [1], []]", ([[], [0], [1], []],)
            ),
            Case("3 RNN layers over 6 tokens", (R.dependency_graph("rnn", 6, 3),)),
            Case("3 attention layers over 6 tokens", (R.dependency_graph("attention", 6, 3),)),
        ]
    return [
        Case(
            "the slowest parent is not the first: [[], [0], [], [2, 1]]", ([[], [0], [], [2, 1]],)
        ),
        Case(
            "a chain of 4 joined three times by a shortcut from a free node",
            ([[], [0], [1], [2], [], [3, 4], [5, 4], [6, 4]],),
        ),
        Case("4 RNN layers over 50 tokens", (R.dependency_graph("rnn", 50, 4),)),
        Case("5 attention layers over 20 tokens", (R.dependency_graph("attention", 20, 5),)),
        Case("a random DAG of 60 nodes", (_random_dag(rng, 60, 0.08),)),
        Case("8 independent nodes", ([[] for _ in range(8)],)),
    ]


def _first_parent(parents):
    depth = []
    for ps in parents:
        depth.append(1 + (depth[ps[0]] if ps else 0))
    return max(depth, default=0)


def _min_parent(parents):
    depth = []
    for ps in parents:
        depth.append(1 + min((depth[p] for p in ps), default=0))
    return max(depth, default=0)


def _edges(parents):
    return max(R.critical_path(parents) - 1, 0)


def _last_node(parents):
    depth = []
    for ps in parents:
        depth.append(1 + max((depth[p] for p in ps), default=0))
    return depth[-1] if depth else 0


register(
    Exercise(
        id="01.4",
        title="sequential depth: the critical path",
        points=2,
        target="critical_path",
        cases=_path_cases,
        reference=R.critical_path,
        mistakes={
            "you counted every node: that is the total work, not the depth. Nodes that do not "
            "wait for each other run in the same round.": len,
            "you counted the edges of the longest path; count its nodes (the number of rounds).": _edges,
            "you followed only the first parent of each node; a node waits for its SLOWEST "
            "parent, so take the max over all parents.": _first_parent,
            "you took the min over parents; a node can start only when ALL its parents are done, "
            "so its depth is 1 + the max over parents.": _min_parent,
            "you returned the depth of the last node; the longest chain may end anywhere, so "
            "return the max over all nodes.": _last_node,
        },
        hint="depth[i] = 1 + max(depth[p] for p in parents[i]) (1 without parents); the answer "
        "is max(depth), and 0 for an empty graph.",
    )
)
