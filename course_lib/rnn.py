r"""The recurrent neural network, and the measurements that show why attention replaced it.

An Elman RNN (Elman, 1990, "Finding Structure in Time") reads a sequence one step at a time
and squeezes everything it has seen into a hidden state :math:`h_t \in \mathbb{R}^{d_\text{hidden}}`:

.. math::

    h_t = \tanh\!\left(W_{xh} x_t + W_{hh} h_{t-1} + b_h\right), \qquad t = 1, \dots, N,

with :math:`x_t \in \mathbb{R}^{d_{in}}`, :math:`W_{xh} \in \mathbb{R}^{d_\text{hidden} \times d_{in}}`,
:math:`W_{hh} \in \mathbb{R}^{d_\text{hidden} \times d_\text{hidden}}`, :math:`b_h \in \mathbb{R}^{d_\text{hidden}}` and
:math:`h_0 = 0` unless given. The weights are stored as in ``torch.nn.RNN``
(``weight_ih_l0`` is :math:`W_{xh}`, ``weight_hh_l0`` is :math:`W_{hh}`, and torch's two
biases add up to :math:`b_h`), so :func:`rnn_forward` equals
``torch.nn.RNN(batch_first=True)`` given the same weights.

Besides the forward pass this module holds what chapter 01 measures:

* **sequential depth**: :func:`dependency_graph` and :func:`critical_path` count the steps
  that must run one after another; :func:`autograd_depth` counts them in a real computation;
* **information over distance**: :func:`jacobian_norms_through_time` gives
  :math:`\lVert \partial h_N / \partial x_t \rVert_F` for every :math:`t`, and
  :func:`scale_to_spectral_radius` / :func:`recurrent_matrix` build :math:`W_{hh}` with a
  chosen spectral radius;
* **a recall task**: :func:`make_recall_batch`, two small models (:class:`RecallRNN`,
  :class:`RecallAttention`), :func:`train_recall` and :func:`recall_accuracy_by_distance`.

The lecture's interactive gradient explorer is a thin widget over this module, in
:mod:`course_lib.widgets.gradients`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import Node

from .attention import scaled_dot_product_attention
from .fitting import fit
from .timing import best_time, single_thread  # noqa: F401  (chapter 01 times with them)
from .validation import check_rnn_inputs, shape_of

__all__ = [
    "RecallAttention",
    "RecallBatch",
    "RecallRNN",
    "autograd_depth",
    "best_time",
    "critical_path",
    "dependency_graph",
    "jacobian_norms_through_time",
    "make_recall_batch",
    "node_depths",
    "recall_accuracy_by_distance",
    "recurrent_matrix",
    "rnn_forward",
    "recall_loss",
    "rnn_weights_from_torch",
    "scale_to_spectral_radius",
    "single_thread",
    "spectral_radius",
    "train_recall",
]


# --------------------------------------------------------------------------- the recurrence


def rnn_forward(
    x: torch.Tensor,
    W_xh: torch.Tensor,
    W_hh: torch.Tensor,
    b_h: torch.Tensor,
    h0: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Run a tanh RNN over ``x [B, N, d_in]`` and return every hidden state ``[B, N, d_hidden]``.

    Row-vector form, one batch row per sequence (this is what the code computes):

    .. math::

        h_t = \tanh\!\left(x_t W_{xh}^\top + b_h + h_{t-1} W_{hh}^\top\right).

    The input term :math:`x_t W_{xh}^\top + b_h` does not depend on :math:`h`, so it is
    computed for all :math:`t` at once; only the :math:`h_{t-1} W_{hh}^\top` chain is
    sequential, :math:`N` steps that no amount of hardware can run side by side.
    ``W_xh [d_hidden, d_in]``, ``W_hh [d_hidden, d_hidden]``, ``b_h [d_hidden]``, ``h0 [B, d_hidden]`` (zeros if None).
    """
    check_rnn_inputs(x, W_xh, W_hh, b_h, h0)
    batch_size, seq_len, _ = x.shape
    d_hidden = W_hh.shape[0]
    h = x.new_zeros(batch_size, d_hidden) if h0 is None else h0  # (B, d_hidden)
    if seq_len == 0:
        return x.new_zeros(batch_size, 0, d_hidden)  # (B, 0, d_hidden)
    xw = x @ W_xh.T + b_h  # (B, N, d_hidden) the parallel part: every step's input at once
    states = []
    for t in range(seq_len):  # the sequential part: step t needs step t-1
        h = torch.tanh(xw[:, t] + h @ W_hh.T)  # (B, d_hidden)
        states.append(h)
    return torch.stack(states, dim=1)  # (B, N, d_hidden)


