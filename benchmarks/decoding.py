r"""Decoding speed: the course's GPT beside transformers and llama.cpp, two rooflines, four formats.

Used by ``benchmarks/real_models.py`` (its ``speed`` section); nothing here is run by the tests
but on tiny random models, and no figure is asserted.

A decoding step reads every weight once, so its time is bounded below by the bytes it reads:

.. math:: t_\text{token} \ge \frac{\text{bytes of weights} + \text{bytes of cache}}{B}.

Two values of :math:`B`, both measured in the same run:

* **physical**: the fastest stream this process reads memory at, over buffers far larger
  than the caches (a copy, counting its read and its write; a sum; one matrix-vector
  product over a single matrix of the model's size);
* **achievable**: the model's own matrices, each multiplied by one vector, in order, and
  nothing else: what any PyTorch implementation of the model spends on the products alone.
  The gap between the two is the cost of many small products instead of one large one.

Each implementation's tokens/s is recorded as a fraction of both.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

# A fixed text for perplexity (ours; ordinary English of the kind the model was trained on).
EVAL_TEXT = (
    "The old bridge over the river was built of stone in the years when the town still "
    "made its living from wool. Carts loaded with bales crossed it every morning on their "
    "way to the mills downstream, and in the evening the same carts came back empty, their "
    "drivers tired and the horses slow. When the railway arrived, the mills closed one by "
    "one, and for a long time nobody crossed the bridge except children on their way to "
    "school and the doctor, who lived on the far bank. Today the mills are apartments, the "
    "railway line is a footpath, and the bridge carries more bicycles than it ever carried "
    "carts. Every spring the river rises, and every spring someone writes to the newspaper "
    "to say that the arches will not hold another flood. They always have. Engineers who "
    "came to measure them found that the builders had set the foundations deeper than any "
    "drawing showed, on rock rather than gravel, as if they had known what the river would "
    "do long after they were gone. Nobody knows their names. The town keeps a list of its "
    "mayors, its teachers and its soldiers, but not of the masons who cut the stones, and "
    "the only record of their work is the work itself, which is still standing."
)


# =========================================================================== the loops


def clock(device) -> float:
    """``time.perf_counter()`` once the device has finished its queued work."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def decode_course(model, prompt, new: int):
    """(prefill seconds, decode seconds, tokens): the course's greedy loop with its KV cache."""
    import torch

    with torch.inference_mode():
        caches = model.new_caches()
        t0 = clock(prompt.device)
        nxt = model(prompt, caches)[:, -1].argmax(-1, keepdim=True)  # (1, 1) prefill
        t1 = clock(prompt.device)
        out = [nxt]
        for _ in range(new - 1):
            nxt = model(nxt, caches)[:, -1].argmax(-1, keepdim=True)  # (1, 1) one step
            out.append(nxt)
        t2 = clock(prompt.device)
    return t1 - t0, t2 - t1, torch.cat(out, dim=1)


def decode_reference(reference, prompt, new: int):
    """The same greedy loop on transformers' model and its own cache."""
    import inspect

    import torch

    # transformers 5.x names the cache `cache` (`past_key_values` before, deprecated after)
    name = "cache" if "cache" in inspect.signature(reference.forward).parameters else None
    name = name or "past_key_values"
    with torch.inference_mode():
        t0 = time.perf_counter()
        step = reference(prompt, use_cache=True)
        nxt = step.logits[:, -1].argmax(-1, keepdim=True)  # (1, 1) prefill
        t1 = time.perf_counter()
        out = [nxt]
        for _ in range(new - 1):
            step = reference(nxt, use_cache=True, **{name: getattr(step, name)})
            nxt = step.logits[:, -1].argmax(-1, keepdim=True)  # (1, 1) one step
            out.append(nxt)
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1, torch.cat(out, dim=1)


# =========================================================================== the rooflines


