"""course_lib.flash: the tiled reference and the Triton kernels, forward and backward.

Without a CUDA GPU the kernels run in Triton's interpreter (the root conftest.py turns it on
before triton is imported), which costs ~milliseconds per block operation, so the CPU
cases are small: every N in {1, 17, 64, 127, 200} appears, with the interpreter's blocks
(64 queries x 32 keys forward) giving ragged last blocks and several blocks per row at
N = 127 and 200. The ``gpu``-marked twins run the compiled kernels at realistic sizes and
skip cleanly without CUDA.

Tolerances (kernel vs a float64 reference computed from the *same* rounded inputs):

* float32: every dot product and running sum is float32 (relative rounding 6e-8 per
  operation); over N <= 200 keys and d <= 128 features the accumulated error is ~1e-6
  for unit-variance inputs. atol 2e-5 / rtol 1e-4 leaves a 10x margin and still catches
  any real bug (a missing rescale or mask gives errors of order 1e-1).
* float16: P is rounded to float16 (relative 4.9e-4) before P @ V and dS before dS @ K,
  outputs are stored in float16 (half an ulp is 2.4e-4 near 0.5); errors of ~1e-3 are
  expected, so outputs get atol 4e-3 and gradients 1e-2 (their magnitudes are larger).
* GPU, float16/bfloat16, N up to 4096: errors grow with N and with the gradients' size, so
  the bound is relative to torch's own SDPA in the same precision (see _check_kernel).
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

import course_lib.flash as flash
from course_lib.flash import flash_attention, flash_attention_reference

# Where the small "CPU" cases run: the CPU through the interpreter, or, when Triton compiles
# (a CUDA machine), the GPU — a compiled kernel cannot read CPU tensors.
DEVICE = "cpu" if flash.triton_mode() == "interpreter" else "cuda"

TOL = {
    torch.float32: dict(out=(2e-5, 1e-4), grad=(2e-5, 1e-4)),
    torch.float16: dict(out=(4e-3, 1e-2), grad=(1e-2, 1e-2)),
}


def _inputs(B, H, n_q, n_k, d, dtype, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, n_q, d, generator=g)  # (B, H, Nq, d)
    k = torch.randn(B, H, n_k, d, generator=g)  # (B, H, Nk, d)
    v = torch.randn(B, H, n_k, d, generator=g)  # (B, H, Nk, d)
    do = torch.randn(B, H, n_q, d, generator=g)  # (B, H, Nq, d)
    return [x.to(device=device, dtype=dtype) for x in (q, k, v, do)]


def _sdpa_grads(q, k, v, do, is_causal, scale, dtype=torch.float64):
    """Output and gradients of torch's SDPA in ``dtype`` on the same (rounded) inputs."""
    qr, kr, vr = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
    out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=is_causal, scale=scale)
    out.backward(do.to(dtype))
    return [t.detach().double().cpu() for t in (out, qr.grad, kr.grad, vr.grad)]


def _assert_close(got, expected, tol, what):
    atol, rtol = tol
    got = got.detach().double().cpu()
    err = (got - expected).abs()
    bound = atol + rtol * expected.abs()
    assert bool((err <= bound).all()), (
        f"{what}: max error {err.max().item():.3g} (atol={atol}, rtol={rtol}), "
        f"at {tuple(int(i) for i in torch.nonzero(err > bound)[0])}"
    )


def _check_kernel(
    B, H, n_q, n_k, d, is_causal, scale=None, dtype=torch.float32, device=DEVICE, grads=True
):
    q, k, v, do = _inputs(B, H, n_q, n_k, d, dtype, device)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = flash_attention(q, k, v, is_causal=is_causal, scale=scale)
    assert out.shape == (B, H, n_q, d) and out.dtype == dtype and out.device == q.device
    refs = _sdpa_grads(q, k, v, do, is_causal, scale)  # float64, on q's device
    if grads:
        out.backward(do)
    ours = [out] + ([q.grad, k.grad, v.grad] if grads else [])
    names = ["output", "dQ", "dK", "dV"]
    if device == "cuda" and dtype != torch.float32:
        # At large N the error budget is best set by torch itself: our error against float64
        # must stay within 3x that of torch's own SDPA in the same low precision (the test
        # used by the FlashAttention repository), plus a small absolute slack.
        theirs = _sdpa_grads(q, k, v, do, is_causal, scale, dtype=dtype)
        for name, got, ref, th in zip(names, ours, refs, theirs):
            err = (got.detach().double().cpu() - ref).abs().max().item()
            err_torch = (th - ref).abs().max().item()
            assert err <= 3 * err_torch + 1e-3, f"{name}: error {err:.3g} vs torch {err_torch:.3g}"
        return
    tol = TOL[dtype]
    for name, got, ref in zip(names, ours, refs):
        assert got.shape == ref.shape and got.dtype == dtype
        _assert_close(got, ref, tol["out" if name == "output" else "grad"], name)


