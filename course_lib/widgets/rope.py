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

_SIZE = 300  # px, the square drawing
_R = 90  # px, radius of the unit circle
_FONT = 12  # px, label font size
_CHAR_W = 7.0  # px, a generous width per character at that size (for the label boxes)
_MARGIN = 4  # px kept free at the drawing's edges
_MIN_LENGTH = 0.35  # shortest arrow drawn, as a fraction of the radius

# colours: query (blue), key (orange), unrotated query (grey)
_Q, _K, _Q0 = "#1f77b4", "#ff7f0e", "#999999"


def _tip(x: float, y: float) -> tuple[float, float]:
    """Pixel position of the unit-circle point (x, y) (y up)."""
    c = _SIZE / 2
    return c + _R * x, c - _R * y


def _arrow(x: float, y: float, color: str, width: float, dashed: bool = False) -> str:
    """An SVG arrow from the centre to (x, y) in unit-circle coordinates (y up)."""
    c = _SIZE / 2
    px, py = _tip(x, y)
    dash = ' stroke-dasharray="5 4"' if dashed else ""
    return (
        f'<line x1="{c}" y1="{c}" x2="{px:.1f}" y2="{py:.1f}" stroke="{color}" '
        f'stroke-width="{width}" stroke-linecap="round"{dash} '
        f'marker-end="url(#rope-head-{color[1:]})"/>'
    )


def _label_boxes(
    arrows: list[tuple[float, float, str]],
) -> list[tuple[str, float, float, float, float]]:
    """Place one label per arrow: beyond its tip, inside the drawing, never overlapping.

    ``arrows`` are ``(x, y, text)`` tips in unit-circle coordinates. Returns boxes
    ``(text, left, top, right, bottom)`` in pixels. Each label sits 6 px beyond its tip (its
    nearest edge, whatever the direction), is clamped inside the square (so no label is cut
    at an edge), and is moved
    down (or up, near the bottom) one line at a time while it overlaps a label already
    placed, which happens when two arrows point the same way.
    """
    placed: list[tuple[str, float, float, float, float]] = []
    for x, y, text in arrows:
        norm = max(math.hypot(x, y), 1e-12)
        px, py = _tip(x, y)
        w, h = _CHAR_W * len(text), _FONT + 2
        ux, uy = x / norm, -y / norm  # direction of the arrow on screen (y down)
        gap = 6 + abs(ux) * w / 2 + abs(uy) * h / 2  # tip to the label's centre
        cx, cy = px + gap * ux, py + gap * uy  # centre of the label
        cx = min(max(cx, _MARGIN + w / 2), _SIZE - _MARGIN - w / 2)
        cy = min(max(cy, _MARGIN + h / 2), _SIZE - _MARGIN - h / 2)
        step = h if cy < _SIZE / 2 else -h
        for _ in range(len(arrows) + 1):
            box = (text, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            if not any(_overlap(box, other) for other in placed):
                break
            cy = min(max(cy + step, _MARGIN + h / 2), _SIZE - _MARGIN - h / 2)
        placed.append(box)
    return placed


def _overlap(a, b) -> bool:
    return a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]


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
        """The drawing: unit circle, the unrotated query pair (dashed) and both rotated pairs.

        The key's arrow is drawn first and wider, the query's on top and narrower, so the
        key stays visible when the two point the same way; labels never leave the square
        and never overlap (:meth:`label_boxes`).
        """
        c = _SIZE / 2
        heads = "".join(
            f'<marker id="rope-head-{col[1:]}" markerWidth="12" markerHeight="12" refX="8" '
            f'refY="5" orient="auto" markerUnits="userSpaceOnUse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{col}"/></marker>'
            for col in (_Q, _K, _Q0)
        )
        (q0x, q0y), (kx, ky), (qx, qy) = self._unit_tips()
        labels = "".join(
            f'<text x="{(left + right) / 2:.1f}" y="{bottom - 3:.1f}" fill="{color}" '
            f'font-size="{_FONT}" font-family="sans-serif" text-anchor="middle" '
            f'class="rope-label">{text}</text>'
            for (text, left, _top, right, bottom), color in zip(self.label_boxes(), (_Q0, _K, _Q))
        )
        return (
            f'<svg class="rope-svg" width="{_SIZE}" height="{_SIZE}" '
            f'viewBox="0 0 {_SIZE} {_SIZE}" '
            f'data-angle-q="{self.state["angle_q"]:.6f}" '
            f'data-angle-k="{self.state["angle_k"]:.6f}" xmlns="http://www.w3.org/2000/svg">'
            f"<defs>{heads}</defs>"
            f'<circle cx="{c}" cy="{c}" r="{_R}" fill="none" stroke="#ccc"/>'
            f'<line x1="10" y1="{c}" x2="{_SIZE - 10}" y2="{c}" stroke="#eee"/>'
            f'<line x1="{c}" y1="10" x2="{c}" y2="{_SIZE - 10}" stroke="#eee"/>'
            + _arrow(q0x, q0y, _Q0, 2, dashed=True)
            + _arrow(kx, ky, _K, 6)
            + _arrow(qx, qy, _Q, 2.5)
            + labels
            + "</svg>"
        )

    def _unit_tips(self) -> list[tuple[float, float]]:
        """Tips of the unrotated query, the key and the query, scaled into the unit circle.

        The longer of the two pairs reaches the circle; a pair shorter than
        ``_MIN_LENGTH`` of the radius is drawn at that length, so that its arrow stays
        visible at every angle (the readout has the exact values).
        """
        q0 = self._pair(self.q, self.state["pair"])
        scale = max(math.hypot(*q0), math.hypot(*self.state["k_pair"]), 1e-12)

        def tip(v):
            length = math.hypot(*v) / scale
            stretch = max(length, _MIN_LENGTH) / max(length, 1e-12)
            return (v[0] / scale * stretch, v[1] / scale * stretch)

        return [tip(q0), tip(self.state["k_pair"]), tip(self.state["q_pair"])]

    def label_boxes(self) -> list[tuple[str, float, float, float, float]]:
        """``(text, left, top, right, bottom)`` of the three labels, in pixels."""
        texts = ("q (m=0)", f"k@{self.state['n']}", f"q@{self.state['m']}")
        return _label_boxes([(x, y, t) for (x, y), t in zip(self._unit_tips(), texts)])

    def _ipython_display_(self):  # pragma: no cover - display only
        from IPython.display import display

        display(self.widget)
