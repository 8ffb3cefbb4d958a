"""course_lib.widgets.rope: the RoPE explorer, driven from code; its angles and scores are
course_lib.positional's, and its drawing keeps every label readable."""

from __future__ import annotations

import math
import re

import pytest
import torch

from course_lib.positional import apply_rope, rope_frequencies

pytest.importorskip("ipywidgets")

from course_lib.widgets import rope as rope_widget  # noqa: E402
from course_lib.widgets.rope import RopeExplorer  # noqa: E402


def test_rope_explorer_runs_headless_and_shows_the_relative_property():
    ex = RopeExplorer(d=16, max_position=64)
    assert "rope-explorer" in ex.widget._dom_classes
    assert "position" in ex.query_position.description
    before, updates = ex.drawing.value, ex.n_updates
    ex.query_position.value, ex.key_position.value = 9, 4
    assert ex.n_updates == updates + 2 and ex.drawing.value != before
    s1 = dict(ex.state)
    ex.query_position.value, ex.key_position.value = 50, 45
    s2 = dict(ex.state)
    assert s1["offset"] == s2["offset"] == 5
    assert s2["score"] == pytest.approx(s1["score"], abs=1e-9)
    assert s2["angle_between"] == pytest.approx(s1["angle_between"], abs=1e-9)
    assert s2["angle_q"] != pytest.approx(s1["angle_q"], abs=1e-3)
    # the query pair turns by theta_i per position
    ex.pair.value = 1
    a0 = ex.state["angle_q"]
    ex.query_position.value += 1
    turn = math.remainder(ex.state["angle_q"] - a0, 2 * math.pi)
    assert turn == pytest.approx(ex.state["theta"], abs=1e-9)


def test_rope_explorer_labels_stay_inside_and_apart_and_the_key_stays_visible():
    """Issue 18: no label cut at an edge, no two labels on top of each other (also when
    arrows coincide, e.g. the query at m = 0 on its unrotated copy), and the key's arrow
    visible at every angle (drawn under the query's, wider, and never shorter than 35%
    of the radius)."""
    ex = rope_widget.RopeExplorer(d=16, max_position=64)
    size = rope_widget._SIZE
    checked = 0
    for i in range(8):
        for m in range(0, 65, 4):
            for n in (0, 5, 33, 64):
                ex.pair.value, ex.query_position.value, ex.key_position.value = i, m, n
                boxes = ex.label_boxes()
                for text, left, top, right, bottom in boxes:
                    assert 0 <= left and right <= size and 0 <= top and bottom <= size, text
                for a in range(3):
                    for b in range(a + 1, 3):
                        assert not rope_widget._overlap(boxes[a], boxes[b]), (i, m, n, boxes)
                tips = ex._unit_tips()
                assert min(math.hypot(*t) for t in tips) >= rope_widget._MIN_LENGTH - 1e-12
                checked += 1
    assert checked == 8 * 17 * 4
    svg = ex.svg()
    widths = [float(w) for w in re.findall(r'stroke-width="([0-9.]+)"', svg)]
    key_at = svg.index(f'stroke="{rope_widget._K}"')
    assert key_at < svg.index(f'stroke="{rope_widget._Q}"')  # the key first, the query on top
    assert widths[1] > widths[2]  # ...and the key wider: both show when they coincide
    assert svg.count('class="rope-label"') == 3 and 'viewBox="0 0 300 300"' in svg


@pytest.mark.parametrize("interleaved", [True, False])
def test_the_state_is_the_librarys_rotation(interleaved):
    ex = RopeExplorer(d=8, base=100.0, seed=2, interleaved=interleaved)
    ex.query_position.value, ex.key_position.value, ex.pair.value = 7, 3, 2
    qm = apply_rope(ex.q[None], torch.tensor([7]), base=100.0, interleaved=interleaved)[0]
    kn = apply_rope(ex.k[None], torch.tensor([3]), base=100.0, interleaved=interleaved)[0]
    a, b = (4, 5) if interleaved else (2, 6)  # pair 2 of d = 8
    st = ex.state
    assert st["q_pair"] == pytest.approx((qm[a].item(), qm[b].item()))
    assert st["k_pair"] == pytest.approx((kn[a].item(), kn[b].item()))
    assert st["score"] == pytest.approx((qm @ kn).item())
    assert st["pair_score"] == pytest.approx(
        qm[a].item() * kn[a].item() + qm[b].item() * kn[b].item()
    )
    assert st["theta"] == pytest.approx(rope_frequencies(8, 100.0)[2].item())
    assert st["angle_q"] == pytest.approx(math.atan2(qm[b].item(), qm[a].item()))
    assert (st["m"], st["n"], st["pair"], st["offset"]) == (7, 3, 2, 4)
    # the score of this pair is |q||k| cos(angle between)
    norms = math.hypot(*st["q_pair"]) * math.hypot(*st["k_pair"])
    assert st["pair_score"] == pytest.approx(norms * math.cos(st["angle_between"]))
    assert f"{st['score']:.4f}" in ex.readout.value and "m − n = 4" in ex.readout.value
    assert f'data-angle-q="{st["angle_q"]:.6f}"' in ex.drawing.value


def test_the_sliders_span_the_positions_and_pairs():
    ex = RopeExplorer(d=12, max_position=20)
    assert (ex.query_position.max, ex.key_position.max, ex.pair.max) == (20, 20, 5)
    assert ex.state["angle_between"] == pytest.approx(
        math.remainder(ex.state["angle_q"] - ex.state["angle_k"], 2 * math.pi)
    )
    assert -math.pi <= ex.state["angle_between"] <= math.pi
