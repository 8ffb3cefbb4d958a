r"""A tiny GPT assembled from the course's own parts, trained on Python's own source code.

A decoder-only Transformer (Radford et al., 2018, "Improving Language Understanding by
Generative Pre-Training"; the layout of Radford et al., 2019, "Language Models are
Unsupervised Multitask Learners") maps tokens :math:`t_1 \dots t_N` to a distribution over
the next token at every position:

.. math::

    x^{(0)} = E[t] \qquad
    x^{(\ell)} = \mathrm{Block}_\ell(x^{(\ell-1)}) \qquad
    \text{logits} = \mathrm{LN}(x^{(L)})\, E^\top,

with the token embedding :math:`E \in \mathbb{R}^{V \times d_\text{model}}` reused as the
read-out ("tied embeddings", Press and Wolf, 2017, "Using the Output Embedding to Improve
Language Models"). Each block is *pre-LayerNorm* (Xiong et al., 2020, "On Layer
Normalization in the Transformer Architecture"):

.. math::

    x \leftarrow x + \mathrm{MultiHead}(\mathrm{LN}_1(x)), \qquad
    x \leftarrow x + \mathrm{MLP}(\mathrm{LN}_2(x)).

Every part comes from an earlier chapter: causal attention (02, with the :math:`1/\sqrt{d_h}`
of 03), heads, grouped-query attention and the KV cache (04: :func:`split_heads`,
:func:`merge_heads`, :func:`repeat_kv`, :class:`KVCache`), rotary positions (05:
:func:`apply_rope`) and, as one of three interchangeable attention backends, the Triton
FlashAttention kernel (06). The file reads top to bottom like nanoGPT's ``model.py``: the
config, the attention, the MLP, the block, the model and its sampling; then the corpus and
its tokenizer, the loss, the training loop; then the measurements the lecture makes
(previous-token and induction scores, the induction-head experiment, ablations).

The corpus is the source code of a fixed list of Python standard-library modules, read from
the running interpreter's own installation: nothing is downloaded. It is licensed under the
Python Software Foundation License (PSF-2.0). Its exact bytes differ between Python
versions, so nothing in the course depends on them.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sysconfig
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .attention import scaled_dot_product_attention
from .multihead import KVCache, kv_cache_bytes, merge_heads, repeat_kv, split_heads
from .positional import apply_rope
from .rnn import single_thread

__all__ = [
    "BACKENDS",
    "Block",
    "CausalSelfAttention",
    "CharTokenizer",
    "Corpus",
    "GPT",
    "GPTConfig",
    "History",
    "INDUCTION_CHECKPOINT",
    "INDUCTION_CONFIG",
    "INDUCTION_TRAIN",
    "MLP",
    "TRAIN_MODULES",
    "TrainConfig",
    "VAL_MODULES",
    "attend",
    "budget_configs",
    "causal_lm_loss",
    "corpus_words",
    "equal_params_config",
    "evaluate",
    "get_batch",
    "induction_probe",
    "induction_scores",
    "known_word_fraction",
    "load_corpus",
    "load_induction_checkpoint",
    "loss_per_position",
    "lr_at",
    "lr_schedule",
    "positions_computed",
    "previous_token_scores",
    "random_period_tokens",
    "repeated_random_tokens",
    "run_ablation",
    "sample_next",
    "save_induction_checkpoint",
    "top_k_probs",
    "train",
    "train_induction_model",
    "unigram_cross_entropy",
]

BACKENDS = ("course", "torch", "flash")
POSITIONS = ("rope", "learned", "none")


# =========================================================================== the config


@dataclass(frozen=True)
class GPTConfig:
    r"""The shape of a model. ``head_dim`` :math:`d_h = d_\text{model}/H`.

    ``seq_len`` is the context the model is trained on (RoPE has no table of positions, so
    longer inputs run, but the model has never seen them). ``num_kv_heads`` :math:`H_{kv}`
    (default :math:`H`): 1 is multi-query attention, :math:`H` plain multi-head attention.
    ``positions``: ``"rope"`` (chapter 05), ``"learned"`` (GPT-2's table of absolute
    positions, up to ``seq_len``) or ``"none"`` (an ablation). ``scaled=False``
    drops the :math:`1/\sqrt{d_h}` of the scores (an ablation, chapter 03). ``attention``:
    the backend, ``"course"`` (chapter 02's ``scaled_dot_product_attention``), ``"torch"``
    (``F.scaled_dot_product_attention``) or ``"flash"`` (chapter 06's Triton kernel).
    ``mlp=False`` gives an attention-only model (for the induction-head experiment).
    """

    vocab_size: int = 97
    seq_len: int = 128
    d_model: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int | None = None
    d_ff: int | None = None  # default 4 * d_model
    positions: str = "rope"
    rope_base: float = 10000.0
    scaled: bool = True
    attention: str = "course"
    mlp: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "d_model", "num_layers", "num_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by "
                f"num_heads={self.num_heads}: each head gets d_model / num_heads "
                "features"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not divisible by "
                f"num_kv_heads={self.num_kv_heads}: each key/value head must "
                "serve the same number of query heads"
            )
        if self.head_dim % 2 and self.positions == "rope":
            raise ValueError(f"RoPE rotates feature pairs: head_dim={self.head_dim} must be even")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        if self.attention not in BACKENDS:
            raise ValueError(f"attention must be one of {BACKENDS}, got {self.attention!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """:math:`H_{kv}`, with ``None`` resolved to :math:`H`."""
        return self.num_heads if self.num_kv_heads is None else int(self.num_kv_heads)

    @property
    def num_groups(self) -> int:
        """:math:`G = H / H_{kv}`: query heads per key/value head."""
        return self.num_heads // self.kv_heads

    @property
    def ff_width(self) -> int:
        r""":math:`d_\text{ff}`, with ``None`` resolved to :math:`4 d_\text{model}`."""
        return 4 * self.d_model if self.d_ff is None else int(self.d_ff)

    def kv_cache_bytes(
        self, seq_len: int | None = None, batch_size: int = 1, bytes_per_value: int = 4
    ) -> int:
        """Bytes of this model's KV cache (chapter 04's formula), float32 by default."""
        return kv_cache_bytes(
            self.num_layers,
            self.kv_heads,
            self.head_dim,
            self.seq_len if seq_len is None else seq_len,
            batch_size,
            bytes_per_value,
        )


def equal_params_config(config: GPTConfig, num_kv_heads: int) -> GPTConfig:
    r"""``config`` with :math:`H_{kv}` = ``num_kv_heads`` and the same number of parameters.

    Fewer key/value heads shrink :math:`W_K` and :math:`W_V` by
    :math:`2\, d_\text{model} (H - H_{kv})\, d_h` weights per layer; widening the MLP by
    :math:`(H - H_{kv})\, d_h` hidden units (:math:`2 d_\text{model}` weights each, no
    biases) gives them back exactly, so an ablation compares equal budgets.
    """
    new = replace(config, num_kv_heads=num_kv_heads)
    return replace(new, d_ff=config.ff_width + (config.kv_heads - new.kv_heads) * config.head_dim)


# =========================================================================== attention


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    backend: str = "course",
    is_causal: bool = False,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    r""":math:`\mathrm{softmax}(\text{scale}\cdot QK^\top + M)\,V` by one of three backends.

    ``q, k, v [B, H, N, d_h]`` (key/value heads already repeated for GQA). ``"course"``:
    chapter 02's :func:`~course_lib.attention.scaled_dot_product_attention`; ``"torch"``:
    ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels where torch has
    them); ``"flash"``: chapter 06's Triton kernel (compiled on a GPU, interpreted on a CPU,
    which is slow: use it at tiny sizes there). All three agree to rounding error.
    ``mask`` (True = may attend) is not supported by the flash kernel, only ``is_causal``.
    """
    if backend == "course":
        out, _ = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=scale)
        return out  # (B, H, Nq, d_h)
    if backend == "torch":
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale
        )  # (B, H, Nq, d_h)
    if backend == "flash":
        if mask is not None:
            raise ValueError(
                "the flash backend takes is_causal only, not an explicit mask: "
                "use backend='course' or 'torch' for chunked prefill with a cache"
            )
        from .flash import flash_attention

        return flash_attention(
            q.contiguous(), k.contiguous(), v.contiguous(), is_causal=is_causal, scale=scale
        )  # (B, H, Nq, d_h)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


class CausalSelfAttention(nn.Module):
    r"""Causal multi-head self-attention with GQA, RoPE, a KV cache and a backend switch.

    Chapter 04's :class:`~course_lib.multihead.MultiHeadAttention` with two additions that
    a language model needs between projection and attention: rotating queries and keys by
    their positions (RoPE) and choosing the attention backend. The rest is chapter 04's
    functions: :func:`split_heads`, :func:`repeat_kv`, :func:`merge_heads`, :class:`KVCache`.

    .. math::

        q_n = R_n\, W_Q x_n, \quad k_n = R_n\, W_K x_n, \quad v_n = W_V x_n, \qquad
        o_n = W_O\, \mathrm{Concat}_i \sum_{m \le n} \mathrm{softmax}_m
        \Big(\tfrac{q_n^{(i)} \cdot k_m^{(\lfloor i/G \rfloor)}}{\sqrt{d_h}}\Big)\,
        v_m^{(\lfloor i/G \rfloor)}

    where :math:`R_n` is the RoPE rotation of position :math:`n`. The cache holds the
    *rotated* keys, so a cached key never needs rotating again.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        d, head_dim = config.d_model, config.head_dim
        self.W_Q = nn.Linear(d, config.num_heads * head_dim, bias=False)
        self.W_K = nn.Linear(d, config.kv_heads * head_dim, bias=False)
        self.W_V = nn.Linear(d, config.kv_heads * head_dim, bias=False)
        self.W_O = nn.Linear(config.num_heads * head_dim, d, bias=False)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(output [B, N, d_model], weights [B, H, N, Nk] or None)``.

        With a ``cache`` the ``N`` tokens of ``x`` are the positions after the cached ones.
        ``need_weights=True`` computes with the course backend, the only one that returns
        the attention weights.
        """
        cfg = self.config
        n = x.shape[1]
        past = 0 if cache is None else len(cache)
        q = split_heads(self.W_Q(x), cfg.num_heads)  # (B, H, N, d_h)
        k = split_heads(self.W_K(x), cfg.kv_heads)  # (B, Hkv, N, d_h)
        v = split_heads(self.W_V(x), cfg.kv_heads)  # (B, Hkv, N, d_h)
        if cfg.positions == "rope":
            positions = torch.arange(past, past + n, device=x.device)  # (N,)
            q = apply_rope(q, positions, base=cfg.rope_base)  # (B, H, N, d_h)
            k = apply_rope(k, positions, base=cfg.rope_base)  # (B, Hkv, N, d_h)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, Hkv, Nk, d_h) with Nk = past + N
        k = repeat_kv(k, cfg.num_groups)  # (B, H, Nk, d_h)
        v = repeat_kv(v, cfg.num_groups)  # (B, H, Nk, d_h)

        # the N new queries are positions past..past+N-1: query i sees keys j <= past + i
        mask, is_causal = None, past == 0
        if past > 0 and n > 1:  # chunked prefill: the causal triangle aligned bottom-right
            mask = torch.ones(n, past + n, dtype=torch.bool, device=x.device).tril(past)
        scale = None if cfg.scaled else 1.0

        weights = None
        if need_weights:
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask, is_causal=is_causal, scale=scale
            )  # (B, H, N, d_h)
        else:
            heads = attend(
                q, k, v, backend=cfg.attention, is_causal=is_causal, mask=mask, scale=scale
            )  # (B, H, N, d_h)
        return self.W_O(merge_heads(heads)), weights  # (B, N, d_model)


class MLP(nn.Module):
    r"""The position-wise feed-forward network: :math:`\mathrm{MLP}(x) = W_2\,\mathrm{GELU}(W_1 x)`.

    :math:`W_1: d_\text{model} \to d_\text{ff}`, :math:`W_2: d_\text{ff} \to d_\text{model}`,
    no biases (as in PaLM and Llama), GELU (Hendrycks and Gimpel, 2016, "Gaussian Error
    Linear Units (GELUs)") as in GPT-2.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.W_1 = nn.Linear(config.d_model, config.ff_width, bias=False)
        self.W_2 = nn.Linear(config.ff_width, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_2(F.gelu(self.W_1(x)))  # (B, N, d_model)


class Block(nn.Module):
    r"""One pre-LayerNorm Transformer block.

    .. math::

        x \leftarrow x + \mathrm{MultiHead}(\mathrm{LN}_1(x)), \qquad
        x \leftarrow x + \mathrm{MLP}(\mathrm{LN}_2(x))

    The residual stream :math:`x` itself is never normalised: every sub-layer reads a
    normalised copy and *adds* its result, so a path of identities runs from the embedding
    to the read-out and gradients reach early layers undamped. (The original Transformer
    normalised after the addition, :math:`x \leftarrow \mathrm{LN}(x + f(x))`, whose
    gradients near the output are large at initialisation, so that it needs a learning-rate
    warm-up: Xiong et al., 2020.)
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model) if config.mlp else None
        self.mlp = MLP(config) if config.mlp else None

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h, weights = self.attn(self.ln_1(x), cache, need_weights)  # (B, N, d_model)
        x = x + h  # (B, N, d_model)
        if self.mlp is not None:
            x = x + self.mlp(self.ln_2(x))  # (B, N, d_model)
        return x, weights


# =========================================================================== the model


class GPT(nn.Module):
    r"""A decoder-only language model: embeddings, :math:`L` blocks, a tied read-out.

    ``forward(tokens)`` maps ``tokens [B, N]`` to ``logits [B, N, V]``: position :math:`n`'s
    logits are the model's guess for token :math:`n+1`, computed from tokens :math:`\le n`.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        # GPT-2's learned absolute positions, one vector per position (only if asked for)
        self.pos_embed = (
            nn.Embedding(config.seq_len, config.d_model) if config.positions == "learned" else None
        )
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.apply(self._init_weights)
        # GPT-2's init: the projections that write into the residual stream are scaled by
        # 1/sqrt(2L) so the stream's variance does not grow with depth
        for name, p in self.named_parameters():
            if name.endswith(("W_O.weight", "W_2.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.num_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        """Parameters, each counted once (the tied embedding is also the read-out)."""
        return sum(p.numel() for p in self.parameters())

    def use_backend(self, backend: str) -> GPT:
        """Switch every layer's attention backend (``"course"``, ``"torch"``, ``"flash"``)."""
        self.config = replace(self.config, attention=backend)
        for block in self.blocks:
            block.attn.config = self.config
        return self

    def new_caches(self) -> list[KVCache]:
        """One empty :class:`KVCache` per layer."""
        return [KVCache() for _ in self.blocks]

    def forward(
        self, tokens: torch.Tensor, caches: list[KVCache] | None = None, need_weights: bool = False
    ):
        """``logits [B, N, V]``, or ``(logits, [weights [B, H, N, Nk] per layer])``.

        With ``caches`` (one per layer, from :meth:`new_caches`) the tokens continue the
        cached ones and their keys and values are appended.
        """
        if tokens.ndim != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"expected integer tokens of shape [B, N], got "
                f"{tuple(tokens.shape)} of dtype {tokens.dtype}"
            )
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(
                f"expected one cache per layer ({len(self.blocks)}), got {len(caches)}"
            )
        x = self.embed(tokens)  # (B, N, d_model)
        if self.pos_embed is not None:
            past = 0 if caches is None else len(caches[0])
            if past + tokens.shape[1] > self.config.seq_len:
                raise ValueError(
                    f"learned positions stop at seq_len={self.config.seq_len}; "
                    f"got positions up to {past + tokens.shape[1] - 1}"
                )
            x = x + self.pos_embed(
                torch.arange(past, past + tokens.shape[1], device=tokens.device)
            )  # (B, N, d_model)
        all_weights = []
        for i, block in enumerate(self.blocks):
            x, weights = block(x, None if caches is None else caches[i], need_weights)
            all_weights.append(weights)  # (B, H, N, Nk) or None
        logits = self.ln_f(x) @ self.embed.weight.T  # (B, N, V) tied read-out: E^T
        return (logits, all_weights) if need_weights else logits

    @torch.no_grad()
    def generate(
        self,
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
        was_training = self.training
        self.eval()
        tokens, start, caches = prompt, 0, None
        for _ in range(int(max_new_tokens)):
            if window is not None and tokens.shape[1] - start > window:
                start, caches = tokens.shape[1] - window // 2, None  # slide: drop the cache
            if not use_cache:
                logits = self(tokens[:, start:])[:, -1]  # (B, V) recompute everything
            elif caches is None:
                caches = self.new_caches()
                logits = self(tokens[:, start:], caches)[:, -1]  # (B, V) prefill
            else:
                logits = self(tokens[:, -1:], caches)[:, -1]  # (B, V) the newest token only
            nxt = sample_next(
                logits, temperature=temperature, top_k=top_k, generator=generator
            )  # (B, 1)
            tokens = torch.cat([tokens, nxt], dim=1)  # (B, P + t)
        self.train(was_training)
        return tokens


# =========================================================================== sampling


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


# =========================================================================== the corpus


# Pure-Python standard-library modules present and stable in Python 3.10-3.13. Validation
# modules are whole files the model never trains on, so no text leaks between the splits.
TRAIN_MODULES = (
    "abc",
    "argparse",
    "bisect",
    "calendar",
    "colorsys",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "getopt",
    "glob",
    "heapq",
    "json.decoder",
    "json.encoder",
    "keyword",
    "linecache",
    "numbers",
    "operator",
    "pprint",
    "queue",
    "random",
    "reprlib",
    "sched",
    "shlex",
    "statistics",
    "string",
    "textwrap",
    "tokenize",
    "traceback",
    "types",
    "weakref",
)
VAL_MODULES = ("configparser", "gettext", "cmd", "filecmp")


def module_source(name: str) -> str | None:
    """The source text of a standard-library module, or None where it has none (.pyc only)."""
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):  # frozen into the interpreter (e.g. abc)
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        candidates = [
            stdlib / (name.replace(".", "/") + ".py"),
            stdlib / name.replace(".", "/") / "__init__.py",
        ]
        origin = next((str(c) for c in candidates if c.is_file()), None)
        if origin is None:
            return None
    return Path(origin).read_text(encoding="utf-8")


class CharTokenizer:
    r"""Characters to ids and back, over a *fixed* vocabulary: newline and printable ASCII.

    ``vocab_size`` = 97: ``"\n"``, the 95 printable ASCII characters (space to ``~``) and
    one unknown token ``"\ufffd"`` (shown as �) for anything else (a tab, a non-ASCII
    letter). The vocabulary does not depend on the corpus, so it is the same on every
    Python version.
    """

    UNKNOWN = "\ufffd"

    def __init__(self) -> None:
        self.chars = ["\n"] + [chr(c) for c in range(32, 127)] + [self.UNKNOWN]
        self.vocab_size = len(self.chars)
        self.unknown_id = self.vocab_size - 1
        self._ids = np.full(128, self.unknown_id, dtype=np.int64)
        for i, ch in enumerate(self.chars[:-1]):
            self._ids[ord(ch)] = i

    def encode(self, text: str) -> torch.Tensor:
        """``text`` → ids ``[len(text)]`` (int64)."""
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # one per character
        ids = np.where(codes < 128, self._ids[np.minimum(codes, 127)], self.unknown_id)
        return torch.from_numpy(ids.astype(np.int64))  # (len(text),)

    def decode(self, ids) -> str:
        """ids (any integer sequence or tensor) → text."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return "".join(self.chars[int(i)] for i in ids)

    def show(self, ids) -> list[str]:
        """One printable label per token, for plot axes: ``"⏎"`` for newline, ``"␣"`` for space."""
        return [{"\n": "⏎", " ": "␣"}.get(c, c) for c in self.decode(ids)]

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


@dataclass
class Corpus:
    """The text split by module, as token ids: ``train`` and ``val`` are 1-D int64 tensors."""

    tokenizer: CharTokenizer
    train: torch.Tensor
    val: torch.Tensor
    train_modules: list[str]
    val_modules: list[str]
    missing: list[str] = field(default_factory=list)

    @property
    def num_chars(self) -> int:
        return int(self.train.numel() + self.val.numel())

    def __repr__(self) -> str:
        return (
            f"Corpus(train={self.train.numel():,} chars from {len(self.train_modules)} "
            f"modules, val={self.val.numel():,} chars from {len(self.val_modules)} "
            f"modules, vocab_size={self.tokenizer.vocab_size})"
        )


def load_corpus(
    train_modules: Sequence[str] = TRAIN_MODULES, val_modules: Sequence[str] = VAL_MODULES
) -> Corpus:
    """Read the modules' source from this Python's installation and tokenize it.

    Files are joined with a blank line between them. A module without source (an
    installation that ships only bytecode) is skipped and listed in ``missing``; too few
    characters left is an error that says why.
    """
    tok = CharTokenizer()
    texts: dict[str, list[str]] = {"train": [], "val": []}
    used: dict[str, list[str]] = {"train": [], "val": []}
    missing = []
    for split, names in (("train", train_modules), ("val", val_modules)):
        for name in names:
            src = module_source(name)
            if src is None:
                missing.append(name)
                continue
            texts[split].append(src)
            used[split].append(name)
    if missing:
        warnings.warn(f"no source found for {missing}: skipped", stacklevel=2)
    train_text, val_text = "\n\n".join(texts["train"]), "\n\n".join(texts["val"])
    if len(train_text) < 100_000 or len(val_text) < 10_000:
        raise RuntimeError(
            f"too little source text was found ({len(train_text)} training, "
            f"{len(val_text)} validation characters): this Python installation "
            f"ships no .py files for {missing}"
        )
    return Corpus(
        tok, tok.encode(train_text), tok.encode(val_text), used["train"], used["val"], missing
    )


def get_batch(
    data: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``batch_size`` random windows of ``seq_len`` consecutive tokens: ``tokens [B, N]``."""
    if data.numel() <= seq_len:
        raise ValueError(f"the data has {data.numel()} tokens, fewer than seq_len={seq_len}+1")
    starts = torch.randint(0, data.numel() - seq_len + 1, (batch_size,), generator=generator)
    offsets = torch.arange(seq_len)  # (N,)
    return data[starts[:, None] + offsets[None, :]]  # (B, N)


def unigram_cross_entropy(train: torch.Tensor, val: torch.Tensor, vocab_size: int) -> float:
    r"""The loss of the best model that ignores context: nats per token on ``val``.

    It predicts every token with the training frequencies :math:`\hat p(c)` (add-one
    smoothed, so an unseen token costs a finite amount):
    :math:`-\frac{1}{|val|}\sum_{t \in val} \log \hat p(t)`. A language model that beats
    it has learned something from context.
    """
    counts = torch.bincount(train, minlength=vocab_size).double() + 1.0  # (V,)
    log_p = torch.log(counts / counts.sum())  # (V,)
    return float(-log_p[val].mean())


# =========================================================================== the loss


def causal_lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    r"""Next-token cross-entropy, in nats per predicted token: the language-modelling loss.

    Position :math:`n` predicts token :math:`n+1`, so the targets are the tokens shifted
    left by one and the last position has no target:

    .. math::

        \mathcal{L} = -\frac{1}{B (N-1)} \sum_{b} \sum_{n=1}^{N-1}
        \log \mathrm{softmax}(\text{logits}_{b,n})_{t_{b,n+1}}

    ``logits [B, N, V]``, ``tokens [B, N]``.
    """
    if logits.ndim != 3 or tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"expected logits [B, N, V] and tokens [B, N], got "
            f"{tuple(logits.shape)} and {tuple(tokens.shape)}"
        )
    pred = logits[:, :-1]  # (B, N-1, V) positions that have a next token
    targets = tokens[:, 1:]  # (B, N-1) the next tokens
    return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), targets.reshape(-1))


