r"""The GPT of chapter 07, assembled from the course's own parts: config, attention, MLP, block, model.

A decoder-only Transformer (Radford et al., 2018; the layout of Radford et al., 2019,
"Language Models are Unsupervised Multitask Learners") maps tokens :math:`t_1 \dots t_N` to
a distribution over the next token at every position:

.. math::

    x^{(0)} = E[t] \qquad
    x^{(\ell)} = \mathrm{Block}_\ell(x^{(\ell-1)}) \qquad
    \text{logits} = \mathrm{Norm}(x^{(L)})\, E^\top,

the token embedding :math:`E \in \mathbb{R}^{V \times d_\text{model}}` reused as the read-out
("tied embeddings", Press and Wolf, 2017). Each block is *pre-norm* (Xiong et al., 2020):

.. math::

    x \leftarrow x + \mathrm{MultiHead}(\mathrm{Norm}_1(x)), \qquad
    x \leftarrow x + \mathrm{MLP}(\mathrm{Norm}_2(x)).

Every part comes from an earlier chapter: causal attention (02, with the :math:`1/\sqrt{d_h}`
of 03), heads, grouped-query attention and the KV cache (04), rotary positions (05) and, as
one of three attention backends, the Triton FlashAttention kernel (06). The defaults are the
course's model; the other switches of :class:`GPTConfig` (biases, RMSNorm, the tanh GELU,
SwiGLU, half-split RoPE, an untied read-out) are what GPT-2 and Llama-family checkpoints
need (:mod:`course_lib.gpt.pretrained` loads them). Training, data, sampling and probes live
in the package's other modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import causal_mask, masked_softmax, scaled_dot_product_attention
from ..multihead import KVCache, kv_cache_bytes, merge_heads, repeat_kv, split_heads
from ..positional import rope_cos_sin, rotate_pairs
from .generate import generate

__all__ = [
    "ACTIVATIONS",
    "BACKENDS",
    "Block",
    "CausalSelfAttention",
    "GPT",
    "GPTConfig",
    "MLP",
    "NORMS",
    "POSITIONS",
    "RMSNorm",
    "attend",
    "equal_params_config",
    "grouped_query_attention",
]

BACKENDS = ("course", "torch", "flash")
POSITIONS = ("rope", "learned", "none")
NORMS = ("layernorm", "rmsnorm")
ACTIVATIONS = ("gelu", "gelu_tanh", "swiglu")


@dataclass(frozen=True)
class GPTConfig:
    r"""The shape of a model. ``head_dim`` :math:`d_h = d_\text{model}/H`.

    ``seq_len``: the training context (and the size of the table for ``positions="learned"``).
    ``num_kv_heads`` :math:`H_{kv}` (default :math:`H`; 1 is multi-query attention).
    ``positions``: ``"rope"`` (chapter 05; ``rope_interleaved=False`` pairs :math:`(i, i+d/2)`
    like Hugging Face Llama), ``"learned"`` (GPT-2's table) or ``"none"``. ``scaled=False``
    drops the :math:`1/\sqrt{d_h}` (chapter 03's ablation). ``attention``: ``"course"``,
    ``"torch"`` or ``"flash"``. ``mlp=False``: attention only. ``bias``: biases on every
    linear layer (GPT-2). ``norm``: ``"layernorm"`` or ``"rmsnorm"`` (Llama), with ``norm_eps``.
    ``activation``: ``"gelu"`` (exact), ``"gelu_tanh"`` (GPT-2's ``gelu_new``) or
    ``"swiglu"`` (Llama's gated MLP). ``tie_embeddings=False`` adds a separate read-out.
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
    bias: bool = False
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    activation: str = "gelu"
    rope_interleaved: bool = True
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "d_model", "num_layers", "num_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}: "
                "each head gets d_model / num_heads features"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not divisible by num_kv_heads="
                f"{self.num_kv_heads}: each key/value head must serve the same number of "
                "query heads"
            )
        if self.head_dim % 2 and self.positions == "rope":
            raise ValueError(f"RoPE rotates feature pairs: head_dim={self.head_dim} must be even")
        for name, allowed in (
            ("positions", POSITIONS),
            ("attention", BACKENDS),
            ("norm", NORMS),
            ("activation", ACTIVATIONS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")

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
        n = self.seq_len if seq_len is None else seq_len
        return kv_cache_bytes(
            self.num_layers, self.kv_heads, self.head_dim, n, batch_size, bytes_per_value
        )


def equal_params_config(config: GPTConfig, num_kv_heads: int) -> GPTConfig:
    r"""``config`` with :math:`H_{kv}` = ``num_kv_heads`` and the same number of parameters.

    Fewer key/value heads shrink :math:`W_K, W_V` by :math:`2 d_\text{model} (H - H_{kv}) d_h`
    weights per layer; widening the two-matrix MLP by :math:`(H - H_{kv}) d_h` hidden units
    (:math:`2 d_\text{model}` weights each, no biases) gives them back exactly.
    """
    if config.activation == "swiglu" or config.bias:
        raise ValueError("equal_params_config assumes the course's MLP: no SwiGLU, no biases")
    new = replace(config, num_kv_heads=num_kv_heads)
    return replace(new, d_ff=config.ff_width + (config.kv_heads - new.kv_heads) * config.head_dim)


def grouped_query_attention(
    q, k, v, mask=None, *, is_causal=False, scale=None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention of ``q [B, H, N, d_h]`` over ``k, v [B, Hkv, Nk, d_h]``: ``(output, weights)``.

    Query head :math:`i` reads key/value head :math:`\lfloor i/G \rfloor`, :math:`G = H/H_{kv}`
    (chapter 04's grouped-query attention). Repeating every key and value :math:`G` times
    (:func:`~course_lib.multihead.repeat_kv`) would copy the whole cache in every layer for
    every generated token; instead the :math:`G` query heads of a group are stacked as
    :math:`G N` query rows against their group's keys, one attention problem per key/value
    head, with chapter 02's arithmetic:

    .. math:: S^{(g)} = \text{scale}\cdot\begin{bmatrix} Q^{(gG)} \\ \vdots \\
              Q^{(gG+G-1)} \end{bmatrix} K^{(g)\top} + M, \qquad
              O^{(g)} = \mathrm{softmax}(S^{(g)})\, V^{(g)}.

    Row :math:`jN + n` of the stack is token :math:`n` of head :math:`gG + j`, so every
    stacked head takes the same ``[N, Nk]`` rows of :math:`M` (0 where the mask is True, may
    attend; :math:`-\infty` where not; ``is_causal``: the top-left triangle), added in the
    same call as the product (``torch.baddbmm``: :math:`M + \text{scale}\cdot QK^\top`). No input checks (the model checks its tokens once); a row with
    every key masked gets zero weights, as in chapter 02. A mask with batch or head axes is
    handed to chapter 02's :func:`~course_lib.attention.scaled_dot_product_attention` with
    the heads repeated. ``output [B, H, N, d_h]``, ``weights [B, H, N, Nk]``.
    """
    b, h, n, d = q.shape
    hkv, nk = k.shape[1], k.shape[-2]
    g = h // hkv
    if mask is not None and mask.ndim > 2:  # a mask per sequence or head: repeat the heads
        k, v = repeat_kv(k, g), repeat_kv(v, g)  # (B, H, Nk, d_h) each
        return scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=scale)
    may_empty_a_row = mask is not None  # a caller's mask can; the causal triangle cannot
    if is_causal:  # query n sees keys m <= n (top-left, as torch's is_causal)
        tri = causal_mask(n, nk, device=q.device)  # (N, Nk)
        mask = tri if mask is None else mask & tri  # (N, Nk)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    rows = q.reshape(b * hkv, g * n, d)  # (B*Hkv, G*N, d_h): heads gG..gG+G-1, stacked
    keys = k.reshape(b * hkv, nk, d).transpose(1, 2)  # (B*Hkv, d_h, Nk)
    if mask is None:  # decoding: every cached key is visible
        scores = torch.bmm(rows * scale, keys)  # (B*Hkv, G*N, Nk)
    else:  # M: 0 where query n may attend, -inf where not; the same rows for every stacked head
        m = mask.expand(n, nk)  # (N, Nk)
        if m.dtype == torch.bool:
            m = torch.zeros(n, nk, dtype=q.dtype, device=q.device).masked_fill_(~m, float("-inf"))
        scores = torch.baddbmm(m.to(q.dtype).repeat(g, 1), rows, keys, alpha=scale)  # M + s QK^T
    if not may_empty_a_row:  # every row keeps at least one key: the plain softmax
        weights = torch.softmax(scores, dim=-1)  # (B*Hkv, G*N, Nk)
    else:
        weights = masked_softmax(scores)  # (B*Hkv, G*N, Nk): all-masked rows give zeros
    out = torch.bmm(weights, v.reshape(b * hkv, nk, d))  # (B*Hkv, G*N, d_h)
    return out.view(b, h, n, d), weights.view(b, h, n, nk)  # (B, H, N, d_h | Nk)


def attend(q, k, v, *, backend="course", is_causal=False, mask=None, scale=None) -> torch.Tensor:
    r""":math:`\mathrm{softmax}(\text{scale}\cdot QK^\top + M)\,V` by one of three backends.

    ``q [B, H, N, d_h]``, ``k, v [B, Hkv, Nk, d_h]`` (``Hkv`` divides ``H``: grouped-query
    attention; ``Hkv = H`` is plain multi-head). ``"course"``: chapter 02's arithmetic with
    the query heads of a group stacked (:func:`grouped_query_attention`); ``"torch"``:
    ``F.scaled_dot_product_attention`` (``enable_gqa``); ``"flash"``: chapter 06's Triton
    kernels, its decode kernel for a few queries against a longer cache, else the
    FlashAttention forward on heads repeated by :func:`~course_lib.multihead.repeat_kv`
    (interpreted on a CPU, which is slow: tiny sizes there). All three agree to rounding error. ``mask``
    (True = may attend) is not supported by the flash kernel, only ``is_causal``.
    """
    groups = q.shape[1] // k.shape[1]
    if backend == "course":
        out, _ = grouped_query_attention(q, k, v, mask, is_causal=is_causal, scale=scale)
        return out  # (B, H, Nq, d_h)
    if backend == "torch":
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=groups > 1
        )  # (B, H, Nq, d_h)
    if backend == "flash":
        if mask is not None:
            raise ValueError(
                "the flash backend takes is_causal only, not an explicit mask: "
                "use backend='course' or 'torch' for chunked prefill with a cache"
            )
        from ..flash import DECODE_MAX_ROWS, flash_attention, flash_decode

        if not is_causal and q.shape[2] < k.shape[2] and groups * q.shape[2] <= DECODE_MAX_ROWS:
            # decoding against a cache: chapter 06's decode kernel reads each key/value head
            # once for its G query heads (no repeat)
            return flash_decode(q, k, v, scale=scale, layout="bhnd")  # (B, H, Nq, d_h)
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # (B, H, Nk, d_h) each
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # (B, H, N, d_h) each
        return flash_attention(
            q, k, v, is_causal=is_causal, scale=scale, layout="bhnd"
        )  # (B, H, Nq, d_h): the layout named, so that fewer tokens than heads is no ambiguity
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


class CausalSelfAttention(nn.Module):
    r"""Causal multi-head self-attention with GQA, RoPE, a KV cache and a backend switch.

    .. math::

        q_n = R_n W_Q x_n, \quad k_n = R_n W_K x_n, \quad v_n = W_V x_n, \qquad
        o_n = W_O\, \mathrm{Concat}_i \sum_{m \le n} \mathrm{softmax}_m
        \Big(\tfrac{q_n^{(i)} \cdot k_m^{(\lfloor i/G \rfloor)}}{\sqrt{d_h}}\Big)\,
        v_m^{(\lfloor i/G \rfloor)}

    :math:`R_n` is the RoPE rotation of position :math:`n`. The cache holds the *rotated*
    keys, so a cached key never needs rotating again.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        d, hd, b = config.d_model, config.head_dim, config.bias
        self.W_Q = nn.Linear(d, config.num_heads * hd, bias=b)
        self.W_K = nn.Linear(d, config.kv_heads * hd, bias=b)
        self.W_V = nn.Linear(d, config.kv_heads * hd, bias=b)
        self.W_O = nn.Linear(config.num_heads * hd, d, bias=b)

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None = None,
        need_weights: bool = False,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ):
        """``(output [B, N, d_model], weights [B, H, N, Nk] or None)``.

        With a ``cache`` the ``N`` tokens of ``x`` are the positions after the cached ones.
        ``need_weights=True`` computes with the course backend, the only one returning weights.
        ``rope``: the ``(cos, sin) [N, d_h]`` of these positions, which the model
        computes once for all layers; computed here when not given.
        """
        cfg = self.config
        n = x.shape[1]
        past = 0 if cache is None else len(cache)
        q = split_heads(self.W_Q(x), cfg.num_heads)  # (B, H, N, d_h)
        k = split_heads(self.W_K(x), cfg.kv_heads)  # (B, Hkv, N, d_h)
        v = split_heads(self.W_V(x), cfg.kv_heads)  # (B, Hkv, N, d_h)
        if cfg.positions == "rope":  # rotate queries and keys by their positions (chapter 05)
            cos, sin = _rope_for(cfg, past, n, x) if rope is None else rope  # (N, d_h)
            q = rotate_pairs(q, cos, sin, interleaved=cfg.rope_interleaved)  # (B, H, N, d_h)
            k = rotate_pairs(k, cos, sin, interleaved=cfg.rope_interleaved)  # (B, Hkv, N, d_h)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, Hkv, Nk, d_h) with Nk = past + N

        # the N new queries are positions past..past+N-1: query i sees keys j <= past + i
        mask, is_causal = None, past == 0
        if past > 0 and n > 1:  # chunked prefill: the causal triangle aligned bottom-right
            mask = torch.ones(n, past + n, dtype=torch.bool, device=x.device).tril(past)  # (N, Nk)
        scale = None if cfg.scaled else 1.0

        weights = None
        if need_weights:
            heads, weights = grouped_query_attention(
                q, k, v, mask, is_causal=is_causal, scale=scale
            )  # (B, H, N, d_h), (B, H, N, Nk)
        else:
            heads = attend(
                q, k, v, backend=cfg.attention, is_causal=is_causal, mask=mask, scale=scale
            )  # (B, H, N, d_h)
        return self.W_O(merge_heads(heads)), weights  # (B, N, d_model)


def _rope_for(
    config: GPTConfig, past: int, n: int, like: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's ``(cos, sin) [N, d_h]`` for positions ``past .. past+N-1``, in ``like``'s dtype."""
    pos = torch.arange(past, past + n, device=like.device)  # (N,)
    return rope_cos_sin(
        pos,
        config.head_dim,
        config.rope_base,
        interleaved=config.rope_interleaved,
        dtype=like.dtype,
    )  # (N, d_h) each


class MLP(nn.Module):
    r"""The position-wise feed-forward network.

    ``"gelu"`` / ``"gelu_tanh"``: :math:`W_2\,\mathrm{GELU}(W_1 x)` (Hendrycks and Gimpel,
    2016; GPT-2 uses the tanh approximation). ``"swiglu"``:
    :math:`W_2\,(\mathrm{SiLU}(W_1 x) \odot W_3 x)` (Shazeer, 2020, "GLU Variants Improve
    Transformer"; Llama), :math:`W_1` the gate, :math:`W_3` the up-projection.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        d, f, b = config.d_model, config.ff_width, config.bias
        self.activation = config.activation
        self.W_1 = nn.Linear(d, f, bias=b)
        self.W_2 = nn.Linear(f, d, bias=b)
        self.W_3 = nn.Linear(d, f, bias=b) if config.activation == "swiglu" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.W_1(x)  # (B, N, d_ff)
        if self.W_3 is not None:  # "swiglu"
            h = F.silu(h) * self.W_3(x)  # (B, N, d_ff)
        else:
            exact = "tanh" if self.activation == "gelu_tanh" else "none"
            h = F.gelu(h, approximate=exact)  # (B, N, d_ff)
        return self.W_2(h)  # (B, N, d_model)


class RMSNorm(nn.Module):
    r"""Root-mean-square normalisation (Zhang and Sennrich, 2019; Llama).

    .. math:: \mathrm{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac{1}{d}\sum_i x_i^2 + \epsilon}} \odot g

    LayerNorm without the mean subtraction and without a bias; computed in float32 at least.
    """

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # (B, N, d)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (B, N, d)
        return self.weight * h.to(x.dtype)  # (B, N, d)


def _norm(config: GPTConfig) -> nn.LayerNorm | RMSNorm:
    if config.norm == "rmsnorm":
        return RMSNorm(config.d_model, config.norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps)


class Block(nn.Module):
    r"""One pre-norm Transformer block.

    .. math::

        x \leftarrow x + \mathrm{MultiHead}(\mathrm{Norm}_1(x)), \qquad
        x \leftarrow x + \mathrm{MLP}(\mathrm{Norm}_2(x))

    The residual stream :math:`x` itself is never normalised: every sub-layer reads a
    normalised copy and *adds* its result, so a path of identities runs from the embedding to
    the read-out and gradients reach early layers undamped. (The original Transformer
    normalised after the addition, whose large gradients near the output at initialisation
    need a learning-rate warm-up: Xiong et al., 2020.)
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = _norm(config)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = _norm(config) if config.mlp else None
        self.mlp = MLP(config) if config.mlp else None

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None = None,
        need_weights: bool = False,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ):
        h, weights = self.attn(self.ln_1(x), cache, need_weights, rope)  # (B, N, d_model)
        x = x + h  # (B, N, d_model)
        if self.mlp is not None and self.ln_2 is not None:  # both, or neither (config.mlp)
            x = x + self.mlp(self.ln_2(x))  # (B, N, d_model)
        return x, weights


class GPT(nn.Module):
    r"""A decoder-only language model: embeddings, :math:`L` blocks, a (tied) read-out.

    ``forward(tokens)`` maps ``tokens [B, N]`` to ``logits [B, N, V]``: position :math:`n`'s
    logits are the model's guess for token :math:`n+1`, computed from tokens :math:`\le n`.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        learned = config.positions == "learned"  # GPT-2's absolute positions, one vector each
        self.pos_embed = nn.Embedding(config.seq_len, config.d_model) if learned else None
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.ln_f = _norm(config)
        tied = config.tie_embeddings
        self.lm_head = None if tied else nn.Linear(config.d_model, config.vocab_size, bias=False)
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
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        """Parameters, each counted once (the tied embedding is also the read-out)."""
        return sum(p.numel() for p in self.parameters())

    def use_backend(self, backend: str) -> GPT:
        """Switch every layer's attention backend (``"course"``, ``"torch"``, ``"flash"``)."""
        self.config = replace(self.config, attention=backend)
        for i in range(len(self.blocks)):
            self.block(i).attn.config = self.config
        return self

    def block(self, i: int) -> Block:
        """Layer ``i``: ``self.blocks[i]``, typed as a :class:`Block` (an ``nn.ModuleList``'s
        items are just modules to a type checker)."""
        block = self.blocks[i]
        assert isinstance(block, Block)
        return block

    def new_caches(self) -> list[KVCache]:
        """One empty :class:`KVCache` per layer."""
        return [KVCache() for _ in self.blocks]

    def forward(self, tokens: torch.Tensor, caches=None, need_weights: bool = False):
        """``logits [B, N, V]``, or ``(logits, [weights [B, H, N, Nk] per layer])``.

        With ``caches`` (one per layer, from :meth:`new_caches`) the tokens continue the
        cached ones and their keys and values are appended.
        """
        if tokens.ndim != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"expected integer tokens of shape [B, N], got {tuple(tokens.shape)} of "
                f"dtype {tokens.dtype}"
            )
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(
                f"expected one cache per layer ({len(self.blocks)}), got {len(caches)}"
            )
        past, n = (0 if caches is None else len(caches[0])), tokens.shape[1]
        x = self.embed(tokens)  # (B, N, d_model)
        if self.pos_embed is not None:
            if past + n > self.config.seq_len:
                raise ValueError(
                    f"learned positions stop at seq_len={self.config.seq_len}; "
                    f"got positions up to {past + n - 1}"
                )
            x = x + self.pos_embed(torch.arange(past, past + n, device=tokens.device))  # (B, N, d)
        # RoPE's angles depend on the positions only: computed once here, used by every layer
        rope = _rope_for(self.config, past, n, x) if self.config.positions == "rope" else None
        all_weights = []
        for i, block in enumerate(self.blocks):
            x, weights = block(x, None if caches is None else caches[i], need_weights, rope)
            all_weights.append(weights)  # (B, H, N, Nk) or None
        x = self.ln_f(x)  # (B, N, d_model)
        if self.lm_head is None:  # tied: the embedding is the read-out
            logits = x @ self.embed.weight.T  # (B, N, V)
        else:
            logits = self.lm_head(x)  # (B, N, V)
        return (logits, all_weights) if need_weights else logits

    def generate(self, prompt: torch.Tensor, max_new_tokens: int, **options) -> torch.Tensor:
        """Continue ``prompt [B, P]``: ``[B, P + max_new_tokens]``. The options (``temperature``,
        ``top_k``, ``use_cache``, ``generator``, ``window``) are :func:`course_lib.gpt.generate.generate`'s."""
        return generate(self, prompt, max_new_tokens, **options)
