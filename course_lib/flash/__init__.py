r"""FlashAttention: exact attention computed tile by tile, with O(N) extra memory.

Naive attention materialises the :math:`N \times N` matrices :math:`S = QK^\top` and
:math:`P = \mathrm{softmax}(S)`. FlashAttention (Dao et al., 2022, "FlashAttention: Fast and
Memory-Efficient Exact Attention with IO-Awareness") never does: it walks over blocks of
keys and keeps, per query row, a running maximum :math:`m`, a running denominator
:math:`\ell` and an unnormalised output :math:`A` (the *online softmax* of Milakov &
Gimelshein, 2018, "Online normalizer calculation for softmax"):

.. math::

    m' = \max(m, \max_j S_{ij}),\quad
    \ell' = e^{m - m'}\,\ell + \sum_j e^{S_{ij} - m'},\quad
    A' = e^{m - m'}\,A + \sum_j e^{S_{ij} - m'}\,V_j,

and at the end :math:`O = A/\ell`, :math:`L = m + \log\ell` (the log-sum-exp, saved so
the backward pass can recompute :math:`P = e^{S - L}` instead of storing it).

Two implementations, same algorithm:

* :func:`flash_attention_reference` — the tiled loop in plain torch, any device and dtype,
  returns ``(output, lse)``: the algorithm to read.
* :func:`flash_attention` — Triton kernels (forward, and a backward of three kernels) behind
  a ``torch.autograd.Function``: the algorithm to run. On a CUDA GPU the kernels are
  compiled; on a CPU they run in Triton's interpreter (``TRITON_INTERPRET=1``, set by
  ``course_lib.env.setup()``), slowly but exactly.

Conventions follow ``torch.nn.functional.scaled_dot_product_attention``: ``q [B, H, Nq, d]``,
``k, v [B, H, Nk, d]``; ``scale`` defaults to :math:`1/\sqrt{d}`; ``is_causal`` is aligned
top-left (query :math:`i` sees keys :math:`j \le i`).
"""

from __future__ import annotations

import importlib
import math
import os

import torch

from ..attention import _check_qkv

__all__ = [
    "SUPPORTED_HEAD_DIMS",
    "flash_attention",
    "flash_attention_reference",
    "kernel_config",
    "triton_mode",
]

SUPPORTED_HEAD_DIMS = (16, 128)  # inclusive range of head dimensions the kernel takes

# --------------------------------------------------------------------------- the algorithm


def _check_common(q, k, v, scale, *, who: str) -> float:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{who}: expected {name} to be a torch.Tensor, got {type(x).__name__}")
    try:  # the shape rules of chapter 02's attention, with the same messages
        _check_qkv(q, k, v)
    except ValueError as err:
        raise ValueError(f"{who}: {err}") from None
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"{who}: q, k and v must have the same batch dimensions: got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if k.shape[-2] == 0:
        raise ValueError(f"{who}: there are no keys (Nk = 0): attention is undefined")
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"{who}: q, k and v must be on the same device: got {q.device}, {k.device}, {v.device}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"{who}: q, k and v must share one dtype: got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not q.dtype.is_floating_point:
        raise TypeError(f"{who}: expected floating-point q, k, v, got {q.dtype}")
    if scale is None:
        return 1.0 / math.sqrt(q.shape[-1])
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"{who}: scale must be a finite number or None, got {scale!r}")
    return float(scale)


