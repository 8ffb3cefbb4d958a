r"""A small RoPE explorer: watch one feature pair of a query and a key rotate with position.

``RopeExplorer()`` shows pair :math:`i` of a query at position :math:`m` and of a key at
position :math:`n`, each rotated by RoPE (:func:`course_lib.positional.apply_rope`), on the
unit circle, with the full score :math:`q_m^\top k_n`. Move both positions by the same
amount: both arrows turn, the angle between them and the score stay put. That is the
relative-position property, seen.

The widget is thin: all the math is in :mod:`course_lib.positional`; this file only draws an
SVG and wires three sliders. It runs headless (set ``explorer.query_position.value`` from
code and read ``explorer.state``), and its root carries the CSS class ``rope-explorer`` so
a browser test can find it.
"""

from __future__ import annotations

import math

import torch

from course_lib.positional import apply_rope, rope_frequencies

__all__ = ["RopeExplorer"]

_SIZE = 240  # px, the square drawing
_R = 90  # px, radius of the unit circle


def _arrow(x: float, y: float, color: str, label: str, dashed: bool = False) -> str:
    """An SVG arrow from the centre to (x, y) in unit-circle coordinates (y up)."""
    c = _SIZE / 2
    px, py = c + _R * x, c - _R * y
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    return (
        f'<line x1="{c}" y1="{c}" x2="{px:.1f}" y2="{py:.1f}" stroke="{color}" '
        f'stroke-width="3"{dash} marker-end="url(#rope-head-{color[1:]})"/>'
        f'<text x="{px + 6 * x:.1f}" y="{py - 6 * y:.1f}" fill="{color}" font-size="12" '
        f'text-anchor="middle">{label}</text>'
    )


class RopeExplorer:
    """Three sliders (query position m, key position n, feature pair i) and a drawing.

    ``state`` holds what is drawn: the rotated pairs, their angles, the angle between
    them, :math:`m-n`, and the full-vector score :math:`q_m^\\top k_n`.
    """

    def __init__(
        self,
        d: int = 16,
        base: float = 10000.0,
        *,
        max_position: int = 64,
        seed: int = 0,
        interleaved: bool = True,
    ):
        import ipywidgets as w

        g = torch.Generator().manual_seed(seed)
        self.d, self.base, self.interleaved = d, base, interleaved
        self.q = torch.randn(d, dtype=torch.float64, generator=g)  # (d,)
        self.k = torch.randn(d, dtype=torch.float64, generator=g)  # (d,)
        self.theta = rope_frequencies(d, base)  # (d/2,)
        style = {"description_width": "initial"}
        self.query_position = w.IntSlider(
            value=0, min=0, max=max_position, description="query position m", style=style
        )
        self.key_position = w.IntSlider(
            value=0, min=0, max=max_position, description="key position n", style=style
        )
        self.pair = w.IntSlider(
            value=0, min=0, max=d // 2 - 1, description="feature pair i", style=style
        )
        self.drawing = w.HTML()
        self.readout = w.HTML()
        self.drawing.add_class("rope-drawing")
        self.widget = w.VBox(
            [
                self.query_position,
                self.key_position,
                self.pair,
                w.HBox([self.drawing, self.readout]),
            ]
        )
        self.widget.add_class("rope-explorer")
        self.state: dict = {}
        self.n_updates = 0
        for s in (self.query_position, self.key_position, self.pair):
            s.observe(lambda _change: self.update(), names="value")
        self.update()

    def _pair(self, v: torch.Tensor, i: int) -> tuple[float, float]:
        a, b = (2 * i, 2 * i + 1) if self.interleaved else (i, i + self.d // 2)
        return v[a].item(), v[b].item()

    def update(self) -> None:
        """Recompute the state from the sliders and redraw."""
        m, n, i = self.query_position.value, self.key_position.value, self.pair.value
        qm = apply_rope(
            self.q[None], torch.tensor([m]), base=self.base, interleaved=self.interleaved
        )[0]  # (d,)
        kn = apply_rope(
            self.k[None], torch.tensor([n]), base=self.base, interleaved=self.interleaved
        )[0]  # (d,)
        q2, k2 = self._pair(qm, i), self._pair(kn, i)
        angle_q, angle_k = math.atan2(q2[1], q2[0]), math.atan2(k2[1], k2[0])
        between = math.remainder(angle_q - angle_k, 2 * math.pi)
        self.state = {
            "m": m,
            "n": n,
            "pair": i,
            "offset": m - n,
            "theta": self.theta[i].item(),
            "q_pair": q2,
            "k_pair": k2,
            "angle_q": angle_q,
            "angle_k": angle_k,
            "angle_between": between,
            "pair_score": q2[0] * k2[0] + q2[1] * k2[1],
            "score": (qm @ kn).item(),
        }
        self.drawing.value = self.svg()
        st = self.state
        self.readout.value = (
            f"<div style='font-family:monospace;padding-left:12px'>"
            f"θ<sub>{i}</sub> = {st['theta']:.4g} rad/position<br>"
            f"m − n = {st['offset']}<br>"
            f"angle q→k in this pair = {math.degrees(between):.1f}°<br>"
            f"pair score = {st['pair_score']:.4f}<br>"
            f"<b>full score q<sub>m</sub>·k<sub>n</sub> = {st['score']:.4f}</b></div>"
        )
        self.n_updates += 1

    def svg(self) -> str:
        """The drawing: unit circle, the unrotated query pair (dashed) and both rotated pairs."""
        c = _SIZE / 2
        q0 = self._pair(self.q, self.state["pair"])
        scale = max(math.hypot(*q0), math.hypot(*self.state["k_pair"]), 1e-12)
        qx, qy = (v / scale for v in self.state["q_pair"])
        kx, ky = (v / scale for v in self.state["k_pair"])
        heads = "".join(
            f'<marker id="rope-head-{col}" markerWidth="8" markerHeight="8" refX="6" refY="3" '
            f'orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#{col}"/></marker>'
            for col in ("1f77b4", "ff7f0e", "999999")
        )
        return (
            f'<svg class="rope-svg" width="{_SIZE}" height="{_SIZE}" '
            f'data-angle-q="{self.state["angle_q"]:.6f}" '
            f'data-angle-k="{self.state["angle_k"]:.6f}" xmlns="http://www.w3.org/2000/svg">'
            f"<defs>{heads}</defs>"
            f'<circle cx="{c}" cy="{c}" r="{_R}" fill="none" stroke="#ccc"/>'
            f'<line x1="10" y1="{c}" x2="{_SIZE - 10}" y2="{c}" stroke="#eee"/>'
            f'<line x1="{c}" y1="10" x2="{c}" y2="{_SIZE - 10}" stroke="#eee"/>'
            + _arrow(q0[0] / scale, q0[1] / scale, "#999999", "q (m=0)", dashed=True)
            + _arrow(kx, ky, "#ff7f0e", f"k@{self.state['n']}")
            + _arrow(qx, qy, "#1f77b4", f"q@{self.state['m']}")
            + "</svg>"
        )

    def _ipython_display_(self):  # pragma: no cover - display only
        from IPython.display import display

        display(self.widget)
