"""Checks for chapter 08 (attention variants).

Eight exercises, each a function the learner writes:

* 08.1 ``document_causal(b, h, q_idx, kv_idx, doc_ids)``: a mask_mod for packed sequences
* 08.2 ``alibi_slopes(num_heads)``: ALiBi's slopes for any number of heads
* 08.3 ``classify_tiles(mask, block_m, block_n)``: the tile map and the fraction skipped
* 08.4 ``ring_decode_step(q_new, k_new, v_new, k_cache, v_cache, position)``
* 08.5 ``mla_cache_bytes_from_config(config, seq_len, batch_size, bytes_per_value)``
* 08.6 ``absorbed_scores(q_nope, q_rope, c_kv, k_rope, W_UK)``: MLA's scores at decode
* 08.7 ``linear_attention_step(q_t, k_t, v_t, state, normalizer)``
* 08.8 ``measure_skipped_tiles(seq_len, window, block)``: predict, then measure how much of
  the score matrix a sliding window skips
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from ..attention import masked_softmax
from ..multihead import repeat_kv
from ..variants.flex import tile_map
from ..variants.mask_mods import document_ids, index_grids
from .core import Case, Fixed
from .declare import exercise
from .kit import BROADCAST_ERROR, DT, byte_compare, randn, within

# --------------------------------------------------------------------------- 08.1 document mask


def document_causal_reference(b, h, q_idx, kv_idx, doc_ids, *, docs="of-b", causal=">=", join="&"):
    r"""The mask_mod of causal attention inside each packed document: query :math:`i` of
    sequence :math:`b` sees key :math:`j` when :math:`D_{b,i} = D_{b,j} \wedge j \le i`
    (tensor operators only, so that it works on index grids and on single indices)."""
    if docs == "ignored":  # no document condition (b >= 0 keeps the batch axis)
        same = b >= 0
    elif docs == "of-sequence-0":
        same = (doc_ids[0, q_idx] == doc_ids[0, kv_idx]) & (b >= 0)
    elif docs == "by-token":  # doc_ids[q_idx] picks rows (sequences), not tokens
        same = doc_ids[q_idx] == doc_ids[kv_idx]
    else:
        same = doc_ids[b, q_idx] == doc_ids[b, kv_idx]
    # the keys a query sees by position (causal=None: all of them)
    seen = {">=": q_idx >= kv_idx, "<=": q_idx <= kv_idx, ">": q_idx > kv_idx, None: True}[causal]
    return (same | seen) if join == "|" else (same & seen)


def _doc_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def packed(name, lengths: list[list[int]], seq_len: int, heads: int = 1, fixed=True) -> Case:
        doc = torch.stack([document_ids(ls, seq_len) for ls in lengths])  # (B, N)
        return Case(name, (*index_grids(len(lengths), heads, seq_len, seq_len), doc), fixed=fixed)

    if not hidden:
        return [
            packed("one packed sequence: documents of 3, 2 and 3 tokens", [[3, 2, 3]], 8),
            packed(
                "two sequences of 10 tokens, the second ending in padding (its own document)",
                [[4, 6], [2, 5]],
                10,
            ),
        ]
    lengths = [[int(n) for n in rng.integers(1, 7, size=4)] for _ in range(3)]
    n = max(sum(ls) for ls in lengths)
    doc = torch.tensor([[0, 0, 1, 1, 1, 2]])
    return [
        packed("three random packings of four documents, 2 heads", lengths, n, 2, False),
        packed("a single document: plain causal", [[7]], 7),
        Fixed(
            "0-dimensional indices, as FlexAttention passes them: q=4, kv=2 (same document)",
            (torch.tensor(0), torch.tensor(0), torch.tensor(4), torch.tensor(2), doc),
        ),
        Fixed(
            "0-dimensional indices: q=4, kv=1 (another document)",
            (torch.tensor(0), torch.tensor(0), torch.tensor(4), torch.tensor(1), doc),
        ),
    ]


exercise(
    "08.1",
    document_causal_reference,
    target="document_causal",
    title="a mask_mod for packed documents, causal",
    points=2,
    cases=_doc_cases,
    errors={"python-and": r"Boolean value of Tensor with more than one value is ambiguous"},
    slips={
        "no-document": dict(docs="ignored"),
        "not-causal": dict(causal=None),
        "or": dict(join="|"),
        "reversed": dict(causal="<="),
        "strict": dict(causal=">"),
        "sequence-zero": dict(docs="of-sequence-0"),
        "token-index": dict(docs="by-token"),
    },
)


# --------------------------------------------------------------------------- 08.2 ALiBi slopes


def _geometric(n: int, start: int = 1) -> torch.Tensor:
    """The slopes of ``n`` heads, :math:`2^{-8h/n}` for ``h = start .. start + n - 1``."""
    return torch.tensor([2.0 ** (-8.0 * h / n) for h in range(start, start + n)], dtype=DT)


def alibi_slopes_reference(
    num_heads: int, *, recipe="split", extra=slice(0, None, 2), order="recipe"
) -> torch.Tensor:
    r"""ALiBi's slopes ``[H]`` (Press et al., 2022): :math:`m_h = 2^{-8h/H}`, :math:`h = 1
    \dots H`, for :math:`H` a power of two; otherwise the :math:`H_0 = 2^{\lfloor \log_2 H
    \rfloor}` slopes of :math:`H_0` heads, then the first :math:`H - H_0` slopes of
    :math:`2 H_0` heads at odd :math:`h` (those that fall between the first ones)."""
    n = int(num_heads)
    p = 2 ** int(math.floor(math.log2(n)))  # H_0, the largest power of two <= H
    if recipe == "from-zero":  # h = 0 .. H - 1, one formula for every H
        return _geometric(n, start=0)
    if recipe == "one-formula":  # the powers-of-two recipe for every H
        return _geometric(n)
    if recipe == "next-power":  # the slopes of the power of two above H, cut
        return _geometric(p if p == n else 2 * p)[:n]
    slopes = _geometric(p)  # (H_0,)
    if p < n:
        slopes = torch.cat([slopes, _geometric(2 * p)[extra][: n - p]])  # (H,)
    return torch.sort(slopes, descending=True).values if order == "sorted" else slopes  # (H,)


def _slopes_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("8 heads (a power of two)", (8,)),
            Fixed("12 heads (not a power of two)", (12,)),
            Fixed("6 heads", (6,)),
        ]
    n = int(rng.choice([20, 24, 40, 48, 96]))
    return [Case(f"{h} head" + "s" * (h > 1), (h,), fixed=h != n) for h in (1, 2, 3, 16, n)]


exercise(
    "08.2",
    alibi_slopes_reference,
    target="alibi_slopes",
    title="ALiBi slopes for any number of heads",
    points=2,
    cases=_slopes_cases,
    atol=1e-7,
    rtol=1e-5,
    slips={
        "from-zero": dict(recipe="from-zero"),
        "one-formula": dict(recipe="one-formula"),
        "next-power": dict(recipe="next-power"),
        "first-extras": dict(extra=slice(None)),
        "even-h": dict(extra=slice(1, None, 2)),
        "sorted": dict(order="sorted"),
    },
)


# --------------------------------------------------------------------------- 08.3 tiles


def classify_tiles_reference(
    mask, block_m, block_n, *, edges="cut", swap=False, codes=(0, 1, 2), share="skipped"
):
    r"""The tiles of ``mask [Nq, Nk]`` (``block_m`` queries by ``block_n`` keys, the last ones
    cut at the edges), each 0 (no entry True: skipped), 2 (every entry True: full) or 1
    (partial), and the fraction of tiles skipped. ``codes`` are those of (skipped, partial,
    full)."""
    if swap:
        block_m, block_n = block_n, block_m
    if edges == "dropped":  # the last, smaller tiles dropped
        mask = mask[: mask.shape[0] // block_m * block_m, : mask.shape[1] // block_n * block_n]
    t_q, t_k = -(-mask.shape[0] // block_m), -(-mask.shape[1] // block_n)  # ceil
    tiles = torch.zeros(t_q, t_k, dtype=torch.long)  # (Tq, Tk)
    for i, j in np.ndindex(t_q, t_k):
        tile = mask[i * block_m : (i + 1) * block_m, j * block_n : (j + 1) * block_n]
        # "padded": a cut edge tile counted with its missing entries as False (never full)
        full = bool(tile.all()) and (edges != "padded" or tile.shape == (block_m, block_n))
        tiles[i, j] = codes[0] if not tile.any() else codes[2] if full else codes[1]
    skipped = float((tiles == 0).sum()) / tiles.numel()
    entries = 1.0 - mask.double().mean().item()  # the share of entries masked out
    return tiles, {"skipped": skipped, "computed": 1.0 - skipped, "entries": entries}[share]


def _causal(n, window=math.inf):
    """Query i sees keys j <= i, and only the last ``window`` of them."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (i - j < window)  # (N, N)


def _tiles_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        doc = document_ids([5, 7])
        return [
            Fixed("causal, 16 x 16, tiles of 8 queries x 4 keys", (_causal(16), 8, 4)),
            Fixed(
                "causal over 10 tokens, tiles 4 x 4 (the last row and column of tiles are "
                "cut to 2)",
                (_causal(10), 4, 4),
            ),
            Fixed(
                "two packed documents (5 and 7 tokens), document mask without causal, tiles 4 x 4",
                (doc[:, None] == doc[None, :], 4, 4),
            ),
        ]
    random_mask = torch.from_numpy(rng.random((13, 9)) < 0.3)
    prefix = _causal(20) | (torch.arange(20)[None, :] < 7)
    return [
        Fixed("sliding window W=3 over 10 tokens, tiles 4 x 4", (_causal(10, 3), 4, 4)),
        Case("a random mask 13 x 9, tiles 4 x 2", (random_mask, 4, 2)),
        Fixed("prefix-LM, 20 tokens, prefix 7, tiles 8 x 8", (prefix, 8, 8)),
        Fixed(
            "decoding: 3 queries over 11 keys, bottom-right causal, tiles 2 x 4",
            (torch.ones(3, 11, dtype=torch.bool).tril(8), 2, 4),
        ),
        Fixed("everything masked out", (torch.zeros(6, 6, dtype=torch.bool), 4, 4)),
        Fixed("one tile larger than the mask", (_causal(5), 8, 8)),
    ]


exercise(
    "08.3",
    classify_tiles_reference,
    target="classify_tiles",
    title="the tiles a block mask skips",
    points=2,
    cases=_tiles_cases,
    atol=1e-9,
    rtol=1e-6,
    outputs=("tiles", "fraction_skipped"),
    errors={"reshape": r"shape '\[.*\]' is invalid for input of size"},
    slips={
        "floor": dict(edges="dropped"),
        "swapped": dict(swap=True),
        "all-or-nothing": dict(codes=(0, 0, 2)),
        "never-full": dict(codes=(0, 1, 1)),
        "edge-partial": dict(edges="padded"),
        "entries": dict(share="entries"),
        "computed": dict(share="computed"),
    },
)


# --------------------------------------------------------------------------- 08.4 ring buffer


def ring_decode_step_reference(
    q_new, k_new, v_new, k_cache, v_cache, position, *, write="p % W", read="s <= p", tiled=False
):
    r"""One decoding step of sliding-window attention from a ring of :math:`W` slots: write
    ``k_new, v_new`` into slot :math:`p \bmod W`, then let ``q_new [B, H, 1, d]`` attend over
    the slots written so far (:math:`s \le p`), KV head :math:`\lfloor i / G \rfloor` for query
    head :math:`i`. Returns the output and the new caches (the inputs are left unchanged)."""
    w = k_cache.shape[2]
    if write == "queue":  # shift left, append at the end
        k_ring = torch.cat([k_cache[:, :, 1:], k_new], dim=2)  # (B, H_kv, W, d)
        v_ring = torch.cat([v_cache[:, :, 1:], v_new], dim=2)
        keep = torch.arange(w) >= w - 1 - position  # (W,)
    else:
        slot = (position + 1 if write == "(p + 1) % W" else position) % w
        k_ring, v_ring = k_cache.clone(), v_cache.clone()
        k_ring[:, :, slot] = k_new[:, :, 0]  # (B, H_kv, d)
        v_ring[:, :, slot] = v_new[:, :, 0]
        keep = torch.arange(w) <= position  # (W,) the slots written so far
    g = q_new.shape[1] // k_ring.shape[1]
    if read == "s < p":
        keep = torch.arange(w) < position  # (W,)
    elif read == "every slot":
        keep = torch.ones(w, dtype=torch.bool)  # (W,)
    elif read == "nonzero keys":  # a slot is 'a token' when its key is not all zeros
        keep = repeat_kv(k_ring.abs().sum(-1)[:, :, None, :] > 0, g)  # (B, H, 1, W)
    k, v = (k_cache, v_cache) if read == "before the write" else (k_ring, v_ring)
    # tiled: KV heads 0, 1, 0, 1 rather than 0, 0, 1, 1
    k, v = (x.repeat(1, g, 1, 1) if tiled else repeat_kv(x, g) for x in (k, v))  # (B, H, W, d)
    scores = q_new @ k.transpose(-2, -1) / math.sqrt(q_new.shape[-1])  # (B, H, 1, W)
    return masked_softmax(scores, keep) @ v, k_ring, v_ring  # (B, H, 1, d), caches


# (name, B, H, H_kv, W slots, d, position of the new token, 1 when its key is all zeros)
_SHOWN_RINGS = [
    ("token 2 into a ring of 4 slots (slot 3 is still empty)", 1, 2, 2, 4, 3, 2, 0),
    ("token 9 into a full ring of 4 slots, 4 query heads on 2 KV heads", 2, 4, 2, 4, 3, 9, 0),
    ("token 5 into a full ring of 4, its key all zeros (it is still a token)", 1, 2, 1, 4, 3, 5, 1),
]
_HIDDEN_RINGS = [
    ("the first token (position 0)", 2, 2, 1, 5, 4, 0, 0),
    ("position W-1: the ring becomes full", 1, 3, 3, 6, 2, 5, 0),
    ("position 100, window 7, multi-query", 2, 4, 1, 7, 3, 100, 0),
    ("position 13, window 5, 6 query heads on 3 KV heads", 1, 6, 3, 5, 2, 13, 0),
    ("position 9 into a full ring of 6, its key all zeros", 2, 2, 2, 6, 4, 9, 1),
]


def _ring_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def case(name, b, h, h_kv, w, d, position, zero_key):
        k_cache, v_cache = randn(rng, b, h_kv, w, d), randn(rng, b, h_kv, w, d)
        k_cache[:, :, position + 1 :] = 0.0  # slots never written are still zero
        v_cache[:, :, position + 1 :] = 0.0
        k_new = torch.zeros(b, h_kv, 1, d, dtype=DT) if zero_key else randn(rng, b, h_kv, 1, d)
        q_new = randn(rng, b, h, 1, d)
        return Case(name, (q_new, k_new, randn(rng, b, h_kv, 1, d), k_cache, v_cache, position))

    return [case(*row) for row in (_HIDDEN_RINGS if hidden else _SHOWN_RINGS)]


exercise(
    "08.4",
    ring_decode_step_reference,
    target="ring_decode_step",
    title="one decoding step from a ring-buffer KV cache",
    points=2,
    cases=_ring_cases,
    atol=1e-9,
    rtol=1e-7,
    outputs=("output", "k_cache", "v_cache"),
    slips={
        "read-first": dict(read="before the write"),
        "strict": dict(read="s < p"),
        "all-slots": dict(read="every slot"),
        "nonzero-keys": dict(read="nonzero keys"),
        "off-by-one": dict(write="(p + 1) % W"),
        "queue": dict(write="queue"),
        "tiled-heads": dict(tiled=True),
    },
)


# --------------------------------------------------------------------------- 08.5 MLA bytes


def mla_cache_bytes_from_config(
    config: dict,
    seq_len: int,
    batch_size: int = 1,
    bytes_per_value: int = 2,
    *,
    cached="latent+rope",
    layers=True,
    batch=True,
    unit=1,
) -> int:
    r"""The bytes of an MLA model's KV cache: each layer caches, per token, one latent
    :math:`c_t` and one RoPE key :math:`k^R_t` shared by all heads:
    :math:`L\,(d_c + d_h^R)\,N\,B` values of ``bytes_per_value`` bytes."""
    c = config
    if cached == "latent-twice":  # once for keys, once for values
        per_token = 2 * c["kv_lora_rank"] + c["qk_rope_head_dim"]
    elif cached == "rope-per-head":
        per_token = c["kv_lora_rank"] + c["num_attention_heads"] * c["qk_rope_head_dim"]
    elif cached == "latent":
        per_token = c["kv_lora_rank"]
    elif cached == "mha":  # every head's keys and values
        head = c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"]
        per_token = c["num_attention_heads"] * head
    else:
        per_token = c["kv_lora_rank"] + c["qk_rope_head_dim"]
    num_layers = c["num_hidden_layers"] if layers else 1
    sequences = batch_size if batch else 1
    return int(num_layers * per_token * seq_len * sequences * bytes_per_value * unit)


def _mla_config(layers, d_model, heads, kv_rank, rope, nope=128, v=128):
    return {
        "num_hidden_layers": layers,
        "hidden_size": d_model,
        "num_attention_heads": heads,
        "kv_lora_rank": kv_rank,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope,
        "v_head_dim": v,
    }


DEEPSEEK_V2_CONFIG = _mla_config(60, 5120, 128, 512, 64)


def _mla_bytes_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed(
                "a tiny MLA model: 3 layers, 4 heads, d_c=16, d_h^R=4, 5 sequences of 10 "
                "tokens, fp32",
                (_mla_config(3, 64, 4, 16, 4, 10, 10), 10, 5, 4),
            ),
            Fixed("DeepSeek-V2's config, one token in bf16", (DEEPSEEK_V2_CONFIG, 1, 1, 2)),
        ]
    n = int(rng.integers(1000, 9000))
    return [
        Fixed("DeepSeek-V2, 128k tokens (131072), bf16", (DEEPSEEK_V2_CONFIG, 131072, 1, 2)),
        Case(
            f"a DeepSeek-V3-like config (61 layers), batch 4, {n} tokens, fp8 (1 byte)",
            (_mla_config(61, 7168, 128, 512, 64), n, 4, 1),
        ),
        Fixed(
            "16 heads, d_c=256, d_h^R=32, 2 sequences of 512, fp32",
            (_mla_config(12, 1024, 16, 256, 32, 64, 64), 512, 2, 4),
        ),
    ]


exercise(
    "08.5",
    mla_cache_bytes_from_config,
    target="mla_cache_bytes_from_config",
    title="the MLA cache of a real config",
    points=1,
    cases=_mla_bytes_cases,
    atol=0.0,
    rtol=1e-12,
    compare=byte_compare(
        "Every factor is an int; keep it so (no `/`, or int() around the product)."
    ),
    slips={
        "latent-twice": dict(cached="latent-twice"),
        "rope-per-head": dict(cached="rope-per-head"),
        "no-rope": dict(cached="latent"),
        "mha": dict(cached="mha"),
        "no-layers": dict(layers=False),
        "no-batch": dict(batch=False),
        "bits": dict(unit=8),
    },
)


# --------------------------------------------------------------------------- 08.6 absorbed


def absorbed_scores_reference(
    q_nope, q_rope, c_kv, k_rope, W_UK, *, rope=True, scale="d_h + d_h^R", w_uk="own"
):
    r"""MLA's attention scores at decode with :math:`W^{UK}` absorbed into the query:
    :math:`s_{h,n} = \big((W^{UK}_h{}^\top q^C_h) \cdot c_n + q^R_h \cdot k^R_n\big) /
    \sqrt{d_h + d_h^R}`, ``[B, H, 1, N]`` for ``q_nope [B, H, 1, d_h]``, ``q_rope [B, H, 1,
    d_h^R]``, ``c_kv [B, N, d_c]``, ``k_rope [B, N, d_h^R]``, ``W_UK [H, d_h, d_c]``."""
    w = W_UK[:1].expand_as(W_UK) if w_uk == "head-0" else W_UK  # (H, d_h, d_c)
    q_lat = torch.einsum("bhqe,hec->bhqc", q_nope, w)  # (B, H, 1, d_c)
    scores = q_lat @ c_kv[:, None].transpose(-2, -1)  # (B, H, 1, N)
    if rope:
        scores = scores + q_rope @ k_rope[:, None].transpose(-2, -1)  # (B, H, 1, N)
    head_dim, d_r, d_c = q_nope.shape[-1], q_rope.shape[-1], c_kv.shape[-1]
    return scores / math.sqrt(
        {"d_h": head_dim, "d_c": d_c, "d_h + d_h^R": head_dim + d_r, "none": 1}[scale]
    )


def _absorbed_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def case(name, b, h, n, head_dim, d_r, d_c):
        shapes = [(b, h, 1, head_dim), (b, h, 1, d_r), (b, n, d_c), (b, n, d_r), (h, head_dim, d_c)]
        *inputs, w_uk = (randn(rng, *shape) for shape in shapes)
        return Case(name, (*inputs, w_uk / math.sqrt(d_c)))

    if not hidden:
        return [
            case("B=1, 2 heads, 5 cached tokens, d_h=4, d_h^R=2, d_c=6", 1, 2, 5, 4, 2, 6),
            case("B=2, 3 heads, 4 cached tokens, d_h=4, d_h^R=2, d_c=5", 2, 3, 4, 4, 2, 5),
        ]
    return [
        case("one cached token", 2, 2, 1, 4, 2, 8),
        case("8 heads, 9 tokens, d_h=8, d_h^R=4, d_c=16", 1, 8, 9, 8, 4, 16),
        case("d_c smaller than d_h", 2, 4, 6, 8, 2, 3),
    ]


exercise(
    "08.6",
    absorbed_scores_reference,
    target="absorbed_scores",
    title="MLA's absorbed scores at decode",
    points=2,
    cases=_absorbed_cases,
    atol=1e-9,
    rtol=1e-7,
    errors={"einsum-letters": r"einsum\(\).*does not broadcast"},
    slips={
        "no-rope": dict(rope=False),
        "scale-d-h": dict(scale="d_h"),
        "scale-d-c": dict(scale="d_c"),
        "unscaled": dict(scale="none"),
        "head-zero": dict(w_uk="head-0"),
    },
)


# --------------------------------------------------------------------------- 08.7 linear step


def _phi(x):
    return F.elu(x) + 1.0


def linear_attention_step_reference(
    q_t, k_t, v_t, S, z, *, phi=_phi, read_first=False, norm=True, phi_v=False, transposed=False
):
    r"""One step of causal linear attention (Katharopoulos et al., 2020), :math:`\phi(x) =
    \mathrm{elu}(x) + 1`, from the state :math:`S = S_{t-1}` and the normalizer :math:`z =
    z_{t-1}`: :math:`S_t = S_{t-1} + \phi(k_t) v_t^\top`, :math:`z_t = z_{t-1} + \phi(k_t)`,
    :math:`o_t = S_t^\top \phi(q_t) / \phi(q_t)^\top z_t`. Returns ``(o_t, S_t, z_t)``;
    ``phi=None`` is no feature map."""
    fq, fk = (q_t, k_t) if phi is None else (phi(q_t), phi(k_t))  # (B, H, d_k)
    v = phi(v_t) if phi_v else v_t  # (B, H, d_v)
    S_t = S + fk[..., :, None] * v[..., None, :]  # (B, H, d_k, d_v)
    z_t = z + fk  # (B, H, d_k)
    S_read, z_read = (S, z) if read_first else (S_t, z_t)
    num = (fq[..., None, :] @ S_read)[..., 0, :]  # (B, H, d_v)
    out = num / (fq * z_read).sum(-1, keepdim=True) if norm else num  # (B, H, d_v)
    return out, S_t.transpose(-2, -1) if transposed else S_t, z_t  # S_t^T: (B, H, d_v, d_k)


def _lin_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def case(name, b, h, d_k, d_v, steps):  # the state and normalizer after `steps` tokens
        ks, vs = randn(rng, steps, b, h, d_k), randn(rng, steps, b, h, d_v)
        state = (_phi(ks)[..., :, None] * vs[..., None, :]).sum(0)  # (B, H, d_k, d_v)
        qkv = randn(rng, b, h, d_k), randn(rng, b, h, d_k), randn(rng, b, h, d_v)
        return Case(name, (*qkv, state, _phi(ks).sum(0)))  # normalizer (B, H, d_k)

    if not hidden:
        return [
            case("after 3 tokens: B=1, 2 heads, d_k=4, d_v=3", 1, 2, 4, 3, 3),
            case("after 10 tokens: B=2, 3 heads, d_k=5, d_v=6", 2, 3, 5, 6, 10),
        ]
    return [
        case("the first token (zero state)", 2, 2, 4, 4, 0),
        case("after 50 tokens, d_k=8, d_v=2", 1, 4, 8, 2, 50),
        case("one head, d_k=d_v=16, after 7 tokens", 3, 1, 16, 16, 7),
    ]


exercise(
    "08.7",
    linear_attention_step_reference,
    target="linear_attention_step",
    title="linear attention's recurrent step",
    points=2,
    cases=_lin_cases,
    atol=1e-9,
    rtol=1e-7,
    outputs=("output", "state", "normalizer"),
    errors={"no-keepdim": BROADCAST_ERROR + r" at non-singleton dimension 2"},
    slips={
        "read-first": dict(read_first=True),
        "no-denominator": dict(norm=False),
        "no-feature-map": dict(phi=None),
        "elu": dict(phi=F.elu),
        "relu": dict(phi=F.relu),
        "exp": dict(phi=torch.exp),
        "phi-v": dict(phi_v=True),
        "transposed-state": dict(transposed=True),
    },
)


# --------------------------------------------------------------------------- 08.8 predict, measure


def skipped_tiles_reference(
    seq_len: int, window: int, block: int, *, count="tiles", windowed=True
) -> float:
    r"""The fraction of ``block`` x ``block`` tiles a causal sliding-window mask (query
    :math:`i` sees keys :math:`i - w < j \le i`) lets FlexAttention skip entirely."""
    mask = _causal(seq_len, window) if windowed else _causal(seq_len)  # (N, N)
    if count == "entries":
        return 1.0 - mask.double().mean().item()
    return float((tile_map(mask, block, block) == 0).double().mean())


def _skipped_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Fixed("N = 1024, window 128, tiles of 64", (1024, 128, 64)),
            Fixed("N = 2048, window 256, tiles of 128", (2048, 256, 128)),
            Fixed("N = 512, window 512 (as causal), tiles of 64", (512, 512, 64)),
        ]
    n = int(rng.integers(128, 1600))  # a length, window and tile size drawn from the seed
    window, block = int(rng.integers(8, n)), int(rng.choice([16, 32, 64, 128]))
    return [
        Fixed("N = 1536, window 100, tiles of 64 (a window not a multiple)", (1536, 100, 64)),
        Fixed("N = 1000, window 64, tiles of 32 (N not a multiple)", (1000, 64, 32)),
        Case(f"N = {n}, window {window}, tiles of {block}", (n, window, block)),
    ]


exercise(
    "08.8",
    skipped_tiles_reference,
    target="measure_skipped_tiles",
    title="predict, then measure: how much of the score matrix a sliding window skips",
    points=1,
    cases=_skipped_cases,
    atol=1e-9,
    rtol=0.0,
    compare=within(1e-9, relative=False),
    measures="the fraction of tiles skipped",
    slips={"entries": dict(count="entries"), "causal-only": dict(windowed=False)},
)
