"""Chapter 02's interactive attention explorer: pick a sentence and a query token, see where
it looks.

Thin over :mod:`course_lib.experiments.coref` and :mod:`course_lib.attention`: the weights come from
:func:`attention_maps`, the widgets only choose the inputs and draw. The drawing is a
PNG rendered by matplotlib's Agg backend into an ``ipywidgets.Image``, so it works headless
and offline (no JavaScript from a CDN).

For browser tests, the parts carry CSS classes and stable descriptions:

=============================  =====================  ===============================
CSS class                      widget                 description / role
=============================  =====================  ===============================
``attention-explorer``         VBox                   the whole explorer
``attention-explorer-model``   Dropdown               "model"
``attention-explorer-sentence`` Dropdown              "sentence"
``attention-explorer-text``    Text                   "or type" (words of the vocabulary)
``attention-explorer-query``   Dropdown               "query" (options "8: it", ...)
``attention-explorer-layer``   ToggleButtons          layers "1", "2", ... (one row, label "layer")
``attention-explorer-causal``  Checkbox               "causal mask"
``attention-explorer-scale``   Checkbox               "scale by 1/√d"
``attention-explorer-summary`` HTML                   one line: the query's top keys
``attention-explorer-plot``    Image (PNG)            bars of the query row + heatmap
=============================  =====================  ===============================

Every redraw increments :attr:`AttentionExplorer.draws` and replaces the PNG bytes.
"""

from __future__ import annotations

import html

import numpy as np
import torch

from ..experiments.coref import CorefAttention, Vocab
from .render import figure_png

__all__ = ["AttentionExplorer", "attention_maps"]


def attention_maps(
    model: CorefAttention, vocab: Vocab, sentence: str, *, causal: bool = False, scaled: bool = True
) -> tuple[list[str], list[np.ndarray]]:
    """Tokens of ``sentence`` and the attention weights ``[N, N]`` of every layer.

    ``scaled=False`` uses scale 1 instead of :math:`1/\\sqrt{d}` (to see the softmax
    sharpen); ``causal=True`` applies the top-left causal mask.
    """
    ids = vocab.encode(sentence)
    if len(ids) > model.pos.num_embeddings:
        raise ValueError(
            f"the model knows positions up to {model.pos.num_embeddings}, the "
            f"sentence has {len(ids)} words"
        )
    tokens = torch.tensor([ids])  # (1, N)
    with torch.no_grad():
        maps = model(tokens, is_causal=causal, scale=None if scaled else 1.0)  # L x (1, N, N)
    return vocab.decode(ids), [w[0].numpy() for w in maps]


def _render_png(tokens: list[str], weights: np.ndarray, query: int, title: str) -> bytes:
    from matplotlib.figure import Figure

    n = len(tokens)
    fig = Figure(figsize=(10, 3.8), dpi=90)
    ax_bar, ax_map = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    row = weights[query]  # (N,)
    colors = ["tab:orange" if j == int(np.argmax(row)) else "tab:blue" for j in range(n)]
    ax_bar.bar(range(n), row, color=colors)
    ax_bar.set_xticks(range(n), tokens, rotation=60, ha="right", fontsize=8)
    ax_bar.set_ylim(0, 1)
    ax_bar.set_xlabel("key")
    ax_bar.set_ylabel("weight")
    ax_bar.set_title(f"query {query}: '{tokens[query]}' attends to…", fontsize=10)
    im = ax_map.imshow(weights, vmin=0, vmax=1, cmap="viridis")
    ax_map.set_xticks(range(n), tokens, rotation=60, ha="right", fontsize=7)
    ax_map.set_yticks(range(n), tokens, fontsize=7)
    ax_map.axhline(query - 0.5, color="tab:orange", lw=1.5)
    ax_map.axhline(query + 0.5, color="tab:orange", lw=1.5)
    ax_map.set_xlabel("key")
    ax_map.set_ylabel("query")
    ax_map.grid(False)
    ax_map.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax_map, fraction=0.046)
    # fixed margins: tight_layout would draw the figure once more just to measure it
    fig.subplots_adjust(left=0.06, right=0.97, bottom=0.27, top=0.91, wspace=0.18)
    return figure_png(fig)