def flash_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_size: int | tuple[int, int] = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Tiled attention with the online softmax, in plain torch: returns ``(output, lse)``.

    ``q [..., Nq, d]``, ``k [..., Nk, d]``, ``v [..., Nk, d_v]`` → ``output [..., Nq, d_v]``
    and ``lse [..., Nq]`` with :math:`L_i = \log\sum_j e^{S_{ij}}` over the keys query
    :math:`i` may see. ``block_size`` is an int (queries and keys) or a pair
    ``(block_q, block_k)``. Equal to naive attention up to rounding; never holds more
    than one ``(block_q, block_k)`` tile of scores. Computes in float32 (float64 for
    float64 inputs) and returns the output in the inputs' dtype, the LSE in float32/64.

    With ``is_causal``, key blocks that start after a query block's last row are skipped
    entirely; only the blocks crossing the diagonal need an element-wise mask.
    """
    scale = _check_common(q, k, v, scale, who="flash_attention_reference")
    if isinstance(block_size, int):
        block_size = (block_size, block_size)
    bq, bk = (int(b) for b in block_size)
    if bq < 1 or bk < 1:
        raise ValueError(f"block_size must be positive, got {block_size!r}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)  # (..., Nq, dv)
    lse = torch.empty(q.shape[:-1], dtype=work, device=q.device)  # (..., Nq)

    for i0 in range(0, n_q, bq):
        i1 = min(i0 + bq, n_q)
        qi = q[..., i0:i1, :].to(work)  # (..., bq, d)
        m = torch.full(qi.shape[:-1], -math.inf, dtype=work, device=q.device)  # (..., bq)
        ell = torch.zeros_like(m)  # (..., bq)
        acc = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=work, device=q.device)  # (..., bq, dv)
        hi = min(n_k, i1) if is_causal else n_k  # causal: skip key blocks past the last row
        for j0 in range(0, hi, bk):
            j1 = min(j0 + bk, hi)
            kj = k[..., j0:j1, :].to(work)  # (..., bk, d)
            vj = v[..., j0:j1, :].to(work)  # (..., bk, dv)
            s = (qi @ kj.transpose(-2, -1)) * scale  # (..., bq, bk)
            if is_causal and j1 - 1 > i0:  # this tile crosses the diagonal
                rows = torch.arange(i0, i1, device=q.device)[:, None]  # (bq, 1)
                cols = torch.arange(j0, j1, device=q.device)[None, :]  # (1, bk)
                s = s.masked_fill(cols > rows, -math.inf)  # (..., bq, bk)
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., bq)
            alpha = torch.exp(m - m_new)  # (..., bq) rescales the old statistics
            p = torch.exp(s - m_new[..., None])  # (..., bq, bk)
            ell = alpha * ell + p.sum(dim=-1)  # (..., bq)
            acc = alpha[..., None] * acc + p @ vj  # (..., bq, dv)
            m = m_new
        out[..., i0:i1, :] = (acc / ell[..., None]).to(q.dtype)  # (..., bq, dv)
        lse[..., i0:i1] = m + torch.log(ell)  # (..., bq)
    return out, lse


# --------------------------------------------------------------------------- Triton


def _load_kernels():
    """Import the Triton kernels, turning on the interpreter first when there is no GPU."""
    if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
        import sys

        if "triton" not in sys.modules:
            os.environ["TRITON_INTERPRET"] = "1"
    try:
        kernels = importlib.import_module("course_lib.flash.kernels")
    except ImportError as err:
        from ..env import TRITON_HELP

        raise ImportError(f"flash_attention needs Triton. {TRITON_HELP}") from err
    return kernels


def triton_mode() -> str:
    """``"interpreter"`` (CPU), ``"compiled"`` (GPU) or ``"unavailable"``."""
    try:
        kernels = _load_kernels()
    except ImportError:
        return "unavailable"
    return "interpreter" if kernels.is_interpreted() else "compiled"


def _cfg(bm: int, bn: int, warps: int = 4, stages: int = 2) -> dict:
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages)


def kernel_config(
    head_dim: int,
    device: torch.device | str,
    *,
    interpreted: bool | None = None,
    dtype: torch.dtype | None = None,
) -> dict[str, list[dict]]:
    """Candidate block sizes and launch settings for each kernel: ``{"fwd", "dkdv", "dq"}``.

    Each entry is a list of configs ``{BLOCK_M, BLOCK_N, num_warps, num_stages}``
    (``BLOCK_M`` counts queries, ``BLOCK_N`` keys). One candidate: launched as is. Several
    (on a GPU): Triton's autotuner times them once per (sequence lengths, d, causal, dtype)
    and keeps the fastest; configs that need more shared memory than the GPU has are
    discarded, so the same list works on an H100 and on a T4.

    The first GPU candidate is the classic choice: 128 queries x 64 keys per forward program
    (a Q tile that stays on chip while K, V tiles stream past), 8 warps for d > 64, three
    pipeline stages. In the interpreter the blocks are small so that tests on short
    sequences still cross several blocks (ragged ends, the causal diagonal); there the cost
    is per element, not per program. ``COURSE_FLASH_AUTOTUNE=0`` in the environment keeps
    only the first GPU candidate (no autotuning: each candidate costs a compilation).

    float32 on a GPU gets one small config and no autotuning: its ``tl.dot`` runs in true
    float32 on the ordinary cores (no tensor cores), where large tiles only cost registers,
    and compiling such a kernel takes tens of seconds per candidate.
    """
    if interpreted is None:
        interpreted = triton_mode() == "interpreter"
    if interpreted or torch.device(device).type != "cuda":
        return {"fwd": [_cfg(64, 32)], "dkdv": [_cfg(32, 64)], "dq": [_cfg(64, 32)]}
    if dtype == torch.float32:
        return {
            "fwd": [_cfg(64, 32, 4, 2)],
            "dkdv": [_cfg(32, 64, 4, 2)],
            "dq": [_cfg(64, 32, 4, 2)],
        }
    cands = _gpu_candidates(head_dim)
    if os.environ.get("COURSE_FLASH_AUTOTUNE", "1") == "0":  # first candidate only: no tuning
        return {kind: configs[:1] for kind, configs in cands.items()}
    return cands


def _gpu_candidates(head_dim: int) -> dict[str, list[dict]]:
    """The autotuner's candidates on a GPU, the classic choice first."""
    if head_dim > 64:
        fwd = [
            _cfg(128, 64, 8, 3),
            _cfg(128, 128, 8, 3),
            _cfg(128, 64, 4, 3),
            _cfg(64, 64, 4, 3),
            _cfg(128, 32, 4, 2),
            _cfg(64, 32, 4, 1),
            _cfg(32, 32, 4, 1),
        ]
        dkdv = [
            _cfg(32, 64, 8, 2),
            _cfg(64, 64, 8, 2),
            _cfg(32, 128, 8, 2),
            _cfg(32, 64, 4, 2),
            _cfg(16, 32, 4, 1),
        ]
        dq = [
            _cfg(64, 32, 8, 2),
            _cfg(64, 64, 8, 2),
            _cfg(128, 32, 8, 2),
            _cfg(64, 32, 4, 2),
            _cfg(32, 16, 4, 1),
        ]
    else:
        fwd = [
            _cfg(128, 128, 4, 3),
            _cfg(128, 64, 4, 3),
            _cfg(128, 128, 8, 3),
            _cfg(64, 64, 4, 3),
            _cfg(64, 32, 4, 2),
            _cfg(32, 32, 4, 1),
        ]
        dkdv = [_cfg(32, 128, 4, 2), _cfg(64, 128, 8, 2), _cfg(32, 64, 4, 2), _cfg(16, 32, 4, 1)]
        dq = [_cfg(128, 32, 4, 2), _cfg(128, 64, 8, 2), _cfg(64, 32, 4, 2), _cfg(32, 16, 4, 1)]
    return {"fwd": fwd, "dkdv": dkdv, "dq": dq}


