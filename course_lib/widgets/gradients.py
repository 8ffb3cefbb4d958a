r"""Chapter 01's gradient explorer: how far back can the last state of an RNN still feel its input?

For a tanh RNN with :math:`W_{hh} = \rho\,Q` (:math:`Q` a fixed random orthogonal matrix, so
every eigenvalue and every singular value of :math:`W_{hh}` has modulus :math:`\rho`) and
inputs :math:`s\,x_t` (:math:`x_t` a fixed random sequence, :math:`s` the "input size"), the
explorer plots

.. math:: \Big\lVert \frac{\partial h_T}{\partial x_t} \Big\rVert_F \quad\text{against}\quad T - t,

next to the linear-regime value :math:`\rho^{T-t} \lVert W_{xh} \rVert_F`, which is also an
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
    :math:`r = \lVert \partial h_T/\partial x_1 \rVert / \lVert \partial h_T/\partial x_T \rVert`:
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
    ax.semilogy(dist.numpy(), norms.numpy(), label="‖∂h_T/∂x_t‖_F (autograd)")
    ax.semilogy(
        dist.numpy(),
        bound.numpy(),
        "k:",
        lw=1,
        label="ρ^(T−t) ‖W_xh‖_F (linear regime; upper bound)",
    )
    ax.set_xlabel("distance T − t")
    ax.set_ylabel("norm (log scale)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return figure_png(fig)


class GradientExplorer:
    r"""Sliders for :math:`\rho(W_{hh})` and the input size over
    :math:`\lVert \partial h_T / \partial x_t \rVert_F` against the distance :math:`T - t`.

    The weights and the input sequence are drawn once from a generator seeded with ``seed``.
    :attr:`norms` holds the ``[T]`` norms currently drawn (entry ``t`` for input ``t``) and
    :attr:`ratio` their first/last ratio. Display with ``display(explorer.widget)``.
    """

    def __init__(
        self,
        *,
        T: int = 60,
        d_h: int = 32,
        d_in: int = 8,
        rho: float = 1.0,
        input_scale: float = 1e-8,
        seed: int = 0,
    ):
        import ipywidgets as w

        if T < 2 or d_h < 1 or d_in < 1:
            raise ValueError(f"expected T >= 2, d_h >= 1, d_in >= 1, got {T}, {d_h}, {d_in}")
        g = torch.Generator().manual_seed(seed)
        self.W_xh = torch.randn(d_h, d_in, generator=g, dtype=torch.float64) / math.sqrt(d_in)
        self.Q = recurrent_matrix(d_h, 1.0, generator=g)  # (d_h, d_h) orthogonal
        self.x = torch.randn(T, d_in, generator=g, dtype=torch.float64)  # (T, d_in)
        self.b = torch.zeros(d_h, dtype=torch.float64)  # (d_h,)
        self.draws = 0
        self.norms = torch.empty(T, dtype=torch.float64)  # (T,) set by redraw()
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
        r"""``[T]``: :math:`\lVert \partial h_T / \partial x_t \rVert_F` at the sliders' values."""
        return jacobian_norms_through_time(
            self.scale.value * self.x, self.W_xh, self.rho.value * self.Q, self.b
        )  # (T,)

    @property
    def ratio(self) -> float:
        r""":math:`\lVert \partial h_T/\partial x_1 \rVert / \lVert \partial h_T/\partial x_T \rVert`
        of the norms currently drawn."""
        return float(self.norms[0] / self.norms[-1])

    def redraw(self) -> None:
        """Recompute the norms, then redraw the plot and the summary line."""
        self.norms = self.compute()  # (T,)
        T = len(self.norms)
        rho, scale = float(self.rho.value), float(self.scale.value)
        dist = torch.arange(T - 1, -1, -1, dtype=torch.float64)  # (T,) T - t for t = 1..T
        bound = torch.linalg.matrix_norm(self.W_xh) * rho**dist  # (T,)
        self.plot.value = _render_png(
            dist, self.norms, bound, f"ρ = {rho:.2f}, input size {scale:.0e}"
        )
        self.summary.value = (
            f"ρ = {rho:.2f}, input size {scale:.0e}: "
            f"‖∂h_T/∂x_1‖ / ‖∂h_T/∂x_T‖ = <b>{self.ratio:.3g}</b> over "
            f"{T - 1} steps ({verdict(self.ratio)})"
        )
        self.draws += 1
