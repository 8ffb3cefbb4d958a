"""course_lib.flash.launch: Triton's mode, the GPU, the kernels' arguments by name,
autotuning and the TMA switch: what every launcher shares."""

from __future__ import annotations

import contextlib
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from flash_lab import DEVICE, TOL, assert_close, check_kernel, make_inputs, sdpa_grads

import course_lib.flash as flash
from course_lib.flash import flash_attention, launch
from course_lib.flash.launch import TMA_ENV, tma_compatible, tma_enabled
from course_lib.flash.tiles import Tile

interpreter_only = pytest.mark.skipif(
    flash.triton_mode() != "interpreter", reason="about Triton's interpreter"
)

# --------------------------------------------------------------------------- Triton's mode


def test_triton_mode_says_how_the_kernels_run():
    kernels = launch.load_kernels()
    assert launch.triton_mode() == ("interpreter" if kernels.is_interpreted() else "compiled")
    assert (launch.triton_mode() == "interpreter") == (DEVICE == "cpu")


def test_missing_triton_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "course_lib.flash.kernels", None)  # import fails
    with pytest.raises(ImportError, match="Colab"):
        flash_attention(*[torch.randn(1, 1, 4, 16)] * 3)
    assert flash.triton_mode() == "unavailable"


def test_cpu_tensors_in_compiled_mode_explain_the_fix(monkeypatch):
    kernels = launch.load_kernels()
    monkeypatch.setattr(kernels, "is_interpreted", lambda: False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        flash_attention(*[torch.randn(1, 1, 4, 16)] * 3)
    monkeypatch.setattr(kernels, "is_interpreted", lambda: True)
    assert launch.prepare(torch.randn(1)) is True


def test_kernel_source_is_every_kernel_file_in_pass_order():
    src = launch.kernel_source()
    order = ["def _load_2d", "def _fwd_kernel", "def _bwd_preprocess_kernel", "def _bwd_dq_kernel",
             "def _decode_kernel", "def _decode_merge_kernel"]  # fmt: skip
    where = [src.index(name) for name in order]
    assert where == sorted(where)
    assert launch.KERNEL_MODULES == ("common", "forward", "backward", "decode")


# --------------------------------------------------------------------------- the GPU


def test_without_a_gpu_the_architecture_is_hoppers_and_the_limits_are_tabled():
    assert launch.device_arch("cpu") == 90
    assert launch.shared_limit("cpu", 80) == launch.SHARED_LIMIT[80] == 163 * 1024
    assert launch.shared_limit("cpu", 75) == 99 * 1024  # an architecture not in the table
    assert isinstance(launch.on_device(torch.zeros(1)), contextlib.nullcontext)


# --------------------------------------------------------------------------- arguments


def test_dot_precision_is_true_float32_for_float32():
    """A compiled tl.dot rounds float32 operands to TF32 unless told "ieee"."""
    assert launch.dot_precision(torch.float32) == "ieee"
    assert launch.dot_precision(torch.float16) != "ieee"  # ignored for 16-bit operands
    assert launch.dot_precision(torch.bfloat16) != "ieee"


def test_head_dim_args_pad_the_features_to_a_power_of_two():
    assert launch.head_dim_args(48, torch.float16) == dict(
        HEAD_DIM=48, BLOCK_D=64, EVEN_D=False, DOT_PRECISION="tf32"
    )
    assert launch.head_dim_args(128, torch.float32)["EVEN_D"] is True
    assert launch.head_dim_args(8, torch.float32)["BLOCK_D"] == 16  # tl.dot needs 16 at least


def test_strides_sizes_and_buckets_by_the_kernels_names():
    q = torch.empty(2, 5, 3, 8).transpose(1, 2)  # (B, H, N, d) = (2, 3, 5, 8), a bnhd view
    k = torch.empty(2, 1, 7, 8)
    assert launch.strides("q", q) == dict(stride_qb=120, stride_qh=8, stride_qn=24)
    args = launch.with_strides(Q=q, DO=k)
    assert list(args) == ["Q", "stride_qb", "stride_qh", "stride_qn",
                          "DO", "stride_dob", "stride_doh", "stride_don"]  # fmt: skip
    assert args["Q"] is q and args["stride_doh"] == 56
    assert launch.sizes(q, k) == dict(H=3, NUM_GROUPS=3, N_Q=5, N_K=7)
    assert [launch.bucket(n) for n in (1, 2, 3, 45, 64, 65)] == [1, 2, 4, 64, 64, 128]
    assert launch.buckets(q, k) == dict(NQ_BUCKET=8, NK_BUCKET=8)


def test_last_dim_contiguous_and_outputs_in_the_callers_layout():
    x = torch.randn(2, 6, 3, 4).transpose(1, 2)  # a bnhd view: unit stride along d already
    assert launch.last_dim_contiguous(x) is x
    t = torch.randn(2, 3, 4, 6).transpose(-1, -2)  # d not the unit-stride dimension
    fixed = launch.last_dim_contiguous(t)
    assert fixed.stride(-1) == 1 and torch.equal(fixed, t)
    o = launch.empty_like_layout(x, "bnhd", dtype=torch.float16)
    assert o.shape == x.shape and o.dtype == torch.float16
    assert o.transpose(1, 2).is_contiguous()  # memory is [B, N, H, d]
    assert launch.empty_like_layout(x, "bhnd").is_contiguous()


class _FakeKernel:
    """Stands for a @triton.jit kernel: records the grid and the keyword arguments."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda **kw: self.calls.append((grid, kw))


def test_run_kernel_with_one_tile_launches_it_as_is():
    kernel = _FakeKernel()
    launch.run_kernel(kernel, [Tile(16, 32, 2, 1)], lambda t: (40 // t["BLOCK_M"], 3),
                      N_Q=48, N_K=64, X=1)  # fmt: skip
    [(grid, kw)] = kernel.calls
    assert grid == (2, 3)
    assert kw == dict(N_Q=48, N_K=64, X=1, BLOCK_M=16, BLOCK_N=32, num_warps=2, num_stages=1,
                      EVEN_M=True, EVEN_N=True)  # fmt: skip
    launch.run_kernel(kernel, [Tile(32, 48)], lambda t: (1,), N_Q=48, N_K=64)
    assert (kernel.calls[-1][1]["EVEN_M"], kernel.calls[-1][1]["EVEN_N"]) == (False, False)


def test_autotuned_launch_path_through_the_interpreter(monkeypatch):
    """The GPU path (several candidate configs, Triton's autotuner, EVEN_M/EVEN_N from
    triton.heuristics) with a CPU timer; lengths in one power-of-two bucket tune once."""
    calls = []

    def cpu_bench(fn, quantiles=None):
        t0 = time.perf_counter()
        fn()
        ms = 1e3 * (time.perf_counter() - t0)
        calls.append(ms)
        return [ms, ms, ms]

    two = {
        "fwd": [Tile(32, 16), Tile(16, 32)],
        "dkdv": [Tile(16, 32), Tile(32, 16)],
        "dkdv_atomic": [Tile(16, 32), Tile(32, 16)],
        "dq": [Tile(32, 16), Tile(16, 16)],
        "decode": [Tile(16, 16)],
    }
    for module in (flash.forward, flash.backward):  # where the launchers look them up
        monkeypatch.setattr(module, "kernel_config", lambda *a, **k: two)
    monkeypatch.setattr(launch, "AUTOTUNE_TIMER", cpu_bench)
    check_kernel(1, 2, 45, 45, 32, True, None, torch.float32)
    tuners = [t for t in launch.autotuners() if t.timer is cpu_bench]
    assert {t.name for t in tuners} >= {"fwd_kernel", "bwd_dkdv_kernel", "bwd_dq_kernel"}
    fwd = next(t for t in tuners if t.name == "fwd_kernel")
    assert fwd.best_config is not None and fwd.best_config.kwargs["BLOCK_M"] in (16, 32)
    key = dict(NQ_BUCKET=64, NK_BUCKET=64, HEAD_DIM=32, IS_CAUSAL=True, HAS_WINDOW=False)
    assert fwd.chosen(**key) is not None and fwd.chosen(**dict(key, NQ_BUCKET=8)) is None
    tuned = len(calls)
    check_kernel(1, 2, 50, 50, 32, True, None, torch.float32)  # same bucket (64): no re-tuning
    assert len(calls) == tuned
    check_kernel(1, 2, 32, 32, 32, False, None, torch.float32)  # even lengths, new bucket
    assert len(calls) > tuned
    # The atomic dQ under the autotuner: every timed trial adds into the same buffer, so the
    # tuner must zero it before each (reset_to_zero); otherwise dQ comes out several times over.
    q, k, v, do = make_inputs(1, 2, 40, 40, 32, torch.float32, DEVICE)
    q.requires_grad_()
    flash_attention(q, k, v, is_causal=True, deterministic=False).backward(do)
    atomic = [t for t in launch.autotuners() if t.reset == ("DQ_ACC",)]
    assert atomic and atomic[0].name == "bwd_dkdv_kernel_atomic_dq"
    assert_close(q.grad, sdpa_grads(q, k, v, do, True, None)[1], TOL[torch.float32]["grad"], "dQ")


# --------------------------------------------------------------------------- TMA


def test_tma_compatible_checks_base_and_strides():
    x = torch.randn(2, 3, 40, 48)
    assert tma_compatible(x, x.transpose(1, 2).contiguous().transpose(1, 2))
    assert not tma_compatible(torch.randn(1, 2, 8, 20).half())  # 40-byte token stride
    assert tma_compatible(x.half()[..., :20])  # 20 of 48 features: the strides stay aligned
    assert not tma_compatible(x.reshape(-1)[1:].reshape(1, 1, 1, -1)[..., :48])  # base + 4 B
    assert not tma_compatible(x.transpose(-1, -2))  # d not the unit-stride dimension

    def strided(heads):  # a 14-byte head stride: never used when there is one head
        return torch.empty_strided((2, heads, 4, 24), (2000, 7, 24, 1), dtype=torch.float16)

    assert tma_compatible(strided(1)) and not tma_compatible(strided(2))


@interpreter_only
def test_tma_switch_rule(monkeypatch):
    """Off by default and for 0; 1 only when compiled on sm_90+ (never on the CPU or in the
    interpreter); force also in the interpreter; anything else is an error."""
    monkeypatch.delenv(TMA_ENV, raising=False)
    assert not tma_enabled("cpu") and not tma_enabled("cuda", interpreted=False)
    for setting, interpreted, device, expected in [
        ("0", True, "cpu", False),
        ("1", True, "cpu", False),
        ("1", False, "cpu", False),  # compiled, but not a CUDA tensor
        ("force", True, "cpu", True),
        ("force", False, "cpu", False),
        (" Force ", True, "cpu", True),  # read as written by a person
    ]:
        monkeypatch.setenv(TMA_ENV, setting)
        assert tma_enabled(device, interpreted=interpreted) is expected, (setting, interpreted)
    monkeypatch.setenv(TMA_ENV, "yes")
    with pytest.raises(ValueError, match="COURSE_FLASH_TMA"):
        tma_enabled("cpu")


def test_ensure_allocator_sets_one_only_when_none_is_set(monkeypatch):
    import triton
    from triton.runtime import _allocation

    given = []
    monkeypatch.setattr(triton, "set_allocator", given.append)
    unset = SimpleNamespace(get=lambda: _allocation.NullAllocator())
    monkeypatch.setattr(_allocation, "_allocator", unset)
    launch.ensure_allocator()
    assert given == [launch._tma_scratch]
    monkeypatch.setattr(_allocation, "_allocator", SimpleNamespace(get=object))  # someone's
    launch.ensure_allocator()
    assert len(given) == 1