_AUTOTUNE_KEY = ["N_Q", "N_K", "HEAD_DIM", "IS_CAUSAL"]
_autotuned: dict = {}
_DO_BENCH = None  # None: Triton's GPU timer; tests put a CPU timer here to tune in the interpreter


def _launch(kernels, name: str, configs: list[dict], grid, *args, **meta) -> None:
    """Launch ``kernels.<name>`` with one config, or autotune over several.

    ``grid(meta)`` maps the chosen block sizes to the launch grid.
    """
    import triton

    kernel = getattr(kernels, name)
    if len(configs) == 1:
        c = configs[0]
        kernel[grid(c)](
            *args,
            **meta,
            BLOCK_M=c["BLOCK_M"],
            BLOCK_N=c["BLOCK_N"],
            num_warps=c["num_warps"],
            num_stages=c["num_stages"],
        )
        return
    key = (
        name,
        kernels.is_interpreted(),
        _DO_BENCH,
        tuple(tuple(sorted(c.items())) for c in configs),
    )
    if key not in _autotuned:
        tconfigs = [
            triton.Config(
                {"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"]},
                num_warps=c["num_warps"],
                num_stages=c["num_stages"],
            )
            for c in configs
        ]
        _autotuned[key] = triton.autotune(configs=tconfigs, key=_AUTOTUNE_KEY, do_bench=_DO_BENCH)(
            kernel
        )
    _autotuned[key][grid](*args, **meta)


_DTYPES_CPU = (torch.float32, torch.float16)
_MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y: the kernels put batch x heads there
_DTYPES_CUDA = (torch.float16, torch.bfloat16, torch.float32)


