"""Inputs, ground truth and tolerances for the tests of course_lib.flash.

Shared by the test files of ``tests/course_lib/flash/`` (one per module: the reference, the
forward, the backward, decoding, the launch helpers and the kernels themselves).

Without a CUDA GPU the kernels run in Triton's interpreter (the root conftest.py turns it on
before triton is imported), which costs ~milliseconds per tile operation, so the CPU
cases are small: the interpreter's tiles (64 queries x 32 keys forward) give ragged last
tiles and several tiles per row at N = 127 and 200, and lengths that are multiples of the
tiles take the even fast path. The ``gpu``-marked twins run the compiled kernels at
realistic sizes and skip cleanly without CUDA.

Tolerances (kernel vs a float64 reference computed from the *same* rounded inputs):

* float32: every dot product and running sum is float32 (relative rounding 6e-8 per
  operation); over N <= 200 keys and d <= 128 features the accumulated error is ~1e-6
  for unit-variance inputs. atol 2e-5 / rtol 1e-4 leaves a 10x margin and still catches
  any real bug (a missing rescale or mask gives errors of order 1e-1).
* float16: P is rounded to float16 (relative 4.9e-4) before P @ V and dS before dS @ K,
  outputs are stored in float16 (half an ulp is 2.4e-4 near 0.5); errors of ~1e-3 are
  expected, so outputs get atol 4e-3 and gradients 1e-2 (their magnitudes are larger).
* GPU, float16/bfloat16, N up to 4096: errors grow with N and with the gradients' size, so
  the bound is relative to torch's own SDPA in the same precision (see :func:`check_kernel`).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import torch
import torch.nn.functional as F

import course_lib.flash as flash
from course_lib.flash import flash_attention, flash_attention_with_lse

# Where the small "CPU" cases run: the CPU through the interpreter, or, when Triton compiles
# (a CUDA machine), the GPU — a compiled kernel cannot read CPU tensors.
DEVICE = "cpu" if flash.triton_mode() == "interpreter" else "cuda"

TOL = {
    torch.float32: dict(out=(2e-5, 1e-4), grad=(2e-5, 1e-4)),
    torch.float16: dict(out=(4e-3, 1e-2), grad=(1e-2, 1e-2)),
}
GRAD_NAMES = ("dQ", "dK", "dV")

# The cases the forward and the backward are checked on, in the interpreter.
KERNEL_CASES = [
    # B, H, Nq, Nk, d, causal, scale
    (1, 1, 1, 1, 16, False, None),
    (1, 1, 1, 1, 16, True, None),
    (2, 3, 17, 17, 32, True, None),
    (2, 2, 17, 17, 64, False, 0.3),  # custom scale
    (1, 2, 64, 64, 64, False, None),  # even lengths: the fast path without bounds masks
    (1, 2, 64, 64, 48, True, None),  # d not a power of two: padded feature lanes
    (1, 1, 127, 127, 128, True, None),
    (1, 1, 127, 127, 16, False, None),
    (1, 1, 200, 200, 32, True, 0.05),
    (1, 1, 200, 200, 80, False, None),
    (1, 2, 30, 70, 32, True, None),  # Nq != Nk, causal aligned top-left
    (2, 1, 70, 30, 32, False, None),
    (1, 2, 128, 128, 32, True, None),  # even and causal: full, diagonal and skipped tiles
]

MASKED_CASES = [
    # B, H, H_kv, Nq, Nk, d, mask
    (1, 4, 2, 40, 40, 32, dict()),  # GQA, G = 2
    (2, 4, 1, 33, 64, 16, dict(is_causal=True)),  # MQA, top-left, even keys
    (1, 4, 2, 24, 96, 32, dict(is_causal=True, causal_alignment="bottom_right")),  # KV cache
    (1, 2, 2, 96, 40, 16, dict(is_causal=True, causal_alignment="bottom_right")),  # empty rows
    (1, 2, 2, 128, 128, 16, dict(is_causal=True, window=40)),  # window: tiles skipped on the left
    (1, 6, 2, 50, 90, 32, dict(is_causal=True, causal_alignment="bottom_right", window=20)),
    (1, 2, 1, 70, 70, 16, dict(is_causal=True, window=1)),  # only the query's own key
]


def make_inputs(B, H, n_q, n_k, d, dtype, device="cpu", seed=0, h_kv=None):
    """Seeded ``q [B, H, Nq, d]``, ``k, v [B, H_kv, Nk, d]`` and ``dO [B, H, Nq, d]``."""
    g = torch.Generator().manual_seed(seed)
    h_kv = H if h_kv is None else h_kv
    q = torch.randn(B, H, n_q, d, generator=g)  # (B, H, Nq, d)
    k = torch.randn(B, h_kv, n_k, d, generator=g)  # (B, H_kv, Nk, d)
    v = torch.randn(B, h_kv, n_k, d, generator=g)  # (B, H_kv, Nk, d)
    do = torch.randn(B, H, n_q, d, generator=g)  # (B, H, Nq, d)
    return [x.to(device=device, dtype=dtype) for x in (q, k, v, do)]


def visible(n_q, n_k, is_causal, alignment="top_left", window=None, device="cpu"):
    """(Nq, Nk) boolean, True = may attend: the definition the kernels must implement."""
    diag = 0 if alignment == "top_left" else n_k - n_q
    i = torch.arange(n_q, device=device)[:, None] + diag  # (Nq, 1) key position of query i
    j = torch.arange(n_k, device=device)[None, :]  # (1, Nk)
    ok = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    if is_causal:
        ok &= j <= i
    if window is not None:
        ok &= j >= i - window + 1
    return ok


def naive_attention(q, k, v, is_causal=False, causal_alignment="top_left", window=None, scale=None):
    """Attention with an explicit mask, K/V repeated for GQA; rows with no key give 0 and -inf.

    Differentiable; used in float64 as the ground truth for outputs, LSE and gradients.
    """
    g = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)  # (B, H, Nk, d)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale  # (B, H, Nq, Nk)
    ok = visible(q.shape[-2], k.shape[-2], is_causal, causal_alignment, window, q.device)
    s = s.masked_fill(~ok, -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # (B, H, Nq)
    p = torch.exp(s - lse.masked_fill(lse == -math.inf, 0.0)[..., None])  # (B, H, Nq, Nk)
    return p @ v, lse


def ground_truth(q, k, v, do, **mask):
    """float64 output, LSE and gradients of naive attention on the same (rounded) inputs:
    ``([out, dq, dk, dv], lse)``, on the CPU."""
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    out, lse = naive_attention(qr, kr, vr, **mask)
    out.backward(do.double())
    return [t.detach().cpu() for t in (out, qr.grad, kr.grad, vr.grad)], lse.detach().cpu()


def sdpa_grads(q, k, v, do, is_causal, scale, dtype=torch.float64):
    """Output and gradients of torch's SDPA in ``dtype`` on the same (rounded) inputs."""
    qr, kr, vr = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
    gqa = dict(enable_gqa=True) if qr.shape[1] != kr.shape[1] else {}
    out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=is_causal, scale=scale, **gqa)
    out.backward(do.to(dtype))
    return [t.detach().double().cpu() for t in (out, qr.grad, kr.grad, vr.grad)]


