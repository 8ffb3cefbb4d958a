r"""Fewer bytes per weight: the same GPT decoding from bfloat16, int8 or the GGUF file's 4-bit blocks.

Decoding one token reads every weight once (chapter 10), so at a fixed memory bandwidth the
tokens per second should follow the bytes per weight:

.. math:: \text{tokens/s} \le \frac{\text{bandwidth}}{\text{bytes per token}}, \qquad
          \text{bytes per token} \approx \sum_{\text{matrices}} n_\text{weights} \cdot
          \text{bytes per weight}.

The formats (:data:`FORMATS`), each a copy of a float32 :class:`~course_lib.gpt.model.GPT`:

* ``"float32"``: 4 bytes a weight, the model as loaded;
* ``"bfloat16"``: 2 bytes, every weight and activation rounded to bfloat16 (8 exponent bits,
  7 mantissa bits: float32's range, about 2-3 significant digits);
* ``"int8"``: about 1 byte. Each row :math:`r` of a matrix keeps one float scale
  :math:`s_r = \max_j |w_{rj}| / 127` and integers :math:`q_{rj} = \mathrm{round}(w_{rj} / s_r)`,
  so :math:`w_{rj} \approx s_r q_{rj}` and :math:`y_r = s_r \sum_j q_{rj} x_j`
  (:class:`Int8Linear`; activations in bfloat16);
* ``"q4_1"``: 0.625 bytes, the GGUF file's own Q4_1 blocks, not re-quantized: 32 weights share
  a scale :math:`d` and an offset :math:`m`, :math:`w_j = d\,q_j + m` with
  :math:`q_j \in \{0..15\}` (:class:`Int4Linear`); the tied read-out, Q8_0 in the file, as
  ``"int8"``.

The integer formats run PyTorch's weight-only CPU kernels (``torch._weight_int8pack_mm``,
``torch._weight_int4pack_mm_for_cpu``, the kernels behind torchao's and gpt-fast's CPU paths),
which read the small integers and widen them on the fly; each class also computes its
readable dequantized matrix (:meth:`Int8Linear.dequantized`), and the tests hold the kernel to
it. The float32 model is itself the file's 4-bit weights widened, so ``"q4_1"`` is exact up to
bfloat16 activations and the cost of a format is measured against float32 with
:func:`perplexity` and the largest logit difference (``benchmarks/real_models.py``).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .model import GPT

__all__ = [
    "FORMATS",
    "Int4Linear",
    "Int8Linear",
    "bytes_per_token",
    "perplexity",
    "q4_1_blocks",
    "quantized_copy",
]

FORMATS = ("float32", "bfloat16", "int8", "q4_1")
GROUP = 32  # weights per Q4_1 block


def _kernels_missing(name: str) -> RuntimeError:
    return RuntimeError(
        f"this PyTorch ({torch.__version__}) has no torch.{name}: the int8 and 4-bit formats "
        "need PyTorch >= 2.7 on a CPU"
    )


class Int8Linear(nn.Module):
    r"""A bias-free linear layer from int8 weights with one scale per output row.

    .. math:: y_r = s_r \sum_j q_{rj}\, x_j, \qquad q_{rj} = \mathrm{round}(w_{rj}/s_r),
              \quad s_r = \max_j |w_{rj}| / 127.
    """

    q: torch.Tensor  # (out, in) int8
    scale: torch.Tensor  # (out,) in the activations' dtype

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        w = weight.detach().float()  # (out, in)
        scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127  # (out,)
        q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)  # (out, in)
        self.register_buffer("q", q)
        self.register_buffer("scale", scale.to(dtype))
        self.in_features, self.out_features = w.shape[1], w.shape[0]

    def dequantized(self) -> torch.Tensor:
        """The matrix this layer multiplies by: :math:`s_r q_{rj}`, ``[out, in]`` float32."""
        return self.q.float() * self.scale.float()[:, None]  # (out, in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(torch, "_weight_int8pack_mm"):
            raise _kernels_missing("_weight_int8pack_mm")
        flat = x.reshape(-1, self.in_features).to(self.scale.dtype)  # (B*N, in)
        y = torch._weight_int8pack_mm(flat, self.q, self.scale)  # (B*N, out)
        return y.reshape(*x.shape[:-1], self.out_features)  # (B, N, out)


class Int4Linear(nn.Module):
    r"""A bias-free linear layer from 4-bit weights in blocks of 32 along each row (Q4_1).

    .. math:: w_{rj} = d_{rb}\, q_{rj} + m_{rb}, \qquad b = \lfloor j/32 \rfloor,
              \ q_{rj} \in \{0, \dots, 15\}.

    PyTorch's kernel reads :math:`(q - 8)\cdot\text{scale} + \text{zero}`, so it gets
    :math:`\text{scale} = d` and :math:`\text{zero} = m + 8d`: the same numbers.
    ``q [out, in]`` integers, ``d, m [out, in/32]``.
    """

    packed: torch.Tensor  # (out, in/2) uint8: two 4-bit numbers a byte, the kernel's layout
    scales_zeros: torch.Tensor  # (in/32, out, 2): d and m + 8d, in the activations' dtype
    _q: torch.Tensor  # (out, in) uint8: the integers, for dequantized()

    def __init__(
        self, q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, dtype=torch.bfloat16
    ) -> None:
        super().__init__()
        if not hasattr(torch, "_convert_weight_to_int4pack_for_cpu"):
            raise _kernels_missing("_convert_weight_to_int4pack_for_cpu")
        out_features, in_features = q.shape
        if in_features % GROUP or d.shape != (out_features, in_features // GROUP):
            raise ValueError(
                f"expected q [out, in] with in a multiple of {GROUP} and d, m [out, in/{GROUP}], "
                f"got q {tuple(q.shape)}, d {tuple(d.shape)}"
            )
        packed = torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)  # (out, in/2)
        zero = m.float() + 8 * d.float()  # (out, in/32)
        scales_zeros = torch.stack((d.float().T, zero.T), dim=-1)  # (in/32, out, 2)
        self.register_buffer("packed", packed)
        self.register_buffer("scales_zeros", scales_zeros.to(dtype).contiguous())
        self.register_buffer("_q", q.to(torch.uint8), persistent=False)  # for dequantized()
        self.in_features, self.out_features = in_features, out_features

    def dequantized(self) -> torch.Tensor:
        """:math:`d\\,q + m` with the kernel's rounded ``d`` and ``m``, ``[out, in]`` float32."""
        sz = self.scales_zeros.float()  # (in/32, out, 2)
        d, zero = sz[..., 0].T, sz[..., 1].T  # (out, in/32) each
        q = self._q.float().view(self.out_features, -1, GROUP)  # (out, in/32, 32)
        return ((q - 8) * d[..., None] + zero[..., None]).view(self.out_features, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(self.scales_zeros.dtype)  # (B*N, in)
        y = torch._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_zeros)
        return y.reshape(*x.shape[:-1], self.out_features)  # (B, N, out)

    def nbytes_read(self) -> int:
        """Bytes a product reads: the packed nibbles and the scales (not ``_q``)."""
        return _nbytes(self.packed) + _nbytes(self.scales_zeros)