def _check_kernel_inputs(q, k, v, scale) -> float:
    scale = _check_common(q, k, v, scale, who="flash_attention")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"flash_attention: expected q, k, v of shape [B, H, N, d] (4 "
            f"dimensions), got q {tuple(q.shape)}, k {tuple(k.shape)}, v "
            f"{tuple(v.shape)}"
        )
    d = q.shape[-1]
    if v.shape[-1] != d:
        raise ValueError(
            f"flash_attention: v must have the same head dimension as q and k "
            f"(d = {d}), got v {tuple(v.shape)}"
        )
    lo, hi = SUPPORTED_HEAD_DIMS
    if not lo <= d <= hi:
        raise ValueError(
            f"flash_attention: head dimension d = {d} is not supported; the "
            f"kernel takes {lo} <= d <= {hi} (use "
            f"flash_attention_reference or torch SDPA otherwise)"
        )
    if q.shape[-2] == 0:
        raise ValueError("flash_attention: there are no queries (Nq = 0)")
    allowed = _DTYPES_CUDA if q.device.type == "cuda" else _DTYPES_CPU
    if q.dtype not in allowed:
        where = "on CUDA" if q.device.type == "cuda" else "on the CPU (Triton's interpreter)"
        names = ", ".join(str(t).replace("torch.", "") for t in allowed)
        raise TypeError(
            f"flash_attention: dtype {q.dtype} is not supported {where}; use one of {names}"
        )
    if (
        q.device.type == "cuda"
        and q.dtype == torch.bfloat16
        and torch.cuda.get_device_capability(q.device) < (8, 0)
    ):
        raise TypeError(
            "flash_attention: bfloat16 needs a GPU of compute capability 8.0 or "
            "newer (Ampere); use float16 on this GPU"
        )
    if q.device.type == "cuda" and q.shape[0] * q.shape[1] > _MAX_GRID_Y:
        raise ValueError(
            f"flash_attention: B*H = {q.shape[0] * q.shape[1]} (batch x heads) "
            f"exceeds the CUDA grid limit of {_MAX_GRID_Y} programs on the "
            f"second grid axis; split the batch into chunks"
        )
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"flash_attention runs on CUDA GPUs or on the CPU through Triton's "
            f"interpreter, got tensors on {q.device}"
        )
    return scale


def _dot_precision(dtype: torch.dtype) -> str:
    """``input_precision`` of every ``tl.dot``: full float32 ("ieee") for float32 inputs.

    On a GPU ``tl.dot`` would otherwise round float32 operands to TF32 (a 10-bit mantissa,
    errors ~1e-3) while the CPU interpreter multiplies in true float32: results would
    silently depend on the machine. float16/bfloat16 operands ignore the setting.
    """
    return "ieee" if dtype == torch.float32 else "tf32"