def assert_close(got, expected, tol, what):
    """``|got - expected| <= atol + rtol |expected|`` everywhere, else where and by how much."""
    atol, rtol = tol
    got = got.detach().double().cpu()
    err = (got - expected).abs()
    bound = atol + rtol * expected.abs()
    assert bool((err <= bound).all()), (
        f"{what}: max error {err.max().item():.3g} (atol={atol}, rtol={rtol}), "
        f"at {tuple(int(i) for i in torch.nonzero(err > bound)[0])}"
    )


def check_kernel(
    B, H, n_q, n_k, d, is_causal, scale=None, dtype=torch.float32, device=DEVICE, grads=True
):
    """flash_attention against SDPA in float64: the output (``grads=False``) or the gradients
    dQ, dK, dV (``grads=True``; the output itself is the forward's tests' business)."""
    q, k, v, do = make_inputs(B, H, n_q, n_k, d, dtype, device)
    if grads:
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = flash_attention(q, k, v, is_causal=is_causal, scale=scale, layout="bhnd")
    assert out.shape == (B, H, n_q, d) and out.dtype == dtype and out.device == q.device
    refs = sdpa_grads(q, k, v, do, is_causal, scale)  # float64, on the CPU
    if grads:
        out.backward(do)
        names, ours, refs = GRAD_NAMES, [q.grad, k.grad, v.grad], refs[1:]
    else:
        names, ours, refs = ("output",), [out], refs[:1]
    if device == "cuda" and dtype != torch.float32:
        # At large N the error budget is best set by torch itself: our error against float64
        # must stay within 3x that of torch's own SDPA in the same low precision (the test
        # used by the FlashAttention repository), plus a small absolute slack.
        theirs = sdpa_grads(q, k, v, do, is_causal, scale, dtype=dtype)
        theirs = theirs[1:] if grads else theirs[:1]
        for name, got, ref, th in zip(names, ours, refs, theirs):
            err = (got.detach().double().cpu() - ref).abs().max().item()
            err_torch = (th - ref).abs().max().item()
            assert err <= 3 * err_torch + 1e-3, f"{name}: error {err:.3g} vs torch {err_torch:.3g}"
        return
    tol = TOL[dtype]["grad" if grads else "out"]
    for name, got, ref in zip(names, ours, refs):
        assert got.shape == ref.shape and got.dtype == dtype
        assert_close(got, ref, tol, name)