def q4_1_blocks(raw: np.ndarray, rows: int, cols: int):
    r"""``(q [rows, cols] uint8, d, m [rows, cols/32] float32)`` of a Q4_1 tensor's bytes.

    A block is 20 bytes: :math:`d` and :math:`m` as float16, then 16 bytes whose low nibbles
    are weights 0-15 and high nibbles weights 16-31 (ggml's layout).
    """
    blocks = np.asarray(raw, dtype=np.uint8).reshape(rows, cols // GROUP, 20)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)  # (rows, cols/32)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)  # (rows, cols/32)
    nibbles = blocks[..., 4:]  # (rows, cols/32, 16)
    q = np.concatenate((nibbles & 0x0F, nibbles >> 4), axis=-1)  # (rows, cols/32, 32)
    return torch.from_numpy(q.reshape(rows, cols)), torch.from_numpy(d), torch.from_numpy(m)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def quantized_copy(model: GPT, fmt: str, gguf_tensors: dict | None = None) -> GPT:
    """A copy of the float32 ``model`` computing in format ``fmt`` (:data:`FORMATS`).

    ``"q4_1"`` needs ``gguf_tensors``: the file's tensors by name (``GGUFTensor``, from
    :func:`course_lib.gpt.gguf_checkpoint.read_gguf`); each block matrix is taken from them
    unchanged, through the GGUF weight table. The read-out (the tied embedding) becomes a
    separate int8 layer; the input embedding stays a table of which a token reads one row.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if fmt == "q4_1" and gguf_tensors is None:
        raise ValueError("fmt='q4_1' takes the matrices from the GGUF file: pass gguf_tensors")
    out = copy.deepcopy(model)
    if fmt == "float32":
        return out
    out = out.to(torch.bfloat16)  # every weight and activation; the norms compute in float32
    if fmt == "bfloat16":
        return out
    for path, linear in list(out.named_modules()):
        if isinstance(linear, nn.Linear):
            parent, _, name = path.rpartition(".")
            setattr(out.get_submodule(parent), name, Int8Linear(linear.weight))
    if fmt == "q4_1" and gguf_tensors is not None:
        _file_blocks(out, gguf_tensors)
    read_out = model.embed.weight if model.lm_head is None else model.lm_head.weight  # (V, d)
    out.lm_head = Int8Linear(read_out)  # type: ignore[assignment]  # a module all the same
    return out


def _file_blocks(model: GPT, tensors: dict) -> None:
    """Replace every block matrix of ``model`` by the GGUF file's own Q4_1 blocks."""
    from .gguf_checkpoint import GGUF_BLOCK, interleaved_to_half_rows

    cfg = model.config
    for i in range(cfg.num_layers):
        for gguf_name, course_name, how in GGUF_BLOCK:
            path = course_name.format(i=i).removesuffix(".weight")
            layer = model.get_submodule(path)
            if not isinstance(layer, Int8Linear):
                continue  # a norm
            t = tensors[gguf_name.format(i=i)]
            if getattr(t.tensor_type, "name", t.tensor_type) != "Q4_1":
                raise ValueError(f"{t.name} is {t.tensor_type!r}, not Q4_1: no 4-bit blocks to use")
            q, d, m = q4_1_blocks(t.data, layer.out_features, layer.in_features)
            if how == "rope_rows" and not cfg.rope_interleaved:  # the loader's row order
                heads = cfg.num_heads if "W_Q" in course_name else cfg.kv_heads
                q, d, m = (interleaved_to_half_rows(x, heads) for x in (q, d, m))
            parent, _, name = path.rpartition(".")
            setattr(model.get_submodule(parent), name, Int4Linear(q, d, m))


def bytes_per_token(model: GPT) -> int:
    """Bytes of weights one decoding step reads: every matrix, norm and the read-out once.

    The input embedding counts only where it is also the read-out (tied, float formats):
    otherwise a token reads one row of it.
    """
    total = 0
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if name == "embed.weight" and model.lm_head is not None:
            continue  # a table: one row per token
        if name.endswith("._q"):
            continue  # Int4Linear's readable copy, not read by the kernel
        total += _nbytes(t)
    return total


@torch.no_grad()
def perplexity(model: GPT, tokens: torch.Tensor) -> float:
    r""":math:`\exp\big(-\frac{1}{N-1}\sum_n \log p(t_{n+1} \mid t_{\le n})\big)` of ``tokens [1, N]``."""
    logits = model(tokens).float()  # (1, N, V)
    loss = F.cross_entropy(logits[0, :-1], tokens[0, 1:])  # mean over N-1 predictions
    return math.exp(float(loss))
