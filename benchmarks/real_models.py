r"""Record chapter 10's figures of the real models in the course's GPT, and their speed.

    python benchmarks/real_models.py            # SmolLM2-135M-Instruct from its GGUF file
        [--models smollm2 gpt2 smollm2-base] [--folder NAME=PATH ...] [--out PATH]
        [--rounds 5] [--prompt-tokens 128] [--new-tokens 32] [--threads N] [--no-speed]

``smollm2`` is the file every machine has (``make model``): SmolLM2-135M-Instruct, 4-bit Q4_1
weights dequantized to float32, read by ``course_lib.gpt.pretrained`` from llama.cpp's GGUF
and, as the reference, by transformers' GGUF route from the same file. ``gpt2`` and
``smollm2-base`` are hub checkpoints (``REAL_MODELS``; a network is needed once).

For each model: the course's model checked against ``transformers``' implementation of the
same weights (largest logit difference in float32 on a fixed sentence, equal greedy
continuations with and without the course's KV cache); the previous-token and induction
scores of every head on repeated random tokens (Olsson et al., 2022: a random sequence of
``T`` tokens, twice) and the loss on each copy; the KV cache's bytes per token.

**Speed** (the first model; ``--no-speed`` skips it; :mod:`decoding` holds the parts):
prefill and decode tokens/s of the course's model (its KV cache, greedy) and of
transformers' (its cache) on the same CPU and threads, in interleaved rounds (course,
transformers, course, ...): medians, every round, and the per-round ratios. Decode reads
every weight once per token (the tied embedding too: it is the read-out) plus the cache so
far, so its speed has two ceilings, both measured in the same run:

.. math:: \text{tokens/s} \le \frac{B}{\text{bytes}_\text{weights}
          + \text{bytes}_\text{KV}(N)},

the *physical* one with :math:`B` the fastest memory stream measured (a copy, a sum, one
large matrix-vector product), the *achievable* one timing the model's own matrices, each
times one vector, and nothing else; :math:`N` is the mean context of the decode steps.
Then the **bytes-per-weight table** (``--no-formats`` skips it): the same model decoded in
float32, bfloat16, int8 and the GGUF file's own Q4_1 blocks (:mod:`course_lib.gpt.quantize`),
each with its bytes per token, both rooflines, perplexity on a fixed text and the largest
logit difference against float32; and **llama.cpp** on the same file as the anchor
(``llama-cpp-python`` from the ``bench`` extra, in a subprocess; ``--no-anchor`` skips it).

Writes JSON (default ``benchmarks/results/real_models.json``) with the machine, its load
average, the versions and the date. ``--folder NAME=PATH`` reads a local checkpoint (a folder
or a ``.gguf``) instead (the tests run the script on tiny random ones that way). Run it on a
quiet machine: other work slows the small operations of both implementations unevenly.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

import decoding as D  # noqa: E402

SENTENCE = "When Mary and John went to the store, John gave a drink to"
PERIOD = 50  # tokens per copy of the repeated random sequence
BATCH = 4
NEW_TOKENS = 20
TOP = 5
MODELS = ("smollm2", "gpt2", "smollm2-base")  # the GGUF file, then the hub's checkpoints
# a long, ordinary English prompt for the speed runs, cut to --prompt-tokens tokens
PROSE = (
    "The history of computing is a story of machines that got smaller, faster and cheaper "
    "while the problems they were asked to solve grew larger. Early computers filled rooms "
    "and were programmed by rewiring panels; later ones read punched cards, then magnetic "
    "tape, then disks. Each step changed who could use a computer and what for. "
) * 8


def reference_model(path: Path):
    """transformers' own implementation of the same weights, in float32."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if path.suffix == ".gguf":  # transformers' GGUF route dequantizes the same file
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.eval()