class AttentionExplorer:
    """Widgets to explore the attention of :class:`~course_lib.experiments.coref.CorefAttention` models.

    ``models`` maps a name ("trained", "untrained", ...) to a model sharing ``vocab``;
    ``sentences`` are the choices of the sentence dropdown. Display it with
    ``display(explorer.widget)`` (or just put the explorer last in a cell).
    """

    def __init__(
        self,
        models: dict[str, CorefAttention],
        vocab: Vocab,
        sentences: list[str],
        *,
        query: str = "it",
    ):
        import ipywidgets as w

        if not models:
            raise ValueError("give at least one model")
        if not sentences:
            raise ValueError("give at least one sentence")
        self.models, self.vocab = dict(models), vocab
        self.draws = 0
        self._quiet = False
        self._summary_text = ""
        self._default_query = query
        num_layers = max(m.num_layers for m in self.models.values())
        self._make_controls(w, list(sentences), num_layers)
        self.widget = self._arrange(w)

        self._set_query_options()
        self.sentence.observe(self._on_sentence, names="value")
        self.text.observe(self._on_text, names="value")
        for part in (self.model, self.query, self.layer, self.causal, self.scaled):
            part.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def _make_controls(self, w, sentences: list[str], num_layers: int) -> None:
        """The controls, the summary line and the plot, each with its CSS class (the
        browser tests find them by it: the table at the top of this module)."""
        self.model = w.Dropdown(options=list(self.models), description="model")
        self.sentence = w.Dropdown(
            options=sentences, description="sentence", layout=w.Layout(width="560px")
        )
        self.text = w.Text(
            value="",
            description="or type",
            continuous_update=False,
            placeholder="a sentence using the vocabulary, then Enter",
            layout=w.Layout(width="560px"),
        )
        self.query = w.Dropdown(options=[], description="query")
        # no `description`: ToggleButtons puts it above its buttons when space is short; a
        # Label beside them keeps "layer 1 2" on one line
        self.layer = w.ToggleButtons(
            options=[str(i + 1) for i in range(num_layers)],
            value=str(num_layers),
            tooltips=[f"layer {i + 1}" for i in range(num_layers)],
            style={"button_width": "40px"},
            layout=w.Layout(width="auto", flex="0 0 auto"),
        )
        self.causal = w.Checkbox(value=False, description="causal mask")
        self.scaled = w.Checkbox(value=True, description="scale by 1/√d")
        self.summary = w.HTML()
        self.plot = w.Image(format="png")
        for part, name in (
            (self.model, "model"),
            (self.sentence, "sentence"),
            (self.text, "text"),
            (self.query, "query"),
            (self.layer, "layer"),
            (self.causal, "causal"),
            (self.scaled, "scale"),
            (self.summary, "summary"),
            (self.plot, "plot"),
        ):
            part.add_class(f"attention-explorer-{name}")

    def _arrange(self, w):
        """The controls in rows, the summary and the plot below them."""
        box = w.VBox(
            [
                w.HBox(
                    [
                        self.model,
                        w.Label("layer", layout=w.Layout(margin="0 4px 0 16px")),
                        self.layer,
                    ],
                    layout=w.Layout(align_items="center", flex_flow="row nowrap"),
                ),
                self.sentence,
                self.text,
                w.HBox([self.query, self.causal, self.scaled]),
                self.summary,
                self.plot,
            ]
        )
        box.add_class("attention-explorer")
        return box

    # ---------------------------------------------------------------- state

    @property
    def tokens(self) -> list[str]:
        return self.sentence.value.split()

    def current(self) -> tuple[list[str], np.ndarray]:
        """Tokens and the weights ``[N, N]`` currently drawn."""
        tokens, maps = attention_maps(
            self.models[self.model.value],
            self.vocab,
            self.sentence.value,
            causal=self.causal.value,
            scaled=self.scaled.value,
        )
        layer = min(int(self.layer.value), len(maps)) - 1
        return tokens, maps[layer]

    @property
    def summary_text(self) -> str:
        """The summary line as plain text (the widget shows it as HTML)."""
        return self._summary_text

    def row(self) -> np.ndarray:
        """The selected query's weights over the keys ``[N]``."""
        return self.current()[1][self.query.value]

    # ---------------------------------------------------------------- callbacks

    def _set_query_options(self) -> None:
        toks = self.tokens
        options = [(f"{i}: {t}", i) for i, t in enumerate(toks)]
        # a new sentence starts at the pronoun (or the first token)
        keep = toks.index(self._default_query) if self._default_query in toks else 0
        self._quiet = True  # one redraw for the whole change, not one per trait
        try:
            self.query.options = options
            self.query.value = keep
        finally:
            self._quiet = False

    def _on_sentence(self, _change) -> None:
        self._set_query_options()
        self.redraw()

    def _on_text(self, change) -> None:
        text = " ".join(str(change["new"]).lower().split())
        if not text:
            return
        try:
            attention_maps(self.models[self.model.value], self.vocab, text)
        except (KeyError, ValueError) as err:
            msg = err.args[0] if err.args else str(err)
            self.summary.value = (
                f"<span style='color:#b00'>cannot use that sentence: {html.escape(str(msg))}</span>"
            )
            return
        if text not in self.sentence.options:
            self.sentence.options = [*self.sentence.options, text]
        self.sentence.value = text

    def redraw(self) -> None:
        """Recompute the weights and redraw the bars, the heatmap and the summary."""
        if self._quiet or self.query.value is None:
            return
        tokens, weights = self.current()
        q = int(self.query.value)
        row = weights[q]  # (N,)
        top = np.argsort(-row)[:3]
        parts = ", ".join(f"'{html.escape(tokens[j])}' {row[j]:.2f}" for j in top)
        mode = ("causal" if self.causal.value else "bidirectional") + (
            ", scaled" if self.scaled.value else ", unscaled"
        )
        self._summary_text = (
            f"{self.model.value} model, layer {self.layer.value} ({mode}): query {q} "
            f"'{tokens[q]}' → " + ", ".join(f"'{tokens[j]}' {row[j]:.2f}" for j in top)
        )
        self.summary.value = (
            f"<b>{html.escape(self.model.value)}</b> model, layer "
            f"{self.layer.value} ({mode}): query {q} "
            f"'{html.escape(tokens[q])}' → {parts}"
        )
        title = f"{self.model.value}, layer {self.layer.value}, {mode}"
        self.plot.value = _render_png(tokens, weights, q, title)
        self.draws += 1

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
