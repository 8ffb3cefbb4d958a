r"""Checks for chapter 07 (a tiny GPT: the loss, the block, sampling, cached decoding, inside).

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

Tensor inputs are float64 (token ids int64); matrices are applied as ``x @ W``. The texts
are in ``ch07.md``.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from ..attention import scaled_dot_product_attention
from ..multihead import merge_heads, repeat_kv, split_heads
from ..positional import apply_rope
from .core import Case, Fixed
from .declare import exercise
from .kit import randn, within

# --------------------------------------------------------------------------- 07.1 LM loss


def causal_lm_loss_reference(
    logits, tokens, *, targets="next", dim=-1, reduce="mean", sign=-1
) -> torch.Tensor:
    r"""The mean next-token cross-entropy of ``logits [B, N, V]`` on ``tokens [B, N]``:
    :math:`-\frac{1}{B(N-1)}\sum_b\sum_{n=0}^{N-2}\log\mathrm{softmax}(z_{b,n})_{t_{b,n+1}}`
    (the last position has no next token)."""
    pred, want = {
        "next": (logits[:, :-1], tokens[:, 1:]),  # (B, N-1, V), (B, N-1)
        "same": (logits, tokens),  # position n scored on token n
        "previous": (logits[:, 1:], tokens[:, :-1]),  # shifted the wrong way
        "rolled": (logits, torch.roll(tokens, -1, dims=1)),  # the last one on token 0
    }[targets]
    logp = torch.log_softmax(pred, dim=dim)  # (B, n, V)
    loss = sign * logp.gather(-1, want[..., None])[..., 0]  # (B, n)
    if reduce == "sum":
        return loss.sum()
    if reduce == "over-bn":  # divided by B*N, one prediction per sequence too many
        return loss.sum() / tokens.numel()
    return loss.mean()


def _loss_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def case(name, b, n, v, std=2.0):
        logits = randn(rng, b, n, v, std=std)  # (B, N, V), drawn before the tokens
        return Case(name, (logits, torch.from_numpy(rng.integers(0, v, size=(b, n))).long()))

    if not hidden:
        return [case("B=1, N=5 tokens, V=7", 1, 5, 7), case("B=2, N=6, V=11", 2, 6, 11)]
    return [
        case("N=2: a single prediction per sequence", 3, 2, 5),
        case("B=2, N=9, V=97 (the lecture's vocabulary)", 2, 9, 97),
        case("confident logits (std 8)", 2, 7, 6, std=8.0),
    ]


exercise(
    "07.1",
    causal_lm_loss_reference,
    target="causal_lm_loss",
    title="the causal language-modelling loss",
    points=1,
    cases=_loss_cases,
    atol=1e-9,
    rtol=1e-7,
    slips={
        "unshifted": dict(targets="same"),
        "shifted-backwards": dict(targets="previous"),
        "rolled": dict(targets="rolled"),
        "softmax-over-sequence": dict(dim=1),
        "summed": dict(reduce="sum"),
        "divided-by-bn": dict(reduce="over-bn"),
        "no-minus": dict(sign=1),
    },
    errors={"classes-last": r"Expected target size"},
)


# --------------------------------------------------------------------------- 07.2 the block


def block_forward_reference(
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
) -> torch.Tensor:
    r"""One pre-LayerNorm block on ``x [B, N, D]``: :math:`x \leftarrow x +
    \mathrm{Attn}(\mathrm{LN}_1(x))`, then :math:`x + \mathrm{GELU}(\mathrm{LN}_2(x) W_1) W_2`;
    causal multi-head attention with heads of width :math:`d_h = D / H`, merged, then
    :math:`W_O`."""
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


exercise(
    "07.2",
    block_forward_reference,
    target="block_forward",
    title="one pre-LayerNorm Transformer block",
    points=2,
    cases=_block_cases,
    atol=1e-9,
    rtol=1e-7,
    slips={
        "post-ln": dict(post_ln=True),
        "added-to-normed": dict(add_to_normed=True),
        "no-residual": dict(residual=False),
        "parallel": dict(parallel=True),
        "not-causal": dict(causal=False),
        "scaled-by-width": dict(scale_by_width=True),
        "interleaved-heads": dict(split="interleaved"),
        "reshape-merge": dict(merge="reshape"),
        "no-w-o": dict(use_W_O=False),
        "tanh-gelu": dict(act=partial(F.gelu, approximate="tanh")),
        "relu": dict(act=F.relu),
        "shared-ln": dict(shared_ln=True),
    },
)


# --------------------------------------------------------------------------- 07.3 top-k


def top_k_probs_reference(
    logits,
    k,
    temperature,
    *,
    times=False,
    keep=0,
    largest=True,
    fill=-math.inf,
    renorm=True,
    dim=-1,
) -> torch.Tensor:
    r"""The sampling distribution of ``logits [B, V]``: the softmax of the top-:math:`k`
    logits at temperature :math:`\tau`,
    :math:`p_i = [i \in \mathrm{top}_k]\, e^{z_i/\tau} / \sum_{j \in \mathrm{top}_k} e^{z_j/\tau}`
    (``k=None`` keeps every token)."""
    z = logits * temperature if times else logits / temperature  # (B, V)
    kk = z.shape[-1] if k is None else min(int(k), z.shape[-1])
    kk = max(1, min(z.shape[-1], kk + keep))
    idx = torch.topk(z, kk, dim=-1, largest=largest).indices  # (B, kk)
    kept = torch.zeros_like(z, dtype=torch.bool).scatter(-1, idx, True)  # (B, V)
    if not renorm:  # the others zeroed after the softmax
        return torch.softmax(z, dim=-1) * kept  # (B, V)
    return torch.softmax(z.masked_fill(~kept, fill), dim=dim)  # (B, V)


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


exercise(
    "07.3",
    top_k_probs_reference,
    target="top_k_probs",
    title="the top-k sampling distribution",
    points=1,
    cases=_topk_cases,
    atol=1e-9,
    rtol=1e-7,
    slips={
        "times-temperature": dict(times=True),
        "not-renormalised": dict(renorm=False),
        "zero-fill": dict(fill=0.0),
        "one-too-few": dict(keep=-1),
        "one-too-many": dict(keep=1),
        "smallest": dict(largest=False),
        "softmax-over-batch": dict(dim=0),
    },
    errors={"k-none": r"topk\(\).*NoneType"},
)


# --------------------------------------------------------------------------- 07.4 RoPE decode


def rope_decode_step_reference(
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
    r"""One cached decoding step: with :math:`t` = ``k_cache.shape[-2]`` tokens cached, rotate
    the new query and key at position :math:`t`, append the key and value to the caches, and
    attend over all :math:`t + 1` keys (each KV head repeated for its :math:`G = H / H_{kv}`
    query heads). Returns ``(out [B, H, 1, d], k_all, v_all [B, H_kv, t + 1, d])``."""
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


exercise(
    "07.4",
    rope_decode_step_reference,
    target="rope_decode_step",
    title="one cached decoding step with rotary positions",
    points=2,
    cases=_rope_cases,
    atol=1e-9,
    rtol=1e-7,
    outputs=("output", "k_cache", "v_cache"),
    slips={
        "position-zero": dict(from_zero=True),
        "past-plus-one": dict(shift=1),
        "past-minus-one": dict(shift=-1),
        "stored-unrotated": dict(store_raw=True),
        "rerotated-cache": dict(rerotate=True),
        "only-query": dict(only_q=True),
        "rotated-value": dict(rotate_v=True),
        "half-split": dict(interleaved=False),
        "is-causal": dict(causal=True),
    },
    errors={
        "kv-not-repeated": r"do not broadcast: got q \(\d+, (\d+), .*k \(\d+, (?!\1\b)\d+,|size of "
        r"tensor a \(\d+\) must match the size of tensor b \(\d+\) at non-singleton dimension 1",
        "int-position": r"expected positions of shape .* got shape \(\)",
    },
)


# --------------------------------------------------------------------------- 07.5 induction


def induction_score_reference(
    weights,
    period,
    *,
    key_shift=1,
    one_query_early=False,
    transpose=False,
    over_heads=False,
    summed=False,
) -> torch.Tensor:
    r"""The per-head induction score of ``weights [B, H, N, N]`` on tokens repeating with
    period :math:`T`: the mean weight from query :math:`n` on key :math:`n - T + 1`, the token
    after the previous occurrence,
    :math:`s_h = \frac{1}{B(N - T)}\sum_b\sum_{n=T}^{N-1} P^{(h)}_{b,n,n-T+1}`. Returns ``[H]``."""
    w = weights.transpose(-2, -1) if transpose else weights  # (B, H, N, N)
    n = w.shape[-1]
    start = period - 1 if one_query_early else period
    queries = torch.arange(start, n)  # (n_q,)
    keys = queries - period + key_shift  # (n_q,)
    s = w[:, :, queries, keys]  # (B, H, n_q)
    if summed:
        return s.sum(dim=(0, 2))  # (H,)
    return s.mean() if over_heads else s.mean(dim=(0, 2))  # (H,)


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


exercise(
    "07.5",
    induction_score_reference,
    target="induction_score",
    title="the induction score of each head",
    points=1,
    cases=_ind_cases,
    atol=1e-9,
    rtol=1e-7,
    slips={
        "duplicate-token": dict(key_shift=0),
        "one-query-early": dict(one_query_early=True),
        "transposed": dict(transpose=True),
        "over-heads": dict(over_heads=True),
        "summed": dict(summed=True),
    },
)


# --------------------------------------------------------------------------- 07.6 schedule


def lr_schedule_reference(
    num_steps,
    max_lr,
    min_lr,
    warmup_steps,
    *,
    warm="(s+1)/W",
    span_shift=0,
    to_zero=False,
    whole_run=False,
    linear=False,
    unguarded=False,
    angle=math.pi,
) -> np.ndarray:
    r"""The learning rate of each step ``[num_steps]``: a linear warm-up
    :math:`\eta_s = \eta_{\max} (s + 1) / W` for :math:`s < W`, then half a cosine down to
    :math:`\eta_{\min}` at the last step,
    :math:`\eta_{\min} + \frac12(\eta_{\max} - \eta_{\min})(1 + \cos \pi p)` with
    :math:`p = (s - W) / \max(S - 1 - W, 1)`."""
    out = []
    lo = 0.0 if to_zero else min_lr
    w = warmup_steps
    for s in range(num_steps):
        if s < w:  # max_lr * top / span
            top, span = {"(s+1)/W": (s + 1, w), "s/W": (s, w), "s/(W-1)": (s, max(w - 1, 1))}[warm]
            out.append(max_lr * top / span)
            continue
        if whole_run:
            progress = s / max(num_steps - 1, 1)
        elif unguarded and num_steps - 1 - w == 0:
            progress = float("nan")  # numpy's 0 / 0
        else:
            progress = (s - w) / max(num_steps - 1 - w + span_shift, 1)
        progress = progress if math.isnan(progress) else min(progress, 1.0)
        if linear:
            out.append(max_lr - (max_lr - lo) * progress)
        else:
            out.append(lo + 0.5 * (max_lr - lo) * (1 + math.cos(angle * progress)))
    return np.array(out)


def _sched_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("10 steps, 3 of warm-up, from 1e-2 down to 1e-3", (10, 1e-2, 1e-3, 3)),
            Fixed("50 steps, 5 of warm-up, 3e-3 down to 3e-4", (50, 3e-3, 3e-4, 5)),
            Fixed(
                "4 steps, 3 of warm-up: num_steps - 1 - warmup_steps = 0 (divide by 1)",
                (4, 1e-2, 1e-3, 3),
            ),
        ]
    s = int(rng.integers(100, 400))
    return [
        Fixed("no warm-up: starts at max_lr", (20, 1e-3, 1e-4, 0)),
        Case(f"{s} steps, 30 of warm-up", (s, 6e-4, 6e-5, 30)),
        Fixed("2 steps after 1 of warm-up", (3, 1.0, 0.5, 1)),
        Fixed(
            "6 steps, 5 of warm-up: num_steps - 1 - warmup_steps = 0 (divide by 1)",
            (6, 2e-3, 2e-4, 5),
        ),
    ]


exercise(
    "07.6",
    lr_schedule_reference,
    target="lr_schedule",
    title="warm-up and cosine decay",
    points=1,
    cases=_sched_cases,
    atol=1e-12,
    rtol=2e-6,  # a float32 schedule is a right answer (float32 rounds to about 6e-8)
    slips={
        "warm-from-zero": dict(warm="s/W"),
        "warm-to-w-minus-1": dict(warm="s/(W-1)"),
        "span-one-too-many": dict(span_shift=1),
        "to-zero": dict(to_zero=True),
        "whole-run": dict(whole_run=True),
        "linear": dict(linear=True),
        "whole-period": dict(angle=2 * math.pi),
        "unguarded": dict(unguarded=True),
    },
    errors={"zero-division": r"ZeroDivisionError"},
)


# --------------------------------------------------------------------------- 07.7 predict, measure


def initial_loss_reference(vocab_size, d_model, seed, *, bits=False, summed=False) -> float:
    r"""The language-modelling loss (nats per token) of course_lib's GPT at initialisation:
    one layer, two heads, ``d_model`` wide, on 8 sequences of 32 uniformly random tokens
    (about :math:`\log V` when the untrained model's predictions are near uniform)."""
    from .. import gpt

    torch.manual_seed(seed)
    cfg = gpt.GPTConfig(
        vocab_size=vocab_size, seq_len=32, d_model=d_model, num_layers=1, num_heads=2
    )
    model = gpt.GPT(cfg)
    tokens = torch.randint(0, vocab_size, (8, 32))  # (B, N)
    with torch.no_grad():
        loss = float(gpt.causal_lm_loss(model(tokens), tokens))
    if summed:  # the B * (N - 1) predictions added up
        loss = loss * 8 * 31
    return loss / math.log(2) if bits else loss


def _initial_loss_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("97 characters, d_model = 64", (97, 64, 0)),
            Fixed("a vocabulary of 1000, d_model = 32", (1000, 32, 1)),
        ]
    return [
        Case("50 tokens, d_model = 128", (50, 128, int(rng.integers(999)))),
        Case("4096 tokens, d_model = 16", (4096, 16, int(rng.integers(999)))),
    ]


exercise(
    "07.7",
    initial_loss_reference,
    target="measure_initial_loss",
    title="predict, then measure: the loss of an untrained model",
    points=1,
    cases=_initial_loss_cases,
    atol=0.0,
    rtol=0.03,
    compare=within(0.03),
    measures="the loss at initialisation (nats per token)",
    slips={"bits": dict(bits=True), "summed": dict(summed=True)},
)
