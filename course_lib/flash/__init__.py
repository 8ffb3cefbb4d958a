r"""FlashAttention: exact attention computed tile by tile, with O(N) extra memory.

Naive attention materialises the :math:`N \times N` matrices :math:`S = QK^\top` and
:math:`P = \mathrm{softmax}(S)`. FlashAttention (Dao et al., 2022, "FlashAttention: Fast and
Memory-Efficient Exact Attention with IO-Awareness") never does: it walks over tiles of
keys and keeps, per query row, a running maximum :math:`m`, a running denominator
:math:`\ell` and an unnormalised output :math:`A` (the *online softmax* of Milakov &
Gimelshein, 2018, "Online normalizer calculation for softmax"):

.. math::

    m' = \max(m, \max_j S_{ij}),\quad
    \ell' = e^{m - m'}\,\ell + \sum_j e^{S_{ij} - m'},\quad
    A' = e^{m - m'}\,A + \sum_j e^{S_{ij} - m'}\,V_j,

and at the end :math:`O = A/\ell`, :math:`L = m + \log\ell` (the log-sum-exp, saved so
the backward pass can recompute :math:`P = e^{S - L}` instead of storing it).

Three implementations of the same algorithm:

* :func:`flash_attention_reference`: the tiled loop in plain torch, any device and dtype,
  returns ``(output, lse)``, with a backward that recomputes the tiles from the saved
  log-sum-exp (so autograd never holds more than one tile of scores either): the algorithm
  to read.
* :func:`flash_attention`: Triton kernels (forward, and a backward in three kernels, or two
  with ``deterministic=False``) behind a ``torch.autograd.Function``: the algorithm to run.
  On a CUDA GPU the kernels are compiled; on a CPU they run in Triton's interpreter
  (``TRITON_INTERPRET=1``, set by ``course_lib.env.setup()``), slowly but exactly.
* :func:`flash_decode`: the forward for a few queries against a long key/value cache, with
  the keys split over programs and the partial results merged by their log-sum-exps.

**Conventions** (and where other libraries differ):

====================  ============================  ==============================  ===============================  ===============================
                      course_lib (this module)      torch SDPA                      flash-attn (``flash_attn_func``)  Triton's fused-attention tutorial
====================  ============================  ==============================  ===============================  ===============================
layout                ``[B, H, N, d_h]``;           ``[B, H, N, d_h]``              ``[B, N, H, d_h]``               ``[B, H, N, d_h]``
                      ``layout="bnhd"`` for
                      flash-attn's
causal alignment      top-left (``is_causal``);     top-left (``is_causal``);       bottom-right                     top-left, and only
                      ``causal_alignment=``         bottom-right through            (query :math:`i` sees keys up     :math:`N_q = N_k`
                      ``"bottom_right"``            ``causal_lower_right``          to :math:`i + N_k - N_q`)
grouped-query (GQA)   k, v with :math:`H_{kv}`       ``enable_gqa=True``             :math:`H_{kv}` heads accepted     no
                      heads, :math:`H_{kv} \mid H`
sliding window        ``window=W``: keys            a boolean ``attn_mask``         ``window_size=(W - 1, 0)``        no
                      :math:`i + \delta - W + 1 ..`
                      :math:`i + \delta`
scale default         :math:`1/\sqrt{d_h}`          :math:`1/\sqrt{d_h}`            :math:`1/\sqrt{d_h}`              none (``sm_scale`` required)
log-sum-exp           ``flash_attention_with_lse``  not returned                    ``return_attn_probs=True``:       kept internally (``M``), base 2
                      ``[B, H, N_q]``, natural log                                  ``[B, H, N_q]``, natural log
====================  ============================  ==============================  ===============================  ===============================

Both alignments are correct by their own definitions and agree when :math:`N_q = N_k`; they
differ for a KV cache or chunked prefill (:math:`N_q < N_k`), where bottom-right is what
one wants (the new queries come last). A query that sees no key at all (bottom-right with
:math:`N_q > N_k`) gets zero output and :math:`L = -\infty`, like a fully masked row in
chapter 02.

**Where things are** (one pass in two files, as Triton's fused-attention tutorial reads:
the kernel, then its launcher with every argument by name and the autograd function; this
file only hands the public names on):

* :mod:`.forward` with ``kernels/forward.py``: the forward's launcher, the autograd
  function, :func:`flash_attention`; the forward kernel;
* :mod:`.backward` with ``kernels/backward.py``: the backward's launcher; its three kernels;
* :mod:`.decode` with ``kernels/decode.py``: :func:`flash_decode`; the split-key kernels;
* ``kernels/common.py``: masked loads and stores, the tile classes, inlined into each kernel;
* :mod:`.tiles`: the tiles as data, one table per architecture (:class:`~.tiles.Tile`,
  :data:`~.tiles.GPU_TILES`), and :func:`kernel_config`, which picks a call's candidates;
* :mod:`.launch`: what the launchers share: Triton's mode, the GPU, the kernels' arguments
  by name, autotuning (:func:`~.launch.run_kernel`, :func:`~.launch.autotuners`), the TMA
  switch;
* :mod:`.inputs`: the checks every call makes once (layout, heads, masks, dtypes);
* :mod:`.reference`: the tiled algorithm in torch, and the tile classes;
* :mod:`.aot` (ahead-of-time compilation for sm_80/sm_90) and :mod:`.bench` (benchmarks).
"""

from __future__ import annotations

from .decode import DECODE_MAX_ROWS, decode_splits, flash_decode
from .forward import FlashAttentionFunction, flash_attention, flash_attention_with_lse
from .inputs import ALIGNMENTS, LAYOUTS, SUPPORTED_HEAD_DIMS
from .launch import kernel_source, triton_mode
from .reference import flash_attention_reference, kernel_tile_map, key_tile_range
from .tiles import kernel_config

__all__ = [
    "ALIGNMENTS",
    "DECODE_MAX_ROWS",
    "FlashAttentionFunction",
    "LAYOUTS",
    "SUPPORTED_HEAD_DIMS",
    "decode_splits",
    "flash_attention",
    "flash_attention_reference",
    "flash_attention_with_lse",
    "flash_decode",
    "kernel_config",
    "kernel_source",
    "kernel_tile_map",
    "key_tile_range",
    "triton_mode",
]
