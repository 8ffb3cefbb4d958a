"""course_lib.widgets.cache_compare: chapter 08's table of MHA, GQA, MQA and MLA cache sizes,
driven from code; its numbers are course_lib.variants.mla's."""

from __future__ import annotations

import re

import pytest

from course_lib.variants.mla import DEEPSEEK_V2, MLAConfig, cache_bytes_per_token, mla_cache_bytes

pytest.importorskip("ipywidgets")

from course_lib.widgets.cache_compare import CacheComparison, GiB  # noqa: E402


def test_cache_comparison_widget_follows_its_sliders():
    w = CacheComparison(DEEPSEEK_V2, seq_len=4096)
    per_token = cache_bytes_per_token(DEEPSEEK_V2)
    assert w.totals == {k: v * 4096 for k, v in per_token.items()}
    before = w.updates
    w.batch.value = 3
    w.tokens.value = 131072
    assert w.updates == before + 2
    assert w.totals["MLA"] == mla_cache_bytes(60, 512, 64, 131072, 3)
    assert "MLA" in w.result.value and "GiB" in w.result.value
    with pytest.raises(ValueError, match="seq_len"):
        CacheComparison(DEEPSEEK_V2, seq_len=1000)


def _rows(html: str) -> dict[str, tuple[float, float]]:
    """The table's rows: label -> (KiB per token, GiB in total)."""
    found = re.findall(r"<tr><td>(\w+)[^<]*</td><td[^>]*>([\d,.]+) KiB</td><td[^>]*><b>([\d,.]+) GiB", html)  # fmt: skip
    return {k: (float(a.replace(",", "")), float(b.replace(",", ""))) for k, a, b in found}


def test_the_table_shows_the_librarys_numbers_for_every_kind():
    small = MLAConfig(
        d_model=64, num_heads=8, head_dim=16, kv_latent_dim=32, rope_head_dim=8, num_layers=4
    )
    w = CacheComparison(small, gqa_kv_heads=2, bytes_per_value=4, seq_len=1024, max_batch=8)
    per_token = cache_bytes_per_token(small, gqa_kv_heads=2, bytes_per_value=4)
    assert w.per_token == per_token
    w.batch.value = 8
    rows = _rows(w.result.value)
    assert list(rows) == ["MHA", "GQA", "MQA", "MLA"]
    for kind, (kib, gib) in rows.items():
        assert kib == pytest.approx(per_token[kind] / 1024, abs=0.05)
        assert gib == pytest.approx(per_token[kind] * 1024 * 8 / GiB, abs=0.005)
    assert "GQA (2 KV heads)" in w.result.value and "MHA (8 KV heads)" in w.result.value
    assert "d_c + d_h^R = 40" in w.result.value
    # fewer key/value heads, a smaller cache
    assert rows["MHA"][0] > rows["GQA"][0] > rows["MQA"][0]
    assert w.batch.max == 8


def test_the_parts_carry_their_css_classes():
    w = CacheComparison(DEEPSEEK_V2)
    assert "cache-compare" in w.widget._dom_classes
    for part, name in ((w.tokens, "tokens"), (w.batch, "batch"), (w.result, "result")):
        assert f"cache-compare-{name}" in part._dom_classes
    assert w.tokens.value == 32768 and w.batch.value == 1 and w.updates == 1
