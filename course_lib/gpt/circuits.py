r"""The induction circuit read from the weights, and tested by ablation (chapter 07).

Attention scores say *where* a head looks; the weights say *why*. Following Elhage et al.
(2021, "A Mathematical Framework for Transformer Circuits") and Olsson et al. (2022,
"In-context Learning and Induction Heads"), each head is two matrices acting on the
residual stream :math:`x \in \mathbb{R}^D`:

.. math::

    \text{QK}^h = (W_Q^h N)^\top (W_K^h N), \qquad \text{OV}^h = W_O^h W_V^h N,

where :math:`N` is the layer's normalisation folded in (LayerNorm's gain times the
centring :math:`I - \tfrac1D \mathbf{1}\mathbf{1}^\top`; the per-token division by the
standard deviation, a positive scalar, is left out, as are biases). The score of query
:math:`x_q` on key :math:`x_k` is :math:`x_q^\top \text{QK}^h x_k` (before RoPE's rotation by
the offset), and the head writes :math:`\text{OV}^h x_k` weighted by the softmax.

* **K-composition** of a layer-0 head :math:`a` into a layer-1 head :math:`b`: how much of
  what :math:`a` writes, :math:`b` reads as its *key*,
  :math:`\lVert \text{QK}^b\,\text{OV}^a \rVert_F / (\lVert \text{QK}^b \rVert_F
  \lVert \text{OV}^a \rVert_F)`. An induction head's keys are built from the previous-token
  head's output, so that pair should stand out (Q- and V-composition likewise, with
  :math:`\text{OV}^{a\top}\text{QK}^b` and :math:`\text{OV}^b\text{OV}^a`).
* **Copying** (the OV circuit from tokens to logits):
  :math:`M = E\, N_f\, \text{OV}^h E^\top` (``[V, V]``, tied embedding :math:`E`, final
  norm :math:`N_f`); a head that copies raises the logit of the token it attends to, so
  :math:`M` is dominated by its diagonal and its eigenvalues are mostly positive:
  :math:`\sum_i \lambda_i / \sum_i |\lambda_i|` near 1.
* **Matching** (the QK circuit through the previous-token head): the induction head's query
  for token :math:`A` against a key whose *previous* token was :math:`A'`,
  :math:`S_{A A'} = (W_Q E_A)^\top R_\delta\, W_K\, \text{OV}^{\text{prev}} E_{A'}` with RoPE's
  rotation :math:`R_\delta` for the offset :math:`\delta` between them; it should peak at
  :math:`A' = A`.
* **Ablation**: replace the previous-token head's output by its mean (or zero) and the
  induction head should lose its keys: the loss on the second copy of repeated tokens rises.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..positional import apply_rope
from .model import GPT, RMSNorm

__all__ = [
    "ablated_heads",
    "composition_baseline",
    "composition_score",
    "composition_scores",
    "copying_score",
    "diagonal_accuracy",
    "effective_embedding",
    "full_ov_circuit",
    "head_weights",
    "induction_losses",
    "ov_circuit",
    "qk_circuit",
    "qk_matching_accuracy",
    "repeat_position_groups",
]


def _norm_matrix(norm: nn.LayerNorm | RMSNorm) -> torch.Tensor:
    """``[D, D]``: the norm's linear part, gain times centring (LayerNorm) or gain (RMSNorm)."""
    gain = norm.weight.detach().double()  # (D,)
    d = gain.shape[0]
    if isinstance(norm, RMSNorm):
        return torch.diag(gain)  # (D, D)
    centre = torch.eye(d, dtype=torch.float64) - 1.0 / d  # (D, D)
    return torch.diag(gain) @ centre  # (D, D)


def _check_head(model: GPT, layer: int, head: int) -> None:
    cfg = model.config
    if not 0 <= layer < cfg.num_layers:
        raise ValueError(f"layer must be in [0, {cfg.num_layers}), got {layer}")
    if not 0 <= head < cfg.num_heads:
        raise ValueError(f"head must be in [0, {cfg.num_heads}), got {head}")


