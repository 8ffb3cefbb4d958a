"""Plausible wrong versions of course_lib's functions, for the mutation run of the lectures.

The README says that every claim a lecture makes is computed in a cell and asserted, so that
the notebooks are the test suite. That holds only if an assertion fails when its claim is
false. A :class:`Mutant` is one mistake a learner or a maintainer could make in a function a
lecture relies on: the scale of attention forgotten, a softmax over the wrong axis, a mask of
the wrong sign, RoPE with the other pairing, a KV cache that drops its newest token. It names

* ``target``: the function it replaces, ``"course_lib.attention:scaled_dot_product_attention"``,
  or a method, ``"course_lib.multihead:KVCache.update"``;
* ``replacement``: the wrong version, a function (below), or the source text of a ``def``
  that is run in the target module's namespace (so it may use the module's private helpers);
* ``claim``: what the lecture claims that the wrong version breaks.

:func:`apply` puts a mutant in place inside a running kernel: the target, and every other
reference to the same function object that a loaded ``course_lib`` module holds (a name
imported with ``from course_lib.x import f``, a value of a module-level dict). Modules
imported later read the replaced attribute. ``benchmarks/mutation_run.py`` runs each lecture
in a fresh kernel with one mutant applied by a cell inserted before the lecture's own cells,
and records which of the lecture's assertions stops it (docs/architecture.md).

A wrong version that needs the right one calls :func:`original`. Every wrong version keeps
the shapes and runs: a claim must catch it, not a traceback.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["MUTANTS", "Mutant", "apply", "by_lecture", "find", "original", "restore"]


@dataclass(frozen=True)
class Mutant:
    """One wrong version of one course_lib function, and the lecture claim it breaks."""

    name: str
    lecture: str  # "02": the two digits of notebooks/02_*.ipynb
    target: str  # "module:function" or "module:Class.method"
    replacement: Callable | str
    claim: str


# target -> the function it named before apply() replaced it
_ORIGINALS: dict[str, Callable] = {}
# (owner, attribute or dict key, original value) for restore()
_REPLACED: list[tuple[object, str, object]] = []


def original(target: str) -> Callable:
    """The function ``target`` named before :func:`apply` replaced it."""
    return _ORIGINALS[target]


def _resolve(target: str) -> tuple[object, str, Callable]:
    """``(owner, attribute, current value)`` of ``"module:name"`` or ``"module:Class.name"``."""
    module_name, _, path = target.partition(":")
    if not path:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    owner = importlib.import_module(module_name)
    *classes, attribute = path.split(".")
    for name in classes:
        owner = getattr(owner, name)
    if attribute not in vars(owner):
        raise AttributeError(f"{target}: {owner!r} has no attribute {attribute!r}")
    return owner, attribute, vars(owner)[attribute]


def _build(mutant: Mutant) -> Callable:
    """The wrong version as a function: ``replacement`` itself, or its source run in a copy of
    the target module's namespace."""
    if callable(mutant.replacement):
        return mutant.replacement
    module = importlib.import_module(mutant.target.partition(":")[0])
    namespace = dict(vars(module))
    exec(mutant.replacement, namespace)  # the maintainer's own declarations, never input
    return namespace[mutant.target.partition(":")[2].rpartition(".")[2]]


def apply(mutant: Mutant | str) -> list[str]:
    """Replace ``mutant.target`` and every reference to the same function object in the
    loaded ``course_lib`` modules (module attributes and module-level dicts). Returns where
    it replaced it, ``"module:name"`` each (the target first)."""
    mutant = find(mutant) if isinstance(mutant, str) else mutant
    owner, attribute, old = _resolve(mutant.target)
    new = _build(mutant)
    _ORIGINALS.setdefault(mutant.target, old)
    setattr(owner, attribute, new)
    _REPLACED.append((owner, attribute, old))
    where = [mutant.target]
    for module_name, module in sorted(sys.modules.items()):
        if module is None or module_name.split(".")[0] != "course_lib":
            continue
        for name, value in list(vars(module).items()):
            if value is old:
                setattr(module, name, new)
                _REPLACED.append((module, name, old))
                where.append(f"{module_name}:{name}")
            elif isinstance(value, dict):
                for key in [k for k, v in value.items() if v is old]:
                    value[key] = new
                    _REPLACED.append((value, key, old))
                    where.append(f"{module_name}:{name}[{key!r}]")
    return where


