r"""Checks for chapter 07 (a tiny GPT: the loss, the block, sampling, cached decoding, looking inside).

Seven exercises, each a function the learner writes:

* 07.1 ``causal_lm_loss(logits, tokens)``: next-token cross-entropy with shifted targets
* 07.2 ``block_forward(x, params, num_heads)``: one pre-LayerNorm Transformer block
* 07.3 ``top_k_probs(logits, k, temperature)``: the sampling distribution
* 07.4 ``rope_decode_step(q_new, k_new, v_new, k_cache, v_cache)``: one cached decoding
  step with rotary positions, at the right position
* 07.5 ``induction_score(weights, period)``: the per-head induction score
* 07.6 ``lr_schedule(num_steps, max_lr, min_lr, warmup_steps)``: warm-up + cosine
* 07.7 ``measure_initial_loss(vocab_size, d_model, seed)``: predict, then measure the loss of
  an untrained model

Tensor inputs are float64 (token ids int64); matrices are applied as ``x @ W``.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from ..attention import scaled_dot_product_attention
from ..gpt import induction_scores, lr_schedule, top_k_probs
from ..multihead import merge_heads, repeat_kv, split_heads
from ..positional import apply_rope
from .core import Case, Exercise, Hint, register
from .kit import randn, within


def _tokens(rng: np.random.Generator, b: int, n: int, v: int) -> torch.Tensor:
    return torch.from_numpy(rng.integers(0, v, size=(b, n))).long()


# --------------------------------------------------------------------------- 07.1 LM loss


def causal_lm_loss_reference(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    pred = logits[:, :-1]  # (B, N-1, V) positions that have a next token
    targets = tokens[:, 1:]  # (B, N-1)
    return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), targets.reshape(-1))


def _nll(logits, targets, dim=-1):
    logp = torch.log_softmax(logits, dim=dim)  # (B, n, V)
    return -logp.gather(-1, targets[..., None])[..., 0]  # (B, n)


def _loss_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def case(name, b, n, v, std=2.0):
        return Case(name, (randn(rng, b, n, v, std=std), _tokens(rng, b, n, v)))

    if not hidden:
        return [case("B=1, N=5 tokens, V=7", 1, 5, 7), case("B=2, N=6, V=11", 2, 6, 11)]
    return [
        case("N=2: a single prediction per sequence", 3, 2, 5),
        case("B=2, N=9, V=97 (the lecture's vocabulary)", 2, 9, 97),
        case("confident logits (std 8)", 2, 7, 6, std=8.0),
    ]


def _loss_unshifted(lo, t):
    return _nll(lo, t).mean()


def _loss_shifted_backwards(lo, t):
    return _nll(lo[:, 1:], t[:, :-1]).mean()


def _loss_softmax_over_sequence(lo, t):
    return _nll(lo[:, :-1], t[:, 1:], dim=1).mean()


def _loss_summed(lo, t):
    return _nll(lo[:, :-1], t[:, 1:]).sum()


def _loss_divided_by_bn(lo, t):
    return _nll(lo[:, :-1], t[:, 1:]).sum() / t.numel()


def _loss_no_minus(lo, t):
    return -_nll(lo[:, :-1], t[:, 1:]).mean()


def _loss_rolled(lo, t):
    return _nll(lo, torch.roll(t, -1, dims=1)).mean()  # the last position scored on token 0


register(
    Exercise(
        id="07.1",
        title="the causal language-modelling loss",
        points=1,
        target="causal_lm_loss",
        cases=_loss_cases,
        reference=causal_lm_loss_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "your targets are not shifted: position n was scored on token n itself, which "
                "it can already see (a model trained so learns to copy its input).",
                "Position n predicts token n+1: compare logits[:, :-1] with tokens[:, 1:].",
            ): _loss_unshifted,
            Hint(
                "you shifted the wrong way round: each position is asked for the token "
                "*before* it.",
                "Use logits[:, :-1] with tokens[:, 1:], not logits[:, 1:] with tokens[:, :-1].",
            ): _loss_shifted_backwards,
            Hint(
                "you rolled the tokens (torch.roll): the last position is then scored on the "
                "sequence's *first* token, which does not follow it.",
                "The last position has no target: drop it, logits[:, :-1] against "
                "tokens[:, 1:], and average over B*(N-1) predictions.",
            ): _loss_rolled,
            Hint(
                "your softmax normalises over the sequence axis (dim=1).",
                "Each position's logits are a distribution over the vocabulary: normalise over "
                "the last axis.",
            ): _loss_softmax_over_sequence,
            Hint(
                "you summed the per-token losses.",
                "The loss is their *mean* over the B*(N-1) predictions, so that it does not grow "
                "with the batch or the length.",
            ): _loss_summed,
            Hint(
                "you divided by B*N, one prediction per sequence too many.",
                "The last position has no target and is not counted: divide by B*(N-1) (or take "
                "the mean over the shifted pairs only).",
            ): _loss_divided_by_bn,
            Hint(
                "your loss is negative.",
                "Cross-entropy is *minus* the mean log-probability of the targets.",
            ): _loss_no_minus,
        },
        errors={
            r"Expected target size": Hint(
                "F.cross_entropy read your [B, N-1, V] logits as [batch, classes, positions]: it "
                "wants the classes on axis 1.",
                "Flatten both: F.cross_entropy(logits[:, :-1].reshape(-1, V), "
                "tokens[:, 1:].reshape(-1)), or pass logits[:, :-1].transpose(1, 2) with "
                "tokens[:, 1:].",
            ),
        },
        hint=Hint(
            "check which token each position is scored on, which positions have a target at all, "
            "and what you average over.",
            "Position n predicts token n+1: pair every position that has a next token with that "
            "token, and average the cross-entropy over those pairs. F.cross_entropy(logits[:, "
            ":-1].reshape(-1, V), tokens[:, 1:].reshape(-1)), or log_softmax over the last axis, "
            "gather the targets, minus the mean.",
        ),
    )
)


# --------------------------------------------------------------------------- 07.2 the block


PARAM_NAMES = (
    "ln_1.weight",
    "ln_1.bias",
    "W_Q",
    "W_K",
    "W_V",
    "W_O",
    "ln_2.weight",
    "ln_2.bias",
    "W_1",
    "W_2",
)


def _block(
    x,
    p,
    num_heads,
    *,
    post_ln=False,
    residual=True,
    causal=True,
    add_to_normed=False,
    scale_by_width=False,
    act=F.gelu,
    shared_ln=False,
    parallel=False,
    split="heads",
    merge="heads",
    use_W_O=True,
):
    d = x.shape[-1]

    def ln(z, i):
        i = 1 if shared_ln else i
        return F.layer_norm(z, (d,), p[f"ln_{i}.weight"], p[f"ln_{i}.bias"])  # (B, N, D)

    def heads(t):
        if split == "interleaved":  # head i gets features i, i + H, i + 2H, ...
            b, n, _ = t.shape
            return t.reshape(b, n, d // num_heads, num_heads).permute(0, 3, 1, 2)
        return split_heads(t, num_heads)  # (B, H, N, d_h)

    def attn(h):
        q, k, v = heads(h @ p["W_Q"]), heads(h @ p["W_K"]), heads(h @ p["W_V"])  # (B, H, N, d_h)
        scale = 1.0 / math.sqrt(d) if scale_by_width else None
        o, _ = scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        if split == "interleaved":
            o = o.permute(0, 2, 3, 1).reshape(h.shape)  # (B, N, D) back to the same layout
        elif merge == "reshape":  # (B, H, N, d_h) read as (B, N, D) without the transpose
            o = o.reshape(h.shape)
        else:
            o = merge_heads(o)  # (B, N, D)
        return o @ p["W_O"] if use_W_O else o  # (B, N, D)

    def mlp(h):
        return act(h @ p["W_1"]) @ p["W_2"]  # (B, N, D)

    if parallel:  # both sub-layers read the block's input (GPT-J's parallel block)
        return x + attn(ln(x, 1)) + mlp(ln(x, 2))  # (B, N, D)
    if post_ln:
        x = ln(x + attn(x), 1)  # (B, N, D)
        return ln(x + mlp(x), 2)  # (B, N, D)
    if not residual:
        return mlp(ln(attn(ln(x, 1)), 2))  # (B, N, D)
    if add_to_normed:
        h = ln(x, 1)
        x = h + attn(h)  # (B, N, D)
        h = ln(x, 2)
        return h + mlp(h)  # (B, N, D)
    x = x + attn(ln(x, 1))  # (B, N, D)
    return x + mlp(ln(x, 2))  # (B, N, D)


def block_forward_reference(x: torch.Tensor, params: dict, num_heads: int) -> torch.Tensor:
    return _block(x, params, num_heads)  # (B, N, D)


def _block_case(rng, name, b, n, d, h, d_ff):
    p = {
        "ln_1.weight": 1.0 + 0.3 * randn(rng, d),
        "ln_1.bias": 0.3 * randn(rng, d),
        "W_Q": randn(rng, d, d, std=1 / math.sqrt(d)),
        "W_K": randn(rng, d, d, std=1 / math.sqrt(d)),
        "W_V": randn(rng, d, d, std=1 / math.sqrt(d)),
        "W_O": randn(rng, d, d, std=1 / math.sqrt(d)),
        "ln_2.weight": 1.0 + 0.3 * randn(rng, d),
        "ln_2.bias": 0.3 * randn(rng, d),
        "W_1": randn(rng, d, d_ff, std=1 / math.sqrt(d)),
        "W_2": randn(rng, d_ff, d, std=1 / math.sqrt(d_ff)),
    }
    return Case(name, (randn(rng, b, n, d, std=2.0), p, h))


def _block_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _block_case(rng, "B=1, N=4, D=8, 2 heads, d_ff=32", 1, 4, 8, 2, 32),
            _block_case(rng, "B=2, N=6, D=12, 3 heads, d_ff=20", 2, 6, 12, 3, 20),
        ]
    return [
        _block_case(rng, "one token (it sees only itself)", 2, 1, 8, 2, 16),
        _block_case(rng, "one head", 1, 5, 6, 1, 12),
        _block_case(rng, "B=3, N=9, D=16, 4 heads, d_ff=64", 3, 9, 16, 4, 64),
    ]


def _tanh_gelu(t):
    return F.gelu(t, approximate="tanh")


register(
    Exercise(
        id="07.2",
        title="one pre-LayerNorm Transformer block",
        points=2,
        target="block_forward",
        cases=_block_cases,
        reference=block_forward_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "you normalised after the residual addition, x = LN(x + f(x)): the original "
                "Transformer's post-LN order.",
                "A pre-LN block normalises the sub-layer's *input* and adds its output to the "
                "un-normalised stream: x = x + f(LN(x)).",
            ): partial(_block, post_ln=True),
            Hint(
                "you added the sub-layer's output to LN(x) instead of x, so the residual stream "
                "itself gets normalised.",
                "Keep x as it is: x = x + f(LN(x)), not h = LN(x); x = h + f(h).",
            ): partial(_block, add_to_normed=True),
            Hint(
                "your block has no residual connections: it forgets x.",
                "Each sub-layer *adds* to the stream: x = x + attn(LN_1(x)), then "
                "x = x + mlp(LN_2(x)).",
            ): partial(_block, residual=False),
            Hint(
                "your MLP reads the block's input, not the stream after attention (a 'parallel' "
                "block, as in GPT-J).",
                "The two sub-layers run one after the other: h = x + attn(LN_1(x)), then "
                "out = h + mlp(LN_2(h)).",
            ): partial(_block, parallel=True),
            Hint(
                "your attention is not causal: token n sees tokens after it.",
                "Use is_causal=True, or mask with the lower-triangular (N, N) mask (True = may "
                "attend).",
            ): partial(_block, causal=False),
            Hint(
                "you scaled the scores by 1/sqrt(D), the model width.",
                "Each head compares vectors of size d_h = D / num_heads: divide by sqrt(d_h).",
            ): partial(_block, scale_by_width=True),
            Hint(
                "your heads take interleaved features (head i gets features i, i+H, ...).",
                "Head i owns the contiguous features i*d_h .. (i+1)*d_h - 1: reshape to "
                "(B, N, H, d_h), then transpose to (B, H, N, d_h) (chapter 04's split_heads).",
            ): partial(_block, split="interleaved"),
            Hint(
                "you merged the heads with a reshape of (B, H, N, d_h) straight to (B, N, D), "
                "which mixes tokens with heads.",
                "Transpose back to (B, N, H, d_h) first, then reshape to (B, N, D) (chapter 04's "
                "merge_heads).",
            ): partial(_block, merge="reshape"),
            Hint(
                "your attention output skips the output projection W_O.",
                "After merging the heads, multiply by params['W_O'] before adding to x.",
            ): partial(_block, use_W_O=False),
            Hint(
                "your MLP uses the tanh approximation of GELU.",
                "The statement asks for the exact GELU, F.gelu(t) (the erf form), not "
                "F.gelu(t, approximate='tanh'): they differ by about 1e-4.",
            ): partial(_block, act=_tanh_gelu),
            Hint(
                "your MLP uses ReLU.",
                "This block uses GELU: torch.nn.functional.gelu (the exact erf form).",
            ): partial(_block, act=F.relu),
            Hint(
                "you used ln_1's weight and bias for both LayerNorms.",
                "The MLP's LayerNorm has its own parameters, ln_2.weight and ln_2.bias.",
            ): partial(_block, shared_ln=True),
        },
        hint=Hint(
            "check the order inside each sub-layer (where the LayerNorm sits, what is added to "
            "the stream) and which parameters each piece uses.",
            "Two sub-layers, each reading a LayerNorm of the stream and adding its result to the "
            "stream: causal multi-head attention, then the MLP. x = x + attn(LN_1(x)); x = x + "
            "gelu(LN_2(x) @ W_1) @ W_2; attn = causal multi-head attention with heads split from "
            "x @ W_Q etc., merged, then @ W_O.",
        ),
    )
)


# --------------------------------------------------------------------------- 07.3 top-k


def top_k_probs_reference(logits: torch.Tensor, k: int | None, temperature: float) -> torch.Tensor:
    return top_k_probs(logits, k, temperature)  # (B, V)


def _topk(
    logits, k, temperature, *, times=False, renorm=True, keep=None, largest=True, fill=None, dim=-1
):
    z = logits * temperature if times else logits / temperature  # (B, V)
    kk = z.shape[-1] if k is None else min(int(k), z.shape[-1])
    kk = kk if keep is None else max(1, min(z.shape[-1], kk + keep))
    idx = torch.topk(z, kk, dim=-1, largest=largest).indices  # (B, kk)
    kept = torch.zeros_like(z, dtype=torch.bool).scatter(-1, idx, True)  # (B, V)
    if fill is not None:  # the others set to a finite value, not -inf
        return torch.softmax(z.masked_fill(~kept, fill), dim=-1)  # (B, V)
    if renorm:
        return torch.softmax(z.masked_fill(~kept, float("-inf")), dim=dim)  # (B, V)
    return torch.softmax(z, dim=-1) * kept  # (B, V)


def _topk_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("B=2, V=10, k=3, temperature 0.7", (randn(rng, 2, 10, std=2.0), 3, 0.7)),
            Case("B=3, V=8, k=2, temperature 2.0", (randn(rng, 3, 8, std=2.0), 2, 2.0)),
        ]
    return [
        Case("k=1: all the mass on the arg max", (randn(rng, 2, 9), 1, 1.0)),
        Case("k=None: no filtering, only the temperature", (randn(rng, 2, 12), None, 0.5)),
        Case("k = V: no filtering", (randn(rng, 1, 6), 6, 1.3)),
        Case("V=97, k=10, temperature 0.8", (randn(rng, 4, 97, std=3.0), 10, 0.8)),
    ]


register(
    Exercise(
        id="07.3",
        title="the top-k sampling distribution",
        points=1,
        target="top_k_probs",
        cases=_topk_cases,
        reference=top_k_probs_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "you multiplied the logits by the temperature.",
                "Divide them, z / temperature, so that a low temperature sharpens the "
                "distribution.",
            ): partial(_topk, times=True),
            Hint(
                "your rows do not sum to 1: you zeroed the other tokens' probabilities after "
                "the softmax without renormalising.",
                "Set the other logits to -inf *before* the softmax.",
            ): partial(_topk, renorm=False),
            Hint(
                "the tokens outside the top k still get some probability: you set their logits "
                "to 0, not to -inf.",
                "exp(0) = 1 is not 0: masked_fill(z < kth, float('-inf')) before the softmax.",
            ): partial(_topk, fill=0.0),
            Hint(
                "you kept one token too few (k-1).",
                "A strict '>' against the k-th largest logit drops the k-th itself: keep every "
                "logit >= the k-th largest.",
            ): partial(_topk, keep=-1),
            Hint(
                "you kept one token too many (k+1).",
                "Keep exactly the k largest logits: the k-th largest is "
                "torch.topk(z, k).values[..., -1:].",
            ): partial(_topk, keep=1),
            Hint(
                "you kept the k *smallest* logits.",
                "torch.topk(..., largest=True), the default, gives the largest.",
            ): partial(_topk, largest=False),
            Hint(
                "your softmax runs over the batch axis (dim=0): rows come out NaN or do not "
                "sum to 1.",
                "Each row is one distribution over the vocabulary: softmax over the last axis, "
                "dim=-1.",
            ): partial(_topk, dim=0),
        },
        errors={
            r"topk\(\).*NoneType": Hint(
                "k=None means 'keep every token', and torch.topk cannot take None.",
                "Filter only when k is not None (and k = V keeps everything too); otherwise "
                "just apply the temperature and the softmax.",
            ),
        },
        hint=Hint(
            "check what the tokens outside the top k get, how many tokens you keep, and where "
            "the temperature enters.",
            "Temperature first, then keep the k largest logits of each row, then normalise. z = "
            "logits / temperature; kth = torch.topk(z, k).values[..., -1:]; set z < kth to -inf; "
            "softmax over the last axis. k=None keeps everything.",
        ),
    )
)


# --------------------------------------------------------------------------- 07.4 RoPE decode


def rope_decode_step_reference(q_new, k_new, v_new, k_cache, v_cache):
    t = k_cache.shape[-2]  # tokens cached so far: the new token sits at position t
    pos = torch.tensor([t])  # (1,)
    q = apply_rope(q_new, pos)  # (B, H, 1, d)
    k_all = torch.cat([k_cache, apply_rope(k_new, pos)], dim=-2)  # (B, Hkv, Nk, d), Nk = past + 1
    v_all = torch.cat([v_cache, v_new], dim=-2)  # (B, Hkv, Nk, d), Nk = past + 1
    g = q_new.shape[1] // k_all.shape[1]
    out, _ = scaled_dot_product_attention(q, repeat_kv(k_all, g), repeat_kv(v_all, g))
    return out, k_all, v_all  # (B, H, 1, d), (B, Hkv, Nk, d), (B, Hkv, Nk, d)


def _decode(
    q_new,
    k_new,
    v_new,
    k_cache,
    v_cache,
    *,
    shift=0,
    from_zero=False,
    store_raw=False,
    rotate_v=False,
    rerotate=False,
    only_q=False,
    interleaved=True,
    causal=False,
):
    t = k_cache.shape[-2]
    pos = torch.tensor([0 if from_zero else t + shift])  # (1,)
    q = apply_rope(q_new, pos, interleaved=interleaved)  # (B, H, 1, d)
    k_rot = k_new if only_q else apply_rope(k_new, pos, interleaved=interleaved)  # (B, Hkv, 1, d)
    v = apply_rope(v_new, pos) if rotate_v else v_new  # (B, Hkv, 1, d)
    k_all = torch.cat([k_cache, k_rot], dim=-2)  # (B, Hkv, Nk, d), Nk = past + 1
    if rerotate:  # the whole cache rotated once more, by positions 0..past
        k_all = apply_rope(k_all)  # (B, Hkv, Nk, d), Nk = past + 1
    v_all = torch.cat([v_cache, v], dim=-2)  # (B, Hkv, Nk, d), Nk = past + 1
    g = q_new.shape[1] // k_all.shape[1]
    out, _ = scaled_dot_product_attention(
        q, repeat_kv(k_all, g), repeat_kv(v_all, g), is_causal=causal
    )  # (B, H, 1, d)
    if store_raw:
        k_all = torch.cat([k_cache, k_new], dim=-2)  # (B, Hkv, Nk, d): the unrotated key stored
    return out, k_all, v_all


def _rope_case(rng, name, b, h, h_kv, t, d):
    pos = torch.arange(t)  # (past,) the cached keys were rotated at their own positions
    k_cache = apply_rope(randn(rng, b, h_kv, t, d), pos)  # (B, Hkv, past, d)
    return Case(
        name,
        (
            randn(rng, b, h, 1, d),
            randn(rng, b, h_kv, 1, d),
            randn(rng, b, h_kv, 1, d),
            k_cache,
            randn(rng, b, h_kv, t, d),
        ),
    )


def _rope_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _rope_case(rng, "MHA: 2 heads, 3 cached tokens, d=4", 1, 2, 2, 3, 4),
            _rope_case(rng, "GQA: 4 query heads, 2 KV heads, 6 cached tokens, d=8", 2, 4, 2, 6, 8),
        ]
    return [
        _rope_case(rng, "the first token: an empty cache (position 0)", 2, 2, 1, 0, 4),
        _rope_case(rng, "MQA, 40 cached tokens, d=16", 1, 4, 1, 40, 16),
        _rope_case(rng, "GQA 6 query heads, 3 KV heads, 11 cached tokens", 2, 6, 3, 11, 6),
    ]


register(
    Exercise(
        id="07.4",
        title="one cached decoding step with rotary positions",
        points=2,
        target="rope_decode_step",
        cases=_rope_cases,
        reference=rope_decode_step_reference,
        atol=1e-9,
        rtol=1e-7,
        outputs=("output", "k_cache", "v_cache"),
        mistakes={
            Hint(
                "you rotated the new token at position 0: apply_rope on a one-token tensor "
                "defaults to positions 0..N-1 = [0].",
                "With past = k_cache.shape[-2] tokens cached, the new token is at position "
                "past: pass positions=torch.tensor([past]).",
            ): partial(_decode, from_zero=True),
            Hint(
                "your position is off by one (past + 1).",
                "Positions count from 0: with past cached tokens (positions 0..past-1) the new "
                "one is at position past.",
            ): partial(_decode, shift=1),
            Hint(
                "your position is off by one (past - 1): that is the last *cached* token's "
                "position.",
                "The new token comes after it, at position past = k_cache.shape[-2].",
            ): partial(_decode, shift=-1),
            Hint(
                "you stored the new key unrotated.",
                "The cache holds rotated keys (each at its own position), so that no cached key "
                "ever needs rotating again: append the rotated k_new.",
            ): partial(_decode, store_raw=True),
            Hint(
                "you rotated the whole cache again.",
                "The cached keys are already rotated: rotate only the new query and key.",
            ): partial(_decode, rerotate=True),
            Hint(
                "you rotated the query but not the new key.",
                "RoPE rotates both q and k (the score then depends on their offset only).",
            ): partial(_decode, only_q=True),
            Hint(
                "you rotated the value.",
                "RoPE acts on queries and keys only; values are not rotated.",
            ): partial(_decode, rotate_v=True),
            Hint(
                "you paired features (i, i + d/2), the half-split RoPE (interleaved=False).",
                "The lecture's model and the cached keys use interleaved pairs (2i, 2i+1), "
                "apply_rope's default.",
            ): partial(_decode, interleaved=False),
            Hint(
                "you passed is_causal=True: its triangle is aligned top-left, so the single new "
                "query (row 0) sees only key 0, the oldest cached token.",
                "The new token is the last position: it may see all past + 1 keys, so no mask "
                "is needed.",
            ): partial(_decode, causal=True),
        },
        errors={
            r"do not broadcast: got q \(\d+, (\d+), .*k \(\d+, (?!\1\b)\d+,|size of tensor a "
            r"\(\d+\) must match the size of tensor b \(\d+\) at non-singleton dimension 1": Hint(
                "the H query heads could not be lined up with the H_kv key/value heads: you did "
                "not repeat the KV heads.",
                "With grouped-query attention repeat each KV head G = H // H_kv times in place "
                "(repeat_kv, or repeat_interleave(G, dim=1)) before attending; return the "
                "caches with their H_kv heads.",
            ),
            r"expected positions of shape .* got shape \(\)": Hint(
                "apply_rope wants one position per token, a tensor, not a Python int.",
                "For the one new token: positions=torch.tensor([past]) (shape [1]).",
            ),
        },
        hint=Hint(
            "check the position you rotate the new token at, what you rotate (and what not), and "
            "which keys the new query sees.",
            "Rotate the new query and key at the new token's own position, append, attend over "
            "everything with each query head reading its KV head. past = k_cache.shape[-2]; pos "
            "= torch.tensor([past]); rotate q_new and k_new with apply_rope(..., pos); append "
            "the rotated key and v_new; repeat KV heads; attend without a mask; return (out, "
            "k_all, v_all).",
        ),
    )
)


# --------------------------------------------------------------------------- 07.5 induction


def induction_score_reference(weights: torch.Tensor, period: int) -> torch.Tensor:
    return induction_scores(weights, period)  # (H,)


def _ind(
    weights,
    period,
    *,
    key_shift=1,
    one_query_early=False,
    transpose=False,
    over_heads=False,
    summed=False,
):
    w = weights.transpose(-2, -1) if transpose else weights
    n = w.shape[-1]
    start = period - 1 if one_query_early else period
    queries = torch.arange(start, n)  # (n_q,)
    keys = queries - period + key_shift  # (n_q,)
    s = w[:, :, queries, keys]  # (B, H, n_q)
    if summed:
        return s.sum(dim=(0, 2))
    return s.mean() if over_heads else s.mean(dim=(0, 2))


def _causal_weights(rng, b, h, n, std=2.0):
    scores = randn(rng, b, h, n, n, std=std)  # (B, H, N, N)
    mask = torch.ones(n, n, dtype=torch.bool).tril()  # (N, N)
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (B, H, N, N)


def _planted(rng, b, h, period, copies=2):
    """Random causal weights whose head 0 is a perfect induction head."""
    n = copies * period
    w = _causal_weights(rng, b, h, n)  # (B, H, N, N)
    q = torch.arange(period, n)  # (N-period,)
    w[:, 0, q] = 0.0
    w[:, 0, q, q - period + 1] = 1.0
    return w


def _ind_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case(
                "random causal weights, B=2, 3 heads, period 4 (N=8)",
                (_causal_weights(rng, 2, 3, 8), 4),
            ),
            Case(
                "head 0 is a perfect induction head, period 5 (N=10)", (_planted(rng, 1, 2, 5), 5)
            ),
        ]
    return [
        Case("three copies: N=12, period 4", (_planted(rng, 2, 3, 4, copies=3), 4)),
        Case("period 1: every token repeats the one before", (_causal_weights(rng, 1, 2, 6), 1)),
        Case("B=3, 4 heads, period 7", (_causal_weights(rng, 3, 4, 14), 7)),
    ]


register(
    Exercise(
        id="07.5",
        title="the induction score of each head",
        points=1,
        target="induction_score",
        cases=_ind_cases,
        reference=induction_score_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "you measured the weight on key n - period: the previous occurrence of the "
                "current token itself (a 'duplicate-token' head).",
                "An induction head looks one further, at n - period + 1: the token that "
                "*followed* the previous occurrence.",
            ): partial(_ind, key_shift=0),
            Hint(
                "you also averaged over the query n = period - 1 (a diagonal that starts one "
                "query too early).",
                "Its key n - period + 1 = 0 follows no earlier occurrence of anything: start at "
                "query n = period.",
            ): partial(_ind, one_query_early=True),
            Hint(
                "you read weights[..., key, query].",
                "The weights are [B, H, query, key]: each row is one query's distribution over "
                "the keys.",
            ): partial(_ind, transpose=True),
            Hint(
                "you averaged over the heads too.",
                "Return one score per head, shape [H]: average over the batch and the queries "
                "only.",
            ): partial(_ind, over_heads=True),
            Hint(
                "you summed the weights instead of averaging them: a perfect head should score 1.",
                "Average over the batch and the N - period queries.",
            ): partial(_ind, summed=True),
        },
        hint=Hint(
            "check which key an induction head looks at for query n, which queries have such a "
            "key, and which axes you average over.",
            "For each query n >= period, read the weight on the key one after the previous "
            "occurrence; average per head. queries n = period .. N-1, keys n - period + 1; "
            "weights[:, :, queries, keys] has shape [B, H, N - period]; average over the batch "
            "and the queries.",
        ),
    )
)


# --------------------------------------------------------------------------- 07.6 schedule


def lr_schedule_reference(
    num_steps: int, max_lr: float, min_lr: float, warmup_steps: int
) -> np.ndarray:
    return lr_schedule(num_steps, max_lr, min_lr, warmup_steps)  # (num_steps,)


def _sched(
    num_steps,
    max_lr,
    min_lr,
    warmup_steps,
    *,
    warm_from_zero=False,
    span_shift=0,
    to_zero=False,
    whole_run=False,
    linear=False,
    unguarded=False,
    warm_span=0,
    period=1.0,
):
    out = []
    lo = 0.0 if to_zero else min_lr
    for s in range(num_steps):
        if s < warmup_steps:
            if warm_span:  # from 0 at step 0 to max_lr at step W - 1
                out.append(max_lr * s / max(warmup_steps - warm_span, 1))
                continue
            out.append(max_lr * (s if warm_from_zero else s + 1) / warmup_steps)
            continue
        if whole_run:
            progress = s / max(num_steps - 1, 1)
        elif unguarded and num_steps - 1 - warmup_steps == 0:
            progress = float("nan")  # numpy's 0 / 0, with a RuntimeWarning
        else:
            progress = (s - warmup_steps) / max(num_steps - 1 - warmup_steps + span_shift, 1)
        progress = progress if math.isnan(progress) else min(progress, 1.0)
        if linear:
            out.append(max_lr - (max_lr - lo) * progress)
        else:
            out.append(lo + 0.5 * (max_lr - lo) * (1 + math.cos(period * math.pi * progress)))
    return np.array(out)


def _sched_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("10 steps, 3 of warm-up, from 1e-2 down to 1e-3", (10, 1e-2, 1e-3, 3)),
            Case("50 steps, 5 of warm-up, 3e-3 down to 3e-4", (50, 3e-3, 3e-4, 5)),
            Case(
                "4 steps, 3 of warm-up: num_steps - 1 - warmup_steps = 0 (divide by 1)",
                (4, 1e-2, 1e-3, 3),
            ),
        ]
    s = int(rng.integers(100, 400))
    return [
        Case("no warm-up: starts at max_lr", (20, 1e-3, 1e-4, 0)),
        Case(f"{s} steps, 30 of warm-up", (s, 6e-4, 6e-5, 30)),
        Case("2 steps after 1 of warm-up", (3, 1.0, 0.5, 1)),
        Case(
            "6 steps, 5 of warm-up: num_steps - 1 - warmup_steps = 0 (divide by 1)",
            (6, 2e-3, 2e-4, 5),
        ),
    ]


register(
    Exercise(
        id="07.6",
        title="warm-up and cosine decay",
        points=1,
        target="lr_schedule",
        cases=_sched_cases,
        reference=lr_schedule_reference,
        atol=1e-12,
        rtol=2e-6,  # a float32 schedule is a right answer (float32 rounds to about 6e-8)
        mistakes={
            Hint(
                "your warm-up starts at 0: step 0 then does not move the weights at all.",
                "Use max_lr * (s + 1) / warmup_steps, so that step warmup_steps - 1 reaches "
                "max_lr.",
            ): partial(_sched, warm_from_zero=True),
            Hint(
                "your warm-up runs from 0 at step 0 to max_lr at step W - 1: step 0 does not "
                "move the weights, and each step adds max_lr / (W - 1).",
                "Step s runs at the fraction of the warm-up completed once it is done: "
                "(s + 1) / W of max_lr (1/W at step 0, 1 at step W - 1).",
            ): partial(_sched, warm_span=1),
            Hint(
                "your cosine never reaches min_lr: it spans one step too many.",
                "The last step (s = num_steps - 1) must give exactly min_lr: divide by "
                "num_steps - 1 - warmup_steps, not num_steps - warmup_steps.",
            ): partial(_sched, span_shift=1),
            Hint(
                "you decay to 0 instead of min_lr.",
                "The cosine goes from max_lr down to min_lr: min_lr + 0.5 * (max_lr - min_lr) * "
                "(1 + cos(pi * progress)).",
            ): partial(_sched, to_zero=True),
            Hint(
                "your cosine starts at step 0, not after the warm-up.",
                "Use the progress (s - warmup_steps) / (num_steps - 1 - warmup_steps), which is "
                "0 right after the warm-up.",
            ): partial(_sched, whole_run=True),
            Hint(
                "you decay linearly; the schedule is half a cosine.",
                "min_lr + (max_lr - min_lr) * (1 + cos(pi * progress)) / 2.",
            ): partial(_sched, linear=True),
            Hint(
                "your cosine runs a whole period: it comes back up to max_lr at the last step.",
                "Half a period: the angle goes from 0 to pi (not 2 pi) over the decay steps, "
                "cos(pi * progress) with progress from 0 to 1.",
            ): partial(_sched, period=2.0),
            Hint(
                "with a single step after the warm-up, your progress is 0 / 0.",
                "A single step after the warm-up is at max_lr (progress 0): divide by "
                "max(num_steps - 1 - warmup_steps, 1).",
            ): partial(_sched, unguarded=True),
        },
        errors={
            r"ZeroDivisionError": Hint(
                "you divided by the length of the decay, which is 0 here (a single step after "
                "the warm-up).",
                "A single step after the warm-up is at max_lr (progress 0): divide by "
                "max(num_steps - 1 - warmup_steps, 1).",
            ),
        },
        hint=Hint(
            "check your schedule at its landmarks: step 0, the last warm-up step, the first step "
            "after it, and the last step.",
            "A linear climb for the warm-up steps, then half a cosine from max_lr down to min_lr "
            "at the last step. for s < W: max_lr * (s+1) / W; else progress = (s - W) / "
            "max(num_steps - 1 - W, 1) and min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * "
            "progress)).",
        ),
    )
)


# --------------------------------------------------------------------------- 07.7 predict, measure


def initial_loss_reference(vocab_size: int, d_model: int, seed: int) -> float:
    r"""The language-modelling loss (nats per token) of course_lib's GPT at initialisation:
    one layer, two heads, ``d_model`` wide, on 8 sequences of 32 uniformly random tokens."""
    from .. import gpt

    torch.manual_seed(seed)
    cfg = gpt.GPTConfig(
        vocab_size=vocab_size, seq_len=32, d_model=d_model, num_layers=1, num_heads=2
    )
    model = gpt.GPT(cfg)
    tokens = torch.randint(0, vocab_size, (8, 32))  # (B, N)
    with torch.no_grad():
        return float(gpt.causal_lm_loss(model(tokens), tokens))


def _initial_loss_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("97 characters, d_model = 64", (97, 64, 0)),
            Case("a vocabulary of 1000, d_model = 32", (1000, 32, 1)),
        ]
    return [
        Case("50 tokens, d_model = 128", (50, 128, int(rng.integers(999)))),
        Case("4096 tokens, d_model = 16", (4096, 16, int(rng.integers(999)))),
    ]


register(
    Exercise(
        id="07.7",
        title="predict, then measure: the loss of an untrained model",
        points=1,
        target="measure_initial_loss",
        cases=_initial_loss_cases,
        reference=initial_loss_reference,
        atol=0.0,
        rtol=0.03,
        compare=within(0.03),
        measures="the loss at initialisation (nats per token)",
        mistakes={
            Hint(
                "your loss is in bits (log base 2).",
                "The course's loss, like F.cross_entropy, is in nats (natural log).",
            ): lambda v, d, seed: initial_loss_reference(v, d, seed) / math.log(2),
            Hint(
                "you added the losses of the tokens instead of averaging them.",
                "The loss is per predicted token: the mean over the B x (N - 1) positions "
                "(gpt.causal_lm_loss, or F.cross_entropy's default reduction).",
            ): lambda v, d, seed: initial_loss_reference(v, d, seed) * 8 * 31,
        },
        hint=Hint(
            "check the loss you compute: the course's next-token loss (a mean, natural log) of "
            "the untrained model, built and seeded as the statement says.",
            "Build the small model, feed it random tokens, and compute the next-token loss "
            "without training. torch.manual_seed(seed); model = "
            "gpt.GPT(gpt.GPTConfig(vocab_size=V, seq_len=32, d_model=d, num_layers=1, "
            "num_heads=2)); tokens = torch.randint(0, V, (8, 32)); return "
            "float(gpt.causal_lm_loss(model(tokens), tokens)).",
        ),
    )
)