def measure(name: str, path: Path, model, reference) -> dict:
    """Every figure of one model but speed (``path``: a folder or a ``.gguf`` file)."""
    import torch

    from course_lib.gpt import (
        induction_scores,
        loss_per_position,
        previous_token_scores,
        repeated_random_tokens,
    )
    from course_lib.gpt import pretrained as P

    tokenizer = P.load_tokenizer(path)
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
        "file": str(path) if not str(path).startswith(str(Path.home())) else path.name,
        "config": {
            "num_layers": cfg.num_layers,
            "num_heads": cfg.num_heads,
            "num_kv_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "d_model": cfg.d_model,
            "vocab_size": cfg.vocab_size,
            "positions": cfg.positions,
            "rope_interleaved": cfg.rope_interleaved,
            "norm": cfg.norm,
            "activation": cfg.activation,
        },
        "num_params": model.num_params(),
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


# =========================================================================== speed


def _with_sdpa(model, prompt, new: int):
    """:func:`decoding.decode_course` with the model's attention backend set to ``"torch"``."""
    model.use_backend("torch")
    try:
        return D.decode_course(model, prompt, new)
    finally:
        model.use_backend("course")


def speed(model, reference, path, tokenizer, prompt, *, rounds: int, new: int, args) -> dict:
    """Prefill and decode of the course and transformers (interleaved rounds), both rooflines,
    the formats' table and llama.cpp's anchor (:mod:`decoding`)."""
    import torch

    from course_lib.gpt.quantize import bytes_per_token

    measured = [D.streams(args.bandwidth_mb)]
    runners = {
        "course": (D.decode_course, model),  # its own attention arithmetic, the default
        "transformers": (D.decode_reference, reference),
        "course_sdpa": (_with_sdpa, model),  # the same model, attention by PyTorch's SDPA
    }
    runs = D.interleaved(runners, prompt, rounds=rounds, new=new)
    same = all(torch.equal(a[2], b[2]) for a, b in zip(runs["course"], runs["transformers"]))
    n, cfg = prompt.shape[1], model.config
    weight_bytes = bytes_per_token(model)
    mean_context = n + new / 2  # the decode steps see n+1 .. n+new-1 cached positions
    kv_bytes = cfg.kv_cache_bytes(seq_len=int(mean_context), bytes_per_value=4)
    measured.append(D.streams(args.bandwidth_mb))
    best = {key: max(m[key] for m in measured) for key in measured[0]}
    roof = D.rooflines(model, weight_bytes + kv_bytes, best)
    out = {who: D.summary(rows, n, new) for who, rows in runs.items()}
    for row in out.values():
        row.update(D.fractions(row, roof))
    course, theirs = out["course"], out["transformers"]
    ours = runs["course"][-1][2][0].tolist()
    result = {
        "prompt_tokens": n,
        "new_tokens": new,
        "rounds": rounds,
        "threads": torch.get_num_threads(),
        "same_greedy_tokens": bool(same),
        **out,
        "decode_ratio_course_over_transformers": round(
            course["decode_tokens_per_s"] / theirs["decode_tokens_per_s"], 3
        ),
        "prefill_ratio_course_over_transformers": round(
            course["prefill_tokens_per_s"] / theirs["prefill_tokens_per_s"], 3
        ),
        "round_ratios_course_over_transformers": D.ratios(
            runs["course"], runs["transformers"], n, new
        ),
        "round_ratios_course_sdpa_over_transformers": D.ratios(
            runs["course_sdpa"], runs["transformers"], n, new
        ),
        "prompt_attention_us_per_layer": D.prompt_attention(cfg, n),
        "roofline": {
            "streams_at_start": measured[0],
            "streams_at_end": measured[1],
            **roof,
            "weight_bytes_per_token": weight_bytes,
            "kv_cache_bytes_per_token_at_mean_context": kv_bytes,
            "mean_context": mean_context,
        },
    }
    if not args.no_formats:
        result["formats"] = D.formats(
            model, path, tokenizer, prompt, rounds=rounds, new=new, measured=best
        )
    if not args.no_anchor:
        result["llama_cpp"] = (
            D.llama_cpp_anchor(
                path,
                prompt[0].tolist(),
                new=new,
                rounds=rounds,
                threads=result["threads"],
                ours=ours,
            )  # fmt: skip
            if str(path).endswith(".gguf")
            else {"unavailable": "not a GGUF file"}
        )
    return result