def rnn_weights_from_torch(rnn: nn.RNN) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(W_xh, W_hh, b_h)`` of a one-layer tanh ``torch.nn.RNN`` (its two biases summed)."""
    if rnn.num_layers != 1 or rnn.bidirectional or rnn.nonlinearity != "tanh":
        raise ValueError(
            "expected a one-layer, one-directional tanh torch.nn.RNN, got "
            f"num_layers={rnn.num_layers}, bidirectional={rnn.bidirectional}, "
            f"nonlinearity={rnn.nonlinearity!r}"
        )
    W_xh = rnn.get_parameter("weight_ih_l0").detach()  # (d_hidden, d_in)
    W_hh = rnn.get_parameter("weight_hh_l0").detach()  # (d_hidden, d_hidden)
    if rnn.bias:
        b_ih, b_hh = rnn.get_parameter("bias_ih_l0"), rnn.get_parameter("bias_hh_l0")
        b_h = (b_ih + b_hh).detach()  # (d_hidden,)
    else:
        b_h = torch.zeros(W_hh.shape[0], dtype=W_hh.dtype, device=W_hh.device)  # (d_hidden,)
    return W_xh, W_hh, b_h


# --------------------------------------------------------------------------- sequential depth


def dependency_graph(kind: str, seq_len: int, num_layers: int = 1) -> list[list[int]]:
    r"""Which computations wait for which, for ``num_layers`` layers over ``seq_len`` tokens.

    Node :math:`(l, t)` is the output of layer :math:`l` at position :math:`t`, numbered
    ``l * seq_len + t`` (a topological order). The inputs are available from the start and
    are not nodes. Returns ``parents``: ``parents[i]`` lists the nodes node ``i`` waits for.

    * ``"rnn"``: :math:`h^{(l)}_t` needs :math:`h^{(l)}_{t-1}` (same layer, previous step) and
      :math:`h^{(l-1)}_t` (layer below, same step);
    * ``"attention"``: position :math:`t` of layer :math:`l` reads *every* position of layer
      :math:`l-1` (a causal layer reads :math:`s \le t`; the depth is the same) and nothing
      of its own layer.
    """
    if kind not in ("rnn", "attention"):
        raise ValueError(f"kind must be 'rnn' or 'attention', got {kind!r}")
    if seq_len < 0 or num_layers < 0:
        raise ValueError(f"expected seq_len >= 0 and num_layers >= 0, got {seq_len}, {num_layers}")
    parents: list[list[int]] = []
    for layer in range(num_layers):
        for t in range(seq_len):
            below = (layer - 1) * seq_len
            if kind == "rnn":
                p = ([below + t] if layer > 0 else []) + ([layer * seq_len + t - 1] if t else [])
            else:
                p = list(range(below, below + t + 1)) if layer > 0 else []
            parents.append(p)
    return parents


def node_depths(parents: Sequence[Sequence[int]]) -> list[int]:
    r"""The depth of every node: the number of nodes on the longest chain ending there,

    .. math::

        \mathrm{depth}(i) = 1 + \max_{p \in \mathrm{parents}(i)} \mathrm{depth}(p)
        \quad (\text{and } 1 \text{ for a node without parents}).

    With unlimited parallel hardware, node ``i`` runs in round ``depth(i)``.
    ``parents[i]`` may only name nodes ``< i`` (a topological order).
    """
    depth: list[int] = []
    for i, ps in enumerate(parents):
        bad = [p for p in ps if not 0 <= p < i]
        if bad:
            raise ValueError(
                f"node {i} lists parents {bad}: parents must be earlier nodes "
                f"(0 <= p < {i}), so the list is in topological order"
            )
        depth.append(1 + max((depth[p] for p in ps), default=0))
    return depth


def critical_path(parents: Sequence[Sequence[int]]) -> int:
    r"""The number of nodes on the longest chain of a dependency graph: its sequential depth,
    :math:`\max_i \mathrm{depth}(i)` (see :func:`node_depths`), 0 for an empty graph.

    The total *work* is the number of nodes; the *depth* is the number of rounds a computer
    with unlimited processors needs, which no amount of parallelism can shorten.
    """
    return max(node_depths(parents), default=0)


def autograd_depth(output: torch.Tensor) -> int:
    """The longest chain of operations autograd recorded to compute ``output``.

    Walks the ``grad_fn`` graph (each node is one differentiable operation) and returns the
    number of nodes on its longest path, leaf accumulators excluded: a measured sequential
    depth of the actual computation, not of a diagram.
    """
    if output.grad_fn is None:
        return 0
    memo: dict[Node, int] = {}
    stack: list[tuple[Node, bool]] = [(output.grad_fn, False)]
    while stack:  # iterative post-order: an RNN's graph is far deeper than Python's stack
        node, expanded = stack.pop()
        if node in memo:
            continue
        children = [
            f
            for f, _ in node.next_functions
            if f is not None and type(f).__name__ != "AccumulateGrad"
        ]
        if expanded:
            memo[node] = 1 + max((memo[c] for c in children), default=0)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if c not in memo)
    return memo[output.grad_fn]


# --------------------------------------------------------------------------- gradients over distance


def spectral_radius(W: torch.Tensor) -> float:
    r"""The spectral radius :math:`\rho(W) = \max_i |\lambda_i(W)|` of a square matrix."""
    if not isinstance(W, torch.Tensor) or W.dim() != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"expected a square matrix [d, d], got {shape_of(W)}")
    return float(torch.linalg.eigvals(W).abs().max())


def scale_to_spectral_radius(W: torch.Tensor, rho: float) -> torch.Tensor:
    r"""``W`` rescaled so that its spectral radius is ``rho``: :math:`\rho \, W / \rho(W)`.

    Not the largest *singular value* :math:`\lVert W \rVert_2`: the two agree for normal
    matrices (symmetric, orthogonal) and differ for most others, where
    :math:`\rho(W) \le \lVert W \rVert_2`.
    """
    r = spectral_radius(W)
    if r == 0:
        raise ValueError("W has spectral radius 0 (nilpotent): it cannot be rescaled to rho")
    return W * (rho / r)  # (d, d)


def recurrent_matrix(
    d_hidden: int,
    rho: float,
    *,
    kind: str = "orthogonal",
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    r"""A random ``[d_hidden, d_hidden]`` recurrent matrix with spectral radius ``rho``.

    ``kind="orthogonal"``: :math:`\rho Q` with :math:`Q` a random orthogonal matrix, so every
    eigenvalue *and* every singular value has modulus :math:`\rho` and
    :math:`\lVert W^k v \rVert = \rho^k \lVert v \rVert` exactly. ``kind="gaussian"``: i.i.d.
    normal entries rescaled to spectral radius :math:`\rho` (non-normal: transients differ).
    """
    A = torch.randn(d_hidden, d_hidden, generator=generator, dtype=dtype)  # (d_hidden, d_hidden)
    if kind == "orthogonal":
        Q, R = torch.linalg.qr(A)  # (d_hidden, d_hidden) each
        Q = Q * torch.sign(torch.diagonal(R))  # (d_hidden, d_hidden) uniform (Haar) orthogonal
        return rho * Q  # (d_hidden, d_hidden)
    if kind == "gaussian":
        return scale_to_spectral_radius(A, rho)  # (d_hidden, d_hidden)
    raise ValueError(f"kind must be 'orthogonal' or 'gaussian', got {kind!r}")


def jacobian_norms_through_time(
    x: torch.Tensor,
    W_xh: torch.Tensor,
    W_hh: torch.Tensor,
    b_h: torch.Tensor,
    h0: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""``[N]`` Frobenius norms :math:`\lVert \partial h_N / \partial x_t \rVert_F`, for ``x [N, d_in]``.

    By the chain rule, with :math:`D_k = \mathrm{diag}(1 - h_k^2)` the tanh derivative,

    .. math::

        \frac{\partial h_N}{\partial x_t} = D_N W_{hh} D_{N-1} W_{hh} \cdots D_{t+1} W_{hh}
        \, D_t W_{xh},

    a product of :math:`N - t` factors :math:`D_k W_{hh}`. Since :math:`\lVert D_k \rVert_2 \le 1`,
    its norm is at most :math:`\sigma_{\max}(W_{hh})^{N-t} \lVert W_{xh} \rVert_F` at any input
    size; while the tanh stays unsaturated (:math:`D_k \approx I`) it is
    :math:`W_{hh}^{N-t} W_{xh}`, whose size follows :math:`\rho(W_{hh})^{N-t}` for large
    :math:`N - t` (exactly, for :math:`W_{hh} = \rho Q` with :math:`Q` orthogonal).

    The Jacobian is :math:`d_\text{hidden} \times d_{in}` per step. Row :math:`i` is the gradient of
    :math:`h_N[i]`; all :math:`d_\text{hidden}` rows come from one backward pass by running :math:`d_\text{hidden}`
    copies of the sequence as a batch and differentiating :math:`\sum_i h_N^{(i)}[i]`.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"expected x of shape [N, d_in] (one sequence), got {shape_of(x)}")
    check_rnn_inputs(x[None], W_xh, W_hh, b_h, None)
    seq_len, d_in = x.shape
    d_hidden = W_hh.shape[0]
    if h0 is not None and (not isinstance(h0, torch.Tensor) or tuple(h0.shape) != (d_hidden,)):
        raise ValueError(
            f"expected h0 of shape [d_hidden] = [{d_hidden}] (one sequence), got {shape_of(h0)}"
        )
    if seq_len == 0:
        return x.new_zeros(0)  # (0,)
    xs = x.detach().unsqueeze(0).expand(d_hidden, seq_len, d_in).clone()  # (d_hidden, N, d_in)
    xs.requires_grad_(True)
    h0s = (
        None if h0 is None else h0.detach().expand(d_hidden, d_hidden)
    )  # (d_hidden, d_hidden) one row per copy
    H = rnn_forward(xs, W_xh.detach(), W_hh.detach(), b_h.detach(), h0s)  # (d_hidden, N, d_hidden)
    h_N = H[:, -1, :]  # (d_hidden, d_hidden) row i: copy i's final state
    (grad,) = torch.autograd.grad(h_N.diagonal().sum(), xs)  # (d_hidden, N, d_in) = dh_T[i]/dx_t
    return grad.pow(2).sum(dim=(0, 2)).sqrt()  # (N,) Frobenius norm over (i, input feature)


# --------------------------------------------------------------------------- the recall task


@dataclass
class RecallBatch:
    """A batch of the marked-token recall task.

    ``tokens [B, N]`` random symbols; ``marker [B, N]`` 1.0 at exactly one position per row,
    ``position [B]``; ``target [B]`` the marked symbol. At every later step ``t`` the model
    must output ``target``: the symbol it saw ``distance = t - position`` steps earlier.
    """

    tokens: torch.Tensor
    marker: torch.Tensor
    position: torch.Tensor
    target: torch.Tensor

    @property
    def distance(self) -> torch.Tensor:
        """``[B, N]``: how many steps ago the marked symbol was seen (< 1: not yet asked)."""
        t = torch.arange(self.tokens.shape[1])  # (N,)
        return t[None, :] - self.position[:, None]  # (B, N)


def make_recall_batch(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    *,
    positions: torch.Tensor | Sequence[int] | None = None,
    generator: torch.Generator | None = None,
) -> RecallBatch:
    """Sequences of random symbols with one marked position; the answer is the marked symbol.

    ``positions`` (one per row, each in ``0 .. seq_len - 2``) says where the marker goes;
    by default it is uniform over that range. Every step after the marker is a question
    ("which symbol was marked?") whose answer lies ``t - position`` steps back.
    """
    if seq_len < 2 or vocab_size < 2 or batch_size < 1:
        raise ValueError(
            f"expected batch_size >= 1, seq_len >= 2, vocab_size >= 2, got "
            f"{batch_size}, {seq_len}, {vocab_size}"
        )
    tokens = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)  # (B, N)
    if positions is None:
        position = torch.randint(0, seq_len - 1, (batch_size,), generator=generator)  # (B,)
    else:
        position = torch.as_tensor(positions, dtype=torch.long).reshape(-1)  # (B,)
        if position.shape != (batch_size,):
            raise ValueError(f"expected {batch_size} positions, got shape {shape_of(position)}")
        if position.min() < 0 or position.max() > seq_len - 2:
            raise ValueError(
                f"positions must lie in 0..{seq_len - 2}, got "
                f"{int(position.min())}..{int(position.max())}"
            )
    rows = torch.arange(batch_size)  # (B,)
    marker = torch.zeros(batch_size, seq_len)  # (B, N)
    marker[rows, position] = 1.0
    target = tokens[rows, position]  # (B,)
    return RecallBatch(tokens, marker, position, target)


class RecallRNN(nn.Module):
    r"""Embedding + marker bit → one tanh RNN layer → a linear read-out at every step.

    Uses ``torch.nn.RNN`` (the same recurrence as :func:`rnn_forward`, run in C++ so the
    notebook trains in seconds).
    """

    def __init__(self, vocab_size: int, d_hidden: int = 64, d_embed: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_embed)
        self.rnn = nn.RNN(d_embed + 1, d_hidden, batch_first=True)
        self.readout = nn.Linear(d_hidden, vocab_size)

    def forward(self, tokens: torch.Tensor, marker: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.embed(tokens), marker.unsqueeze(-1)], dim=-1)  # (B, N, d_embed + 1)
        h, _ = self.rnn(x)  # (B, N, d_hidden)
        return self.readout(h)  # (B, N, V) logits at every step


class RecallAttention(nn.Module):
    r"""Embedding + marker → one causal self-attention layer → a linear read-out at every step.

    :math:`e_t = E[\text{token}_t] + m_t u` (a learned marker vector :math:`u`), then
    :math:`Q = e W_Q`, :math:`K = e W_K`, :math:`V = e W_V`, one head, no positional
    information: a query finds the marked key by its content, whatever its distance.
    """

    def __init__(self, vocab_size: int, d_model: int = 32):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.marker_vec = nn.Parameter(torch.randn(d_model))
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, marker: torch.Tensor, return_weights: bool = False):
        e = self.embed(tokens) + marker.unsqueeze(-1) * self.marker_vec  # (B, N, D)
        q, k, v = self.W_Q(e), self.W_K(e), self.W_V(e)  # (B, N, D) each
        out, w = scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, N, D), (B, N, N)
        logits = self.readout(out)  # (B, N, V)
        return (logits, w) if return_weights else logits


def recall_loss(logits: torch.Tensor, b: RecallBatch) -> torch.Tensor:
    """Mean cross-entropy over the questions: every step after the marker."""
    asked = b.distance >= 1  # (B, N)
    target = b.target[:, None].expand_as(asked)  # (B, N)
    return F.cross_entropy(logits[asked], target[asked])  # scalar


def train_recall(
    model: nn.Module,
    *,
    steps: int = 300,
    batch_size: int = 32,
    seq_len: int = 32,
    vocab_size: int = 8,
    lr: float = 1e-2,
    seed: int = 0,
    clip: float | None = 1.0,
) -> list[float]:
    """Train on fresh recall batches with Adam; returns the loss of every step.

    Batches come from a generator seeded with ``seed``, so a run is reproducible.
    ``clip`` caps the gradient norm (the standard remedy for exploding gradients).
    """
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def step_loss():
        b = make_recall_batch(batch_size, seq_len, vocab_size, generator=gen)
        return recall_loss(model(b.tokens, b.marker), b)  # scalar

    with single_thread():
        return fit(model, opt, steps, step_loss, clip=clip)


@torch.no_grad()
def recall_accuracy_by_distance(
    model: nn.Module,
    *,
    seq_len: int = 32,
    vocab_size: int = 8,
    batch_size: int = 4096,
    seed: int = 1,
    marker: str = "random",
    return_counts: bool = False,
):
    """``(distances [N-1], accuracy [N-1])``: the fraction of questions at each distance
    ``k = 1 .. seq_len - 1`` that the model answers right, on ``batch_size`` fresh sequences.

    ``marker="random"`` (default) draws the marked position uniformly over ``0 .. N-2``, as
    :func:`train_recall` does, and scores every question of every sequence: distance ``k``
    is asked about ``batch_size * (N - k) / (N - 1)`` times on average (many times for short
    distances, fewer for long ones). ``marker="start"`` marks position 0 of every sequence,
    so that each distance is asked exactly ``batch_size`` times, but from a state that has
    seen nothing before the marker, which the model was not trained on: it flatters a model
    whose memory is disturbed by what came earlier (chapter 01 measures by how much).
    ``return_counts=True`` adds the number of questions per distance ``[N-1]``.
    """
    if marker not in ("random", "start"):
        raise ValueError(f"marker must be 'random' or 'start', got {marker!r}")
    gen = torch.Generator().manual_seed(seed)
    positions = torch.zeros(batch_size, dtype=torch.long) if marker == "start" else None
    b = make_recall_batch(batch_size, seq_len, vocab_size, positions=positions, generator=gen)
    model.eval()
    with single_thread():
        pred = model(b.tokens, b.marker).argmax(-1)  # (B, N)
    correct = (pred == b.target[:, None]).float()  # (B, N)
    distance = b.distance  # (B, N)
    dists = torch.arange(1, seq_len)  # (N-1,)
    asked = distance[None] == dists[:, None, None]  # (N-1, B, N)
    counts = asked.sum(dim=(1, 2))  # (N-1,)
    accuracy = (asked * correct[None]).sum(dim=(1, 2)) / counts.clamp_min(1)  # (N-1,)
    return (dists, accuracy, counts) if return_counts else (dists, accuracy)
