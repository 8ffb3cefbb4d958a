"""Checks for chapter 01 (the RNN bottleneck): six graded exercises.

* 01.1 ``rnn_forward``: the recurrence, step by step (3 points);
* 01.2 ``scale_to_spectral_radius``: eigenvalues, not singular values (1 point);
* 01.3 ``jacobian_norms_through_time``: how much ``h_N`` still feels ``x_t`` (3 points);
* 01.4 ``critical_path``: sequential depth versus total work (2 points);
* 01.5 ``clip_grad_norm``: gradient clipping by the global norm, which the lecture names
  but does not show (2 points);
* 01.6 ``measure_growth_rate``: predict, then measure how fast a recurrence grows or fades
  (1 point).

Every hint has two tiers (:class:`~course_lib.checks.core.Hint`): a nudge first, the fix
when the same exercise fails again.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import rnn as R
from .core import Case, Exercise, Hint, register
from .kit import within


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


def _rnn_args(
    rng: np.random.Generator,
    batch_size: int,
    seq_len: int,
    d_in: int,
    d_hidden: int,
    *,
    h0: bool = False,
    gain: float = 0.8,
) -> tuple:
    x = _t(rng.normal(size=(batch_size, seq_len, d_in)))  # (B, N, d_in)
    W_xh = _t(rng.normal(size=(d_hidden, d_in)) / np.sqrt(d_in))  # (d_hidden, d_in)
    W_hh = _t(
        rng.normal(size=(d_hidden, d_hidden)) * gain / np.sqrt(d_hidden)
    )  # (d_hidden, d_hidden) not symmetric
    b_h = _t(rng.normal(size=(d_hidden,)) * 0.5)  # (d_hidden,)
    return (x, W_xh, W_hh, b_h) + ((_t(rng.normal(size=(batch_size, d_hidden))),) if h0 else ())


# --------------------------------------------------------------------------- 01.1 rnn_forward


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


def _zero_h0(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x, W_xh, W_hh, b_h)


def _no_tanh(x, W_xh, W_hh, b_h, h0=None):
    h = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0  # (B, d_hidden)
    out = []
    for t in range(x.shape[1]):
        h = x[:, t] @ W_xh.T + h @ W_hh.T + b_h  # (B, d_hidden)
        out.append(h)
    return torch.stack(out, 1)  # (B, N, d_hidden)


def _untransposed_W_hh(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x, W_xh, W_hh.T, b_h, h0)


def _last_state_only(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x, W_xh, W_hh, b_h, h0)[:, -1]  # (B, d_hidden)


def _shifted_states(x, W_xh, W_hh, b_h, h0=None):
    H = R.rnn_forward(x, W_xh, W_hh, b_h, h0)  # (B, N, d_hidden)
    first = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0  # (B, d_hidden)
    return torch.cat([first[:, None], H[:, :-1]], dim=1)  # (B, N, d_hidden): h_0 .. h_{N-1}


def _no_recurrence(x, W_xh, W_hh, b_h, h0=None):
    return torch.tanh(x @ W_xh.T + b_h)  # (B, N, d_hidden)


def _no_bias(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x, W_xh, W_hh, torch.zeros_like(b_h), h0)  # (B, N, d_hidden)


def _h0_included(x, W_xh, W_hh, b_h, h0=None):
    H = R.rnn_forward(x, W_xh, W_hh, b_h, h0)  # (B, N, d_hidden)
    first = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0  # (B, d_hidden)
    return torch.cat([first[:, None], H], dim=1)  # (B, N + 1, d_hidden): h_0 .. h_N


def _float32_zeros(x, W_xh, W_hh, b_h, h0=None):
    h = torch.zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0  # (B, d_hidden) float32!
    out = []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ W_xh.T + h @ W_hh.T + b_h)  # raises: float32 @ float64
        out.append(h)
    return torch.stack(out, 1)  # (B, N, d_hidden)


def _skipped_first_input(x, W_xh, W_hh, b_h, h0=None):
    return R.rnn_forward(x[:, 1:], W_xh, W_hh, b_h, h0)  # (B, N - 1, d_hidden): range(1, N)


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
            Hint(
                "your starting state has the wrong dtype: torch.zeros makes float32 zeros, "
                "and these inputs are float64, so the matrix product refuses to mix them.",
                "Create the zeros from x: h = x.new_zeros(B, d_hidden) (or torch.zeros(..., "
                "dtype=x.dtype, device=x.device)).",
            ): _float32_zeros,
            Hint(
                "you ignored h0: with an initial state given, your states are those of a "
                "start from zeros.",
                "Start the loop from h = h0, and use zeros only when h0 is None.",
            ): _zero_h0,
            Hint(
                "your states grow without bound: the nonlinearity is missing.",
                "h_t = tanh(x_t W_xhᵀ + h_{t-1} W_hhᵀ + b_h): wrap the sum in torch.tanh.",
            ): _no_tanh,
            Hint(
                "the recurrent term uses W_hh the wrong way round.",
                "With row vectors (one row per sequence) the product is h @ W_hh.T, as in "
                "torch.nn.RNN; h @ W_hh applies the transpose of W_hh.",
            ): _untransposed_W_hh,
            Hint(
                "you returned one state per sequence; the exercise asks for every state.",
                "Collect h after each step in a list and return torch.stack(states, dim=1), "
                "shape [B, N, d_hidden].",
            ): _last_state_only,
            Hint(
                "your states are shifted by one step: position t holds h_{t-1}.",
                "Append the new state after computing it, so that position t holds h_t.",
            ): _shifted_states,
            Hint(
                "your h_t does not depend on h_{t-1}.",
                "The recurrence term h_{t-1} W_hhᵀ is missing, or h is never updated inside "
                "the loop (assign the new state to h).",
            ): _no_recurrence,
            Hint(
                "every state is off by the same shift before the tanh: the bias is missing.",
                "Add b_h inside the tanh at every step.",
            ): _no_bias,
            Hint(
                "you returned N + 1 states, starting with h0.",
                "h0 is the state before the first input: return h_1 .. h_N only (append each "
                "new state after computing it).",
            ): _h0_included,
            Hint(
                "you returned N - 1 states and skipped the first input.",
                "Loop over every t in range(N): x[:, 0] is x_1, the first input.",
            ): _skipped_first_input,
        },
        hint=Hint(
            "compare your loop with the formula of the statement, one step at a time.",
            "Start from h = h0 (or x.new_zeros(B, d_hidden) if h0 is None); for each t in "
            "range(N), h = torch.tanh(x[:, t] @ W_xh.T + h @ W_hh.T + b_h), keep it, and "
            "stack all N states along dim 1.",
        ),
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
            Hint(
                "you divided by the largest singular value (the matrix 2-norm), which equals "
                "the spectral radius only for normal matrices.",
                "The spectral radius is the largest |eigenvalue|: "
                "torch.linalg.eigvals(W).abs().max().",
            ): _by_singular_value,
            Hint(
                "you divided by the Frobenius norm.",
                "The spectral radius is the largest |eigenvalue|: "
                "torch.linalg.eigvals(W).abs().max().",
            ): _by_frobenius,
            Hint(
                "you took the largest real part of the eigenvalues.",
                "Eigenvalues can be negative or complex: take the largest modulus, .abs().max().",
            ): _by_real_part,
            Hint(
                "you divided by the largest entry of W.",
                "The spectral radius is the largest |eigenvalue|: "
                "torch.linalg.eigvals(W).abs().max().",
            ): _by_max_entry,
            Hint(
                "you used torch.linalg.eigvalsh, which assumes a symmetric matrix and reads "
                "only one triangle of W.",
                "For a general W use torch.linalg.eigvals (complex eigenvalues).",
            ): _by_eigvalsh,
            Hint(
                "your result has spectral radius 1, not rho.",
                "You divided by rho(W) but did not multiply by rho: return W * (rho / rho(W)).",
            ): _rho_forgotten,
        },
        hint=Hint(
            "check the number you divide W by: the statement's spectral radius comes from the "
            "eigenvalues, not from a norm or an entry of W.",
            "The spectral radius is the largest modulus of an eigenvalue. rho(W) = "
            "torch.linalg.eigvals(W).abs().max(); return W * (rho / rho(W)).",
        ),
    )
)


# --------------------------------------------------------------------------- 01.3 Jacobian norms


def _jac_args(
    rng: np.random.Generator,
    seq_len: int,
    d_in: int,
    d_hidden: int,
    gain: float,
    x_scale: float = 1.0,
) -> tuple:
    x = _t(rng.normal(size=(seq_len, d_in)) * x_scale)  # (N, d_in)
    W_xh = _t(rng.normal(size=(d_hidden, d_in)) / np.sqrt(d_in))  # (d_hidden, d_in)
    W_hh = _t(
        rng.normal(size=(d_hidden, d_hidden)) * gain / np.sqrt(d_hidden)
    )  # (d_hidden, d_hidden)
    b_h = _t(rng.normal(size=(d_hidden,)) * 0.1)  # (d_hidden,)
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


def _reversed(x, W_xh, W_hh, b_h):
    return R.jacobian_norms_through_time(x, W_xh, W_hh, b_h).flip(0)


def _sum_gradient(x, W_xh, W_hh, b_h):
    xx = x.detach().clone().requires_grad_(True)  # (N, d_in)
    h_N = R.rnn_forward(xx[None], W_xh, W_hh, b_h)[0, -1]  # (d_hidden,)
    (g,) = torch.autograd.grad(h_N.sum(), xx)  # (N, d_in)
    return g.norm(dim=1)  # (N,)


def _spectral_norm(x, W_xh, W_hh, b_h):
    J = torch.autograd.functional.jacobian(
        lambda xx: R.rnn_forward(xx[None], W_xh, W_hh, b_h)[0, -1], x, vectorize=True
    )  # (d_hidden, N, d_in)
    return torch.linalg.matrix_norm(J.permute(1, 0, 2), ord=2)  # (N,)


def _previous_state(x, W_xh, W_hh, b_h):
    n = R.jacobian_norms_through_time(x[:-1], W_xh, W_hh, b_h)  # (N-1,) dh_{N-1}/dx_t
    return torch.cat([n, n.new_zeros(1)])  # (N,): h_{N-1} does not depend on x_T


def _squared_norm(x, W_xh, W_hh, b_h):
    return R.jacobian_norms_through_time(x, W_xh, W_hh, b_h).pow(2)  # (N,)


def _local_jacobian(x, W_xh, W_hh, b_h):
    H = R.rnn_forward(x[None], W_xh, W_hh, b_h)[0]  # (N, d_hidden)
    # dh_t/dx_t = D_t W_xh with D_t = diag(1 - h_t^2): row i is scaled by D_t[i]
    return ((1 - H**2).pow(2) @ W_xh.pow(2).sum(dim=1)).sqrt()  # (N,)


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
            Hint(
                "your norms are in reverse order.",
                "Entry t must be ‖∂h_N/∂x_t‖ for t = 1..N (position in the sequence), not "
                "ordered by the distance N − t.",
            ): _reversed,
            Hint(
                "you differentiated h_N.sum(): that is one gradient (the sum of the "
                "Jacobian's rows), not the whole Jacobian.",
                "Differentiate every component of h_N, e.g. with "
                "torch.autograd.functional.jacobian, and take the Frobenius norm.",
            ): _sum_gradient,
            Hint(
                "you took the spectral norm (largest singular value) of each Jacobian.",
                "The exercise asks for the Frobenius norm: the square root of the sum of "
                "squared entries.",
            ): _spectral_norm,
            Hint(
                "you measured ∂h_t/∂x_t, each state against its own input.",
                "The question is how much the LAST state h_N depends on each x_t.",
            ): _local_jacobian,
            Hint(
                "you differentiated h_{N-1}, the state one step before the last (an "
                "off-by-one, e.g. H[0, -2]).",
                "The last state is H[0, -1]; only it depends on the last input x_N, so your "
                "last entry is 0.",
            ): _previous_state,
            Hint(
                "your values are the squares of the expected ones.",
                "Take the square root of the sum of squares (the Frobenius norm).",
            ): _squared_norm,
        },
        hint=Hint(
            "the Jacobian of h_N (shape (d_hidden,)) with respect to x (shape (N, d_in)) has "
            "shape (d_hidden, N, d_in).",
            "For each t, square its entries, sum over the d_hidden and d_in axes and take the "
            "square root: J.pow(2).sum(dim=(0, 2)).sqrt().",
        ),
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


def _sum_parents(parents):
    depth = []
    for ps in parents:
        depth.append(1 + sum(depth[p] for p in ps))
    return max(depth, default=0)


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
            Hint(
                "you added up the parents' depths; a node waits for its parents in parallel, "
                "not one after another.",
                "A node's depth is 1 + the MAX of its parents' depths (the slowest parent), "
                "not 1 + their sum.",
            ): _sum_parents,
            Hint(
                "you counted every node: that is the total work, not the depth.",
                "Nodes that do not wait for each other run in the same round; count the "
                "nodes of the longest chain.",
            ): len,
            Hint(
                "you counted the edges of the longest path.",
                "Count its nodes (the number of rounds): one more than its edges.",
            ): _edges,
            Hint(
                "you followed only the first parent of each node.",
                "A node waits for its SLOWEST parent, so take the max over all parents.",
            ): _first_parent,
            Hint(
                "you took the min over parents.",
                "A node can start only when ALL its parents are done, so its depth is 1 + the "
                "max over parents.",
            ): _min_parent,
            Hint(
                "you returned the depth of the last node.",
                "The longest chain may end anywhere: return the max over all nodes.",
            ): _last_node,
        },
        hint=Hint(
            "work a small graph through by hand: when can a node start, given when each of its "
            "parents finishes, and which node finishes last?",
            "Compute every node's depth in order (parents come first), then the largest. "
            "depth[i] = 1 + max(depth[p] for p in parents[i]) (1 without parents); the answer is "
            "max(depth), and 0 for an empty graph.",
        ),
    )
)


# --------------------------------------------------------------------------- 01.5 clipping


def clip_grad_norm_reference(grads: list[torch.Tensor], max_norm: float):
    r"""``(clipped, total_norm)``: gradient clipping by the global norm.

    .. math::

        n = \sqrt{\textstyle\sum_i \lVert g_i \rVert_F^2}, \qquad
        g_i \leftarrow g_i \cdot \min\!\left(1, \frac{c}{n}\right),

    the rule of ``torch.nn.utils.clip_grad_norm_`` (which adds 1e-6 to ``n``): one factor
    for all tensors, so the direction of the whole gradient is kept; ``total_norm`` is
    :math:`n` before clipping.
    """
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)) if grads else torch.zeros(())
    factor = min(1.0, max_norm / float(total)) if float(total) > 0 else 1.0
    return [g * factor for g in grads], float(total)


def _clip_args(rng: np.random.Generator, shapes, scale: float, max_norm: float) -> tuple:
    return ([_t(rng.normal(size=s) * scale) for s in shapes], max_norm)


def _clip_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "two gradients [3.] and [4.] (global norm 5), max_norm = 1",
                ([_t(np.array([3.0])), _t(np.array([4.0]))], 1.0),
            ),
            Case(
                "a weight (4, 3), a bias (4,) and a (2, 2) matrix of unequal sizes, "
                "global norm far above max_norm = 2",
                (
                    [_t(rng.normal(size=(4, 3)) * 5), _t(rng.normal(size=4) * 0.1)]
                    + [_t(rng.normal(size=(2, 2)))],
                    2.0,
                ),
            ),
            Case(
                "a small gradient (global norm below max_norm = 10): unchanged",
                _clip_args(rng, [(3, 3), (3,)], 0.5, 10.0),
            ),
            Case(
                "all-zero gradients (norm 0: nothing to divide)",
                (
                    [torch.zeros(3, 2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)],
                    1.0,
                ),
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
        Case("one tensor, exactly at the norm", ([_t(np.array([0.6, 0.8]))], 1.0)),
        Case(
            "three small gradients (global norm below max_norm = 5): unchanged",
            _clip_args(rng, [(2, 5), (5,), (3,)], 0.3, 5.0),
        ),
        Case(
            "zero gradients in two tensors (a frozen layer): norm 0, nothing to divide",
            ([torch.zeros(4, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64)], 0.1),
        ),
    ]


def _per_tensor(grads, max_norm):
    total = clip_grad_norm_reference(grads, max_norm)[1]
    return [clip_grad_norm_reference([g], max_norm)[0][0] for g in grads], total


def _always_rescale(grads, max_norm):
    clipped, total = clip_grad_norm_reference(grads, max_norm)
    return [g * (max_norm / total) for g in grads], total


def _value_clipping(grads, max_norm):
    total = clip_grad_norm_reference(grads, max_norm)[1]
    return [g.clamp(-max_norm, max_norm) for g in grads], total


def _sum_of_norms(grads, max_norm):
    total = float(sum(g.norm() for g in grads))
    factor = min(1.0, max_norm / total)
    return [g * factor for g in grads], total


def _norm_after_clipping(grads, max_norm):
    clipped, _ = clip_grad_norm_reference(grads, max_norm)
    return clipped, clip_grad_norm_reference(clipped, max_norm)[1]


def _squared_total(grads, max_norm):
    clipped, total = clip_grad_norm_reference(grads, max_norm)
    return clipped, total**2


def _divides_by_zero(grads, max_norm):
    total = float(torch.sqrt(sum((g**2).sum() for g in grads)))
    factor = min(1.0, max_norm / total)  # ZeroDivisionError when every gradient is 0
    return [g * factor for g in grads], total


register(
    Exercise(
        id="01.5",
        title="gradient clipping by the global norm",
        points=2,
        target="clip_grad_norm",
        cases=_clip_cases,
        reference=clip_grad_norm_reference,
        atol=1e-9,
        rtol=1e-5,  # torch's own clip_grad_norm_ adds 1e-6 to the norm: it passes too
        outputs=("clipped", "total_norm"),
        mistakes={
            Hint(
                "with all-zero gradients the norm is 0, and max_norm / 0 fails.",
                "Only rescale when the norm exceeds max_norm (then it is > 0): "
                "if norm > max_norm: factor = max_norm / norm.",
            ): _divides_by_zero,
            Hint(
                "you clipped each tensor by its own norm, which changes the direction of the "
                "whole gradient.",
                "Compute ONE norm over all tensors, sqrt(sum of every g.pow(2).sum()), and "
                "multiply every tensor by the same factor min(1, max_norm / norm).",
            ): _per_tensor,
            Hint(
                "you rescaled a gradient that was already small enough: clipping only shrinks.",
                "Multiply by min(1, max_norm / norm), not by max_norm / norm.",
            ): _always_rescale,
            Hint(
                "you clamped each entry to [-max_norm, max_norm] (clipping by value, "
                "torch's clip_grad_value_).",
                "Clipping by norm rescales every entry by one factor, min(1, max_norm / norm), "
                "so the gradient keeps its direction.",
            ): _value_clipping,
            Hint(
                "your total norm adds up the tensors' norms.",
                "The global norm is the norm of all entries together: the square root of the "
                "SUM OF SQUARES, sqrt(sum of g.pow(2).sum()), which is smaller than the sum of "
                "the norms.",
            ): _sum_of_norms,
            Hint(
                "you returned the norm after clipping.",
                "Return the norm of the gradients you were given (before clipping): it is "
                "what a training loop logs to see explosions.",
            ): _norm_after_clipping,
            Hint(
                "you returned the squared norm.",
                "Take the square root of the sum of squares.",
            ): _squared_total,
        },
        hint=Hint(
            "check which norm you compare with max_norm (one for each tensor, or one for all of "
            "them?) and in which case the gradients change at all.",
            "One norm for all the tensors together, one factor for all of them. norm = "
            "sqrt(sum(g.pow(2).sum() for g in grads)); factor = max_norm / norm if norm > "
            "max_norm else 1; return [g * factor for g in grads], float(norm).",
        ),
    )
)


# --------------------------------------------------------------------------- 01.6 predict, measure


def growth_rate_reference(d_hidden: int, rho: float, num_steps: int, seed: int) -> float:
    r"""The measured growth per step of a linear recurrence :math:`h_t = W h_{t-1}`.

    A random :math:`W` (normal entries) scaled to spectral radius :math:`\rho`, a random
    :math:`h_0`, then :math:`(\lVert h_T\rVert / \lVert h_0\rVert)^{1/T}`; it tends to
    :math:`\rho` (the largest singular value only bounds one step)."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(d_hidden, d_hidden))  # (d, d)
    W *= rho / np.abs(np.linalg.eigvals(W)).max()
    h0 = rng.normal(size=d_hidden)  # (d,)
    h = h0.copy()
    for _ in range(num_steps):
        h = W @ h  # (d,)
    return float((np.linalg.norm(h) / np.linalg.norm(h0)) ** (1.0 / num_steps))