def loss_per_position(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """Loss ``[N-1]`` of predicting token ``n+1`` at each position ``n``, averaged over the batch."""
    with torch.no_grad():
        logits = model(tokens)  # (B, N, V)
        nll = F.cross_entropy(
            logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
        )  # (B, N-1)
    return nll.mean(0)  # (N-1,)


# =========================================================================== training


@dataclass(frozen=True)
class TrainConfig:
    """How to train: steps, batch, AdamW with warm-up + cosine, gradient clipping."""

    steps: int = 2000
    batch_size: int = 32
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_windows: int = 128
    seed: int = 0


def lr_at(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, num_steps: int) -> float:
    r"""The learning rate at ``step`` (0-based): linear warm-up, then cosine decay.

    .. math::

        \eta_s = \begin{cases}
            \eta_\max \,\dfrac{s+1}{W} & s < W \\[4pt]
            \eta_\min + \tfrac12 (\eta_\max - \eta_\min)
            \big(1 + \cos \pi\, \tfrac{s - W}{N_\text{steps} - 1 - W}\big)
            & W \le s < N_\text{steps}
        \end{cases}

    so the first step already moves (:math:`\eta_\max/W`), steps :math:`W-1` and :math:`W`
    are at :math:`\eta_\max` and the last step, :math:`N_\text{steps}-1`, at
    :math:`\eta_\min`. Warm-up keeps the first updates small while AdamW's second-moment
    estimates are still noisy (AdamW: Loshchilov and Hutter, 2019, "Decoupled Weight Decay
    Regularization"; the cosine: Loshchilov and Hutter, 2017, "SGDR: Stochastic Gradient
    Descent with Warm Restarts").
    """
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    span = max(num_steps - 1 - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def lr_schedule(num_steps: int, max_lr: float, min_lr: float, warmup_steps: int) -> np.ndarray:
    """:func:`lr_at` for every step: ``[num_steps]`` float64."""
    return np.array(
        [
            lr_at(s, max_lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, num_steps=num_steps)
            for s in range(num_steps)
        ]
    )


@torch.no_grad()
def evaluate(
    model: GPT,
    data: torch.Tensor,
    *,
    seq_len: int | None = None,
    num_windows: int = 128,
    batch_size: int = 64,
) -> float:
    """Mean loss over ``num_windows`` fixed, evenly spaced windows of ``data``.

    Fixed windows (not random ones) make every evaluation of every model comparable: the
    differences between two numbers are the models', not the sampling's.
    """
    seq_len = model.config.seq_len if seq_len is None else seq_len
    was_training = model.training
    model.eval()
    starts = torch.linspace(0, data.numel() - seq_len - 1, num_windows).long()  # (W,)
    offsets = torch.arange(seq_len)  # (N,)
    total = 0.0
    for i in range(0, num_windows, batch_size):
        tokens = data[starts[i : i + batch_size, None] + offsets[None, :]]  # (b, N)
        total += float(causal_lm_loss(model(tokens), tokens)) * tokens.shape[0]
    model.train(was_training)
    return total / num_windows


@dataclass
class History:
    """What :func:`train` recorded: one entry per step, validation every ``eval_every``."""

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    val_step: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    probes: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def smoothed_train_loss(self, window: int = 20) -> np.ndarray:
        """A moving average of the training loss (the raw curve is noisy batch to batch)."""
        x = np.asarray(self.train_loss)
        window = max(1, min(window, len(x)))
        return np.convolve(x, np.ones(window) / window, mode="valid")

    def plot(self, ax=None, title: str | None = None):
        """Training loss (raw and smoothed) and validation loss against the step."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 3.6))
        ax.plot(self.step, self.train_loss, color="tab:blue", alpha=0.25, lw=0.8)
        smooth = self.smoothed_train_loss()
        ax.plot(
            self.step[len(self.step) - len(smooth) :],
            smooth,
            color="tab:blue",
            label="train (moving average)",
        )
        ax.plot(self.val_step, self.val_loss, "o-", color="tab:orange", label="validation")
        ax.set(xlabel="step", ylabel="loss (nats / token)", title=title)
        ax.legend()
        return ax


def train(
    model: GPT,
    corpus_or_data,
    config: TrainConfig,
    *,
    val: torch.Tensor | None = None,
    progress: bool = True,
    batch_fn=None,
    probe=None,
) -> History:
    r"""Train with AdamW, linear warm-up + cosine decay and gradient-norm clipping.

    ``corpus_or_data``: a :class:`Corpus` (trains on ``.train``, validates on ``.val``) or
    a 1-D token tensor (then ``val`` is optional). ``batch_fn(step, generator)`` replaces
    the batches drawn from the text (the induction-head experiment uses it);
    ``probe(model) -> dict`` is called at every evaluation and its results are kept in
    ``history.probes`` (the induction-head experiment measures its heads with it). Weight decay
    applies to matrices only, not to LayerNorm gains and biases (as in nanoGPT). A
    ``tqdm`` progress bar shows the loss as it goes (``progress=False`` hides it).
    """
    if isinstance(corpus_or_data, Corpus):
        data, val = corpus_or_data.train, corpus_or_data.val
    else:
        data = corpus_or_data
    gen = torch.Generator().manual_seed(config.seed)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config.max_lr,
        betas=(0.9, 0.95),
    )
    history = History()
    bar = _progress(config.steps, progress)
    model.train()
    t0 = time.perf_counter()
    for step in range(config.steps):
        lr = lr_at(
            step,
            max_lr=config.max_lr,
            min_lr=config.min_lr,
            warmup_steps=config.warmup_steps,
            num_steps=config.steps,
        )
        for group in opt.param_groups:
            group["lr"] = lr
        tokens = (
            batch_fn(step, gen)
            if batch_fn is not None
            else get_batch(data, config.batch_size, model.config.seq_len, gen)
        )  # (B, N)
        loss = causal_lm_loss(model(tokens), tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        opt.step()
        history.step.append(step)
        loss_value = loss.item()
        history.train_loss.append(loss_value)
        history.lr.append(lr)
        last = step == config.steps - 1
        if last or (config.eval_every and (step + 1) % config.eval_every == 0):
            if val is not None:
                history.val_step.append(step)
                history.val_loss.append(evaluate(model, val, num_windows=config.eval_windows))
            if probe is not None:
                model.eval()
                history.probes.append({"step": step, **probe(model)})
                model.train()
        if bar is not None:
            bar.update(1)
            if step % 10 == 0 or last:
                post = {"loss": f"{loss_value:.3f}"}
                if history.val_loss:
                    post["val"] = f"{history.val_loss[-1]:.3f}"
                bar.set_postfix(post, refresh=False)
    if bar is not None:
        bar.close()
    history.seconds = time.perf_counter() - t0
    model.eval()
    return history


def _progress(total: int, show: bool):
    if not show:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, desc="training", mininterval=0.5)


def budget_configs(budget: str | None = None) -> tuple[GPTConfig, TrainConfig]:
    """The lecture's model and training run for a budget (``course_lib.env.budget()``).

    ``"full"``: the learner's default, a few minutes on a laptop CPU. ``"ci"``: the test
    suite's short run, seconds. Every claim the lecture asserts holds in both.
    """
    from . import env

    budget = env.budget() if budget is None else budget
    if budget == "full":
        return (
            GPTConfig(seq_len=128, d_model=128, num_layers=3, num_heads=4),
            TrainConfig(
                steps=600, batch_size=16, max_lr=6e-3, min_lr=6e-4, warmup_steps=30, eval_every=100
            ),
        )
    if budget == "ci":
        return (
            GPTConfig(seq_len=64, d_model=64, num_layers=2, num_heads=4),
            TrainConfig(
                steps=300, batch_size=16, max_lr=1e-2, min_lr=1e-3, warmup_steps=30, eval_every=100
            ),
        )
    raise ValueError(f"budget must be 'full' or 'ci', got {budget!r}")


# =========================================================================== looking inside


def repeated_random_tokens(
    batch_size: int,
    period: int,
    vocab_size: int,
    *,
    copies: int = 2,
    generator: torch.Generator | None = None,
    low: int = 0,
) -> torch.Tensor:
    """Random tokens in ``[low, vocab_size)`` repeated ``copies`` times: ``[B, copies·period]``.

    The first copy is unpredictable; from the second on, every token can be predicted by
    looking up where the current token occurred before and copying its successor: the
    job of an induction head.
    """
    first = torch.randint(low, vocab_size, (batch_size, period), generator=generator)  # (B, T)
    return first.repeat(1, copies)  # (B, copies*T)


def induction_scores(weights: torch.Tensor, period: int) -> torch.Tensor:
    r"""Per-head induction score of attention weights ``[B, H, N, N]`` on repeated tokens.

    On a sequence that repeats with period :math:`T` (:math:`t_{n} = t_{n-T}`), an
    induction head at query :math:`n` attends to key :math:`n - T + 1`: the token *after*
    the previous occurrence of the current token, which is the token to copy next
    (Olsson et al., 2022, "In-context Learning and Induction Heads"). The score is the
    mean weight on that key over every query that has one, :math:`n \ge T`:

    .. math:: s_h = \frac{1}{B\,(N - T)} \sum_b \sum_{n=T}^{N-1} P^{(h)}_{b,\,n,\,n-T+1}

    Returns ``[H]``: 1 for a perfect induction head, about :math:`1/n` for uniform attention.
    """
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"expected weights [B, H, N, N], got {tuple(weights.shape)}")
    n = weights.shape[-1]
    if not 1 <= period < n:
        raise ValueError(f"period must be in [1, N={n}), got {period}")
    queries = torch.arange(period, n)  # (N-T,)
    keys = queries - period + 1  # (N-T,)
    return weights[:, :, queries, keys].mean(dim=(0, 2))  # (H,)


def previous_token_scores(weights: torch.Tensor) -> torch.Tensor:
    r"""Per-head mean weight on the previous token: :math:`\frac{1}{B(N-1)}\sum P_{b,n,n-1}`."""
    if weights.ndim != 4:
        raise ValueError(f"expected weights [B, H, N, Nk], got {tuple(weights.shape)}")
    n = weights.shape[-2]
    queries = torch.arange(1, n)  # (N-1,)
    return weights[:, :, queries, queries - 1].mean(dim=(0, 2))  # (H,)


def random_period_tokens(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    *,
    min_period: int,
    max_period: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Rows of random tokens that repeat with a random period each: ``[B, N]``.

    Row :math:`b` draws a period :math:`T_b \\in [\\text{min}, \\text{max}]` and
    :math:`T_b` random tokens, repeated to fill ``seq_len``. Because the period varies,
    "copy the token :math:`T` positions back" is no solution: a model must find where the
    current token occurred before, by content (an induction head).
    """
    periods = torch.randint(min_period, max_period + 1, (batch_size,), generator=generator)  # (B,)
    first = torch.randint(0, vocab_size, (batch_size, max_period), generator=generator)  # (B, Tmax)
    n = torch.arange(seq_len)  # (N,)
    return first.gather(1, n[None, :] % periods[:, None])  # (B, N)


# =========================================================================== induction heads

# The induction-head experiment: a 2-layer attention-only model on rows that repeat with a
# random period (so that "copy from T back" is no solution). With this recipe the heads
# formed after 1300 to 1700 steps for seeds 0, 1, 2 (a sudden drop of the loss: the phase
# change of Olsson et al., 2022). The learning rate stays constant after the warm-up
# (min_lr = max_lr): a decaying rate delays the phase change.
INDUCTION_CONFIG = GPTConfig(
    vocab_size=30, seq_len=32, d_model=64, num_layers=2, num_heads=4, mlp=False
)
INDUCTION_TRAIN = TrainConfig(
    steps=2500,
    batch_size=32,
    max_lr=1e-2,
    min_lr=1e-2,
    warmup_steps=50,
    weight_decay=0.0,
    eval_every=100,
)
INDUCTION_PERIODS = (8, 16)
INDUCTION_PROBE_PERIOD = 12
INDUCTION_CHECKPOINT = Path(__file__).parent / "data" / "induction_heads.pt"


def induction_probe(
    model: GPT, period: int = INDUCTION_PROBE_PERIOD, batch_size: int = 64, seed: int = 123
) -> dict:
    """Loss on each copy of repeated random tokens, and each layer's best induction score."""
    tokens = repeated_random_tokens(
        batch_size, period, model.config.vocab_size, generator=torch.Generator().manual_seed(seed)
    )  # (B, 2T)
    per_position = loss_per_position(model, tokens)  # (2T-1,)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)  # L x (B, H, 2T, 2T)
    return {
        "first_copy_loss": float(per_position[: period - 1].mean()),
        "second_copy_loss": float(per_position[period - 1 :].mean()),
        "induction": [induction_scores(w, period).tolist() for w in weights],
    }


def train_induction_model(
    config: GPTConfig = INDUCTION_CONFIG,
    train_config: TrainConfig = INDUCTION_TRAIN,
    *,
    periods: tuple[int, int] = INDUCTION_PERIODS,
    progress: bool = True,
) -> tuple[GPT, History]:
    """Train the induction-head experiment's model; ``history.probes`` tracks its heads.

    On one CPU thread, like ``tools/make_induction_checkpoint.py``: the model is small, and
    the same thread count gives the same arithmetic, so the same model, on one machine.
    """
    torch.manual_seed(train_config.seed)
    model = GPT(config)

    def batch(step, generator):
        return random_period_tokens(
            train_config.batch_size,
            config.seq_len,
            config.vocab_size,
            min_period=periods[0],
            max_period=periods[1],
            generator=generator,
        )  # (B, N)

    with single_thread():
        history = train(
            model, None, train_config, progress=progress, batch_fn=batch, probe=induction_probe
        )
    return model, history


def save_induction_checkpoint(
    models: dict[str, tuple[GPT, History]], path: str | Path = INDUCTION_CHECKPOINT
) -> Path:
    """Save models (weights, config, training record) as plain tensors and numbers."""
    payload = {}
    for name, (model, history) in models.items():
        payload[name] = {
            "config": {k: getattr(model.config, k) for k in model.config.__dataclass_fields__},
            "state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "history": {
                "step": torch.tensor(history.step, dtype=torch.int32),
                "train_loss": torch.tensor(history.train_loss, dtype=torch.float32),
                "lr": torch.tensor(history.lr, dtype=torch.float32),
                "probes": history.probes,
                "seconds": history.seconds,
            },
        }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path)
    return path


