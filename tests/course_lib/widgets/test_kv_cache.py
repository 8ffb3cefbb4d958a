"""course_lib.widgets.kv_cache: chapter 04's KV-cache calculator, driven from code; its
numbers are course_lib.multihead's."""

from __future__ import annotations

import pytest

from course_lib.multihead import GPU_MEMORY_BYTES, decode_step_bytes, kv_cache_bytes

pytest.importorskip("ipywidgets")

from course_lib.widgets.kv_cache import KVCacheCalculator  # noqa: E402

GiB = 1024**3


def test_kv_cache_calculator_follows_its_sliders():
    weights = 16e9  # 14.90 GiB
    calc = KVCacheCalculator(num_layers=32, head_dim=128, weights_bytes=weights)
    assert calc.memory_bytes == GPU_MEMORY_BYTES["H100 80GB"] == 81559 * 2**20
    assert calc.cache_bytes == kv_cache_bytes(32, 8, 128, 8192) == GiB
    assert calc.fits and "fits" in calc.result.value and "NOT" not in calc.result.value
    assert "79.65 GiB of an H100 80GB" in calc.result.value and " GB " not in calc.result.value
    before = calc.updates
    calc.tokens.value, calc.heads.value = 131072, 32  # MHA at 128k: 64 + 14.9 GiB < 79.65 GiB
    assert calc.updates == before + 2
    assert calc.cache_bytes == 64 * GiB and calc.fits  # one sequence, barely
    calc.batch.value = 2
    assert "128.00 GiB" in calc.result.value and "does NOT fit" in calc.result.value
    calc.batch.value = 1
    calc.heads.value = 8
    calc.batch.value = 4  # 4 x 16 GiB + 14.9 GiB = 78.9 GiB: fits; a 5th sequence does not
    assert calc.fits
    assert calc.step_bytes.cache == 64 * GiB and calc.step_bytes.weights == weights
    assert "81% of it KV cache" in calc.result.value
    calc.batch.value = 5
    assert not calc.fits and calc.total_bytes == 5 * 16 * GiB + weights
    assert "kv-cache-calculator" in calc.widget._dom_classes
    with pytest.raises(ValueError, match="num_kv_heads=3 is not one of"):
        KVCacheCalculator(num_layers=32, head_dim=128, weights_bytes=weights, num_kv_heads=3)


def test_every_slider_enters_the_formula():
    calc = KVCacheCalculator(
        num_layers=4, head_dim=16, weights_bytes=0, bytes_per_value=4, num_kv_heads=2,
        seq_len=1024, kv_head_choices=(1, 2, 4), memory_bytes=GiB, memory_name="toy",
    )  # fmt: skip
    for heads, tokens, batch in ((1, 1024, 1), (4, 4096, 3), (2, 131072, 7)):
        calc.heads.value, calc.tokens.value, calc.batch.value = heads, tokens, batch
        want = kv_cache_bytes(4, heads, 16, tokens, batch_size=batch, bytes_per_value=4)
        assert calc.cache_bytes == want == 2 * 4 * heads * 16 * tokens * batch * 4
        step = decode_step_bytes(0, 4, heads, 16, tokens, batch_size=batch, bytes_per_value=4)
        assert calc.step_bytes == step
        assert calc.fits == (want <= GiB)
    assert f"KV cache <b>{calc.cache_bytes / GiB:.2f} GiB</b>" in calc.result.value
    assert "of an toy" in calc.result.value and "100% of it KV cache" in calc.result.value


def test_the_fit_is_cache_plus_weights_against_the_memory():
    cache = 2 * 1 * 1 * 64 * 1024 * 2  # K and V, 1 layer, 1 head, d_h 64, 1k tokens, 2 bytes
    calc = KVCacheCalculator(
        num_layers=1, head_dim=64, weights_bytes=GiB - cache, memory_bytes=GiB, num_kv_heads=1,
        seq_len=1024,
    )  # fmt: skip
    assert calc.total_bytes == GiB and calc.fits  # exactly full still fits
    calc.batch.value = 2
    assert not calc.fits


def test_bad_settings_are_named():
    common = {"num_layers": 2, "head_dim": 8}
    with pytest.raises(ValueError, match="seq_len=5000 is not one of"):
        KVCacheCalculator(weights_bytes=1, seq_len=5000, **common)
    with pytest.raises(ValueError, match="weights_bytes >= 0 and memory_bytes > 0"):
        KVCacheCalculator(weights_bytes=-1, **common)
    with pytest.raises(ValueError, match="weights_bytes >= 0 and memory_bytes > 0"):
        KVCacheCalculator(weights_bytes=1, memory_bytes=0, **common)
    with pytest.raises(ValueError, match="weights_bytes >= 0 and memory_bytes > 0"):
        KVCacheCalculator(weights_bytes=float("nan"), **common)
