r"""Generating text: the sampling distribution, one sampled token, and the decoding loop.

:func:`generate` continues a prompt token by token. With a KV cache (chapter 04) the prompt
goes through the model once ("prefill") and every later step feeds only the newest token;
without it every step recomputes the whole sequence. Both give the same tokens, and
:func:`positions_computed` counts the work each does. The loop only calls the model and
its ``new_caches()``, so it runs any model of the course, trained here or loaded.
"""

from __future__ import annotations

import torch

__all__ = ["generate", "positions_computed", "sample_next", "top_k_probs"]


def top_k_probs(
    logits: torch.Tensor, k: int | None = None, temperature: float = 1.0
) -> torch.Tensor:
    r"""The sampling distribution ``[..., V]``: softmax of the top-``k`` logits at a temperature.

    .. math::

        p_i = \frac{[\,i \in \mathrm{top}_k\,]\; e^{z_i / \tau}}
                   {\sum_{j \in \mathrm{top}_k} e^{z_j / \tau}}

    ``k=None`` keeps every token. Lower :math:`\tau` sharpens the distribution, higher
    flattens it; top-:math:`k` removes the long tail of unlikely tokens, whose combined mass
    would otherwise produce an odd token every few steps.
    """
    if temperature <= 0:
        raise ValueError(
            f"temperature must be > 0, got {temperature!r} (use temperature=0 "
            "in sample_next for greedy decoding)"
        )
    z = logits / temperature  # (..., V)
    if k is not None and k < z.shape[-1]:
        kth = torch.topk(z, int(k), dim=-1).values[..., -1:]  # (..., 1) the k-th largest
        z = z.masked_fill(z < kth, float("-inf"))  # (..., V)
    return torch.softmax(z, dim=-1)  # (..., V)


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One next token per row of ``logits [B, V]``: ``[B, 1]``; ``temperature=0`` is greedy."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
    probs = top_k_probs(logits, top_k, temperature)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)


def positions_computed(prompt_len: int, new_tokens: int, use_cache: bool) -> int:
    r"""How many token positions go through the model to generate ``new_tokens`` tokens.

    With :math:`N_p` = ``prompt_len`` and :math:`N_n` = ``new_tokens``: without a cache,
    step :math:`t` (from 0) recomputes all :math:`N_p + t` positions,
    :math:`\sum_{t=0}^{N_n-1} (N_p + t) = N_n N_p + N_n(N_n-1)/2`. With a cache the prompt
    goes through once and each later step one position: :math:`N_p + N_n - 1`.
    """
    p, t = int(prompt_len), int(new_tokens)
    if t == 0:
        return 0
    return p + t - 1 if use_cache else t * p + t * (t - 1) // 2


@torch.no_grad()
def generate(
    model,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    window: int | None = None,
) -> torch.Tensor:
    r"""Continue ``prompt [B, P]`` by ``max_new_tokens`` tokens: ``[B, P + new]``.

    ``temperature=0`` is greedy decoding (the arg max). With ``use_cache`` the prompt
    is processed once ("prefill") and every later step feeds only the newest token,
    reading the others' keys and values from the per-layer KV caches; without it, every
    step recomputes the whole sequence. Both give the same tokens.

    ``window`` (e.g. ``config.seq_len``) keeps the model inside the context it was
    trained on: when the context would exceed ``window`` tokens, it restarts from the
    last ``window // 2`` (the cache is refilled from them; RoPE positions start again
    at 0, which changes nothing since scores depend on offsets only). Without a
    window, positions grow past the training length.
    """
    was_training = model.training
    model.eval()
    tokens, start, caches = prompt, 0, None
    for _ in range(int(max_new_tokens)):
        if window is not None and tokens.shape[1] - start > window:
            start, caches = tokens.shape[1] - window // 2, None  # slide: drop the cache
        if not use_cache:
            logits = model(tokens[:, start:])[:, -1]  # (B, V) recompute everything
        elif caches is None:
            caches = model.new_caches()
            logits = model(tokens[:, start:], caches)[:, -1]  # (B, V) prefill
        else:
            logits = model(tokens[:, -1:], caches)[:, -1]  # (B, V) the newest token only
        nxt = sample_next(
            logits, temperature=temperature, top_k=top_k, generator=generator
        )  # (B, 1)
        tokens = torch.cat([tokens, nxt], dim=1)  # (B, P + t)
    model.train(was_training)
    return tokens