def _best_of(fn, repeats: int, device="cpu") -> float:
    """The shortest of ``repeats`` timings of ``fn()`` after one untimed call (seconds)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = clock(device)
        fn()
        times.append(clock(device) - t0)
    return min(times)


def streams(megabytes: int, repeats: int = 5, device="cpu") -> dict:
    """GB/s of three streams over ``megabytes`` of float32: a copy (read + write), a sum, a matvec."""
    import torch

    n = megabytes * 2**20 // 4
    src = torch.ones(n, device=device)  # (n,)
    dst = torch.empty_like(src)
    matrix = src[: n // 576 * 576].view(-1, 576)  # (n/576, 576): the model's row length
    vec = torch.ones(576, device=device)
    copy = 2 * n * 4 / _best_of(lambda: dst.copy_(src), repeats, device)
    read = n * 4 / _best_of(src.sum, repeats, device)
    matvec = matrix.numel() * 4 / _best_of(lambda: matrix @ vec, repeats, device)
    return {
        "copy_GB_per_s": round(copy / 1e9, 2),
        "sum_GB_per_s": round(read / 1e9, 2),
        "one_matvec_GB_per_s": round(matvec / 1e9, 2),
    }


def matrix_products(model):
    """One vector through each of the model's matrices in order, and nothing else (a callable)."""
    import torch
    from torch import nn

    from course_lib.gpt.quantize import Int4Linear, Int8Linear

    layers = [m for m in model.modules() if isinstance(m, (nn.Linear, Int8Linear, Int4Linear))]
    weight = next(model.parameters())
    read_out = None if model.lm_head is not None else model.embed.weight  # (V, d) tied
    vectors = {}
    for m in layers:
        inputs = m.in_features
        vectors.setdefault(
            inputs, torch.ones(1, 1, inputs, dtype=weight.dtype, device=weight.device)
        )

    def run():
        with torch.inference_mode():
            for m in layers:
                m(vectors[m.in_features])  # (1, 1, out)
            if read_out is not None:
                vectors[read_out.shape[1]] @ read_out.T  # (1, 1, V)

    return run


def rooflines(model, bytes_per_token: int, measured: dict, repeats: int = 5) -> dict:
    """Both rooflines of ``model`` in tokens/s; ``measured``: :func:`streams`' figures."""
    physical = max(measured.values()) * 1e9  # bytes/s
    device = next(model.parameters()).device
    products = _best_of(matrix_products(model), repeats, device)  # seconds per token
    return {
        "physical_GB_per_s": round(physical / 1e9, 2),
        "physical_tokens_per_s": round(physical / bytes_per_token, 2),
        "achievable_ms_per_token": round(1000 * products, 2),
        "achievable_tokens_per_s": round(1 / products, 2),
        "achievable_GB_per_s": round(bytes_per_token / products / 1e9, 2),
    }


def prompt_attention(config, n: int, repeats: int = 20) -> dict:
    """Microseconds of one layer's causal attention over an ``n``-token prompt: the course's
    explicit arithmetic (:func:`~course_lib.gpt.model.grouped_query_attention`) and SDPA."""
    import torch
    import torch.nn.functional as F

    from course_lib.gpt.model import grouped_query_attention

    g = torch.Generator().manual_seed(0)
    d = config.head_dim
    q = torch.randn(1, n, config.num_heads, d, generator=g).transpose(1, 2)  # (1, H, n, d)
    k, v = (torch.randn(1, n, config.kv_heads, d, generator=g).transpose(1, 2) for _ in "kv")
    with torch.inference_mode():
        ours = _best_of(lambda: grouped_query_attention(q, k, v, is_causal=True), repeats)
        sdpa = _best_of(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
            repeats,
        )
    return {"course": round(ours * 1e6, 1), "sdpa": round(sdpa * 1e6, 1)}


def fractions(speed: dict, roof: dict) -> dict:
    """The decode speed of ``speed`` (:func:`summary`) as a fraction of both rooflines."""
    tokens_per_s = speed["decode_tokens_per_s"]
    return {
        "fraction_of_achievable": round(tokens_per_s / roof["achievable_tokens_per_s"], 3),
        "fraction_of_physical": round(tokens_per_s / roof["physical_tokens_per_s"], 3),
    }


# =========================================================================== rounds


def spread(values: list[float]) -> dict:
    """Median, smallest and largest of per-round figures."""
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def interleaved(runners: dict, prompt, *, rounds: int, new: int) -> dict:
    """``{name: [(prefill s, decode s, tokens) per round]}``, the runners taking turns."""
    rows: dict[str, list] = {name: [] for name in runners}
    for fn, target in runners.values():
        fn(target, prompt[:, :8], 3)  # warm-up: first calls allocate
    for _ in range(rounds):
        for name, (fn, target) in runners.items():
            rows[name].append(fn(target, prompt, new))
    return rows


def summary(rows: list, n: int, new: int) -> dict:
    """Prefill and decode tokens/s of one implementation's rounds: medians and spread."""
    prefill = [n / r[0] for r in rows]
    decode = [(new - 1) / r[1] for r in rows]
    med = statistics.median(decode)
    return {
        "prefill_tokens_per_s": round(statistics.median(prefill), 1),
        "decode_tokens_per_s": round(med, 2),
        "decode_ms_per_token": round(1000 / med, 1),
        "prefill_rounds_tokens_per_s": [round(x, 1) for x in prefill],
        "decode_rounds_tokens_per_s": [round(x, 2) for x in decode],
    }


def ratios(a: list, b: list, n: int, new: int) -> dict:
    """Per-round ratios a/b of decode and prefill speed (the rounds were interleaved)."""
    dec = [(new - 1) / ra[1] / ((new - 1) / rb[1]) for ra, rb in zip(a, b)]
    pre = [rb[0] / ra[0] for ra, rb in zip(a, b)]
    return {"decode": spread(dec), "prefill": spread(pre)}


