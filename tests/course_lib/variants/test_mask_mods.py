"""Unit tests of course_lib.variants.mask_mods: masks as functions, checked against the
boolean masks built by hand (attention with them, and FlexAttention: test_flex.py)."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import causal_mask, padding_mask
from course_lib.variants import mask_mods as M

B, H, N = 2, 3, 24


DOC_IDS = torch.stack([M.document_ids([5, 12, 7]), M.document_ids([10, 9], N)])  # (B, N)


def _variants():
    """(name, mask_mod, the explicit boolean mask [B or 1, H or 1, N, N] built by hand)."""
    i = torch.arange(N)[:, None]
    j = torch.arange(N)[None, :]
    same_doc = DOC_IDS[:, :, None] == DOC_IDS[:, None, :]  # (B, N, N)
    prefix = torch.tensor([6, 0])[:, None, None]  # (B, 1, 1)
    return [
        ("causal", M.causal, causal_mask(N)[None, None]),
        ("sliding window 5", M.sliding_window(5), ((j <= i) & (i - j < 5))[None, None]),
        ("padding", M.padding([17, 24]), padding_mask(torch.tensor([17, 24]), N)[:, None]),
        ("document", M.document(DOC_IDS), same_doc[:, None]),
        (
            "document & causal",
            M.and_masks(M.causal, M.document(DOC_IDS)),
            (same_doc & (j <= i))[:, None],
        ),
        ("prefix-LM", M.prefix_lm([6, 0]), ((j < prefix) | (j <= i))[:, None]),
        (
            "causal | padding",
            M.or_masks(M.causal, M.padding([3, 24])),
            ((j <= i)[None] | (j < torch.tensor([3, 24])[:, None, None]))[:, None],
        ),
    ]


VARIANTS = _variants()


@pytest.mark.parametrize("name, mask_mod, explicit", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_materialize_equals_the_mask_built_by_hand(name, mask_mod, explicit):
    got = M.materialize(mask_mod, B, H, N)
    assert got.shape == (B, H, N, N) and got.dtype == torch.bool
    assert torch.equal(got, explicit.expand(B, H, N, N))


def test_document_ids_and_errors():
    assert M.document_ids([3, 2, 4]).tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert M.document_ids([2, 1], 5).tolist() == [0, 0, 1, 2, 2]
    with pytest.raises(ValueError, match="more than seq_len"):
        M.document_ids([3, 4], 5)
    with pytest.raises(ValueError, match="positive integer"):
        M.sliding_window(0)
    with pytest.raises(TypeError, match="integer lengths"):
        M.padding([1.5, 2.0])
    with pytest.raises(ValueError, match=r"\[B, N\]"):
        M.document(torch.zeros(5, dtype=torch.long))


def test_materialize_rejects_a_mask_mod_that_returns_no_boolean():
    with pytest.raises(TypeError, match="boolean tensor"):
        M.materialize(lambda b, h, q, kv: (q - kv).float(), 1, 1, 4)


def test_python_and_instead_of_tensor_and_fails_clearly():
    def bad(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) and (q_idx - kv_idx < 3)

    with pytest.raises(RuntimeError, match="ambiguous"):
        M.materialize(bad, 1, 1, 4)


@pytest.mark.parametrize(
    "mod",
    [
        M.padding([2, 3]),
        M.document(torch.zeros(2, 3, dtype=torch.long)),
        M.prefix_lm([1, 2]),
        M.prefix_lm(1),
    ],
)
def test_mask_mods_follow_the_index_device(mod):
    """Captured tensors move to the indices' device, so a mask built on the CPU works where
    FlexAttention evaluates it on a GPU. The "meta" device stands in for the GPU: mixing a
    CPU tensor into a meta computation raises, as mixing it into a CUDA one would."""
    assert M.materialize(mod, 2, 1, 3, device="meta").device.type == "meta"
