r"""Chapter 08's cache comparison: MHA, GQA, MQA and MLA for one model shape.

Two sliders choose the context length :math:`N` and the number of sequences :math:`B`; the
table shows each kind of attention's cache, per token and in total. The numbers come from
:func:`course_lib.variants.mla.cache_bytes_per_token` (chapter 04's ``kv_cache_bytes`` for
MHA/GQA/MQA, :func:`course_lib.variants.mla.mla_cache_bytes` for MLA); the widget only multiplies by
:math:`N \times B` and writes the table. It runs headless: set the sliders from code and read
:attr:`CacheComparison.totals`.

For browser tests, the parts carry CSS classes ``cache-compare`` (the VBox),
``cache-compare-tokens``, ``cache-compare-batch`` (the sliders) and ``cache-compare-result``
(the HTML table).
"""

from __future__ import annotations

from ..variants.mla import MLAConfig, cache_bytes_per_token

__all__ = ["CacheComparison"]

GiB = 1024**3


class CacheComparison:
    """Sliders over context length and batch; a table of cache sizes for ``config``.

    ``gqa_kv_heads`` is the number of key/value heads of the GQA row (8 by default).
    """

    def __init__(
        self,
        config: MLAConfig,
        *,
        gqa_kv_heads: int = 8,
        bytes_per_value: int = 2,
        seq_len: int = 32768,
        max_batch: int = 64,
    ) -> None:
        import ipywidgets as w

        lengths = [("1k", 1024), ("4k", 4096), ("32k", 32768), ("128k", 131072)]
        if seq_len not in dict(lengths).values():
            raise ValueError(f"seq_len={seq_len} is not one of {[n for _, n in lengths]}")
        self.config, self.gqa_kv_heads = config, int(gqa_kv_heads)
        self.per_token = cache_bytes_per_token(
            config, gqa_kv_heads=gqa_kv_heads, bytes_per_value=bytes_per_value
        )
        self.updates = 0
        self.tokens = w.SelectionSlider(options=lengths, value=seq_len, description="tokens")
        self.batch = w.IntSlider(value=1, min=1, max=int(max_batch), description="sequences")
        self.result = w.HTML()
        for part, name in ((self.tokens, "tokens"), (self.batch, "batch"), (self.result, "result")):
            part.add_class(f"cache-compare-{name}")
            if name != "result":
                part.observe(lambda _change: self.update(), names="value")
        self.widget = w.VBox([self.tokens, self.batch, self.result])
        self.widget.add_class("cache-compare")
        self.update()

    @property
    def totals(self) -> dict[str, int]:
        """Bytes of each kind's cache for the current sliders."""
        n = int(self.tokens.value) * int(self.batch.value)
        return {kind: per * n for kind, per in self.per_token.items()}

    def update(self) -> None:
        """Recompute and rewrite the table."""
        c = self.config
        labels = {
            "MHA": f"MHA ({c.num_heads} KV heads)",
            "GQA": f"GQA ({self.gqa_kv_heads} KV heads)",
            "MQA": "MQA (1 KV head)",
            "MLA": f"MLA (d_c + d_h^R = {c.kv_latent_dim + c.rope_head_dim})",
        }
        rows = "".join(
            f"<tr><td>{labels[k]}</td><td style='text-align:right'>{self.per_token[k] / 1024:,.1f}"
            f" KiB</td><td style='text-align:right'><b>{total / GiB:,.2f} GiB</b></td></tr>"
            for k, total in self.totals.items()
        )
        self.result.value = (
            f"<table><tr><th>attention</th><th>per token</th><th>cache</th></tr>{rows}</table>"
        )
        self.updates += 1