def restore() -> None:
    """Undo every :func:`apply` of this process, newest first."""
    while _REPLACED:
        owner, key, old = _REPLACED.pop()
        if isinstance(owner, dict):
            owner[key] = old
        else:
            setattr(owner, key, old)
    _ORIGINALS.clear()


# --------------------------------------------------------------------------- 00: setup


def softmax_reference_without_max(x):
    """Chapter 00's reference softmax without the max subtraction: NaN for scores near 1000."""
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def matches_inverted(got, other, atol, rtol) -> bool:
    """The check's mistake matcher with the comparison the wrong way round: it names the
    first declared mistake whose output differs from the learner's."""
    from course_lib.checks.core import compare_values

    try:
        return compare_values(got, other, atol, rtol) is not None
    except Exception:
        return False


def triton_installed_means_imported() -> bool:
    """'Installed' read as 'already imported': False in a fresh kernel that has Triton."""
    return "triton" in sys.modules


# --------------------------------------------------------------------------- 01: the RNN


def rnn_forward_without_bias(x, W_xh, W_hh, b_h, h0=None):
    """The tanh RNN with the bias b_h left out of every step."""
    h = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0
    states = []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ W_xh.T + h @ W_hh.T)
        states.append(h)
    return torch.stack(states, dim=1)


def rnn_forward_relu(x, W_xh, W_hh, b_h, h0=None):
    """The RNN with ReLU where the tanh belongs."""
    h = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0
    states = []
    for t in range(x.shape[1]):
        h = torch.relu(x[:, t] @ W_xh.T + b_h + h @ W_hh.T)
        states.append(h)
    return torch.stack(states, dim=1)


def dependency_graph_strictly_earlier(kind, seq_len, num_layers=1):
    """Attention's dependency graph with position t reading positions s < t only (itself
    forgotten); the RNN's graph unchanged."""
    if kind == "rnn":
        return original("course_lib.rnn:dependency_graph")(kind, seq_len, num_layers)
    parents = []
    for layer in range(num_layers):
        below = (layer - 1) * seq_len
        parents += [list(range(below, below + t)) if layer else [] for t in range(seq_len)]
    return parents


# --------------------------------------------------------------------------- 02-03: attention


