"""The real model decoding on a GPU, for ``benchmarks/gpu_check.py`` (its step 4).

SmolLM2-135M-Instruct (``make model``) in the course's GPT, in float16 and bfloat16, with its
attention by chapter 06's Triton kernels (backend ``"flash"``: the decode kernel for each new
token, FlashAttention for the prompt), by PyTorch's SDPA (``"torch"``) and by the course's
explicit arithmetic (``"course"``), in interleaved rounds; with the GPU's rooflines measured
the same way as on a CPU (:mod:`decoding`) and the same fields as the ``speed`` section of
``results/real_models.json``. ``dry_run``: a tiny random model on the CPU, through Triton's
interpreter (the tests run it).
"""

from __future__ import annotations

import copy

import decoding as D

BACKENDS = ("course", "torch", "flash")


def _model_and_prompt(dry_run: bool, prompt_tokens: int):
    """(float32 model, prompt [1, n], label) or a reason it cannot run."""
    import torch

    from course_lib.gpt import GPT, GPTConfig
    from course_lib.gpt import pretrained as P

    if dry_run:
        cfg = GPTConfig(vocab_size=64, seq_len=32, d_model=64, num_layers=2, num_heads=4,
                        num_kv_heads=2, norm="rmsnorm", activation="swiglu")  # fmt: skip
        torch.manual_seed(0)
        prompt = torch.randint(0, cfg.vocab_size, (1, prompt_tokens))  # (1, n)
        return GPT(cfg).eval(), prompt, "a tiny random GPT (dry run)"
    try:
        path = P.smollm2_path()
    except (FileNotFoundError, ValueError, OSError) as err:
        return f"the model file is not on this machine ({err}): run `make model` first"
    tokenizer = P.load_tokenizer(path)
    prompt = tokenizer.encode(D.EVAL_TEXT)[None, :prompt_tokens]  # (1, n)
    return P.load_pretrained(path), prompt, P.SMOLLM2_LABEL


def _runner(backend: str):
    def run(model, prompt, new):
        model.use_backend(backend)
        return D.decode_course(model, prompt, new)

    return run


def run(dry_run: bool, *, rounds: int = 5, new: int = 32, prompt_tokens: int = 128) -> dict:
    """Decode speed per dtype and backend, both rooflines, greedy agreement between backends."""
    import torch

    from course_lib.gpt.quantize import bytes_per_token

    if dry_run:
        rounds, new, prompt_tokens = 1, 3, 6
    got = _model_and_prompt(dry_run, prompt_tokens)
    if isinstance(got, str):
        print(f"  skipped: {got}")
        return {"skipped": got}
    model, prompt, label = got
    device = "cpu" if dry_run else "cuda"
    dtypes = (torch.float32,) if dry_run else (torch.float16, torch.bfloat16)
    measured = D.streams(16 if dry_run else 2048, device=device)
    out: dict = {"model": label, "device": device, "rounds": rounds, "new_tokens": new,
                 "prompt_tokens": int(prompt.shape[1]), "streams": measured}  # fmt: skip
    for dtype in dtypes:
        m = copy.deepcopy(model).to(device=device, dtype=dtype)
        runners = {b: (_runner(b), m) for b in BACKENDS}
        rows = D.interleaved(runners, prompt.to(device), rounds=rounds, new=new)
        n = int(prompt.shape[1])
        row = {b: D.summary(rows[b], n, new) for b in BACKENDS}
        nbytes = bytes_per_token(m)
        roof = D.rooflines(m, nbytes, measured)
        for b in BACKENDS:
            row[b].update(D.fractions(row[b], roof))
        row["flash_over_torch"] = D.ratios(rows["flash"], rows["torch"], n, new)
        row["same_greedy_tokens"] = all(
            torch.equal(rows["flash"][i][2], rows["torch"][i][2]) for i in range(rounds)
        )
        row["bytes_per_token"], row["roofline"] = nbytes, roof
        name = str(dtype).removeprefix("torch.")
        out[name] = row
        print(f"  {name}: decode tokens/s " + ", ".join(
            f"{b} {row[b]['decode_tokens_per_s']}" for b in BACKENDS
        ) + f"; achievable {roof['achievable_tokens_per_s']}, physical "
            f"{roof['physical_tokens_per_s']}", flush=True)  # fmt: skip
        m.use_backend("course")
    return out
