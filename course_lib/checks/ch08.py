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
from ..variants.alibi import alibi_slopes as lib_alibi_slopes
from ..variants.flex import tile_map
from ..variants.mask_mods import document_ids, index_grids
from .core import Case, Exercise, Hint, NotThisMistake, register
from .kit import BROADCAST_ERROR, DT, byte_compare, randn, twin, unless_different, within

# --------------------------------------------------------------------------- 08.1 document mask


def document_causal_reference(b, h, q_idx, kv_idx, doc_ids):
    return (doc_ids[b, q_idx] == doc_ids[b, kv_idx]) & (q_idx >= kv_idx)


def _doc_case(name: str, lengths: list[list[int]], seq_len: int, num_heads: int = 1) -> Case:
    doc = torch.stack([document_ids(ls, seq_len) for ls in lengths])  # (B, N)
    b, h, q, kv = index_grids(len(lengths), num_heads, seq_len, seq_len)
    return Case(name, (b, h, q, kv, doc))


def _doc_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _doc_case("one packed sequence: documents of 3, 2 and 3 tokens", [[3, 2, 3]], 8),
            _doc_case(
                "two sequences of 10 tokens, the second ending in padding (its own document)",
                [[4, 6], [2, 5]],
                10,
            ),
        ]
    lengths = [[int(n) for n in rng.integers(1, 7, size=4)] for _ in range(3)]
    n = max(sum(ls) for ls in lengths)
    doc = torch.tensor([[0, 0, 1, 1, 1, 2]])
    scalar = lambda i: torch.tensor(i)  # noqa: E731 - how FlexAttention's vmap calls it
    return [
        _doc_case("three random packings of four documents, 2 heads", lengths, n, 2),
        _doc_case("a single document: plain causal", [[7]], 7),
        Case(
            "0-dimensional indices, as FlexAttention passes them: q=4, kv=2 (same document)",
            (scalar(0), scalar(0), scalar(4), scalar(2), doc),
        ),
        Case(
            "0-dimensional indices: q=4, kv=1 (another document)",
            (scalar(0), scalar(0), scalar(4), scalar(1), doc),
        ),
    ]


def _doc_forgot_batch(b, h, q, kv, d):
    return (d[q] == d[kv]) & (q >= kv)  # doc_ids indexed without the sequence b


register(
    Exercise(
        id="08.1",
        title="a mask_mod for packed documents, causal",
        points=2,
        target="document_causal",
        cases=_doc_cases,
        reference=document_causal_reference,
        mistakes={
            Hint(
                "your mask is causal but lets tokens attend across document boundaries.",
                "Also require doc_ids[b, q_idx] == doc_ids[b, kv_idx].",
            ): lambda b, h, q, kv, d: (q >= kv) & (b >= 0),
            Hint(
                "your mask keeps each token inside its document but is not causal: a token sees "
                "later tokens of its own document.",
                "Combine with q_idx >= kv_idx, using `&`.",
            ): lambda b, h, q, kv, d: d[b, q] == d[b, kv],
            Hint(
                "you combined the two conditions with `|` (or): a token then sees every earlier "
                "token of any document.",
                "Both must hold: `&`.",
            ): lambda b, h, q, kv, d: (d[b, q] == d[b, kv]) | (q >= kv),
            Hint(
                "your causal condition is reversed.",
                "Query i may see keys j <= i: q_idx >= kv_idx.",
            ): lambda b, h, q, kv, d: (d[b, q] == d[b, kv]) & (q <= kv),
            Hint(
                "a token cannot see itself.",
                "Use q_idx >= kv_idx, not q_idx > kv_idx.",
            ): lambda b, h, q, kv, d: (d[b, q] == d[b, kv]) & (q > kv),
            Hint(
                "you used the documents of sequence 0 for every sequence.",
                "Index doc_ids with b: doc_ids[b, q_idx].",
            ): lambda b, h, q, kv, d: (d[0, q] == d[0, kv]) & (q >= kv) & (b >= 0),
            Hint(
                "you indexed doc_ids with the token index alone, doc_ids[q_idx]: that picks "
                "*sequences* (rows), not tokens.",
                "doc_ids is [B, N]: doc_ids[b, q_idx] is the document of token q_idx of "
                "sequence b.",
            ): _doc_forgot_batch,
        },
        errors={
            r"Boolean value of Tensor with more than one value is ambiguous": Hint(
                "you used Python's `and`, `or`, `not` or an `if` on the index tensors: they ask "
                "for one True/False, and a grid of indices has many.",
                "Use tensor operators only, which work elementwise on a whole grid and on single "
                "indices alike: `&`, `|`, `~`, comparisons.",
            ),
        },
        hint=Hint(
            "check your mask on pairs of tokens: two in the same document (in both orders) and "
            "two in different documents.",
            "Two conditions, both elementwise: same document, and the key not after the query. "
            "(doc_ids[b, q_idx] == doc_ids[b, kv_idx]) & (q_idx >= kv_idx): tensor operators "
            "only (`&`, not `and`), so that it works on whole index grids and on single indices.",
        ),
    )
)


