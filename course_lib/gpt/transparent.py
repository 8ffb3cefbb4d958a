r"""A transparent forward pass of a loaded model: what ``model(tokens)`` computes, opened.

:func:`run_model` recomputes a loaded :class:`~course_lib.gpt.model.GPT` from its own modules,
layer by layer, so that a notebook can (1) read every layer's queries, keys and values before
and after RoPE, (2) place the tokens at any positions (RoPE's :math:`m - n` claim, distances
past the training context), (3) give every layer one boolean mask (sliding windows, attention
sinks: Xiao et al., 2023, "Efficient Streaming Language Models with Attention Sinks") and
(4) mean-ablate chosen heads. With none of these it equals ``model(tokens)`` (a test).
Chapter 11 measures the course's claims with it; the statistics it computes on what it reads
are in :mod:`course_lib.gpt.attention_stats` and :mod:`course_lib.stats`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..attention import scaled_dot_product_attention
from ..multihead import merge_heads, repeat_kv, split_heads
from ..positional import apply_rope
from .model import GPT

__all__ = ["Run", "mean_ablate", "run_model", "sliding_window_mask", "token_losses"]


@dataclass
class Run:
    """What :func:`run_model` returns: ``logits [B, N, V]``; per layer (lists of length L,
    empty unless asked): ``weights [B, H, N, N]``, ``q [B, H, N, d_h]``, ``k, v [B, H_kv, N, d_h]``
    after RoPE, ``q_raw, k_raw`` before it."""

    logits: torch.Tensor
    weights: list = field(default_factory=list)
    q: list = field(default_factory=list)
    k: list = field(default_factory=list)
    v: list = field(default_factory=list)
    q_raw: list = field(default_factory=list)
    k_raw: list = field(default_factory=list)


def sliding_window_mask(n: int, window: int | None = None, sinks: int = 0) -> torch.Tensor:
    r"""``[N, N]`` boolean, True = may attend: causal, and with ``window`` = :math:`W` only the
    last :math:`W` keys (the query's own included), plus the first ``sinks`` keys always
    (StreamingLLM's attention sinks, Xiao et al., 2023).

    .. math:: \text{keep}_{nm} = (m \le n) \wedge \big(n - m < W \,\vee\, m < S\big)
    """
    if n < 1 or (window is not None and window < 1) or sinks < 0:
        raise ValueError(
            f"need n >= 1, window >= 1 (or None), sinks >= 0; got {n}, {window}, {sinks}"
        )
    i = torch.arange(n)
    keep = i[None, :] <= i[:, None]  # (N, N) causal
    if window is not None:
        near = (i[:, None] - i[None, :]) < window  # (N, N)
        keep = keep & (near | (i[None, :] < sinks))  # (N, N)
    return keep


def run_model(
    model: GPT,
    tokens: torch.Tensor,
    *,
    positions: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    need_weights: bool = False,
    capture: bool = False,
    ablate=(),
    ablate_with=None,
    layers=None,
) -> Run:
    """Run ``model`` on ``tokens [B, N]`` (no gradients), opening what ``model(tokens)`` hides.

    ``positions [N]``: RoPE positions (default ``0..N-1``). ``mask [N, N]``: boolean, True =
    may attend, for every layer (default: causal). ``need_weights``: keep every layer's
    attention weights; ``capture``: its q, k, v (``layers``: only these layers). ``ablate``:
    ``(layer, head)`` pairs whose output is replaced by its mean over the batch and positions
    (mean ablation, as :func:`course_lib.gpt.circuits.ablated_heads`); ``ablate_with(out,
    heads)``: another function that returns a layer's per-head outputs ``out [B, H, N, d_h]``
    with ``heads`` ablated (default :func:`mean_ablate`; chapter 11's exercise passes the
    learner's).
    """
    cfg = model.config
    if cfg.positions != "rope":
        raise ValueError("run_model reads RoPE models (the Llama family); this one has none")
    if tokens.ndim != 2:
        raise ValueError(f"expected tokens [B, N], got {tuple(tokens.shape)}")
    n = tokens.shape[1]
    pos = torch.arange(n) if positions is None else torch.as_tensor(positions)  # (N,)
    if pos.shape != (n,):
        raise ValueError(f"positions must have shape ({n},), got {tuple(pos.shape)}")
    if mask is not None and mask.shape != (n, n):
        raise ValueError(f"mask must have shape ({n}, {n}), got {tuple(mask.shape)}")
    keep = sliding_window_mask(n) if mask is None else mask  # (N, N)
    ablated: dict[int, list[int]] = {}
    for layer, head in ablate:
        ablated.setdefault(int(layer), []).append(int(head))
    wanted = set(range(cfg.num_layers)) if layers is None else set(layers)
    rope: dict[str, Any] = {"base": cfg.rope_base, "interleaved": cfg.rope_interleaved}
    scale = None if cfg.scaled else 1.0  # as the model's attention
    run = Run(logits=torch.empty(0))
    with torch.no_grad():
        x = model.embed(tokens)  # (B, N, d_model)
        for i in range(len(model.blocks)):
            block = model.block(i)
            a, h = block.attn, block.ln_1(x)  # (B, N, d_model)
            q_raw = split_heads(a.W_Q(h), cfg.num_heads)  # (B, H, N, d_h)
            k_raw = split_heads(a.W_K(h), cfg.kv_heads)  # (B, Hkv, N, d_h)
            v = split_heads(a.W_V(h), cfg.kv_heads)  # (B, Hkv, N, d_h)
            q, k = apply_rope(q_raw, pos, **rope), apply_rope(k_raw, pos, **rope)
            kr, vr = repeat_kv(k, cfg.num_groups), repeat_kv(v, cfg.num_groups)  # (B, H, N, d_h)
            if need_weights and i in wanted:
                out, w = scaled_dot_product_attention(
                    q, kr, vr, keep, scale=scale
                )  # (B, H, N, d_h), (B, H, N, N)
                run.weights.append(w)
            else:
                out = F.scaled_dot_product_attention(
                    q, kr, vr, attn_mask=keep, scale=scale
                )  # (B, H, N, d_h)
            if capture and i in wanted:
                for name, t in (("q", q), ("k", k), ("v", v), ("q_raw", q_raw), ("k_raw", k_raw)):
                    getattr(run, name).append(t)
            if i in ablated:
                out = (ablate_with or mean_ablate)(out, ablated[i])  # (B, H, N, d_h)
            x = x + a.W_O(merge_heads(out))  # (B, N, d_model)
            if block.mlp is not None and block.ln_2 is not None:  # (none: attention only)
                x = x + block.mlp(block.ln_2(x))  # (B, N, d_model)
        head = model.embed if model.lm_head is None else model.lm_head  # tied or not
        run.logits = model.ln_f(x) @ head.weight.T  # (B, N, V)
    return run


def mean_ablate(out: torch.Tensor, heads) -> torch.Tensor:
    r"""``out [B, H, N, d_h]`` with each head of ``heads`` replaced by its mean over the batch
    and positions, :math:`o_{b,h,n} \leftarrow \frac{1}{BN}\sum_{b',n'} o_{b',h,n'}` (a copy)."""
    out = out.clone()  # (B, H, N, d_h)
    for head in heads:
        out[:, head] = out[:, head].mean(dim=(0, 1), keepdim=True)  # (B, N, d_h)
    return out


def token_losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[B, N-1]``: the loss (nats) of each next token, position ``n`` predicting ``n+1``."""
    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)  # (B, N-1, V)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)  # (B, N-1)
