"""Chapter 07's head explorer: chapter 02's attention explorer, pointed at a trained GPT.

Pick a text, a layer, a head and a query position; see where that head looks. The picture
is chapter 02's (:mod:`course_lib.widgets.explorer`: bars of the query's row beside the
heatmap of every row); the weights come from :class:`course_lib.gpt.GPT` with
``need_weights=True``. The widget only chooses inputs and draws.

For browser tests, the parts carry CSS classes:

=========================  ================  =====================================
CSS class                  widget            description
=========================  ================  =====================================
``head-explorer``          VBox              the whole explorer
``head-explorer-text``     Dropdown          "text"
``head-explorer-typed``    Text              "or type" (any text; Enter)
``head-explorer-layer``    ToggleButtons     "layer"
``head-explorer-head``     ToggleButtons     "head"
``head-explorer-query``    Dropdown          "query" (options "12: s", ...)
``head-explorer-summary``  HTML              one line: the query's top keys
``head-explorer-plot``     Image (PNG)       bars of the query row + heatmap
=========================  ================  =====================================
"""

from __future__ import annotations

import html

import numpy as np
import torch

from .explorer import _render_png

__all__ = ["HeadExplorer", "head_weights"]


def head_weights(model, tokenizer, text: str) -> tuple[list[str], torch.Tensor]:
    """Token labels of ``text`` and every head's weights ``[L, H, N, N]`` for it."""
    ids = tokenizer.encode(text)[None, :]  # (1, N)
    if ids.shape[1] < 2:
        raise ValueError("give at least two characters")
    was_training = model.training
    model.eval()
    with torch.no_grad():
        _, weights = model(ids, need_weights=True)  # L x (1, H, N, N)
    model.train(was_training)
    return tokenizer.show(ids[0]), torch.stack([w[0] for w in weights])  # (L, H, N, N)


class HeadExplorer:
    """Widgets to see where each head of a :class:`~course_lib.gpt.GPT` attends.

    ``texts`` are the choices of the text dropdown (the first is shown first); ``query``
    the position selected at start (default: the last). Display with
    ``display(explorer.widget)`` or by ending a cell with the explorer.
    """

    def __init__(
        self,
        model,
        tokenizer,
        texts: list[str],
        *,
        layer: int | None = None,
        head: int = 0,
        query: int | None = None,
    ):
        import ipywidgets as w

        if not texts:
            raise ValueError("give at least one text")
        self.model, self.tokenizer = model, tokenizer
        self.draws = 0
        self._quiet = False
        self._default_query = query
        cfg = model.config
        self._cache: dict[str, tuple[list[str], torch.Tensor]] = {}

        self.text = w.Dropdown(
            options=list(texts), description="text", layout=w.Layout(width="640px")
        )
        self.typed = w.Text(
            value="",
            description="or type",
            continuous_update=False,
            placeholder="any text, then Enter",
            layout=w.Layout(width="640px"),
        )
        layers = [str(i) for i in range(cfg.num_layers)]
        self.layer = w.ToggleButtons(
            options=layers,
            value=layers[-1] if layer is None else str(layer),
            description="layer",
            style={"button_width": "40px"},
        )
        self.head = w.ToggleButtons(
            options=[str(i) for i in range(cfg.num_heads)],
            value=str(head),
            description="head",
            style={"button_width": "40px"},
        )
        self.query = w.Dropdown(options=[], description="query")
        self.summary = w.HTML()
        self.plot = w.Image(format="png")
        for part, name in (
            (self.text, "text"),
            (self.typed, "typed"),
            (self.layer, "layer"),
            (self.head, "head"),
            (self.query, "query"),
            (self.summary, "summary"),
            (self.plot, "plot"),
        ):
            part.add_class(f"head-explorer-{name}")
        self.widget = w.VBox(
            [
                self.text,
                self.typed,
                w.HBox([self.layer, self.head]),
                self.query,
                self.summary,
                self.plot,
            ]
        )
        self.widget.add_class("head-explorer")

        self._set_query_options()
        self.text.observe(self._on_text, names="value")
        self.typed.observe(self._on_typed, names="value")
        for part in (self.layer, self.head, self.query):
            part.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    # ---------------------------------------------------------------- state

    def _weights(self, text: str) -> tuple[list[str], torch.Tensor]:
        if text not in self._cache:
            self._cache[text] = head_weights(self.model, self.tokenizer, text)
        return self._cache[text]

    def current(self) -> tuple[list[str], np.ndarray]:
        """Token labels and the selected head's weights ``[N, N]``."""
        labels, weights = self._weights(self.text.value)
        return labels, weights[int(self.layer.value), int(self.head.value)].numpy()

    def row(self) -> np.ndarray:
        """The selected query's weights over the keys ``[N]``."""
        return self.current()[1][self.query.value]

    # ---------------------------------------------------------------- callbacks

    def _set_query_options(self) -> None:
        labels, _ = self._weights(self.text.value)
        options = [(f"{i}: {t}", i) for i, t in enumerate(labels)]
        keep = self._default_query if self._default_query is not None else len(labels) - 1
        self._quiet = True  # one redraw for the whole change
        try:
            self.query.options = options
            self.query.value = min(max(int(keep), 0), len(labels) - 1)
        finally:
            self._quiet = False

    def _on_text(self, _change) -> None:
        self._set_query_options()
        self.redraw()

    def _on_typed(self, change) -> None:
        text = str(change["new"])
        if not text.strip():
            return
        try:
            self._weights(text)
        except ValueError as err:
            self.summary.value = (
                f"<span style='color:#b00'>cannot use that text: {html.escape(str(err))}</span>"
            )
            return
        if text not in self.text.options:
            self.text.options = [*self.text.options, text]
        self.text.value = text

    def redraw(self) -> None:
        """Recompute the selected head's weights and redraw."""
        if self._quiet or self.query.value is None:
            return
        labels, weights = self.current()
        q = int(self.query.value)
        row = weights[q]  # (N,)
        top = np.argsort(-row)[:3]
        parts = ", ".join(f"{j} '{html.escape(labels[j])}' {row[j]:.2f}" for j in top)
        self.summary.value = (
            f"layer {self.layer.value}, head {self.head.value}: query {q} "
            f"'{html.escape(labels[q])}' → {parts}"
        )
        title = f"layer {self.layer.value}, head {self.head.value}"
        self.plot.value = _render_png(labels, weights, q, title)
        self.draws += 1

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