# --------------------------------------------------------------------------- reference


@pytest.mark.parametrize("n", [1, 17, 64, 127, 200])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("block_size", [16, (32, 8), 256])
def test_reference_equals_naive_attention(n, is_causal, block_size):
    g = torch.Generator().manual_seed(n)
    q = torch.randn(2, 3, n, 24, generator=g, dtype=torch.float64)  # (B, H, N, d)
    k = torch.randn(2, 3, n, 24, generator=g, dtype=torch.float64)  # (B, H, N, d)
    v = torch.randn(2, 3, n, 40, generator=g, dtype=torch.float64)  # (B, H, N, d_v)
    out, lse = flash_attention_reference(q, k, v, is_causal=is_causal, block_size=block_size)
    scores = q @ k.transpose(-2, -1) / math.sqrt(24)  # (B, H, N, N)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -math.inf)
    naive = torch.softmax(scores, dim=-1) @ v  # (B, H, N, d_v)
    # Float64 all the way: the tiled and naive sums differ only in summation order.
    torch.testing.assert_close(out, naive, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=1e-12, rtol=1e-10)


def test_reference_rectangular_scale_and_dtype():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 10, 8, generator=g)  # (B, Nq, d): any leading dims
    k = torch.randn(3, 37, 8, generator=g)  # (B, Nk, d)
    v = torch.randn(3, 37, 5, generator=g)  # (B, Nk, d_v)
    for causal in (False, True):
        out, lse = flash_attention_reference(q, k, v, is_causal=causal, scale=0.7, block_size=4)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.7)
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
        assert out.dtype == torch.float32 and lse.shape == (3, 10)
    half, _ = flash_attention_reference(q.half(), k.half(), v.half(), block_size=16)
    assert half.dtype == torch.float16


def test_reference_errors():
    q = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="share the last dimension"):
        flash_attention_reference(q, torch.randn(2, 5, 4), torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="same number of keys"):
        flash_attention_reference(q, q, torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match="block_size"):
        flash_attention_reference(q, q, q, block_size=0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        flash_attention_reference(q.numpy(), q, q)


# --------------------------------------------------------------------------- kernels on CPU

KERNEL_CASES = [
    # B, H, Nq, Nk, d, causal, scale
    (1, 1, 1, 1, 16, False, None),
    (1, 1, 1, 1, 16, True, None),
    (2, 3, 17, 17, 32, True, None),
    (2, 2, 17, 17, 64, False, 0.3),  # custom scale
    (1, 2, 64, 64, 64, False, None),
    (1, 2, 64, 64, 48, True, None),  # d not a power of two: padded feature lanes
    (1, 1, 127, 127, 128, True, None),
    (1, 1, 127, 127, 16, False, None),
    (1, 1, 200, 200, 32, True, 0.05),
    (1, 1, 200, 200, 80, False, None),
    (1, 2, 30, 70, 32, True, None),  # Nq != Nk, causal aligned top-left
    (2, 1, 70, 30, 32, False, None),
]


@pytest.mark.parametrize("B,H,n_q,n_k,d,is_causal,scale", KERNEL_CASES)
def test_kernel_matches_sdpa_float32(B, H, n_q, n_k, d, is_causal, scale):
    _check_kernel(B, H, n_q, n_k, d, is_causal, scale, torch.float32)


@pytest.mark.parametrize("n,is_causal", [(64, True), (127, False)])
def test_kernel_matches_sdpa_float16(n, is_causal):
    _check_kernel(1, 2, n, n, 64, is_causal, None, torch.float16)


def test_kernel_lse_and_causality():
    q, k, v, _ = _inputs(1, 2, 100, 100, 32, torch.float32, DEVICE)
    out, lse = flash.flash_attention_with_lse(q, k, v, is_causal=True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(32)  # (B, H, N, N)
    future = ~torch.ones(100, 100, dtype=torch.bool, device=DEVICE).tril()  # (N, N)
    scores = scores.masked_fill(future, -math.inf)  # (B, H, N, N)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=1e-5, rtol=1e-5)
    # Changing the future must not change the past: rows < 50 ignore keys >= 50.
    k2, v2 = k.clone(), v.clone()
    k2[..., 50:, :] += 10.0
    v2[..., 50:, :] -= 10.0
    out2 = flash_attention(q, k2, v2, is_causal=True)
    assert torch.equal(out[..., :50, :], out2[..., :50, :])
    assert not torch.allclose(out[..., 50:, :], out2[..., 50:, :])


def test_kernel_non_contiguous_inputs():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 17, 2, 32, generator=g) for _ in range(3))  # (B, N, H, d)
    q, k, v = (x.to(DEVICE).transpose(1, 2) for x in (q, k, v))  # (B, H, N, d), strided
    assert not q.is_contiguous()
    ref = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(flash_attention(q, k, v), ref, atol=2e-5, rtol=1e-4)