def head_weights(model: GPT, layer: int, head: int) -> dict[str, torch.Tensor]:
    """One head's slices, float64: ``W_Q, W_K, W_V`` ``[d_h, D]`` and ``W_O`` ``[D, d_h]``.

    With grouped-query attention the key/value slices are those of the KV head the query
    head reads, :math:`\\lfloor h / G \\rfloor`.
    """
    _check_head(model, layer, head)
    cfg, attn = model.config, model.block(layer).attn
    hd, kv = cfg.head_dim, head // cfg.num_groups
    q_rows, kv_rows = slice(head * hd, (head + 1) * hd), slice(kv * hd, (kv + 1) * hd)
    return {
        "W_Q": attn.W_Q.weight.detach().double()[q_rows],  # (d_h, D)
        "W_K": attn.W_K.weight.detach().double()[kv_rows],  # (d_h, D)
        "W_V": attn.W_V.weight.detach().double()[kv_rows],  # (d_h, D)
        "W_O": attn.W_O.weight.detach().double()[:, q_rows],  # (D, d_h)
    }


def qk_circuit(model: GPT, layer: int, head: int) -> torch.Tensor:
    r""":math:`\text{QK}^h = (W_Q N)^\top (W_K N)`, ``[D, D]``: score = :math:`x_q^\top \text{QK}\, x_k`
    at offset 0 (RoPE rotates between the two factors for other offsets)."""
    w, n = head_weights(model, layer, head), _norm_matrix(model.block(layer).ln_1)
    return (w["W_Q"] @ n).T @ (w["W_K"] @ n)  # (D, D)


def ov_circuit(model: GPT, layer: int, head: int) -> torch.Tensor:
    r""":math:`\text{OV}^h = W_O W_V N`, ``[D, D]``: what the head writes for a key :math:`x_k`."""
    w, n = head_weights(model, layer, head), _norm_matrix(model.block(layer).ln_1)
    return w["W_O"] @ w["W_V"] @ n  # (D, D)


def composition_score(left: torch.Tensor, right: torch.Tensor) -> float:
    r""":math:`\lVert A B \rVert_F / (\lVert A \rVert_F \lVert B \rVert_F)`, in :math:`[0, 1]`."""
    num = torch.linalg.matrix_norm(left @ right)
    return float(num / (torch.linalg.matrix_norm(left) * torch.linalg.matrix_norm(right)))


def _pair(kind: str, ov_a: torch.Tensor, qk_b: torch.Tensor, ov_b: torch.Tensor):
    if kind == "k":
        return qk_b, ov_a  # b's keys read a's output
    if kind == "q":
        return ov_a.T, qk_b  # b's queries read a's output
    if kind == "v":
        return ov_b, ov_a  # b's values read a's output
    raise ValueError(f"kind must be 'q', 'k' or 'v' (the input of the later head), got {kind!r}")


def composition_scores(
    model: GPT, kind: str = "k", *, writer_layer: int = 0, reader_layer: int = 1
) -> torch.Tensor:
    """``[H, H]``: entry ``[a, b]`` is how much head ``b`` of ``reader_layer`` reads head
    ``a`` of ``writer_layer`` through its keys (``"k"``), queries (``"q"``) or values (``"v"``)."""
    if not writer_layer < reader_layer:
        raise ValueError(
            f"a head can only read an earlier layer: writer_layer={writer_layer} must be "
            f"below reader_layer={reader_layer}"
        )
    h = model.config.num_heads
    out = torch.zeros(h, h, dtype=torch.float64)  # (H, H)
    for a in range(h):
        ov_a = ov_circuit(model, writer_layer, a)
        for b in range(h):
            qk_b, ov_b = qk_circuit(model, reader_layer, b), ov_circuit(model, reader_layer, b)
            out[a, b] = composition_score(*_pair(kind, ov_a, qk_b, ov_b))
    return out