def check_masked(B, H, h_kv, n_q, n_k, d, *, dtype=torch.float32, device=DEVICE, grads=True,
                 **mask):  # fmt: skip
    """The kernel against naive float64 attention with a mask: with ``grads``, dQ, dK, dV
    (dK, dV summed over each group); without, the output and the log-sum-exp (``-inf``
    exactly where a query sees no key). Returns ``q, k, v, out``."""
    q, k, v, do = make_inputs(B, H, n_q, n_k, d, dtype, device, h_kv=h_kv, seed=n_q + n_k)
    (ref_o, ref_dq, ref_dk, ref_dv), ref_lse = ground_truth(q, k, v, do, **mask)
    tol = TOL[dtype]
    if grads:
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
        out = flash_attention(q, k, v, layout="bhnd", **mask)
        out.backward(do)
        for name, got, ref in zip(GRAD_NAMES, (q.grad, k.grad, v.grad), (ref_dq, ref_dk, ref_dv)):
            assert got.shape == ref.shape, (name, got.shape, ref.shape)
            assert_close(got, ref, tol["grad"], name)
        return q.detach(), k.detach(), v.detach(), out.detach()
    out, lse = flash_attention_with_lse(q, k, v, layout="bhnd", **mask)
    assert_close(out, ref_o, tol["out"], "output")
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)  # -inf exactly where no key is seen
    assert_close(lse[finite], ref_lse[finite].double(), (2e-5, 1e-5), "lse")
    return q, k, v, out


def kernel_module_source(name: str):
    """The parsed source of ``course_lib/flash/kernels/<name>.py``: ``(dots, kernels)``, every
    ``tl.dot`` call and ``{name: source}`` of every ``@triton.jit`` function named
    ``*_kernel`` (the ones launched from the host)."""
    path = Path(flash.__file__).parent / "kernels" / f"{name}.py"
    text = path.read_text()
    tree = ast.parse(text)
    dots = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.dot"
    ]
    kernels = {
        node.name: ast.get_source_segment(text, node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_kernel")
    }
    return dots, kernels


def states_its_precision(dot: ast.Call) -> bool:
    """A compiled ``tl.dot`` rounds float32 operands to TF32 by default; the interpreter never
    does, so a forgotten ``input_precision`` passes every CPU test and loses 3 digits on a
    GPU. Each dot must take the launcher's ``DOT_PRECISION`` ("ieee" for float32)."""
    return any(
        kw.arg == "input_precision" and ast.unparse(kw.value) == "DOT_PRECISION"
        for kw in dot.keywords
    )