# --------------------------------------------------------------------------- 08.2 ALiBi slopes


def alibi_slopes_reference(num_heads: int) -> torch.Tensor:
    return lib_alibi_slopes(num_heads, dtype=DT)  # (H,)


def _geometric(n: int, start: int = 1) -> torch.Tensor:
    return torch.tensor([2.0 ** (-8.0 * h / n) for h in range(start, start + n)], dtype=DT)


def _slopes_wrong(num_heads: int, *, how: str) -> torch.Tensor:
    n = int(num_heads)
    p = 2 ** int(math.floor(math.log2(n)))
    if how == "same formula":
        return _geometric(n)
    if how == "from zero":
        return _geometric(n, start=0)
    if how == "truncate next power":
        return _geometric(p if p == n else 2 * p)[:n]
    if how == "sorted":
        return torch.sort(lib_alibi_slopes(n, dtype=DT), descending=True).values
    extra = {
        "first ones": _geometric(2 * p)[: n - p],
        "odd positions": _geometric(2 * p)[1::2][: n - p],
    }[how]
    return torch.cat([_geometric(p), extra]) if p < n else _geometric(n)


def _slopes_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("8 heads (a power of two)", (8,)),
            Case("12 heads (not a power of two)", (12,)),
            Case("6 heads", (6,)),
        ]
    n = int(rng.choice([20, 24, 40, 48, 96]))
    return [
        Case("1 head", (1,)),
        Case("2 heads", (2,)),
        Case("3 heads", (3,)),
        Case("16 heads", (16,)),
        Case(f"{n} heads", (n,)),
    ]


register(
    Exercise(
        id="08.2",
        title="ALiBi slopes for any number of heads",
        points=2,
        target="alibi_slopes",
        cases=_slopes_cases,
        reference=alibi_slopes_reference,
        atol=1e-7,
        rtol=1e-5,
        mistakes={
            Hint(
                "your slopes start at 2^0 = 1.",
                "The sequence starts at h = 1: m_h = 2^(-8h/H), so the first slope is 2^(-8/H) "
                "(1/2 for 8 heads).",
            ): twin(_slopes_wrong, how="from zero"),
            Hint(
                "you used 2^(-8h/H) for every H: the recipe for powers of two only.",
                "For other H take the H_0 = 2^floor(log2 H) slopes of H_0 heads, then fill up "
                "with slopes of 2 H_0 heads.",
            ): twin(_slopes_wrong, how="same formula"),
            Hint(
                "you took the slopes of the next power of two and cut them.",
                "The paper starts from the power of two *below* H (all its slopes) and adds "
                "slopes of twice as many heads.",
            ): twin(_slopes_wrong, how="truncate next power"),
            Hint(
                "the extra slopes are the first H - H_0 slopes of 2 H_0 heads.",
                "Take *every other* slope of 2 H_0 heads (h = 1, 3, 5, ...: the ones step 1 "
                "does not already have), the first H - H_0 of those.",
            ): twin(_slopes_wrong, how="first ones"),
            Hint(
                "your extra slopes repeat slopes you already have: at even h the slopes of "
                "2 H_0 heads equal those of H_0 heads.",
                "Take the odd h = 1, 3, 5, ... (list indices 0, 2, 4, ...).",
            ): twin(_slopes_wrong, how="odd positions"),
            Hint(
                "you have the right slopes in the wrong order: you sorted them.",
                "The order is the recipe's: first the H_0 slopes of H_0 heads, then the extra "
                "ones (head h of the model gets slope h of this list).",
            ): twin(_slopes_wrong, how="sorted"),
        },
        hint=Hint(
            "check your slopes for a power of two first (8 heads), then for a head count that is "
            "not one (6 heads), against the statement's recipe.",
            "Start from the largest power of two H_0 <= H; if H_0 < H, borrow the missing slopes "
            "from the recipe for 2 H_0 heads. H_0 = 2 ** floor(log2(H)); slopes(n) = [2 ** (-8 * "
            "h / n) for h in 1..n]; slopes(H_0) + slopes(2 * H_0)[0::2][:H - H_0].",
        ),
    )
)


# --------------------------------------------------------------------------- 08.3 tiles


def classify_tiles_reference(mask: torch.Tensor, block_m: int, block_n: int):
    tiles = tile_map(mask, block_m, block_n)  # (Tq, Tk)
    return tiles, float((tiles == 0).sum()) / tiles.numel()