def composition_baseline(model: GPT, samples: int = 200, seed: int = 0) -> torch.Tensor:
    r"""The composition score of random matrices shaped like the heads' (rank :math:`d_h`
    products of Gaussian ``[D, d_h]`` and ``[d_h, D]`` factors): ``[samples]``. What a score
    is worth is how far it stands above these."""
    d, hd = model.config.d_model, model.config.head_dim
    gen = torch.Generator().manual_seed(seed)

    def low_rank():
        a = torch.randn(d, hd, generator=gen, dtype=torch.float64)  # (D, d_h)
        return a @ torch.randn(hd, d, generator=gen, dtype=torch.float64)  # (D, D)

    return torch.tensor([composition_score(low_rank(), low_rank()) for _ in range(samples)])


def effective_embedding(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    r"""``[V, D]``: what a position holding token :math:`t` carries into layer 1, to first
    order: :math:`E_t + \sum_a s_a\, \text{OV}^a E_t` over the layer-0 heads :math:`a`,
    :math:`s_a` the mean weight head :math:`a` puts on the query's own position (measured on
    ``tokens``). A layer-0 head that attends to itself rewrites the token in place; the
    layer-1 heads read that rewritten version, not :math:`E` alone."""
    e = model.embed.weight.detach().double()  # (V, D)
    with torch.no_grad():
        _, weights = model(tokens, need_weights=True)  # L x (B, H, N, N)
    own = torch.diagonal(weights[0], dim1=-2, dim2=-1).mean(dim=(0, 2)).double()  # (H,)
    out = e.clone()  # (V, D)
    for a in range(model.config.num_heads):
        out = out + own[a] * (ov_circuit(model, 0, a) @ e.T).T  # (V, D)
    return out


def full_ov_circuit(model: GPT, layer: int, head: int, embedding=None) -> torch.Tensor:
    r""":math:`M = E\,N_f\,\text{OV}^h \tilde E^\top`, ``[V, V]``: entry ``[out, in]`` is the logit
    of token ``out`` that the head adds when it attends to a position holding token ``in``.
    :math:`\tilde E` is ``embedding`` (``[V, D]``, e.g. :func:`effective_embedding` for a
    layer-1 head), by default the token embedding :math:`E` itself."""
    e = model.embed.weight.detach().double()  # (V, D)
    read_out = e if model.lm_head is None else model.lm_head.weight.detach().double()  # (V, D)
    src = e if embedding is None else embedding.double()  # (V, D)
    return read_out @ _norm_matrix(model.ln_f) @ ov_circuit(model, layer, head) @ src.T  # (V, V)


def diagonal_accuracy(circuit: torch.Tensor, dim: int = 0) -> float:
    """Fraction of tokens whose own entry is the largest of its column (``dim=0``) or row."""
    return float((circuit.argmax(dim) == torch.arange(circuit.shape[1 - dim])).double().mean())


def copying_score(circuit: torch.Tensor) -> float:
    r""":math:`\sum_i \lambda_i / \sum_i |\lambda_i|` (real part of the sum) of a square
    circuit: 1 if every eigenvalue is positive (it copies), −1 if every one is negative."""
    lam = torch.linalg.eigvals(circuit)  # (V,) complex
    return float(lam.sum().real / lam.abs().sum())


def qk_matching_accuracy(
    model: GPT, prev_head: int, induction_head: int, offsets=range(7, 16), embedding=None
) -> torch.Tensor:
    r"""``[len(offsets)]``: for each offset :math:`\delta` between query and key, the
    fraction of tokens :math:`A` whose score :math:`S_{AA'}` (query token :math:`A` at
    :math:`\delta`, key whose previous token is :math:`A'`, written there by ``prev_head`` of
    layer 0) is largest at :math:`A' = A`. The query reads ``embedding`` (``[V, D]``, e.g.
    :func:`effective_embedding`; default :math:`E`). Chance is :math:`1/V`."""
    cfg = model.config
    e = model.embed.weight.detach().double()  # (V, D)
    src = e if embedding is None else embedding.double()  # (V, D)
    w, n1 = head_weights(model, 1, induction_head), _norm_matrix(model.block(1).ln_1)
    q = src @ (w["W_Q"] @ n1).T  # (V, d_h) the query of each token
    k = (w["W_K"] @ n1 @ ov_circuit(model, 0, prev_head) @ e.T).T  # (V, d_h) key from prev token
    rope: dict[str, Any] = {"base": cfg.rope_base, "interleaved": cfg.rope_interleaved}
    out = []
    for delta in offsets:
        if cfg.positions == "rope":
            qd = apply_rope(q, torch.full((q.shape[0],), float(delta)), **rope)  # (V, d_h)
            kd = apply_rope(k, torch.zeros(k.shape[0]), **rope)  # (V, d_h)
        else:
            qd, kd = q, k
        out.append(diagonal_accuracy(qd @ kd.T, dim=1))  # rows A, columns A'
    return torch.tensor(out, dtype=torch.float64)


@contextmanager
def ablated_heads(model: GPT, heads, mode: str = "mean"):
    """Within the block, the given ``(layer, head)`` pairs write their mean output over the
    batch and positions (``mode="mean"``) or nothing (``"zero"``) instead of their own.

    The head's slice of the input to :math:`W_O` is replaced, so the rest of the layer is
    untouched. Mean ablation keeps the average the later layers are used to and removes only
    what depends on the input (Olsson et al. discuss both)."""
    if mode not in ("mean", "zero"):
        raise ValueError(f"mode must be 'mean' or 'zero', got {mode!r}")
    hd = model.config.head_dim
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        _check_head(model, layer, head)
        by_layer.setdefault(layer, []).append(head)

    def make_hook(hs):
        def hook(module, args):
            (x,) = args  # (B, N, H*d_h)
            x = x.clone()
            for h in hs:
                part = x[..., h * hd : (h + 1) * hd]  # (B, N, d_h)
                fill = part.mean(dim=(0, 1), keepdim=True) if mode == "mean" else 0.0
                x[..., h * hd : (h + 1) * hd] = fill
            return (x,)

        return hook

    handles = [
        model.block(layer).attn.W_O.register_forward_pre_hook(make_hook(hs))
        for layer, hs in by_layer.items()
    ]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def repeat_position_groups(tokens: torch.Tensor, period: int) -> dict[str, torch.Tensor]:
    """Boolean masks ``[B, 2T-1]`` over the predicting positions of a twice-repeated row.

    Position ``n`` predicts token ``n+1``. ``"first_copy"``: ``n < T-1`` (nothing to copy);
    ``"copy_start"``: ``n = T-1``, predicting the second copy's first token, which no
    induction head can get (the current token's earlier occurrence, if any, was followed by
    something else); ``"unique"``: ``n >= T`` and the current token occurs once in the first
    copy, so "the token after its previous occurrence" is one token, the right one;
    ``"repeated"``: ``n >= T`` and it occurs more than once (drawn with replacement), so
    the earlier occurrences point at different successors.
    """
    b, n = tokens.shape
    if n != 2 * period:
        raise ValueError(f"expected tokens [B, 2T] = [B, {2 * period}], got {tuple(tokens.shape)}")
    first = tokens[:, :period]  # (B, T)
    counts = (first[:, :, None] == first[:, None, :]).sum(-1)  # (B, T) occurrences in copy 1
    pos = torch.arange(n - 1)  # (2T-1,)
    second = (pos >= period)[None, :].expand(b, -1)  # (B, 2T-1)
    count_here = counts.gather(1, (pos % period)[None, :].expand(b, -1))  # (B, 2T-1)
    return {
        "first_copy": (pos < period - 1)[None, :].expand(b, -1),
        "copy_start": (pos == period - 1)[None, :].expand(b, -1),
        "unique": second & (count_here == 1),
        "repeated": second & (count_here > 1),
    }


def induction_losses(model: GPT, tokens: torch.Tensor, period: int) -> dict[str, float]:
    """Mean loss (nats) on each group of :func:`repeat_position_groups`, and ``"second_copy"``
    on all of ``n >= T`` (the positions an induction head can predict)."""
    with torch.no_grad():
        logits = model(tokens)  # (B, 2T, V)
        nll = F.cross_entropy(
            logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
        )  # (B, 2T-1)
    groups = repeat_position_groups(tokens, period)
    out = {name: float(nll[mask].mean()) for name, mask in groups.items() if mask.any()}
    out["second_copy"] = float(nll[groups["unique"] | groups["repeated"]].mean())
    return out
