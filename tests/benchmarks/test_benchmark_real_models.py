"""benchmarks/real_models.py, run offline on tiny random checkpoints in place of the real ones.

A tiny GGUF file stands in for SmolLM2's (read by the course and by transformers' GGUF route),
a tiny GPT-2 folder for the hub's. Nothing is timed here: the speed section's figures are
only checked to be there and consistent.
"""

from __future__ import annotations

import json

import pytest
from scripts import load_script
from tiny_gguf import random_tiny_model, write_gguf

from course_lib.gpt import pretrained as P
from course_lib.gpt.tiny_checkpoints import make_tiny_checkpoint

pytest.importorskip("accelerate")  # transformers' GGUF route


def test_the_script_records_every_figure(tmp_path):
    gguf_file = write_gguf(tmp_path / "tiny.gguf", random_tiny_model())
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
        assert len(speed[who]["decode_rounds_tokens_per_s"]) == 2
        assert speed[who]["decode_tokens_per_s"] > 0 and speed[who]["prefill_tokens_per_s"] > 0
    ratio = speed["course"]["decode_tokens_per_s"] / speed["transformers"]["decode_tokens_per_s"]
    assert speed["decode_ratio_course_over_transformers"] == pytest.approx(ratio, rel=1e-2)
    roof = speed["roofline"]
    weights = sum(p.numel() * 4 for p in P.load_pretrained(gguf_file).parameters())
    assert roof["weight_bytes_per_token"] == weights
    assert roof["decode_tokens_per_s_at_full_bandwidth"] == pytest.approx(
        roof["copy_bandwidth_GB_per_s"]
        * 1e9
        / (weights + roof["kv_cache_bytes_per_token_at_mean_context"]),
        rel=1e-2,
    )
