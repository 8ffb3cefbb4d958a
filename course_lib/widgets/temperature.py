r"""Chapter 03's temperature explorer: how the score scale sharpens or flattens softmax.

One query attends to ``n_keys`` keys, all with i.i.d. unit-variance components in
:math:`d_k` dimensions; the weights are

.. math:: w = \mathrm{softmax}(q K^\top / \tau),

where the temperature :math:`\tau` is what the slider sets. :math:`\tau = \sqrt{d_k}` is
the standard scaling (scores of unit variance), :math:`\tau = 1` is "no scaling". Thin over
:mod:`course_lib.scaling`: entropy and the Jacobian's size come from there; the widget only
chooses inputs and draws a PNG (matplotlib's Agg backend into an ``ipywidgets.Image``), so
it works headless and offline.

For browser tests, the parts carry CSS classes and stable descriptions:

==================================  ==================  =============================
CSS class                           widget              description / role
==================================  ==================  =============================
``temperature-explorer``            VBox                the whole explorer
``temperature-explorer-slider``     FloatLogSlider      "temperature τ"
``temperature-explorer-dk``         Dropdown            "d_k"
``temperature-explorer-reset``      Button              "τ = √d_k"
``temperature-explorer-summary``    HTML                max weight, entropy, Σ|J|
``temperature-explorer-plot``       Image (PNG)         bars of the weights
==================================  ==================  =============================

Every redraw increments :attr:`TemperatureExplorer.draws` and replaces the PNG bytes.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..scaling import jacobian_abs_sum, softmax_entropy
from .render import figure_png

__all__ = ["TemperatureExplorer", "weights_at"]


def weights_at(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    r""":math:`\mathrm{softmax}(s / \tau)` over the last axis, in float64."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    return (scores.double() / float(temperature)).softmax(-1)  # (..., Nk)


def _render_png(weights: np.ndarray, title: str) -> bytes:
    from matplotlib.figure import Figure

    n = len(weights)
    fig = Figure(figsize=(7, 3.0), dpi=90)
    ax = fig.subplots()
    colors = ["tab:orange" if j == int(np.argmax(weights)) else "tab:blue" for j in range(n)]
    ax.bar(range(n), weights, color=colors)
    ax.axhline(1.0 / n, color="gray", ls="--", lw=1, label="uniform 1/n")
    ax.set_ylim(0, 1)
    ax.set_xlabel("key")
    ax.set_ylabel("weight")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return figure_png(fig)


class TemperatureExplorer:
    """A temperature slider over one query's attention weights.

    ``d_ks`` are the choices of the ``d_k`` dropdown; the scores for each are drawn once
    from a generator seeded with ``seed`` and ``d_k`` (so they are reproducible). Display
    with ``display(explorer.widget)``.
    """

    def __init__(
        self,
        *,
        d_ks: tuple[int, ...] = (4, 16, 64, 256, 1024),
        d_k: int = 256,
        n_keys: int = 16,
        temperature: float | None = None,
        seed: int = 0,
    ):
        import ipywidgets as w

        if d_k not in d_ks:
            raise ValueError(f"d_k={d_k} is not one of the choices {d_ks}")
        self.n_keys, self.seed = int(n_keys), int(seed)
        self.draws = 0
        self._quiet = False
        self.dk = w.Dropdown(options=list(d_ks), value=d_k, description="d_k")
        self.slider = w.FloatLogSlider(
            value=math.sqrt(d_k) if temperature is None else temperature,
            base=10,
            min=-1,
            max=2,
            step=0.01,
            description="temperature τ",
            readout_format=".2f",
            continuous_update=True,
            style={"description_width": "initial"},
            layout=w.Layout(width="420px"),
        )
        self.reset = w.Button(description="τ = √d_k", tooltip="standard scaling")
        self.summary = w.HTML()
        self.plot = w.Image(format="png")
        for part, name in (
            (self.slider, "slider"),
            (self.dk, "dk"),
            (self.reset, "reset"),
            (self.summary, "summary"),
            (self.plot, "plot"),
        ):
            part.add_class(f"temperature-explorer-{name}")
        self.widget = w.VBox([w.HBox([self.dk, self.slider, self.reset]), self.summary, self.plot])
        self.widget.add_class("temperature-explorer")

        self.slider.observe(lambda _change: self.redraw(), names="value")
        self.dk.observe(self._on_dk, names="value")
        self.reset.on_click(lambda _button: self.set_standard())
        self.redraw()

    # ---------------------------------------------------------------- state

    def scores(self) -> torch.Tensor:
        r"""Raw scores :math:`q \cdot k_j` ``[n_keys]`` for the current ``d_k``."""
        d_k = int(self.dk.value)
        g = torch.Generator().manual_seed(self.seed * 100_003 + d_k)
        q = torch.randn(d_k, generator=g, dtype=torch.float64)  # (d_k,)
        k = torch.randn(self.n_keys, d_k, generator=g, dtype=torch.float64)  # (Nk, d_k)
        return k @ q  # (Nk,)

    @property
    def weights(self) -> np.ndarray:
        """The weights ``[n_keys]`` currently drawn."""
        return weights_at(self.scores(), self.slider.value).numpy()

    @property
    def max_weight(self) -> float:
        return float(self.weights.max())

    @property
    def entropy(self) -> float:
        """Entropy of the current weights in nats (uniform gives log n_keys)."""
        return float(softmax_entropy(torch.from_numpy(self.weights)))

    # ---------------------------------------------------------------- callbacks

    def set_standard(self) -> None:
        r"""Set :math:`\tau = \sqrt{d_k}` (the standard scaling)."""
        self.slider.value = math.sqrt(int(self.dk.value))

    def _on_dk(self, _change) -> None:
        self._quiet = True  # one redraw for the whole change
        try:
            self.set_standard()
        finally:
            self._quiet = False
        self.redraw()

    def redraw(self) -> None:
        """Recompute the weights, then redraw the bars and the summary line."""
        if self._quiet:
            return
        p = weights_at(self.scores(), self.slider.value)  # (Nk,)
        d_k, tau = int(self.dk.value), float(self.slider.value)
        ent = float(softmax_entropy(p))
        jac = float(jacobian_abs_sum(p))
        ratio = tau / math.sqrt(d_k)
        self.summary.value = (
            f"τ = {tau:.2f} = {ratio:.2f}·√d_k &nbsp;·&nbsp; largest weight "
            f"<b>{float(p.max()):.3f}</b> &nbsp;·&nbsp; entropy <b>{ent:.2f}</b> nats "
            f"(uniform: {math.log(self.n_keys):.2f}) &nbsp;·&nbsp; Σ|J| = {jac:.3f} "
            "(how much gradient the softmax lets through)"
        )
        self.plot.value = _render_png(
            p.numpy(), f"d_k = {d_k}, softmax(q·k / τ) with τ = {tau:.2f}"
        )
        self.draws += 1