# =========================================================================== the run


def machine() -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


def resolve(name: str, folders: dict) -> tuple[Path, str | None]:
    """(the file or folder to read, the hub name or None) of one model."""
    from course_lib.gpt import pretrained as P

    if name in folders:
        return Path(folders[name]), None
    if name == "smollm2":
        return P.smollm2_path(), None
    from course_lib.gpt.hub_cache import checkpoint_folder

    return checkpoint_folder(P.REAL_MODELS[name], download=True), P.REAL_MODELS[name]


def main(argv: list[str] | None = None) -> dict:
    from course_lib import env

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2"], choices=MODELS)
    parser.add_argument("--folder", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--out", type=Path, default=RESULTS / "real_models.json")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="default: min(4, CPUs)")
    parser.add_argument("--bandwidth-mb", type=int, default=512, help="the copied tensor's size")
    parser.add_argument("--no-speed", action="store_true")
    parser.add_argument("--no-formats", action="store_true", help="skip the bytes-per-weight table")
    parser.add_argument("--no-anchor", action="store_true", help="skip llama.cpp")
    args = parser.parse_args(argv)
    folders = dict(item.split("=", 1) for item in args.folder)
    env.setup(quiet=True, plots=False)
    import torch
    import transformers

    from course_lib.gpt import pretrained as P

    torch.set_num_threads(args.threads or max(1, min(4, os.cpu_count() or 1)))
    report = {
        "command": "python benchmarks/real_models.py " + " ".join(argv or sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "models": {},
    }
    for i, name in enumerate(args.models):
        path, hub = resolve(name, folders)
        print(f"{name}: {hub or path}", flush=True)
        t0 = time.perf_counter()
        model = P.load_pretrained(path)
        load_s = time.perf_counter() - t0
        reference = reference_model(path)
        row = dict(measure(name, path, model, reference), hub=hub, load_seconds=round(load_s, 2))
        row["label"] = P.SMOLLM2_LABEL if name == "smollm2" and hub is None else (hub or name)
        if i == 0 and not args.no_speed:
            tokenizer = P.load_tokenizer(path)
            prompt = tokenizer.encode(PROSE)[None, : args.prompt_tokens]  # (1, n)
            row["speed"] = sp = speed(
                model, reference, path, tokenizer, prompt,
                rounds=args.rounds, new=args.new_tokens, args=args,
            )  # fmt: skip
            roof = sp["roofline"]
            print(
                f"  decode: course {sp['course']['decode_tokens_per_s']} tokens/s, "
                f"transformers {sp['transformers']['decode_tokens_per_s']} "
                f"(ratio {sp['decode_ratio_course_over_transformers']}; prefill "
                f"{sp['prefill_ratio_course_over_transformers']}); rooflines: achievable "
                f"{roof['achievable_tokens_per_s']}, physical {roof['physical_tokens_per_s']} "
                f"tokens/s at {roof['physical_GB_per_s']} GB/s",
                flush=True,
            )
            for fmt, f in sp.get("formats", {}).get("formats", {}).items():
                print(f"  {fmt}: {f}", flush=True)
            print(f"  llama.cpp: {sp.get('llama_cpp')}", flush=True)
        report["models"][name] = row
        print(
            f"  logits differ by at most {row['max_abs_logit_diff_fp32']:.2e}; greedy equal: "
            f"{row['greedy_equal_to_reference']}; best induction head "
            f"{row['induction_top'][0]}; KV cache {row['kv_cache_bytes_per_token_fp16']:,} "
            "bytes/token (fp16)",
            flush=True,
        )
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
