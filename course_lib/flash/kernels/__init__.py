r"""The Triton kernels of FlashAttention: forward, backward, and a split-key decode path.

One module per pass (``forward.py``, ``backward.py``, ``decode.py``, and ``common.py`` for
the helpers they share); each pass's launcher (``course_lib/flash/forward.py``, ...) imports
its kernel from there by name. Importing this package decorates every kernel at once, in the
mode :func:`course_lib.flash.launch.load_kernels` chose first (Triton reads
``TRITON_INTERPRET`` when ``@triton.jit`` decorates a kernel), so it is imported lazily.

Tensors are addressed through three strides, batch ``b``, head ``h`` and token ``n`` (the
last dimension, the features, is contiguous), so one kernel reads the course's
``[B, H, N, d_h]`` layout and flash-attn's ``[B, N, H, d_h]`` alike, without a copy.

Notation, for one (batch, head) pair: :math:`S = \text{scale}\cdot QK^\top`,
:math:`P = \mathrm{softmax}(S)` row by row over the keys a query may see, :math:`O = PV`, and
the log-sum-exp :math:`L_i = \log\sum_j e^{S_{ij}}` so that :math:`P_{ij} = e^{S_{ij} - L_i}`.

**Which keys a query sees.** Query :math:`i` sits at position :math:`i + \delta` of the key
sequence, with the *diagonal offset* :math:`\delta = 0` for top-left alignment (torch SDPA's
``is_causal``) and :math:`\delta = N_k - N_q` for bottom-right alignment (flash-attn's causal,
what a KV cache needs: the last query sees every key). Causal: key :math:`j` is visible when
:math:`j \le i + \delta`. A sliding window of :math:`W` keys adds :math:`j \ge i + \delta - W + 1`.

**What makes them fast** (each trick is also explained in chapter 06):

* *Tile classes.* For a tile of queries, the key tiles fall into three classes: skipped
  (no query of the tile sees any of their keys: never loaded), **full** (every query sees
  every key: no mask is built at all) and **partial** (crossing the causal diagonal, the
  window's edge or the end of the sequence: the element-wise mask is applied).
  :func:`.common._key_range` computes the classes' boundaries once per program, and each kernel
  runs two loops: the full tiles with no mask in the loop body, then the partial tiles of
  both edges (a window's left edge, the diagonal) in one loop with the mask, a compile-time
  switch (``MASKED``). The online softmax does not care about the order of the tiles, and
  two loops keep fewer registers alive than three. Only a couple of tiles per row of tiles
  are partial, so almost every tile runs the unmasked body: fewer instructions per tile, and
  no ``-inf`` handling.
* *The even fast path.* ``EVEN_M``/``EVEN_N``/``EVEN_D`` are compile-time flags that say the
  lengths are multiples of the tile sizes (and ``d_h`` a power of two): loads and stores then
  carry no bounds masks. They are set per launch from the actual lengths (Triton compiles
  one variant for each combination it meets).
* *Heaviest first.* With a causal mask the last query tiles see the most keys. Programs are
  numbered so that, within each (batch, head), those start first; the last programs to start
  are the cheapest, so the final wave of the GPU ends nearly together instead of waiting on
  one long program.
* *Register-safe tile sizes* (the table of :mod:`course_lib.flash.tiles`): checked with
  ``ptxas`` for sm_80 and sm_90 (``python -m course_lib.flash.aot``); a tile that spills
  registers to local memory turns the on-chip loop into a memory-bound one. On a GPU the
  autotuner picks among them once per *bucket* of lengths (the next power of two), not per
  exact length, so a new length does not re-tune.
* *Base 2.* ``exp2`` is what the GPU's special-function unit computes:
  :math:`e^{x} = 2^{x\log_2 e}`, so scores are multiplied by :math:`\text{scale}\cdot\log_2 e`
  (fused with the max subtraction into one multiply-add, ``tl.fma``). The forward stores
  its log-sum-exp in the same units, :math:`L_2 = m + \log_2 \ell`, which the backward
  uses as it is; ``flash_attention_with_lse`` returns :math:`L_2 \ln 2`, and the decode
  kernels store natural logs for their merge.

**The backward.** FlashAttention-2 (Dao, 2023) computes :math:`dK, dV` *and* :math:`dQ` in one
pass, one program per key tile, adding each tile's :math:`dQ` contribution into a float32
buffer with atomic additions: five tile matmuls per tile. Triton's fused-attention tutorial
avoids atomics: a program computes :math:`dK, dV` for a key tile, then :math:`dQ` for a query
tile in a second loop that recomputes :math:`S` and :math:`dP`: seven matmuls per tile,
deterministic. The course does the same as the tutorial, in two kernels (after a small
*preprocess* kernel for :math:`D = \mathrm{rowsum}(dO\circ O)`): each kernel is one loop a
learner can read on its own, and the gradients are bit-for-bit reproducible (float32
atomics add in a different order on every run). The price is 7/5 of the matmul work.
``deterministic=False`` takes FlashAttention-2's way instead: the dK/dV kernel, compiled
with ``ATOMIC_DQ``, also adds each tile's :math:`dS K` into a float32 dQ buffer with
atomics (on sm_90 computed as :math:`(dQ)^\top = K^\top dS^\top`, tall enough for the
warpgroup MMA), and the dQ kernel is not launched.

**Grouped-query attention.** K and V have :math:`H_{kv}` heads, :math:`H = G\,H_{kv}`; query head
:math:`h` reads key/value head :math:`\lfloor h/G\rfloor` (no repeated K, V is materialised). The
:math:`dK, dV` program of a key/value head loops over its :math:`G` query heads, so the sum
over the group happens in registers.

**Decoding.** With a few queries against a long cache, one program per query tile would leave
almost every SM idle. :func:`.decode._decode_kernel` splits the *keys* over programs, each returning
a partial output and its log-sum-exp; :func:`.decode._decode_merge_kernel` combines them,
:math:`L = \log\sum_s e^{L_s}`, :math:`O = \sum_s e^{L_s - L} O_s` (flash-decoding). The
:math:`G` query heads of a key/value head are packed into one tile of rows, so each key is
read once per key/value head.

Two details that only matter once the kernels are compiled for a GPU (the interpreter hides
them): offsets of a (batch, head) pair are computed in int64, because ``B*H*N*d`` can exceed
:math:`2^{31}` elements; and every ``tl.dot`` gets ``input_precision=DOT_PRECISION`` ("ieee"
for float32 inputs), because a compiled ``tl.dot`` silently rounds float32 operands to TF32
while the interpreter multiplies in float32.

References: Dao et al. (2022), "FlashAttention: Fast and Memory-Efficient Exact Attention
with IO-Awareness"; Dao (2023), "FlashAttention-2: Faster Attention with Better
Parallelism and Work Partitioning"; Dao, Haziza, Massa and Sizov (2023), "Flash-Decoding for
long-context inference"; the fused-attention tutorial of the Triton project.
"""

from __future__ import annotations

from . import backward, common, decode, forward

__all__ = ["backward", "common", "decode", "forward", "is_interpreted"]


def is_interpreted() -> bool:
    """True when these kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1)."""
    return type(forward._fwd_kernel).__name__ == "InterpretedFunction"