def _tiles_wrong(mask, block_m, block_n, *, how: str):
    if how == "swap":
        block_m, block_n = block_n, block_m
    n_q, n_k = mask.shape
    if how == "floor":
        mask = mask[: n_q // block_m * block_m, : n_k // block_n * block_n]
        n_q, n_k = mask.shape
    t_q, t_k = -(-n_q // block_m), -(-n_k // block_n)
    tiles = torch.zeros(t_q, t_k, dtype=torch.long)
    for i in range(t_q):
        for j in range(t_k):
            tile = mask[i * block_m : (i + 1) * block_m, j * block_n : (j + 1) * block_n]
            full_size = tile.shape == (block_m, block_n)
            if how == "all or nothing":
                tiles[i, j] = 2 if tile.all() else 0
            elif how == "any":
                tiles[i, j] = 1 if tile.any() else 0
            elif how == "edge partial":
                tiles[i, j] = 0 if not tile.any() else (2 if tile.all() and full_size else 1)
            else:
                tiles[i, j] = 0 if not tile.any() else (2 if tile.all() else 1)
    frac = float((tiles == 0).sum()) / tiles.numel()
    if how == "elements":
        frac = 1.0 - mask.double().mean().item()
    if how == "computed":
        frac = 1.0 - frac
    return tiles, frac


def _causal(n_q, n_k=None):
    n_k = n_q if n_k is None else n_k
    return torch.ones(n_q, n_k, dtype=torch.bool).tril()


def _window(n, w):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (i - j < w)


def _tiles_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        doc = document_ids([5, 7])
        return [
            Case("causal, 16 x 16, tiles of 8 queries x 4 keys", (_causal(16), 8, 4)),
            Case(
                "causal over 10 tokens, tiles 4 x 4 (the last row and column of tiles are "
                "cut to 2)",
                (_causal(10), 4, 4),
            ),
            Case(
                "two packed documents (5 and 7 tokens), document mask without causal, tiles 4 x 4",
                (doc[:, None] == doc[None, :], 4, 4),
            ),
        ]
    random_mask = torch.from_numpy(rng.random((13, 9)) < 0.3)
    prefix = _causal(20) | (torch.arange(20)[None, :] < 7)
    return [
        Case("sliding window W=3 over 10 tokens, tiles 4 x 4", (_window(10, 3), 4, 4)),
        Case("a random mask 13 x 9, tiles 4 x 2", (random_mask, 4, 2)),
        Case("prefix-LM, 20 tokens, prefix 7, tiles 8 x 8", (prefix, 8, 8)),
        Case(
            "decoding: 3 queries over 11 keys, bottom-right causal, tiles 2 x 4",
            (torch.ones(3, 11, dtype=torch.bool).tril(8), 2, 4),
        ),
        Case("everything masked out", (torch.zeros(6, 6, dtype=torch.bool), 4, 4)),
        Case("one tile larger than the mask", (_causal(5), 8, 8)),
    ]


register(
    Exercise(
        id="08.3",
        title="the tiles a block mask skips",
        points=2,
        target="classify_tiles",
        cases=_tiles_cases,
        reference=classify_tiles_reference,
        atol=1e-9,
        rtol=1e-6,
        outputs=("tiles", "fraction_skipped"),
        mistakes={
            Hint(
                "your tile map has one tile too few along an axis whose length is not a "
                "multiple of the tile size.",
                "The last, smaller tile still counts: ceil division, -(-n // block).",
            ): twin(_tiles_wrong, how="floor"),
            Hint(
                "you swapped the tile sizes.",
                "block_m counts queries (rows), block_n keys (columns).",
            ): twin(_tiles_wrong, how="swap"),
            Hint(
                "you skip every tile that is not entirely True.",
                "A partial tile (some True, some False) must be computed (1); only an all-False "
                "tile is skipped (0).",
            ): twin(_tiles_wrong, how="all or nothing"),
            Hint(
                "you never mark a tile as full (2).",
                "A tile whose entries are all True is full (2); one with both True and False "
                "entries is partial (1).",
            ): twin(_tiles_wrong, how="any"),
            Hint(
                "you classified a cut edge tile by its missing entries too.",
                "Look only at the tile's real entries: an edge tile whose real entries are all "
                "True is full.",
            ): twin(_tiles_wrong, how="edge partial"),
            Hint(
                "your fraction counts masked-out *entries*.",
                "The exercise asks for the fraction of *tiles* that are skipped (classified 0).",
            ): twin(_tiles_wrong, how="elements"),
            Hint(
                "your fraction is the share of tiles that are computed.",
                "The exercise asks for the share that is skipped (partial and full tiles are "
                "computed).",
            ): twin(_tiles_wrong, how="computed"),
        },
        errors={
            r"shape '\[.*\]' is invalid for input of size": Hint(
                "a reshape into whole tiles fails when the mask's side is not a multiple of the "
                "tile size.",
                "The last tiles are smaller: loop over ceil(Nq / block_m) x ceil(Nk / block_n) "
                "tiles and slice, mask[i*block_m:(i+1)*block_m, j*block_n:(j+1)*block_n] (a "
                "slice past the end stops at the edge).",
            ),
        },
        hint=Hint(
            "check a tile at the edge of the mask (it may be smaller), what each class 0, 1, 2 "
            "means, and which tiles the fraction counts.",
            "Slice the mask into tiles (the last ones may be smaller) and ask of each: no True, "
            "all True, or some? For tile (i, j) take mask[i*block_m:(i+1)*block_m, "
            "j*block_n:(j+1)*block_n]: 0 if not any(), 2 if all(), else 1; ceil division for the "
            "number of tiles.",
        ),
    )
)


# --------------------------------------------------------------------------- 08.4 ring buffer


def _ring_attend(q_new, k_cache, v_cache, valid, tile=False):
    g = q_new.shape[1] // k_cache.shape[1]
    rep = (lambda t: t.repeat(1, g, 1, 1)) if tile else (lambda t: repeat_kv(t, g))
    k, v = rep(k_cache), rep(v_cache)  # (B, H, W, d)
    scores = q_new @ k.transpose(-2, -1) / math.sqrt(q_new.shape[-1])  # (B, H, 1, W)
    weights = masked_softmax(scores, valid)  # (B, H, 1, W)
    return weights @ v  # (B, H, 1, d)


def ring_decode_step_reference(q_new, k_new, v_new, k_cache, v_cache, position):
    w = k_cache.shape[2]
    slot = position % w
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    k_cache[:, :, slot] = k_new[:, :, 0]  # (B, H_kv, d)
    v_cache[:, :, slot] = v_new[:, :, 0]
    valid = torch.arange(w) <= position  # (W,) slots written so far
    return _ring_attend(q_new, k_cache, v_cache, valid), k_cache, v_cache


def _ring_wrong(q_new, k_new, v_new, k_cache, v_cache, position, *, how: str):
    w = k_cache.shape[2]
    k_old, v_old = k_cache.clone(), v_cache.clone()
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    if how == "roll":
        k_cache = torch.cat([k_cache[:, :, 1:], k_new], dim=2)  # (B, H_kv, W, d)
        v_cache = torch.cat([v_cache[:, :, 1:], v_new], dim=2)
        valid = torch.arange(w) >= w - 1 - position
    else:
        slot = {"off by one": (position + 1) % w}.get(how, position % w)
        k_cache[:, :, slot] = k_new[:, :, 0]
        v_cache[:, :, slot] = v_new[:, :, 0]
        valid = torch.arange(w) <= position
    if how == "all slots":
        valid = torch.ones(w, dtype=torch.bool)
    if how == "strict":
        valid = torch.arange(w) < position
    if how == "nonzero keys":  # a slot is 'a token' when its key is not all zeros
        valid = k_cache.abs().sum(-1)[:, :, None, :] > 0  # (B, H_kv, 1, W)
        valid = repeat_kv(valid, q_new.shape[1] // k_cache.shape[1])  # (B, H, 1, W)
    if how == "read first":
        return _ring_attend(q_new, k_old, v_old, valid), k_cache, v_cache
    return _ring_attend(q_new, k_cache, v_cache, valid, tile=how == "tile"), k_cache, v_cache


def _ring_case(rng, name, b, h, h_kv, w, d, position, zero_key=False):
    k_cache, v_cache = randn(rng, b, h_kv, w, d), randn(rng, b, h_kv, w, d)
    k_cache[:, :, position + 1 :] = 0.0  # slots never written are still zero
    v_cache[:, :, position + 1 :] = 0.0
    k_new = torch.zeros(b, h_kv, 1, d, dtype=DT) if zero_key else randn(rng, b, h_kv, 1, d)
    return Case(
        name,
        (randn(rng, b, h, 1, d), k_new, randn(rng, b, h_kv, 1, d), k_cache, v_cache, position),
    )


def _ring_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _ring_case(
                rng, "token 2 into a ring of 4 slots (slot 3 is still empty)", 1, 2, 2, 4, 3, 2
            ),
            _ring_case(
                rng,
                "token 9 into a full ring of 4 slots, 4 query heads on 2 KV heads",
                2,
                4,
                2,
                4,
                3,
                9,
            ),
            _ring_case(
                rng,
                "token 5 into a full ring of 4, its key all zeros (it is still a token)",
                1,
                2,
                1,
                4,
                3,
                5,
                zero_key=True,
            ),
        ]
    return [
        _ring_case(rng, "the first token (position 0)", 2, 2, 1, 5, 4, 0),
        _ring_case(rng, "position W-1: the ring becomes full", 1, 3, 3, 6, 2, 5),
        _ring_case(rng, "position 100, window 7, multi-query", 2, 4, 1, 7, 3, 100),
        _ring_case(rng, "position 13, window 5, 6 query heads on 3 KV heads", 1, 6, 3, 5, 2, 13),
        _ring_case(
            rng,
            "position 9 into a full ring of 6, its key all zeros",
            2,
            2,
            2,
            6,
            4,
            9,
            zero_key=True,
        ),
    ]


register(
    Exercise(
        id="08.4",
        title="one decoding step from a ring-buffer KV cache",
        points=2,
        target="ring_decode_step",
        cases=_ring_cases,
        reference=ring_decode_step_reference,
        atol=1e-9,
        rtol=1e-7,
        outputs=("output", "k_cache", "v_cache"),
        mistakes={
            Hint(
                "the new token attends before it is written into the ring.",
                "Write k_new, v_new into slot position % W first, then attend: the token sees "
                "itself, not the token it overwrites.",
            ): twin(_ring_wrong, how="read first"),
            Hint(
                "the new token does not see itself while the ring is filling up: you kept slots "
                "s < position.",
                "Slot s holds a token when s <= position (the new token's own slot included).",
            ): twin(_ring_wrong, how="strict"),
            Hint(
                "you attend to slots that were never written: they hold zeros, not tokens.",
                "Mask out slot s while s > position.",
            ): twin(_ring_wrong, how="all slots"),
            Hint(
                "you decide which slots hold a token by looking at their values (a key of "
                "zeros = empty), so a real token whose key is zero is dropped.",
                "Decide by position alone: slot s holds a token when s <= position.",
            ): twin(_ring_wrong, how="nonzero keys"),
            Hint(
                "you write into slot (position + 1) % W.",
                "Token t goes to slot t % W.",
            ): twin(_ring_wrong, how="off by one"),
            Hint(
                "you shift the cache and append the new token at the end, like a queue.",
                "The cache is a ring (token t sits in slot t % W): shifting drops the wrong "
                "token and copies W entries per token. Write the new token into slot "
                "position % W.",
            ): twin(_ring_wrong, how="roll"),
            Hint(
                "you tiled the KV heads (0,1,0,1) instead of repeating each in place (0,0,1,1).",
                "Query head i reads KV head i // G (chapter 04's repeat_kv).",
            ): twin(_ring_wrong, how="tile"),
        },
        hint=Hint(
            "check which slot the new token goes into, and which slots hold a token while the "
            "ring is still filling up.",
            "Write the new token into its slot, then let the query attend to every slot that "
            "holds a token. slot = position % W; write k_new[:, :, 0] and v_new[:, :, 0] there; "
            "valid = arange(W) <= position; softmax over the valid slots with repeated KV heads.",
        ),
    )
)


# --------------------------------------------------------------------------- 08.5 MLA bytes


def _mla_bytes(config, seq_len, batch_size, bytes_per_value, *, how: str = ""):
    c = config
    per_layer = c["kv_lora_rank"] + c["qk_rope_head_dim"]
    if how == "kv twice":
        per_layer = 2 * c["kv_lora_rank"] + c["qk_rope_head_dim"]
    elif how == "rope per head":
        per_layer = c["kv_lora_rank"] + c["num_attention_heads"] * c["qk_rope_head_dim"]
    elif how == "no rope":
        per_layer = c["kv_lora_rank"]
    elif how == "mha":
        per_layer = c["num_attention_heads"] * (
            c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"]
        )
    layers = 1 if how == "no layers" else c["num_hidden_layers"]
    batch = 1 if how == "no batch" else batch_size
    unit = 8 if how == "bits" else 1
    out = int(layers * per_layer * seq_len * batch * bytes_per_value * unit)
    if how and out == _mla_bytes(config, seq_len, batch_size, bytes_per_value):
        raise NotThisMistake  # e.g. "forgot the batch" when batch_size is 1
    return out


_bytes_compare = byte_compare(
    "Every factor is an int; keep it so (no `/`, or int() around the product)."
)


def mla_cache_bytes_from_config(
    config: dict, seq_len: int, batch_size: int = 1, bytes_per_value: int = 2
) -> int:
    return _mla_bytes(config, seq_len, batch_size, bytes_per_value)


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
            Case(
                "a tiny MLA model: 3 layers, 4 heads, d_c=16, d_h^R=4, 5 sequences of 10 "
                "tokens, fp32",
                (_mla_config(3, 64, 4, 16, 4, 10, 10), 10, 5, 4),
            ),
            Case("DeepSeek-V2's config, one token in bf16", (DEEPSEEK_V2_CONFIG, 1, 1, 2)),
        ]
    n = int(rng.integers(1000, 9000))
    return [
        Case("DeepSeek-V2, 128k tokens (131072), bf16", (DEEPSEEK_V2_CONFIG, 131072, 1, 2)),
        Case(
            f"a DeepSeek-V3-like config (61 layers), batch 4, {n} tokens, fp8 (1 byte)",
            (_mla_config(61, 7168, 128, 512, 64), n, 4, 1),
        ),
        Case(
            "16 heads, d_c=256, d_h^R=32, 2 sequences of 512, fp32",
            (_mla_config(12, 1024, 16, 256, 32, 64, 64), 512, 2, 4),
        ),
    ]


register(
    Exercise(
        id="08.5",
        title="the MLA cache of a real config",
        points=1,
        target="mla_cache_bytes_from_config",
        cases=_mla_bytes_cases,
        reference=mla_cache_bytes_from_config,
        atol=0.0,
        rtol=1e-12,
        compare=_bytes_compare,
        mistakes={
            Hint(
                "you counted the latent twice, once for keys and once for values.",
                "One latent c_t serves both: MLA has no factor 2.",
            ): twin(_mla_bytes, how="kv twice"),
            Hint(
                "you cached the RoPE key once per head.",
                "k^R is shared by all heads: qk_rope_head_dim numbers per token and layer.",
            ): twin(_mla_bytes, how="rope per head"),
            Hint(
                "you forgot the decoupled RoPE key.",
                "Each token caches kv_lora_rank + qk_rope_head_dim numbers per layer.",
            ): twin(_mla_bytes, how="no rope"),
            Hint(
                "that is the cache of the same model with plain multi-head attention.",
                "MLA caches only the latent and the RoPE key, not every head's keys and values.",
            ): twin(_mla_bytes, how="mha"),
            Hint(
                "you forgot the layers.",
                "Every layer caches its own latent and RoPE key: multiply by num_hidden_layers.",
            ): twin(_mla_bytes, how="no layers"),
            Hint(
                "you forgot the batch.",
                "Each of the batch_size sequences has its own cache.",
            ): twin(_mla_bytes, how="no batch"),
            Hint(
                "your answer is 8 times too large: that is bits.",
                "bytes_per_value already counts bytes.",
            ): twin(_mla_bytes, how="bits"),
        },
        hint=Hint(
            "count what MLA caches for one token in one layer (which vectors, shared by the "
            "heads or not), then check that every factor of the statement is in.",
            "Per token and layer MLA caches one latent and one RoPE key, shared by all heads. "
            "bytes = num_hidden_layers x (kv_lora_rank + qk_rope_head_dim) x seq_len x "
            "batch_size x bytes_per_value.",
        ),
    )
)


# --------------------------------------------------------------------------- 08.6 absorbed


def _absorbed(q_nope, q_rope, c_kv, k_rope, W_UK, *, scale_dim=None, rope=True, head0=False):
    w = W_UK[:1].expand_as(W_UK) if head0 else W_UK  # (H, d_h, d_c)
    q_lat = torch.einsum("bhqe,hec->bhqc", q_nope, w)  # (B, H, 1, d_c)
    scores = q_lat @ c_kv[:, None].transpose(-2, -1)  # (B, H, 1, N)
    if rope:
        scores = scores + q_rope @ k_rope[:, None].transpose(-2, -1)  # (B, H, 1, N)
    d = q_nope.shape[-1] + q_rope.shape[-1] if scale_dim is None else scale_dim
    return scores / math.sqrt(d) if d else scores


def absorbed_scores_reference(q_nope, q_rope, c_kv, k_rope, W_UK):
    return _absorbed(q_nope, q_rope, c_kv, k_rope, W_UK)  # (B, H, 1, N)


def _absorbed_case(rng, name, b, h, n, head_dim, d_r, d_c):
    return Case(
        name,
        (
            randn(rng, b, h, 1, head_dim),
            randn(rng, b, h, 1, d_r),
            randn(rng, b, n, d_c),
            randn(rng, b, n, d_r),
            randn(rng, h, head_dim, d_c) / math.sqrt(d_c),
        ),
    )


def _absorbed_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _absorbed_case(
                rng, "B=1, 2 heads, 5 cached tokens, d_h=4, d_h^R=2, d_c=6", 1, 2, 5, 4, 2, 6
            ),
            _absorbed_case(
                rng, "B=2, 3 heads, 4 cached tokens, d_h=4, d_h^R=2, d_c=5", 2, 3, 4, 4, 2, 5
            ),
        ]
    return [
        _absorbed_case(rng, "one cached token", 2, 2, 1, 4, 2, 8),
        _absorbed_case(rng, "8 heads, 9 tokens, d_h=8, d_h^R=4, d_c=16", 1, 8, 9, 8, 4, 16),
        _absorbed_case(rng, "d_c smaller than d_h", 2, 4, 6, 8, 2, 3),
    ]