def test_kernel_config_is_gpu_sized_on_cuda():
    cfg = flash.kernel_config(128, "cuda", interpreted=False)
    assert cfg["fwd"][0] == dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    for kind in ("fwd", "dkdv", "dq"):
        assert len(cfg[kind]) > 1  # several candidates: autotuned, too-big ones discarded
        assert all(c["BLOCK_M"] >= 16 and c["BLOCK_N"] >= 16 for c in cfg[kind])  # tl.dot
    small = flash.kernel_config(64, "cpu", interpreted=True)
    assert all(len(v) == 1 and v[0]["BLOCK_M"] <= 64 for v in small.values())


def test_autotuning_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("COURSE_FLASH_AUTOTUNE", "0")
    cfg = flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.bfloat16)
    assert all(len(v) == 1 for v in cfg.values())
    assert cfg["fwd"][0] == dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


def test_kernel_config_float32_on_cuda_is_one_small_config():
    # float32 dots run in true float32 (no tensor cores): one small tile, no autotuning.
    cfg = flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.float32)
    assert all(len(v) == 1 and v[0]["BLOCK_M"] * v[0]["BLOCK_N"] <= 64 * 64 for v in cfg.values())
    assert len(flash.kernel_config(128, "cuda", interpreted=False, dtype=torch.bfloat16)["fwd"]) > 1


# ------------------------------------------------ what only a compiled (GPU) kernel would show


def _kernel_source() -> str:
    from pathlib import Path

    return (Path(flash.__file__).parent / "kernels.py").read_text()


def test_every_tl_dot_states_its_input_precision():
    """A compiled tl.dot rounds float32 operands to TF32 by default; the interpreter never
    does, so a forgotten ``input_precision`` passes every CPU test and loses 3 digits on a
    GPU. Each dot must take the launcher's DOT_PRECISION, which is "ieee" for float32."""
    import re

    src = _kernel_source()
    dots = re.findall(r"tl\.dot\((.*?)\)\s*(?:\*|#|$)", src, flags=re.M | re.S)
    assert len(dots) == 9  # 2 forward, 4 dK/dV, 3 dQ
    assert all("input_precision=DOT_PRECISION" in d for d in dots), dots
    assert flash._dot_precision(torch.float32) == "ieee"
    assert flash._dot_precision(torch.float16) != "ieee"  # ignored for 16-bit operands


def test_batch_head_offsets_are_int64():
    """``bh * stride_b`` overflows int32 once B*H*N*d passes 2^31 - 1 elements (B*H = 2048
    heads of N = 16k, d = 128 make 2^32): silent wrong addresses on a GPU. The interpreter
    computes in numpy and would need a 16 GiB tensor to show it, so we check the source."""
    src = _kernel_source()
    assert src.count("bh = tl.program_id(1).to(tl.int64)") == 4  # all four kernels
    assert "bh = tl.program_id(1)\n" not in src


