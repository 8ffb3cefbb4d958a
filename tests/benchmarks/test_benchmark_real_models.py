"""benchmarks/real_models.py, run offline on tiny random checkpoints in place of the hub's."""

from __future__ import annotations

import json

from scripts import load_script

from course_lib.gpt import pretrained as P


def test_the_script_records_every_figure(tmp_path):
    gpt2 = P.make_tiny_checkpoint("gpt2", tmp_path / "gpt2")
    llama = P.make_tiny_checkpoint("llama", tmp_path / "llama")
    out = tmp_path / "real_models.json"
    load_script("benchmarks/real_models.py").main(
        ["--folder", f"gpt2={gpt2}", "--folder", f"smollm2={llama}", "--out", str(out)]
    )
    report = json.loads(out.read_text())
    assert set(report["models"]) == {"gpt2", "smollm2"}
    for row in report["models"].values():
        assert row["hub"] is None  # a local folder, not the hub
        assert row["max_abs_logit_diff_fp32"] < 1e-4 < row["max_abs_logit"]
        assert row["greedy_equal_to_reference"] and row["cached_equal_to_recomputed"]
        cfg = row["config"]
        assert len(row["induction_scores"]) == cfg["num_layers"]
        assert all(len(r) == cfg["num_heads"] for r in row["previous_token_scores"])
        best = row["induction_top"][0]
        assert best["score"] == max(max(r) for r in row["induction_scores"])
        per_token = 2 * cfg["num_layers"] * cfg["num_kv_heads"] * cfg["head_dim"] * 2
        assert row["kv_cache_bytes_per_token_fp16"] == per_token
    gqa = report["models"]["smollm2"]["config"]
    assert gqa["num_kv_heads"] < gqa["num_heads"]