register(
    Exercise(
        id="08.6",
        title="MLA's absorbed scores at decode",
        points=2,
        target="absorbed_scores",
        cases=_absorbed_cases,
        reference=absorbed_scores_reference,
        atol=1e-9,
        rtol=1e-7,
        mistakes={
            Hint(
                "you left out the RoPE part, q^R . k^R.",
                "The score is the sum of the latent part and the rotary part.",
            ): twin(_absorbed, rope=False),
            Hint(
                "you scaled by 1/sqrt(d_h).",
                "MLA's query and key heads have d_h + d_h^R components, so the scale is "
                "1/sqrt(d_h + d_h^R).",
            ): lambda *a: _absorbed(*a, scale_dim=a[0].shape[-1]),
            Hint(
                "you scaled by 1/sqrt(d_c).",
                "The latent is not a head: the scale is 1/sqrt(d_h + d_h^R).",
            ): lambda *a: _absorbed(*a, scale_dim=a[2].shape[-1]),
            Hint(
                "you forgot the scale.",
                "Divide the scores by sqrt(d_h + d_h^R).",
            ): twin(_absorbed, scale_dim=0),
            Hint(
                "you used head 0's W_UK for every head.",
                "Head h needs W_UK[h].",
            ): twin(_absorbed, head0=True),
        },
        errors={
            r"einsum\(\).*does not broadcast": Hint(
                "your einsum's letters do not line up with the shapes: q_nope is "
                "[B, H, 1, d_h] and W_UK is [H, d_h, d_c].",
                "Contract over d_h and keep d_c: einsum('bhqe,hec->bhqc', q_nope, W_UK) gives "
                "[B, H, 1, d_c].",
            ),
        },
        hint=Hint(
            "check which W_UK each head uses, the two parts a score is made of, and the width "
            "the scale uses.",
            "Move each head's query into the latent space with that head's W_UK, then dot it "
            "with every cached latent; add the rotary part; scale. q_lat = "
            "einsum('bhqe,hec->bhqc', q_nope, W_UK); scores = (q_lat @ c_kv[:, "
            "None].transpose(-2, -1) + q_rope @ k_rope[:, None].transpose(-2, -1)) / sqrt(d_h + "
            "d_h^R).",
        ),
    )
)


