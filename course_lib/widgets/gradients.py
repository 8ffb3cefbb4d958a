r"""Chapter 01's gradient explorer: how far back can the last state of an RNN still feel its input?

For a tanh RNN with :math:`W_{hh} = \rho\,Q` (:math:`Q` a fixed random orthogonal matrix, so
every eigenvalue and every singular value of :math:`W_{hh}` has modulus :math:`\rho`) and
inputs :math:`s\,x_t` (:math:`x_t` a fixed random sequence, :math:`s` the "input size"), the
explorer plots

.. math:: \Big\lVert \frac{\partial h_N}{\partial x_t} \Big\rVert_F \quad\text{against}\quad N - t,

next to the linear-regime value :math:`\rho^{N-t} \lVert W_{xh} \rVert_F`, which is also an
upper bound at any input size (the tanh's derivative is at most 1). Moving a slider changes
exactly one of :math:`\rho` and :math:`s`. Thin over :mod:`course_lib.rnn`: the norms come
from :func:`course_lib.rnn.jacobian_norms_through_time`; the widget only chooses inputs and
draws a PNG (matplotlib's Agg backend into an ``ipywidgets.Image``), so it works headless
and offline.

For browser tests, the parts carry CSS classes and stable descriptions:

==================================  ==================  ================================
CSS class                           widget              description / role
==================================  ==================  ================================
``gradient-explorer``               VBox                the whole explorer
``gradient-explorer-rho``           FloatSlider         "ρ(W_hh)", 0.5 .. 3
``gradient-explorer-scale``         FloatLogSlider      "input size", 1e-8 .. 10
``gradient-explorer-summary``       HTML                the ratio first/last and a verdict
``gradient-explorer-plot``          Image (PNG)         norms against distance, log scale
==================================  ==================  ================================

Every redraw increments :attr:`GradientExplorer.draws` and replaces the PNG bytes.
"""

from __future__ import annotations

import math

import torch

from ..rnn import jacobian_norms_through_time, recurrent_matrix
from .render import figure_png

__all__ = ["GradientExplorer", "verdict"]


def verdict(ratio: float, factor: float = 1e3) -> str:
    r"""Name what happened over the sequence, from
    :math:`r = \lVert \partial h_N/\partial x_1 \rVert / \lVert \partial h_N/\partial x_N \rVert`:
    "explodes" if :math:`r > ` ``factor``, "vanishes" if :math:`r < 1/` ``factor``."""
    if ratio > factor:
        return "explodes"
    if ratio < 1 / factor:
        return "vanishes"
    return f"stays within a factor {factor:g}"


def _render_png(dist: torch.Tensor, norms: torch.Tensor, bound: torch.Tensor, title: str) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.0), dpi=80)
    ax = fig.subplots()
    ax.semilogy(dist.numpy(), norms.numpy(), label="‖∂h_N/∂x_t‖_F (autograd)")
    ax.semilogy(
        dist.numpy(),
        bound.numpy(),
        "k:",
        lw=1,
        label="ρ^(N−t) ‖W_xh‖_F (linear regime; upper bound)",
    )
    ax.set_xlabel("distance N − t")
    ax.set_ylabel("norm (log scale)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return figure_png(fig)


class GradientExplorer:
    r"""Sliders for :math:`\rho(W_{hh})` and the input size over
    :math:`\lVert \partial h_N / \partial x_t \rVert_F` against the distance :math:`N - t`.

    The weights and the input sequence are drawn once from a generator seeded with ``seed``.
    :attr:`norms` holds the ``[N]`` norms currently drawn (entry ``t`` for input ``t``) and
    :attr:`ratio` their first/last ratio. Display with ``display(explorer.widget)``.
    """

    def __init__(
        self,
        *,
        seq_len: int = 60,
        d_hidden: int = 32,
        d_in: int = 8,
        rho: float = 1.0,
        input_scale: float = 1e-8,
        seed: int = 0,
    ):
        import ipywidgets as w

        if seq_len < 2 or d_hidden < 1 or d_in < 1:
            raise ValueError(
                f"expected seq_len >= 2, d_hidden >= 1, d_in >= 1, got {seq_len}, "
                f"{d_hidden}, {d_in}"
            )
        g = torch.Generator().manual_seed(seed)
        self.W_xh = torch.randn(d_hidden, d_in, generator=g, dtype=torch.float64) / math.sqrt(d_in)
        self.Q = recurrent_matrix(d_hidden, 1.0, generator=g)  # (d_hidden, d_hidden) orthogonal
        self.x = torch.randn(seq_len, d_in, generator=g, dtype=torch.float64)  # (N, d_in)
        self.b = torch.zeros(d_hidden, dtype=torch.float64)  # (d_hidden,)
        self.draws = 0
        self.norms = torch.empty(seq_len, dtype=torch.float64)  # (N,) set by redraw()
        self.rho = w.FloatSlider(
            value=rho, min=0.5, max=3.0, step=0.05, description="ρ(W_hh)", continuous_update=False
        )
        self.scale = w.FloatLogSlider(
            value=input_scale,
            base=10,
            min=-8,
            max=1,
            step=0.5,
            description="input size",
            readout_format=".0e",
            continuous_update=False,
        )
        self.summary = w.HTML()
        self.plot = w.Image(format="png")
        for part, name in (
            (self.rho, "rho"),
            (self.scale, "scale"),
            (self.summary, "summary"),
            (self.plot, "plot"),
        ):
            part.add_class(f"gradient-explorer-{name}")
        self.widget = w.VBox([w.HBox([self.rho, self.scale]), self.summary, self.plot])
        self.widget.add_class("gradient-explorer")
        self.rho.observe(lambda _change: self.redraw(), names="value")
        self.scale.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def compute(self) -> torch.Tensor:
        r"""``[N]``: :math:`\lVert \partial h_N / \partial x_t \rVert_F` at the sliders' values."""
        return jacobian_norms_through_time(
            self.scale.value * self.x, self.W_xh, self.rho.value * self.Q, self.b
        )  # (N,)

    @property
    def ratio(self) -> float:
        r""":math:`\lVert \partial h_N/\partial x_1 \rVert / \lVert \partial h_N/\partial x_N \rVert`
        of the norms currently drawn."""
        return float(self.norms[0] / self.norms[-1])

    def redraw(self) -> None:
        """Recompute the norms, then redraw the plot and the summary line."""
        self.norms = self.compute()  # (N,)
        seq_len = len(self.norms)
        rho, scale = float(self.rho.value), float(self.scale.value)
        dist = torch.arange(seq_len - 1, -1, -1, dtype=torch.float64)  # (N,) N - t for t = 1..N
        bound = torch.linalg.matrix_norm(self.W_xh) * rho**dist  # (N,)
        self.plot.value = _render_png(
            dist, self.norms, bound, f"ρ = {rho:.2f}, input size {scale:.0e}"
        )
        self.summary.value = (
            f"ρ = {rho:.2f}, input size {scale:.0e}: "
            f"‖∂h_N/∂x_1‖ / ‖∂h_N/∂x_N‖ = <b>{self.ratio:.3g}</b> over "
            f"{seq_len - 1} steps ({verdict(self.ratio)})"
        )
        self.draws += 1
