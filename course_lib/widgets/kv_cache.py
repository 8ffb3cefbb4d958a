r"""Chapter 04's KV-cache calculator: does cache plus weights fit on one accelerator?

Three sliders choose the number of key/value heads :math:`H_{kv}`, the context length
:math:`T` and the number of sequences decoded together :math:`B`; the model's other
dimensions (layers :math:`L`, head size :math:`d_h`, weight bytes) are fixed when the
calculator is built. The cache is

.. math:: \text{bytes} = 2 \times L \times H_{kv} \times d_h \times N \times B \times
          \text{bytes per value},

computed by :func:`course_lib.multihead.kv_cache_bytes`; the widget only chooses the inputs,
adds the weights and compares with the accelerator's memory, all in GiB (:math:`2^{30}`
bytes), the unit ``nvidia-smi`` and the cache arithmetic share (an "80 GB" H100 holds
79.6 GiB: :data:`course_lib.multihead.GPU_MEMORY_BYTES`). It also shows what one decoding
step reads (:func:`course_lib.multihead.decode_step_bytes`): the weights once plus every
sequence's cache. It runs headless (no drawing),
so a notebook can set the sliders from code and assert on :attr:`KVCacheCalculator.cache_bytes`
or the summary text.

For browser tests, the parts carry CSS classes:

==============================  ==================  ===============================
CSS class                       widget              role
==============================  ==================  ===============================
``kv-cache-calculator``         VBox                the whole calculator
``kv-cache-calculator-heads``   SelectionSlider     "KV heads"
``kv-cache-calculator-tokens``  SelectionSlider     "tokens"
``kv-cache-calculator-batch``   IntSlider           "sequences"
``kv-cache-calculator-result``  HTML                cache, total and the verdict
==============================  ==================  ===============================
"""

from __future__ import annotations

from ..multihead import GPU_MEMORY_BYTES, decode_step_bytes, kv_cache_bytes

__all__ = ["KVCacheCalculator"]

GiB = 1024**3


class KVCacheCalculator:
    """Sliders over :func:`~course_lib.multihead.kv_cache_bytes` for a fixed model shape.

    ``num_layers``, ``head_dim`` and ``weights_bytes`` describe the model (required: no
    model is assumed); ``memory_bytes`` is the accelerator's memory and ``memory_name`` its
    name (default: an H100 80GB, 81559 MiB as ``nvidia-smi`` reports it). Display with
    ``display(calculator.widget)``; every recomputation increments :attr:`updates`.
    """

    def __init__(
        self,
        *,
        num_layers: int,
        head_dim: int,
        weights_bytes: float,
        memory_bytes: float = GPU_MEMORY_BYTES["H100 80GB"],
        memory_name: str = "H100 80GB",
        bytes_per_value: int = 2,
        kv_head_choices: tuple[int, ...] = (1, 2, 4, 8, 16, 32),
        num_kv_heads: int = 8,
        seq_len: int = 8192,
        max_batch: int = 64,
    ) -> None:
        import ipywidgets as w

        if num_kv_heads not in kv_head_choices:
            raise ValueError(
                f"num_kv_heads={num_kv_heads} is not one of the choices {kv_head_choices}"
            )
        lengths = [("1k", 1024), ("4k", 4096), ("8k", 8192), ("32k", 32768), ("128k", 131072)]
        if seq_len not in dict(lengths).values():
            raise ValueError(f"seq_len={seq_len} is not one of {[n for _, n in lengths]}")
        if not weights_bytes >= 0 or not memory_bytes > 0:
            raise ValueError(
                f"expected weights_bytes >= 0 and memory_bytes > 0, got "
                f"{weights_bytes!r} and {memory_bytes!r}"
            )
        self.num_layers, self.head_dim = int(num_layers), int(head_dim)
        self.bytes_per_value = int(bytes_per_value)
        self.weights_bytes, self.memory_bytes = float(weights_bytes), float(memory_bytes)
        self.memory_name = str(memory_name)
        self.updates = 0

        self.heads = w.SelectionSlider(
            options=list(kv_head_choices), value=num_kv_heads, description="KV heads"
        )
        self.tokens = w.SelectionSlider(options=lengths, value=seq_len, description="tokens")
        self.batch = w.IntSlider(value=1, min=1, max=int(max_batch), description="sequences")
        self.result = w.HTML()
        for part, name in (
            (self.heads, "heads"),
            (self.tokens, "tokens"),
            (self.batch, "batch"),
            (self.result, "result"),
        ):
            part.add_class(f"kv-cache-calculator-{name}")
            if name != "result":
                part.observe(lambda _change: self.update(), names="value")
        self.widget = w.VBox([self.heads, self.tokens, self.batch, self.result])
        self.widget.add_class("kv-cache-calculator")
        self.update()

    # ---------------------------------------------------------------- state

    @property
    def cache_bytes(self) -> int:
        """Bytes of the KV cache for the current slider values."""
        return kv_cache_bytes(
            self.num_layers,
            int(self.heads.value),
            self.head_dim,
            int(self.tokens.value),
            batch_size=int(self.batch.value),
            bytes_per_value=self.bytes_per_value,
        )

    @property
    def total_bytes(self) -> float:
        """Cache plus weights."""
        return self.cache_bytes + self.weights_bytes

    @property
    def fits(self) -> bool:
        """Whether cache plus weights fit in ``memory_bytes``."""
        return self.total_bytes <= self.memory_bytes

    # ---------------------------------------------------------------- callback

    @property
    def step_bytes(self):
        """What one decoding step reads (:class:`~course_lib.multihead.DecodeBytes`)."""
        return decode_step_bytes(
            int(self.weights_bytes),
            self.num_layers,
            int(self.heads.value),
            self.head_dim,
            int(self.tokens.value),
            batch_size=int(self.batch.value),
            bytes_per_value=self.bytes_per_value,
        )

    def update(self) -> None:
        """Recompute and rewrite the result lines (every size in GiB)."""
        verdict = "fits" if self.fits else "does NOT fit"
        step = self.step_bytes
        self.result.value = (
            f"KV cache <b>{self.cache_bytes / GiB:.2f} GiB</b> + weights "
            f"{self.weights_bytes / GiB:.2f} GiB = {self.total_bytes / GiB:.2f} GiB: "
            f"<b>{verdict}</b> in the {self.memory_bytes / GiB:.2f} GiB of an "
            f"{self.memory_name}<br>one decoding step reads {step.total / GiB:.2f} GiB, "
            f"{step.cache_share:.0%} of it KV cache"
        )
        self.updates += 1