# --------------------------------------------------------------------------- 08.7 linear step


def _phi(x):
    return F.elu(x) + 1.0


def _lin_step(
    q_t,
    k_t,
    v_t,
    state,
    normalizer,
    *,
    phi=_phi,
    read_first=False,
    norm=True,
    phi_v=False,
    transposed=False,
):
    fq, fk = phi(q_t), phi(k_t)  # (B, H, d_k)
    v = phi(v_t) if phi_v else v_t  # (B, H, d_v)
    new_state = state + fk[..., :, None] * v[..., None, :]  # (B, H, d_k, d_v)
    new_norm = normalizer + fk  # (B, H, d_k)
    s, z = (state, normalizer) if read_first else (new_state, new_norm)
    num = (fq[..., None, :] @ s)[..., 0, :]  # (B, H, d_v)
    out = num / (fq * z).sum(-1, keepdim=True) if norm else num
    if transposed:
        new_state = new_state.transpose(-2, -1)  # (B, H, d_v, d_k)
    return out, new_state, new_norm


def linear_attention_step_reference(q_t, k_t, v_t, state, normalizer):
    return _lin_step(q_t, k_t, v_t, state, normalizer)


def _lin_case(rng, name, b, h, d_k, d_v, steps):
    ks = randn(rng, steps, b, h, d_k)
    vs = randn(rng, steps, b, h, d_v)
    state = (_phi(ks)[..., :, None] * vs[..., None, :]).sum(0)  # (B, H, d_k, d_v)
    normalizer = _phi(ks).sum(0)  # (B, H, d_k)
    return Case(
        name,
        (randn(rng, b, h, d_k), randn(rng, b, h, d_k), randn(rng, b, h, d_v), state, normalizer),
    )