def test_too_many_batch_heads_for_the_cuda_grid_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(flash, "_MAX_GRID_Y", 3)
    q = torch.empty(2, 2, 8, 16, device="meta")  # B*H = 4 > 3
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
    with pytest.raises(ValueError, match="B\\*H = 4"):
        flash._check_kernel_inputs(q, q, q, None)


@pytest.mark.slow
def test_kernels_compile_for_an_h100_without_a_gpu():
    """Ahead-of-time compilation for sm_90 through Triton's real compiler (ptxas included):
    catches what the interpreter accepts but the compiler rejects (dot shapes, constexpr
    misuse, Python control flow on tensors, shared memory), and checks that the loads of
    the main loops are software-pipelined (cp.async), which num_stages asks for."""
    import os
    import subprocess

    script = (
        "import json\n"
        "from course_lib.flash import aot\n"
        "out = [aot.compile_kernel(k, 'bfloat16', 48, True) for k in "
        "('fwd', 'dkdv', 'dq', 'preprocess')]\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0 and ("ptxas" in proc.stderr and "not found" in proc.stderr):
        pytest.skip("this Triton wheel ships no ptxas")
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    reports = json.loads(proc.stdout.strip().splitlines()[-1])
    for r in reports:
        assert r["shared_bytes"] <= 227 * 1024, r  # an H100's shared memory per block
        if r["kind"] != "preprocess":
            assert r["tensor_cores"], r
    assert all(r["pipelined"] for r in reports if r["kind"] == "fwd"), reports


def test_autotuned_launch_path_through_the_interpreter(monkeypatch):
    """The GPU path (several candidate configs, Triton's autotuner) with a CPU timer."""
    import time

    def cpu_bench(fn, quantiles=None):
        t0 = time.perf_counter()
        fn()
        ms = 1e3 * (time.perf_counter() - t0)
        return [ms, ms, ms]

    two = {
        "fwd": [flash._cfg(32, 16), flash._cfg(16, 32)],
        "dkdv": [flash._cfg(16, 32), flash._cfg(32, 16)],
        "dq": [flash._cfg(32, 16), flash._cfg(16, 16)],
    }
    monkeypatch.setattr(flash, "kernel_config", lambda *a, **k: two)
    monkeypatch.setattr(flash, "_DO_BENCH", cpu_bench)
    _check_kernel(1, 2, 45, 45, 32, True, None, torch.float32)
    assert any(key[2] is cpu_bench for key in flash._autotuned)
    from course_lib.flash import bench

    chosen = bench.autotuned_configs()  # recorded in the benchmark's JSON on a GPU
    assert {"fwd_kernel", "bwd_dkdv_kernel", "bwd_dq_kernel"} <= set(chosen)
    assert all("BLOCK_M" in c for c in chosen.values())


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "shapes,match",
    [
        (((2, 8, 16), (2, 8, 16), (2, 8, 16)), r"\[B, H, N, d_h\]"),
        (((1, 1, 8, 16), (1, 1, 8, 32), (1, 1, 8, 16)), "share the last dimension"),
        (((1, 1, 8, 16), (1, 1, 9, 16), (1, 1, 8, 16)), "same number of keys"),
        (((1, 2, 8, 16), (1, 1, 8, 16), (1, 1, 8, 16)), "same batch dimensions"),
        (((1, 1, 8, 16), (1, 1, 8, 16), (1, 1, 8, 32)), "same head dimension"),
        (((1, 1, 8, 8), (1, 1, 8, 8), (1, 1, 8, 8)), "d_h = 8 is not supported"),
        (((1, 1, 8, 256), (1, 1, 8, 256), (1, 1, 8, 256)), "d_h = 256 is not supported"),
        (((1, 1, 0, 16), (1, 1, 8, 16), (1, 1, 8, 16)), "no queries"),
        (((1, 1, 8, 16), (1, 1, 0, 16), (1, 1, 0, 16)), "no keys"),
    ],
)
def test_kernel_shape_errors(shapes, match):
    q, k, v = (torch.randn(s) for s in shapes)
    with pytest.raises(ValueError, match=match) as info:
        flash_attention(q, k, v)
    if "d_h = " in match or "B, H" in match:
        assert str(tuple(q.shape)) in str(info.value) or "d_h =" in str(info.value)


