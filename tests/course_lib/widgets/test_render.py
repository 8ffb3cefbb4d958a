"""course_lib.widgets.render: a matplotlib figure drawn into PNG bytes, without pyplot."""

from __future__ import annotations

import struct

from course_lib.widgets.render import figure_png


def test_figure_png_is_a_png_of_the_figures_size():
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    open_before = plt.get_fignums()
    fig = Figure(figsize=(2.0, 1.5), dpi=50)
    fig.subplots().plot([0, 1], [1, 0])
    png = figure_png(fig)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (100, 75)  # width, height in pixels
    assert plt.get_fignums() == open_before  # no pyplot figure was opened


def test_figure_png_changes_with_what_is_drawn():
    from matplotlib.figure import Figure

    pictures = []
    for y in ([0, 1], [1, 0]):
        fig = Figure(figsize=(1, 1), dpi=40)
        fig.subplots().plot([0, 1], y)
        pictures.append(figure_png(fig))
    assert pictures[0] != pictures[1]