def _lin_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _lin_case(rng, "after 3 tokens: B=1, 2 heads, d_k=4, d_v=3", 1, 2, 4, 3, 3),
            _lin_case(rng, "after 10 tokens: B=2, 3 heads, d_k=5, d_v=6", 2, 3, 5, 6, 10),
        ]
    return [
        _lin_case(rng, "the first token (zero state)", 2, 2, 4, 4, 0),
        _lin_case(rng, "after 50 tokens, d_k=8, d_v=2", 1, 4, 8, 2, 50),
        _lin_case(rng, "one head, d_k=d_v=16, after 7 tokens", 3, 1, 16, 16, 7),
    ]


register(
    Exercise(
        id="08.7",
        title="linear attention's recurrent step",
        points=2,
        target="linear_attention_step",
        cases=_lin_cases,
        reference=linear_attention_step_reference,
        atol=1e-9,
        rtol=1e-7,
        outputs=("output", "state", "normalizer"),
        mistakes={
            Hint(
                "you read the state before adding the new token.",
                "Update S and z first, then compute o_t, so that the token attends to itself "
                "(j <= t).",
            ): twin(_lin_step, read_first=True),
            Hint(
                "you forgot the denominator phi(q)^T z.",
                "Without it the output grows with the number of tokens: divide by "
                "(phi(q) * z).sum(-1, keepdim=True).",
            ): twin(_lin_step, norm=False),
            Hint(
                "you used q and k without the feature map.",
                "phi(x) = elu(x) + 1 keeps every weight phi(q)^T phi(k) positive.",
            ): lambda *a: _lin_step(*a, phi=lambda x: x),
            Hint(
                "your feature map is elu(x), without the + 1: it is negative for x < 0.",
                "phi(x) = elu(x) + 1 > 0, so that every weight phi(q)^T phi(k) is positive.",
            ): twin(_lin_step, phi=F.elu),
            Hint(
                "your feature map is relu(x).",
                "This exercise uses phi(x) = elu(x) + 1 (Katharopoulos et al., 2020): positive "
                "everywhere, where relu is 0 for half of its inputs.",
            ): twin(_lin_step, phi=F.relu),
            Hint(
                "you used exp as the feature map.",
                "This exercise uses phi(x) = elu(x) + 1.",
            ): twin(_lin_step, phi=torch.exp),
            Hint(
                "you applied the feature map to v as well.",
                "Only queries and keys go through phi.",
            ): twin(_lin_step, phi_v=True),
            Hint(
                "your state is transposed, [d_v, d_k] (v phi(k)^T).",
                "The state is S = sum_j phi(k_j) v_j^T of shape [..., d_k, d_v].",
            ): twin(_lin_step, transposed=True),
        },
        errors={
            BROADCAST_ERROR + r" at non-singleton dimension 2": Hint(
                "your numerator [B, H, d_v] and denominator [B, H] do not line up.",
                "Keep the summed axis: (phi(q) * z).sum(-1, keepdim=True) is [B, H, 1].",
            ),
        },
        hint=Hint(
            "check the order (update the state, then read it), the feature map applied to q and "
            "k, and the denominator.",
            "Add this token's phi(k) v^T to the state and phi(k) to the normaliser, then read "
            "both with phi(q). fk = elu(k_t) + 1; state = state + fk[..., :, None] * v_t[..., "
            "None, :]; normalizer = normalizer + fk; o = (fq[..., None, :] @ state)[..., 0, :] / "
            "(fq * normalizer).sum(-1, keepdim=True).",
        ),
    )
)