def load_induction_checkpoint(
    path: str | Path = INDUCTION_CHECKPOINT,
) -> dict[str, tuple[GPT, History]]:
    """The models saved by :func:`save_induction_checkpoint` (``tools/make_induction_checkpoint.py``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no induction-head checkpoint at {path}: make it with "
            "`python tools/make_induction_checkpoint.py`"
        )
    payload = torch.load(path, map_location="cpu", weights_only=True)
    out = {}
    for name, item in payload.items():
        model = GPT(GPTConfig(**item["config"]))
        model.load_state_dict(item["state_dict"])
        model.eval()
        h = item["history"]
        history = History(
            step=h["step"].tolist(),
            train_loss=h["train_loss"].tolist(),
            lr=h["lr"].tolist(),
            probes=h["probes"],
            seconds=h["seconds"],
        )
        out[name] = (model, history)
    return out


# =========================================================================== ablations and samples


def run_ablation(
    configs: dict[str, GPTConfig],
    corpus: Corpus,
    train_config: TrainConfig,
    seeds: Sequence[int],
    *,
    progress: bool = True,
) -> dict[str, list[float]]:
    """Train every config once per seed; return the final validation losses per config.

    Seed ``s`` fixes both the initial weights and the batches, and is shared by all the
    configs, so ``losses[a][i] - losses[b][i]`` is a *paired* difference: the two runs
    differ only by the architecture. The runs use one CPU thread: models this small gain
    nothing from more, and on a busy machine lose a lot to thread synchronisation.
    """
    bar = _progress(len(configs) * len(seeds), progress)
    if bar is not None:
        bar.set_description("ablation runs")
    losses: dict[str, list[float]] = {name: [] for name in configs}
    with single_thread():
        for seed in seeds:
            for name, config in configs.items():
                torch.manual_seed(seed)
                model = GPT(config)
                run = replace(train_config, seed=seed, eval_every=0)
                history = train(model, corpus, run, progress=False)
                losses[name].append(history.val_loss[-1])
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    return losses


def known_word_fraction(text: str, words: set[str]) -> float:
    """The fraction of the words (runs of 2+ letters or ``_``) of ``text`` found in ``words``."""
    found = re.findall(r"[A-Za-z_]{2,}", text)
    return sum(w in words for w in found) / max(len(found), 1)


def corpus_words(corpus: Corpus) -> set[str]:
    """Every word (run of 2+ letters or ``_``) of the training text."""
    return set(re.findall(r"[A-Za-z_]{2,}", corpus.tokenizer.decode(corpus.train)))