# =========================================================================== llama.cpp

_LLAMA = r"""
import json, sys, time
import numpy as np
from llama_cpp import Llama, __version__
a = json.loads(sys.argv[1])
llm = Llama(model_path=a["path"], n_ctx=a["n_ctx"], n_threads=a["threads"],
            n_threads_batch=a["threads"], n_batch=512, verbose=False)
rounds = []
for _ in range(a["rounds"] + 1):
    llm.reset()
    t0 = time.perf_counter(); llm.eval(a["prompt"]); t1 = time.perf_counter()
    out = []
    for _ in range(a["new"]):  # the newest token's logits (llama.cpp keeps only those)
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        out.append(int(np.argmax(logits)))
        if len(out) < a["new"]:
            llm.eval([out[-1]])
    t2 = time.perf_counter()
    rounds.append((t1 - t0, t2 - t1, out))
print(json.dumps({"version": __version__, "rounds": rounds[1:]}))
"""


def llama_cpp_anchor(
    path, prompt_ids: list, *, new: int, rounds: int, threads: int, ours: list | None = None
) -> dict:
    """llama.cpp's own decode of the same GGUF file (``llama-cpp-python``), in a subprocess.

    The benchmark extra installs it (``pip install -e '.[bench]'``); where it is missing or
    fails, the reason is recorded instead. Its first token comes with the prefill, so its
    decode covers ``new - 1`` steps, like the course's. ``ours``: the course's greedy tokens
    on the same prompt, to count how many of llama.cpp's agree before the first difference
    (its 4-bit products round activations to 8 bits; the course's run in float32).
    """
    args = {"path": str(path), "prompt": [int(t) for t in prompt_ids], "new": new,
            "rounds": rounds, "threads": threads, "n_ctx": len(prompt_ids) + new + 8}  # fmt: skip
    try:
        done = subprocess.run(
            [sys.executable, "-c", _LLAMA, json.dumps(args)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"unavailable": "llama.cpp did not finish in 600 s"}
    if done.returncode < 0:  # killed by a signal: a crash inside llama.cpp's kernels
        return {"unavailable": f"llama.cpp crashed (signal {-done.returncode}); see "
                "benchmarks/README.md for a portable build"}  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return {"unavailable": f"llama-cpp-python failed: {last[:300]}"}
    got = json.loads(done.stdout.strip().splitlines()[-1])
    rows = got["rounds"]
    return {
        "llama_cpp_python": got["version"],
        "threads": threads,
        **summary(rows, len(prompt_ids), new),
        "tokens": rows[-1][2],
        "tokens_equal_to_course_before_first_difference": (
            None if ours is None else _common_prefix(rows[-1][2], ours)
        ),
    }


def _common_prefix(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# =========================================================================== formats


def formats(model, path, tokenizer, prompt, *, rounds: int, new: int, measured: dict) -> dict:
    """Every format of :mod:`course_lib.gpt.quantize`: bytes, speed, rooflines and accuracy.

    The formats' decodes take turns within each round. Accuracy is measured on
    :data:`EVAL_TEXT` against the float32 model: perplexity, and the largest logit
    difference. ``"q4_1"`` needs ``path`` to be a GGUF file of Q4_1 matrices.
    """
    import torch

    from course_lib.gpt import quantize as Q
    from course_lib.gpt.gguf_checkpoint import read_gguf

    gguf = str(path).endswith(".gguf")
    tensors = {t.name: t for t in read_gguf(path).tensors} if gguf else None
    text = tokenizer.encode(EVAL_TEXT)[None, : model.config.seq_len]  # (1, T)
    with torch.inference_mode():
        base = model(text).float()  # (1, T, V)
    weights = Q.bytes_per_token(model) // 4  # float32: 4 bytes a weight
    copies, out = {}, {}
    for fmt in Q.FORMATS:
        try:
            copies[fmt] = Q.quantized_copy(model, fmt, tensors)
        except (RuntimeError, ValueError) as err:
            out[fmt] = {"unavailable": str(err)}
    rows = interleaved(
        {f: (decode_course, m) for f, m in copies.items()}, prompt, rounds=rounds, new=new
    )
    for fmt, m in copies.items():
        nbytes = Q.bytes_per_token(m)
        with torch.inference_mode():
            gap = float((m(text).float() - base).abs().max())
        speed = summary(rows[fmt], prompt.shape[1], new)
        roof = rooflines(m, nbytes, measured)
        out[fmt] = {
            "bytes_per_token": nbytes,
            "bytes_per_weight": round(nbytes / weights, 4),
            **speed,
            **roof,
            **fractions(speed, roof),
            "perplexity": round(Q.perplexity(m, text), 4),
            "max_abs_logit_diff_vs_float32": round(gap, 4),
        }
    return {"eval_tokens": int(text.shape[1]), "formats": out}