# --------------------------------------------------------------------------- 08.8 predict, measure


def _skipped(seq_len, window, block, *, elements=False, causal_only=False):
    mask = _causal(seq_len) if causal_only else _window(seq_len, window)  # (N, N)
    if elements:
        return 1.0 - mask.double().mean().item()
    return float((tile_map(mask, block, block) == 0).double().mean())


def skipped_tiles_reference(seq_len: int, window: int, block: int) -> float:
    r"""The fraction of ``block`` x ``block`` tiles a causal sliding-window mask (query
    :math:`i` sees keys :math:`i - w < j \le i`) lets FlexAttention skip entirely."""
    return _skipped(seq_len, window, block)


def _skipped_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            Case("N = 1024, window 128, tiles of 64", (1024, 128, 64)),
            Case("N = 2048, window 256, tiles of 128", (2048, 256, 128)),
            Case("N = 512, window 512 (as causal), tiles of 64", (512, 512, 64)),
        ]
    return [
        Case("N = 1536, window 100, tiles of 64 (a window not a multiple)", (1536, 100, 64)),
        Case("N = 1000, window 64, tiles of 32 (N not a multiple)", (1000, 64, 32)),
        _skipped_drawn(rng),
    ]


def _skipped_drawn(rng: np.random.Generator) -> Case:
    """A length, window and tile size drawn from ``rng`` (the grader's seed)."""
    n = int(rng.integers(128, 1600))
    window, block = int(rng.integers(8, n)), int(rng.choice([16, 32, 64, 128]))
    return Case(f"N = {n}, window {window}, tiles of {block}", (n, window, block))