def attention_without_scale(q, k, v, mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    """Scaled dot-product attention with the default 1/sqrt(d_k) forgotten (scale 1)."""
    sdpa = original("course_lib.attention:scaled_dot_product_attention")
    scale = 1.0 if scale is None else scale
    return sdpa(q, k, v, mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p)


def softmax_over_queries(scores, mask=None, dim=-1):
    """The masked softmax normalised over the query axis (-2) instead of the keys (-1)."""
    return original("course_lib.attention:masked_softmax")(scores, mask, dim=-2)


def mask_true_means_blocked(scores, mask=None, dim=-1):
    """The masked softmax reading a boolean mask as torch's attn_mask of nn.MultiheadAttention
    does: True = blocked."""
    flipped = None if mask is None else ~mask
    return original("course_lib.attention:masked_softmax")(scores, flipped, dim)


def causal_mask_one_ahead(n_q, n_k=None, *, device=None):
    """The causal mask shifted by one: query i also sees key i + 1, the next token."""
    n_k = n_q if n_k is None else n_k
    return torch.ones(int(n_q), int(n_k), dtype=torch.bool, device=device).tril(1)


def softmax_jacobian_plus(p):
    """The softmax Jacobian with the sign of the outer product flipped: diag(p) + p p^T."""
    p = torch.as_tensor(p)
    return torch.diag_embed(p) + p[..., :, None] * p[..., None, :]


def project_and_score_by_d_model(x, W_Q, W_K, num_heads, *, scale_by="d_model"):
    """Per-head scores divided by sqrt(d_model) however they are asked for (the classic
    bug of scaling by the model's width instead of the head's)."""
    return original("course_lib.scaling:project_and_score")(
        x, W_Q, W_K, num_heads, scale_by="d_model"
    )


# --------------------------------------------------------------------------- 04: heads, cache


def split_heads_by_reshape(x, num_heads):
    """[B, N, D] -> [B, H, N, d_h] by one reshape, without the transpose: the right shape,
    the wrong numbers."""
    batch_size, seq_len, d_model = x.shape
    return x.reshape(batch_size, num_heads, seq_len, d_model // num_heads)


def repeat_kv_tiled(x, num_groups):
    """Key/value heads tiled (0, 1, 0, 1) instead of repeated in place (0, 0, 1, 1)."""
    return x if num_groups == 1 else x.repeat(1, num_groups, 1, 1)


def kv_cache_update_drops_newest(self, k_new, v_new):
    """KVCache.update that, once the cache holds tokens, returns it without the newest ones:
    the new query never sees its own key."""
    had_tokens = self.k is not None
    k, v = original("course_lib.multihead:KVCache.update")(self, k_new, v_new)
    if not had_tokens:
        return k, v
    return k[..., :-1, :], v[..., :-1, :]


def kv_cache_bytes_keys_only(
    num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_value=2
):
    """The KV cache's bytes with the factor 2 for keys and values forgotten."""
    return int(num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value)


# --------------------------------------------------------------------------- 05: positions


def rope_angles_other_pairing(positions, d, base=10000.0, *, interleaved=True, **options):
    """RoPE's angles laid out for the other pairing convention: (i, i + d/2) where (2i, 2i+1)
    is rotated, and back (the angle table and the rotation disagree)."""
    angles = original("course_lib.positional:rope_cos_sin")
    return angles(positions, d, base, interleaved=not interleaved, **options)


def rope_angles_forget_positions(positions, d, base=10000.0, **options):
    """RoPE's angles of positions 0, 1, ... whatever positions are asked for (the offset of
    the tokens after a KV cache forgotten)."""
    pos = torch.as_tensor(positions)
    fresh = torch.arange(pos.shape[-1], device=pos.device).expand(pos.shape)  # (..., N)
    return original("course_lib.positional:rope_cos_sin")(fresh, d, base, **options)


def rotate_negative_angle(x, pos, base, interleaved, scale, frequencies):
    """RoPE's rotation by -phi instead of phi (the sine's sign flipped)."""
    from course_lib.positional import rope_angles

    d = x.shape[-1]
    phi = rope_angles(pos, d, base, scale=scale, frequencies=frequencies)
    cos, sin = torch.cos(phi).to(x.dtype), torch.sin(phi).to(x.dtype)
    if interleaved:
        xa, xb = x[..., 0::2], x[..., 1::2]
    else:
        xa, xb = x[..., : d // 2], x[..., d // 2 :]
    ya, yb = xa * cos + xb * sin, -xa * sin + xb * cos
    if interleaved:
        return torch.stack((ya, yb), dim=-1).flatten(-2)
    return torch.cat((ya, yb), dim=-1)


def sinusoidal_sin_cos_swapped(seq_len, d_model, base=10000.0, **options):
    """The sinusoidal table with cos at even features and sin at odd ones."""
    pe = original("course_lib.positional:sinusoidal_encoding")(seq_len, d_model, base, **options)
    out = pe.clone()
    half = d_model // 2
    out[:, 0 : 2 * half : 2], out[:, 1::2] = pe[:, 1::2], pe[:, 0 : 2 * half : 2]
    return out


# --------------------------------------------------------------------------- 06: FlashAttention


def _reference_forward_variant(*, rescale: bool, log_sum: bool) -> Callable:
    """Chapter 06's tiled forward with the running sums not rescaled (``rescale=False``) or
    the log-sum-exp stored as m + l instead of m + log l (``log_sum=False``)."""
    from course_lib.flash.reference import _reference_tiles, _tile_mask

    def forward(qg, kg, vg, scale, bq, bk, is_causal, diag, window):
        work = torch.float64 if qg.dtype == torch.float64 else torch.float32
        n_q, n_k, dev = qg.shape[-2], kg.shape[-2], qg.device
        out = torch.zeros(*qg.shape[:-1], vg.shape[-1], dtype=work, device=dev)
        lse = torch.full(qg.shape[:-1], -math.inf, dtype=work, device=dev)
        for i0, i1, key_tiles in _reference_tiles(n_q, n_k, bq, bk, is_causal, diag, window):
            qi = qg[..., i0:i1, :].to(work)
            m = torch.full(qi.shape[:-1], -math.inf, dtype=work, device=dev)
            ell = torch.zeros_like(m)
            acc = torch.zeros(*qi.shape[:-1], vg.shape[-1], dtype=work, device=dev)
            for j0, j1, masked in key_tiles:
                s = (qi @ kg[..., j0:j1, :].to(work).transpose(-2, -1)) * scale
                if masked:
                    keep = _tile_mask(i0, i1, j0, j1, diag, is_causal, window, dev)
                    s = s.masked_fill(~keep, -math.inf)
                m_new = torch.maximum(m, s.amax(dim=-1))
                m_sub = m_new.masked_fill(m_new == -math.inf, 0.0)
                alpha = torch.exp(m - m_sub) if rescale else torch.ones_like(m)
                p = torch.exp(s - m_sub[..., None])
                ell = alpha * ell + p.sum(dim=-1)
                acc = alpha[..., None] * acc + p @ vg[..., j0:j1, :].to(work)
                m = m_new
            seen = ell > 0
            ell_safe = torch.where(seen, ell, 1.0)
            out[..., i0:i1, :] = acc / ell_safe[..., None]
            total = torch.log(ell_safe) if log_sum else ell_safe
            lse[..., i0:i1] = torch.where(seen, m + total, -math.inf)
        return out, lse

    forward.__doc__ = _reference_forward_variant.__doc__
    return forward


def online_softmax_without_rescale(*args):
    """The online softmax without the rescale e^(m - m') of the old sums and output."""
    return _reference_forward_variant(rescale=False, log_sum=True)(*args)


def lse_without_log(*args):
    """The tiled forward saving m + l as the log-sum-exp, the log forgotten."""
    return _reference_forward_variant(rescale=True, log_sum=False)(*args)


def key_tile_range_full_from_last_query(m_first, m_last, n_k, block_n, **kwargs):
    """The kernel's tile classes with 'full' decided by the tile's last query instead of its
    first: the tiles on the causal diagonal are computed without the mask. The visited range
    is the right one; the full range is the one a tile of only its last query would have."""
    tiles = original("course_lib.flash.reference:key_tile_range")
    lo, _, _, hi = tiles(m_first, m_last, n_k, block_n, **kwargs)
    _, full_lo, full_hi, _ = tiles(m_last, m_last, n_k, block_n, **kwargs)
    return lo, full_lo, full_hi, hi


# --------------------------------------------------------------------------- 07-08: variants


def sliding_window_one_too_wide(window):
    """The sliding-window mask_mod with i - j <= W: W + 1 keys, one more than the ring holds."""
    w = int(window)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= w)

    return mask_mod


def power_of_two_slopes_from_zero(n):
    """ALiBi's slopes 2^(-8h/n) for h = 0..n-1 instead of 1..n: head 1 gets slope 1."""
    return [2.0 ** (-8.0 * h / n) for h in range(n)]


def linear_attention_step_reads_first(
    q_t, k_t, v_t, state, normalizer, *, feature_map=None, eps=1e-6
):
    """One token of linear attention that reads the state before adding the token to it: the
    token does not attend to itself."""
    from course_lib.variants.linear_attention import elu_feature_map

    feature_map = elu_feature_map if feature_map is None else feature_map
    fq, fk = feature_map(q_t), feature_map(k_t)
    num = (fq[..., None, :] @ state)[..., 0, :]
    den = (fq * normalizer).sum(dim=-1, keepdim=True)
    state = state + fk[..., :, None] * v_t[..., None, :]
    return num / (den + eps), state, normalizer + fk


# --------------------------------------------------------------------------- 09: merging


def merge_attention_keeps_max(out_a, lse_a, out_b, lse_b):
    """The merge with the larger log-sum-exp taken as the merged one: log(e^a + e^b) ~ max."""
    out, _ = original("course_lib.context_parallel.merge:merge_attention")(
        out_a, lse_a, out_b, lse_b
    )
    return out, torch.maximum(lse_a, lse_b)


def merge_attention_unnormalised(out_a, lse_a, out_b, lse_b):
    """The merge that weights each part by e^(L - max) without dividing by their total."""
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    out = w_a[..., None] * out_a.to(m.dtype) + w_b[..., None] * out_b.to(m.dtype)
    return out.to(out_a.dtype), m + torch.log(w_a + w_b)


def block_scores_mask_true_means_blocked(q, k, scale, mask):
    """A block's scores with the boolean mask read as True = blocked."""
    s = (q @ k.transpose(-2, -1)) * scale
    return s if mask is None else s.masked_fill(mask, -math.inf)


# --------------------------------------------------------------------------- 11: claims


def sliding_window_mask_one_too_wide(n, window=None, sinks=0):
    """Chapter 11's window mask keeping n - m <= W: one key more than the window."""
    i = torch.arange(n)
    keep = i[None, :] <= i[:, None]
    if window is not None:
        near = (i[:, None] - i[None, :]) <= window
        keep = keep & (near | (i[None, :] < sinks))
    return keep


def qk_variance_of_scaled_scores(q, k):
    """The variance of q.k / sqrt(d) where chapter 11 means the raw scores q.k."""
    d = q.shape[-1]
    return original("course_lib.gpt.attention_stats:qk_variance")(q, k) / d


def substitution_scores_whole_sentence(model, tok, sentences):
    """Substitution scoring that compares the whole sentences' likelihoods where chapter 11
    compares the rest of the sentence after the candidate (partial scoring)."""
    sub = original("course_lib.gpt.winograd:substitution_scores")(model, tok, sentences)
    sub.partial = sub.full
    return sub


# --------------------------------------------------------------------------- the declarations

ATTENTION = "course_lib.attention:"
SDPA = ATTENTION + "scaled_dot_product_attention"
ROPE = "course_lib.positional:rope_cos_sin"  # apply_rope and the GPT both use it
KV_UPDATE = "course_lib.multihead:KVCache.update"
MERGE = "course_lib.context_parallel.merge:merge_attention"
REF_FORWARD = "course_lib.flash.reference:_reference_forward"


def _declare(lecture: str, rows: list[tuple[str, str, Callable | str, str]]) -> list[Mutant]:
    return [Mutant(name, lecture, target, fn, claim) for name, target, fn, claim in rows]


# fmt: off
MUTANTS: list[Mutant] = [
    *_declare("00", [
        ("softmax_reference_without_max", "course_lib.checks.ch00:softmax_reference",
         softmax_reference_without_max,
         "the reference softmax is finite and exact for scores near 1000"),
        ("mistake_matcher_inverted", "course_lib.checks.core:_matches", matches_inverted,
         "a check's feedback names the mistake the learner made (the wrong axis)"),
        ("triton_installed_means_imported", "course_lib.env:triton_installed",
         triton_installed_means_imported,
         "env.setup() reports Triton available exactly when it is installed"),
    ]),
    *_declare("01", [
        ("rnn_without_bias", "course_lib.rnn:rnn_forward", rnn_forward_without_bias,
         "rnn_forward equals torch.nn.RNN at every step"),
        ("rnn_relu", "course_lib.rnn:rnn_forward", rnn_forward_relu,
         "rnn_forward equals torch.nn.RNN at every step"),
        ("attention_reads_strictly_earlier", "course_lib.rnn:dependency_graph",
         dependency_graph_strictly_earlier,
         "each attention position reads every earlier position and itself: "
         "(L-1) N (N+1) / 2 edges"),
    ]),
    *_declare("02", [
        ("attention_without_scale", SDPA, attention_without_scale,
         "course_lib's attention equals the numpy steps and torch's SDPA"),
        ("softmax_over_queries", ATTENTION + "masked_softmax", softmax_over_queries,
         "course_lib's attention equals the numpy steps and torch's SDPA"),
        ("mask_true_means_blocked", ATTENTION + "masked_softmax", mask_true_means_blocked,
         "with the causal mask, later tokens cannot change earlier outputs"),
        ("causal_mask_one_ahead", ATTENTION + "causal_mask", causal_mask_one_ahead,
         "the causal mask allows N (N+1) / 2 pairs"),
    ]),
    *_declare("03", [
        ("attention_without_scale", SDPA, attention_without_scale,
         "with 1/sqrt(d_k) the softmax is not saturated at d_k = 512"),
        ("softmax_jacobian_plus", "course_lib.scaling:softmax_jacobian", softmax_jacobian_plus,
         "diag(p) - p p^T equals autograd's Jacobian of softmax"),
        ("head_scores_by_sqrt_d_model", "course_lib.scaling:project_and_score",
         project_and_score_by_d_model, "scores divided by sqrt(d_h) have unit variance"),
    ]),
    *_declare("04", [
        ("split_heads_by_reshape", "course_lib.multihead:split_heads", split_heads_by_reshape,
         "head i of token n is the feature block i of token n"),
        ("repeat_kv_tiled", "course_lib.multihead:repeat_kv", repeat_kv_tiled,
         "each key/value head is repeated in place (0, 0, 1, 1): query head i reads i // G"),
        ("kv_cache_drops_newest", KV_UPDATE, kv_cache_update_drops_newest,
         "generation with the KV cache equals recomputation, token for token"),
        ("kv_cache_bytes_keys_only", "course_lib.multihead:kv_cache_bytes",
         kv_cache_bytes_keys_only, "Llama-3-8B's GQA cache takes 128 KiB per token"),
    ]),
    *_declare("05", [
        ("rope_other_pairing", ROPE, rope_angles_other_pairing,
         "the rotation formula equals complex multiplication (pairs 2i, 2i+1)"),
        ("rope_negative_angle", "course_lib.positional:_rotate", rotate_negative_angle,
         "the rotation formula equals complex multiplication by e^(i p theta)"),
        ("rope_forgets_positions", ROPE, rope_angles_forget_positions,
         "a RoPE score depends on the offset m - n"),
        ("sinusoidal_sin_cos_swapped", "course_lib.positional:sinusoidal_encoding",
         sinusoidal_sin_cos_swapped, "PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i)"),
    ]),
    *_declare("06", [
        ("online_softmax_without_rescale", REF_FORWARD, online_softmax_without_rescale,
         "flash_attention_reference equals the tiled numpy loop and naive attention"),
        ("lse_without_log", REF_FORWARD, lse_without_log,
         "the saved log-sum-exp equals m + log l of the scores"),
        ("diagonal_tiles_unmasked", "course_lib.flash.reference:key_tile_range",
         key_tile_range_full_from_last_query,
         "causal, N=512: only the 2 tiles per row on the diagonal are masked"),
    ]),
    *_declare("07", [
        ("causal_mask_one_ahead", ATTENTION + "causal_mask", causal_mask_one_ahead,
         "the course, torch and flash backends give the same logits"),
        ("kv_cache_drops_newest", KV_UPDATE, kv_cache_update_drops_newest,
         "cached and uncached greedy generation agree on every character"),
        ("rope_forgets_positions", ROPE, rope_angles_forget_positions,
         "text sampled with the KV cache uses the corpus's words (and cached and uncached "
         "greedy generation agree)"),
    ]),
    *_declare("08", [
        ("sliding_window_one_too_wide", "course_lib.variants.mask_mods:sliding_window",
         sliding_window_one_too_wide, "the sliding-window mask_mod equals the explicit mask"),
        ("alibi_slopes_from_zero", "course_lib.variants.alibi:_power_of_two_slopes",
         power_of_two_slopes_from_zero, "8 heads get the slopes 2^-1 .. 2^-8"),
        ("linear_attention_reads_first",
         "course_lib.variants.linear_attention:linear_attention_step",
         linear_attention_step_reads_first,
         "the recurrent form of linear attention equals the parallel one"),
    ]),
    *_declare("09", [
        ("lse_merge_keeps_max", MERGE, merge_attention_keeps_max,
         "two partial results merged equal attention over all keys"),
        ("merge_unnormalised", MERGE, merge_attention_unnormalised,
         "two partial results merged equal attention over all keys"),
        ("block_mask_true_means_blocked", "course_lib.context_parallel.merge:_scores",
         block_scores_mask_true_means_blocked,
         "a block with no visible key gives output 0 and LSE -inf"),
    ]),
    *_declare("10", [
        ("rope_other_pairing", ROPE, rope_angles_other_pairing,
         "the course's GPT on the GGUF file gives transformers' logits"),
        ("kv_cache_drops_newest", KV_UPDATE, kv_cache_update_drops_newest,
         "cached and recomputed greedy generation agree"),
        ("causal_mask_one_ahead", ATTENTION + "causal_mask", causal_mask_one_ahead,
         "the course's GPT on the GGUF file gives transformers' logits"),
    ]),
    *_declare("11", [
        ("claims_window_one_too_wide", "course_lib.gpt.transparent:sliding_window_mask",
         sliding_window_mask_one_too_wide,
         "a window of W keys (the query's own included) and the sinks, as the model ran"),
        ("rope_other_pairing", ROPE, rope_angles_other_pairing,
         "SmolLM2 pairs RoPE features (2i, 2i+1) in llama.cpp's order"),
        ("qk_variance_of_scaled_scores", "course_lib.gpt.attention_stats:qk_variance",
         qk_variance_of_scaled_scores, "the raw scores q.k have variance near d_k"),
        ("substitution_whole_sentence", "course_lib.gpt.winograd:substitution_scores",
         substitution_scores_whole_sentence,
         "substitution (the rest of the sentence) resolves the pairs far above chance"),
    ]),
]
# fmt: on


def by_lecture(lecture: str) -> list[Mutant]:
    """The mutants declared for one lecture (``"02"``)."""
    return [m for m in MUTANTS if m.lecture == lecture]


def find(name: str, lecture: str | None = None) -> Mutant:
    """The declared mutant called ``name`` (of ``lecture``, when several lectures use it)."""
    found = [m for m in MUTANTS if m.name == name and lecture in (None, m.lecture)]
    if not found:
        raise KeyError(
            f"no mutant called {name!r}" + (f" for lecture {lecture}" if lecture else "")
        )
    return found[0]