def test_kernel_dtype_device_scale_errors():
    x = torch.randn(1, 1, 4, 16)
    with pytest.raises(TypeError, match="bfloat16 is not supported on the CPU"):
        flash_attention(x.bfloat16(), x.bfloat16(), x.bfloat16())
    with pytest.raises(TypeError, match="float64 is not supported"):
        flash_attention(x.double(), x.double(), x.double())
    with pytest.raises(TypeError, match="share one dtype"):
        flash_attention(x, x.half(), x)
    with pytest.raises(TypeError, match="floating-point"):
        flash_attention(x.long(), x.long(), x.long())
    with pytest.raises(ValueError, match="same device"):
        flash_attention(x, x.to("meta"), x)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        flash_attention(x, x, x, scale=float("nan"))


def test_missing_triton_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "course_lib.flash.kernels", None)  # import fails
    with pytest.raises(ImportError, match="Colab"):
        flash_attention(*[torch.randn(1, 1, 4, 16)] * 3)
    assert flash.triton_mode() == "unavailable"


def test_cpu_tensors_in_compiled_mode_explain_the_fix(monkeypatch):
    kernels = flash._load_kernels()
    monkeypatch.setattr(kernels, "is_interpreted", lambda: False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        flash_attention(*[torch.randn(1, 1, 4, 16)] * 3)


# --------------------------------------------------------------------------- GPU twins


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "n,d,is_causal", [(1024, 64, False), (1000, 128, True), (4096, 128, True), (2047, 96, False)]
)
def test_kernel_matches_sdpa_on_gpu(dtype, n, d, is_causal):
    _check_kernel(2, 4, n, n, d, is_causal, None, dtype, device="cuda")


@pytest.mark.gpu
def test_kernel_float32_on_gpu_is_true_float32():
    """float32 dots use input_precision="ieee": the GPU meets the CPU's float32 tolerances
    (TF32, the default of a compiled tl.dot, would miss them by ~100x)."""
    _check_kernel(1, 2, 512, 512, 64, True, None, torch.float32, device="cuda")
    _check_kernel(2, 2, 300, 300, 128, False, 0.1, torch.float32, device="cuda")


@pytest.mark.gpu
def test_kernel_offsets_past_int32_on_gpu():
    """B*H*N*d > 2^31 - 1 elements per tensor: the last heads sit beyond int32 offsets.
    The first and last heads' output and gradients are compared with SDPA on those heads
    alone, with the error bound of the other GPU tests (3x torch's own bf16 error)."""
    B, H, N, d = 1, 2100, 8192, 128  # 2.2e9 elements, 4.4 GB per bf16 tensor
    need = 8 * B * H * N * d * 2 + 2**31  # q, k, v, o, do, dq, dk, dv
    if torch.cuda.get_device_properties(0).total_memory < 1.2 * need:
        pytest.skip("needs ~45 GB of GPU memory")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (
        torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)
    )  # (B, H, N, d)
    assert q.numel() > 2**31
    for t in (q, k, v):
        t.requires_grad_()
    out = flash_attention(q, k, v, is_causal=True)  # (B, H, N, d)
    out.backward(do)
    for h in (0, H - 1):
        sl = slice(h, h + 1)
        ours = [out[:, sl], q.grad[:, sl], k.grad[:, sl], v.grad[:, sl]]
        args = (q[:, sl], k[:, sl], v[:, sl], do[:, sl], True, None)
        refs, theirs = _sdpa_grads(*args), _sdpa_grads(*args, dtype=torch.bfloat16)
        for name, got, ref, th in zip(("output", "dQ", "dK", "dV"), ours, refs, theirs):
            err = (got.detach().double().cpu() - ref).abs().max().item()
            err_torch = (th - ref).abs().max().item()
            assert err <= 3 * err_torch + 1e-3, f"head {h} {name}: {err:.3g} vs {err_torch:.3g}"