register(
    Exercise(
        id="08.8",
        title="predict, then measure: how much of the score matrix a sliding window skips",
        points=1,
        target="measure_skipped_tiles",
        cases=_skipped_cases,
        reference=skipped_tiles_reference,
        atol=1e-9,
        rtol=0.0,
        compare=within(1e-9, relative=False),
        measures="the fraction of tiles skipped",
        mistakes={
            Hint(
                "you measured the masked *entries*, not the skipped tiles.",
                "A kernel skips a whole tile only when none of its entries may attend: a tile "
                "the window's edge crosses is computed (and masked) in full. Count tiles with "
                "tile_map(mask, B, B) == 0.",
            ): twin(_skipped, elements=True),
            Hint(
                "your mask is causal only: the window is missing.",
                "Query i sees keys i - window < j <= i: both conditions.",
            ): unless_different(twin(_skipped, causal_only=True), skipped_tiles_reference),
        },
        hint=Hint(
            "check your mask (causal and windowed) and what you count: whole tiles with nothing "
            "to compute, not masked entries.",
            "Build the causal sliding-window mask, classify its tiles, and take the share of "
            "empty ones. i, j = arange(N)[:, None], arange(N)[None, :]; mask = (j <= i) & (i - j "
            "< window); return float((tile_map(mask, block, block) == 0).double().mean()).",
        ),
    )
)