def _on_device(x: torch.Tensor):
    """Launch on the tensors' GPU (Triton launches on the *current* CUDA device)."""
    import contextlib

    return torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, N, d]`` → contiguous ``[B*H, N, d]``."""
    return x.reshape(-1, x.shape[-2], x.shape[-1]).contiguous()  # (BH, N, d)


def _prepare(q):
    kernels = _load_kernels()
    interpreted = kernels.is_interpreted()
    if q.device.type == "cpu" and not interpreted:
        raise RuntimeError(
            "flash_attention got CPU tensors but Triton is in compiled (GPU) mode. Triton "
            "reads TRITON_INTERPRET when it is first imported: restart the kernel and call "
            "course_lib.env.setup() (or set TRITON_INTERPRET=1) before anything imports "
            "triton, or move the tensors to a CUDA GPU."
        )
    return kernels, interpreted


def _forward(q, k, v, is_causal: bool, scale: float):
    """Run the forward kernel: returns ``O [B, H, Nq, d]`` and ``LSE [B*H, Nq]`` (float32)."""
    import triton

    kernels, interpreted = _prepare(q)
    B, H, n_q, d = q.shape
    n_k = k.shape[-2]
    qf, kf, vf = _flat(q), _flat(k), _flat(v)  # (BH, Nq, d), (BH, Nk, d), (BH, Nk, d)
    o = torch.empty_like(qf)  # (BH, Nq, d)
    lse = torch.empty(qf.shape[:2], dtype=torch.float32, device=q.device)  # (BH, Nq)
    cfg = kernel_config(d, q.device, interpreted=interpreted, dtype=q.dtype)
    _launch(
        kernels,
        "_fwd_kernel",
        cfg["fwd"],
        lambda meta: (triton.cdiv(n_q, meta["BLOCK_M"]), B * H),  # (query blocks, B*H)
        qf,
        kf,
        vf,
        o,
        lse,
        scale * kernels.LOG2E,
        qf.stride(0),
        qf.stride(1),
        kf.stride(0),
        kf.stride(1),
        vf.stride(0),
        vf.stride(1),
        o.stride(0),
        o.stride(1),
        n_q,
        n_k,
        HEAD_DIM=d,
        BLOCK_D=max(16, triton.next_power_of_2(d)),
        IS_CAUSAL=bool(is_causal),
        DOT_PRECISION=_dot_precision(q.dtype),
    )
    return o.view(B, H, n_q, d), lse


def _backward(do, q, k, v, o, lse, is_causal: bool, scale: float):
    """Run the three backward kernels: returns ``dQ, dK, dV`` shaped like q, k, v."""
    import triton

    kernels, interpreted = _prepare(q)
    B, H, n_q, d = q.shape
    n_k = k.shape[-2]
    qf, kf, vf, of, dof = _flat(q), _flat(k), _flat(v), _flat(o), _flat(do)  # (BH, N, d)
    cfg = kernel_config(d, q.device, interpreted=interpreted, dtype=q.dtype)
    block_d = max(16, triton.next_power_of_2(d))

    delta = torch.empty_like(lse)  # (BH, Nq) D_i = rowsum(dO * O)
    kernels._bwd_preprocess_kernel[(triton.cdiv(n_q, 64), B * H)](
        of,
        dof,
        delta,
        of.stride(0),
        of.stride(1),
        dof.stride(0),
        dof.stride(1),
        n_q,
        HEAD_DIM=d,
        BLOCK_D=block_d,
        BLOCK_M=64,
    )
    dq = torch.empty_like(qf)  # (BH, Nq, d)
    dk = torch.empty_like(kf)  # (BH, Nk, d)
    dv = torch.empty_like(vf)  # (BH, Nk, d)
    args = (qf, kf, vf, dof, lse, delta)
    strides = (
        qf.stride(0),
        qf.stride(1),
        kf.stride(0),
        kf.stride(1),
        vf.stride(0),
        vf.stride(1),
        dof.stride(0),
        dof.stride(1),
    )
    meta = dict(
        HEAD_DIM=d,
        BLOCK_D=block_d,
        IS_CAUSAL=bool(is_causal),
        DOT_PRECISION=_dot_precision(q.dtype),
    )
    _launch(
        kernels,
        "_bwd_dkdv_kernel",
        cfg["dkdv"],
        lambda m: (triton.cdiv(n_k, m["BLOCK_N"]), B * H),
        *args,
        dk,
        dv,
        scale,
        scale * kernels.LOG2E,
        *strides,
        n_q,
        n_k,
        **meta,
    )
    _launch(
        kernels,
        "_bwd_dq_kernel",
        cfg["dq"],
        lambda m: (triton.cdiv(n_q, m["BLOCK_M"]), B * H),
        *args,
        dq,
        scale,
        scale * kernels.LOG2E,
        *strides,
        n_q,
        n_k,
        **meta,
    )
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: the forward saves only q, k, v, O and the LSE — never P."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):
        with _on_device(q):
            o, lse = _forward(q, k, v, is_causal, scale)  # (B, H, Nq, d), (BH, Nq)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.is_causal, ctx.scale = is_causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        with _on_device(q):
            dq, dk, dv = _backward(do, q, k, v, o, lse, ctx.is_causal, ctx.scale)
        return dq, dk, dv, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    r"""Exact attention :math:`\mathrm{softmax}(\text{scale}\cdot QK^\top)V` by Triton kernels.

    ``q [B, H, Nq, d]``, ``k, v [B, H, Nk, d]`` with :math:`16 \le d \le 128`; any
    sequence lengths. Differentiable in q, k, v (the backward recomputes the attention
    weights from the saved log-sum-exp). dtypes: float16/bfloat16 on CUDA (the fast path;
    float32 works too, in true float32 matmuls without tensor cores — for checking, not
    speed); float32/float16 on the CPU through Triton's interpreter.
    """
    scale = _check_kernel_inputs(q, k, v, scale)
    return FlashAttentionFunction.apply(q, k, v, bool(is_causal), scale)


def flash_attention_with_lse(
    q, k, v, *, is_causal: bool = False, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward kernel's two outputs, ``O [B, H, Nq, d]`` and ``LSE [B, H, Nq]`` (no autograd)."""
    scale = _check_kernel_inputs(q, k, v, scale)
    with _on_device(q):
        o, lse = _forward(q, k, v, bool(is_causal), scale)
    return o, lse.view(q.shape[:-1])
