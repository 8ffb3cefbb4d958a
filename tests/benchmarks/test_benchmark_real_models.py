"""benchmarks/real_models.py, run offline on tiny random checkpoints in place of the real ones.

A tiny GGUF file stands in for SmolLM2's (read by the course and by transformers' GGUF route),
a tiny GPT-2 folder for the hub's. Nothing is timed here: the speed section's figures are
only checked to be there and consistent.
"""

from __future__ import annotations

import json

import gguf
import pytest
from scripts import load_script
from tiny_gguf import random_tiny_model, write_gguf

from course_lib.gpt import pretrained as P
from course_lib.gpt.tiny_checkpoints import make_tiny_checkpoint

pytest.importorskip("accelerate")  # transformers' GGUF route


def test_the_script_records_every_figure(tmp_path):
    model = random_tiny_model()
    gguf_file = write_gguf(tmp_path / "tiny.gguf", model, qtype=gguf.GGMLQuantizationType.Q4_1)
    gpt2 = make_tiny_checkpoint("gpt2", tmp_path / "gpt2")
    out = tmp_path / "real_models.json"
    load_script("benchmarks/real_models.py").main(
        ["--models", "smollm2", "gpt2", "--folder", f"smollm2={gguf_file}"]
        + ["--folder", f"gpt2={gpt2}", "--out", str(out), "--rounds", "2"]
        + ["--prompt-tokens", "12", "--new-tokens", "4", "--threads", "1", "--bandwidth-mb", "16"]
    )
    report = json.loads(out.read_text())
    assert set(report["models"]) == {"smollm2", "gpt2"}
    assert len(report["machine"]["load_average_1_5_15"]) == 3
    for row in report["models"].values():
        assert row["hub"] is None  # a local file or folder, not the hub
        assert row["max_abs_logit_diff_fp32"] < 1e-4 < row["max_abs_logit"]
        assert row["greedy_equal_to_reference"] and row["cached_equal_to_recomputed"]
        cfg = row["config"]
        assert len(row["induction_scores"]) == cfg["num_layers"]
        assert all(len(r) == cfg["num_heads"] for r in row["previous_token_scores"])
        best = row["induction_top"][0]
        assert best["score"] == max(max(r) for r in row["induction_scores"])
        per_token = 2 * cfg["num_layers"] * cfg["num_kv_heads"] * cfg["head_dim"] * 2
        assert row["kv_cache_bytes_per_token_fp16"] == per_token
    gqa = report["models"]["smollm2"]
    assert gqa["config"]["num_kv_heads"] < gqa["config"]["num_heads"]
    assert gqa["config"]["rope_interleaved"] and gqa["label"] == P.SMOLLM2_LABEL
    assert "speed" not in report["models"]["gpt2"]  # the first model only

    speed = gqa["speed"]
    assert speed["prompt_tokens"] == 12 and speed["rounds"] == 2 and speed["same_greedy_tokens"]
    for who in ("course", "transformers"):
        row = speed[who]
        assert (
            len(row["decode_rounds_tokens_per_s"]) == 2 == len(row["prefill_rounds_tokens_per_s"])
        )
        assert row["decode_tokens_per_s"] > 0 and row["prefill_tokens_per_s"] > 0
    ratio = speed["course"]["decode_tokens_per_s"] / speed["transformers"]["decode_tokens_per_s"]
    assert speed["decode_ratio_course_over_transformers"] == pytest.approx(ratio, rel=1e-2)
    assert speed["course_sdpa"]["decode_tokens_per_s"] > 0  # the same model, SDPA attention
    assert (
        speed["prompt_attention_us_per_layer"]["course"]
        > 0
        < speed["prompt_attention_us_per_layer"]["sdpa"]
    )
    rounds = speed["round_ratios_course_over_transformers"]
    for phase in ("decode", "prefill"):
        assert rounds[phase]["min"] <= rounds[phase]["median"] <= rounds[phase]["max"]

    roof = speed["roofline"]
    weights = sum(p.numel() * 4 for p in P.load_pretrained(gguf_file).parameters())
    assert roof["weight_bytes_per_token"] == weights
    physical = max(max(roof[k].values()) for k in ("streams_at_start", "streams_at_end"))
    assert roof["physical_GB_per_s"] == pytest.approx(physical, abs=0.01)
    per_token = weights + roof["kv_cache_bytes_per_token_at_mean_context"]
    assert roof["physical_tokens_per_s"] == pytest.approx(physical * 1e9 / per_token, rel=1e-2)
    assert roof["achievable_tokens_per_s"] == pytest.approx(
        1000 / roof["achievable_ms_per_token"], rel=0.1
    )
    for who in ("course", "transformers"):
        frac = speed[who]["decode_tokens_per_s"] / roof["achievable_tokens_per_s"]
        assert speed[who]["fraction_of_achievable"] == pytest.approx(frac, rel=1e-2)

    table = speed["formats"]["formats"]
    assert list(table) == ["float32", "bfloat16", "int8", "q4_1"]  # q4_1: the file's blocks
    assert table["float32"]["bytes_per_token"] == weights
    assert (
        table["float32"]["bytes_per_weight"] == 4.0 and table["bfloat16"]["bytes_per_weight"] == 2.0
    )
    assert 1.0 < table["int8"]["bytes_per_weight"] < 1.3
    assert table["q4_1"]["bytes_per_token"] < table["int8"]["bytes_per_token"]
    assert table["float32"]["max_abs_logit_diff_vs_float32"] == 0.0
    for fmt, row in table.items():
        assert row["perplexity"] > 1 and len(row["decode_rounds_tokens_per_s"]) == 2, fmt
        assert row["physical_tokens_per_s"] == pytest.approx(
            row["physical_GB_per_s"] * 1e9 / row["bytes_per_token"], rel=1e-2
        )
    anchor = speed["llama_cpp"]  # the bench extra's llama-cpp-python, where installed
    assert "unavailable" in anchor or anchor["decode_tokens_per_s"] > 0
