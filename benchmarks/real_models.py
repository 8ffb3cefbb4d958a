"""Record chapter 10's figures of the real models: GPT-2 small and SmolLM2-135M in the course's GPT.

    python benchmarks/real_models.py            # downloads both (a network is needed once)
        [--models gpt2 smollm2] [--folder gpt2=PATH ...] [--out PATH]

For each model: the course's model loaded by ``course_lib.gpt.pretrained``, checked against
``transformers``' own implementation of the same checkpoint (largest logit difference in
float32 on a fixed sentence, equal greedy continuations with and without the course's KV
cache); the previous-token and induction scores of every head on repeated random tokens
(Olsson et al., 2022: a random sequence of ``T`` tokens, twice) and the loss on each copy;
the KV cache's bytes per token from the config. Writes JSON (default
``benchmarks/results/real_models.json``) with the machine, versions and date, which
``notebooks/10_real_models.ipynb`` shows. ``--folder NAME=PATH`` reads a local checkpoint
instead of the hub's (the tests run the script on tiny random checkpoints that way).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

SENTENCE = "When Mary and John went to the store, John gave a drink to"
PERIOD = 50  # tokens per copy of the repeated random sequence
BATCH = 4
NEW_TOKENS = 20
TOP = 5


def measure(name: str, folder: Path) -> dict:
    """Every figure of one model (``folder`` holds config.json and model.safetensors)."""
    import torch
    import transformers

    from course_lib.gpt import (
        induction_scores,
        loss_per_position,
        previous_token_scores,
        repeated_random_tokens,
    )
    from course_lib.gpt import pretrained as P

    t0 = time.perf_counter()
    model = P.load_pretrained(folder)
    load_s = time.perf_counter() - t0
    # float32 like the course's model (a checkpoint stored in bfloat16 would load as bfloat16)
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    reference = reference.eval()
    tokenizer = P.load_tokenizer(folder)
    cfg = model.config
    tokens = tokenizer.encode(SENTENCE)[None, :]  # (1, N)
    with torch.no_grad():
        ours, theirs = model(tokens), reference(tokens).logits  # (1, N, V)
    cached = model.generate(tokens, NEW_TOKENS, temperature=0)  # (1, N + new)
    recomputed = model.generate(tokens, NEW_TOKENS, temperature=0, use_cache=False)
    ref_tokens = reference.generate(
        tokens, max_new_tokens=NEW_TOKENS, do_sample=False, attention_mask=torch.ones_like(tokens)
    )  # (1, N + new)

    period = min(PERIOD, cfg.seq_len // 2)
    low = min(1000, cfg.vocab_size // 4)  # skip the rarest ids' neighbours: ordinary tokens
    rep = repeated_random_tokens(
        BATCH, period, cfg.vocab_size, generator=torch.Generator().manual_seed(0), low=low
    )  # (B, 2T)
    with torch.no_grad():
        _, weights = model(rep, need_weights=True)  # L x (B, H, 2T, 2T)
    induction = torch.stack([induction_scores(w, period) for w in weights])  # (L, H)
    previous = torch.stack([previous_token_scores(w) for w in weights])  # (L, H)
    per_position = loss_per_position(model, rep)  # (2T-1,)

    def top(scores):
        flat = scores.flatten().argsort(descending=True)[:TOP]
        return [
            {"layer": int(i) // cfg.num_heads, "head": int(i) % cfg.num_heads,
             "score": round(float(scores.flatten()[i]), 4)}
            for i in flat
        ]  # fmt: skip

    return {
        "folder": str(folder) if not str(folder).startswith(str(Path.home())) else folder.name,
        "config": {
            "num_layers": cfg.num_layers,
            "num_heads": cfg.num_heads,
            "num_kv_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "d_model": cfg.d_model,
            "vocab_size": cfg.vocab_size,
            "positions": cfg.positions,
            "norm": cfg.norm,
            "activation": cfg.activation,
        },
        "num_params": model.num_params(),
        "load_seconds": round(load_s, 2),
        "sentence": SENTENCE,
        "max_abs_logit_diff_fp32": float((ours - theirs).abs().max()),
        "max_abs_logit": float(theirs.abs().max()),
        "same_next_token": bool((ours.argmax(-1) == theirs.argmax(-1)).all()),
        "greedy_equal_to_reference": bool(torch.equal(cached, ref_tokens)),
        "cached_equal_to_recomputed": bool(torch.equal(cached, recomputed)),
        "continuation": tokenizer.decode(cached[0, tokens.shape[1] :]),
        "repeated_tokens": {"batch": BATCH, "period": period, "low": low},
        "induction_top": top(induction),
        "previous_token_top": top(previous),
        "induction_scores": [[round(float(s), 4) for s in row] for row in induction],
        "previous_token_scores": [[round(float(s), 4) for s in row] for row in previous],
        "first_copy_loss": float(per_position[: period - 1].mean()),
        "second_copy_loss": float(per_position[period - 1 :].mean()),
        "kv_cache_bytes_per_token_fp16": cfg.kv_cache_bytes(seq_len=1, bytes_per_value=2),
        "kv_cache_bytes_per_token_fp32": cfg.kv_cache_bytes(seq_len=1, bytes_per_value=4),
    }


def main(argv: list[str] | None = None) -> dict:
    from course_lib import env
    from course_lib.gpt.pretrained import REAL_MODELS, checkpoint_folder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(REAL_MODELS), choices=list(REAL_MODELS))
    parser.add_argument("--folder", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--out", type=Path, default=RESULTS / "real_models.json")
    args = parser.parse_args(argv)
    folders = dict(item.split("=", 1) for item in args.folder)
    env.setup(quiet=True, plots=False)
    import torch
    import transformers

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    report = {
        "command": "python benchmarks/real_models.py " + " ".join(argv or sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()})",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "models": {},
    }
    for name in args.models:
        if name in folders:
            folder = Path(folders[name])
            hub = None
        else:
            hub = REAL_MODELS[name]
            folder = checkpoint_folder(hub, download=True)
        print(f"{name}: {hub or folder}", flush=True)
        report["models"][name] = dict(measure(name, folder), hub=hub)
        row = report["models"][name]
        print(
            f"  logits differ by at most {row['max_abs_logit_diff_fp32']:.2e}; greedy equal: "
            f"{row['greedy_equal_to_reference']}; best induction head "
            f"{row['induction_top'][0]}; KV cache {row['kv_cache_bytes_per_token_fp16']:,} "
            "bytes/token (fp16)",
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