def _growth_by_singular_value(d_hidden, rho, num_steps, seed):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(d_hidden, d_hidden))
    W *= rho / np.linalg.norm(W, 2)  # the largest singular value, not the spectral radius
    h0 = rng.normal(size=d_hidden)
    h = np.linalg.matrix_power(W, num_steps) @ h0
    return float((np.linalg.norm(h) / np.linalg.norm(h0)) ** (1.0 / num_steps))


def _growth_total(d_hidden, rho, num_steps, seed):
    return growth_rate_reference(d_hidden, rho, num_steps, seed) ** num_steps


def _growth_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("d = 16, rho = 0.9, 200 steps", (16, 0.9, 200, 0)),
            Case("d = 16, rho = 1.1, 200 steps", (16, 1.1, 200, 1)),
            Case("d = 64, rho = 1.05, 200 steps", (64, 1.05, 200, 2)),
        ]
    return [
        Case("d = 8, rho = 0.5, 100 steps", (8, 0.5, 100, int(rng.integers(1000)))),
        Case("d = 32, rho = 0.95, 300 steps", (32, 0.95, 300, int(rng.integers(1000)))),
    ]


register(
    Exercise(
        id="01.6",
        title="predict, then measure: how fast a recurrence grows or fades",
        points=1,
        target="measure_growth_rate",
        cases=_growth_cases,
        reference=growth_rate_reference,
        atol=0.0,
        rtol=0.05,
        compare=within(0.05),
        measures="the growth of the state per step",
        mistakes={
            Hint(
                "you scaled W by its largest singular value: your states fade much faster than "
                "rho per step.",
                "Scale by the spectral radius, the largest |eigenvalue| "
                "(np.abs(np.linalg.eigvals(W)).max()): it, not the largest singular value, "
                "sets the growth over many steps.",
            ): _growth_by_singular_value,
            Hint(
                "you returned the growth over all the steps, not per step.",
                "Take the T-th root: (norm(h_T) / norm(h_0)) ** (1 / T).",
            ): _growth_total,
        },
        hint=Hint(
            "check two things against the statement: how W is scaled before the loop, and "
            "whether your number is the growth per step or over all the steps.",
            "Build W, rescale it to spectral radius rho, iterate h = W h, and compare the norms "
            "at the end and at the start, per step. W *= rho / "
            "np.abs(np.linalg.eigvals(W)).max(); after T steps return (norm(h_T) / norm(h_0)) ** "
            "(1 / T).",
        ),
    )
)
