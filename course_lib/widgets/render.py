"""What every explorer shares: a matplotlib figure drawn into PNG bytes for an Image widget."""

from __future__ import annotations

import io


def figure_png(fig) -> bytes:
    """PNG bytes of a ``matplotlib.figure.Figure`` (no pyplot state, no display needed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
