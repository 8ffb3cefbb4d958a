"""course_lib.gpt.circuits: the induction circuit read from the weights, and ablations."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib import gpt
from course_lib.gpt import circuits as C


def _tiny(seed: int = 0, **kw) -> gpt.GPT:
    torch.manual_seed(seed)
    cfg = gpt.GPTConfig(vocab_size=11, seq_len=16, d_model=16, num_layers=2, num_heads=4, mlp=False)
    return gpt.GPT(cfg).eval()


def test_composition_score_is_a_normalised_product_norm():
    a = torch.randn(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert C.composition_score(a, torch.eye(8, dtype=torch.float64)) == pytest.approx(
        1 / math.sqrt(8)
    )
    u = torch.zeros(8, 1, dtype=torch.float64)
    u[0] = 1
    aligned, orthogonal = u @ u.T, torch.eye(8, dtype=torch.float64) - u @ u.T
    assert C.composition_score(aligned, aligned) == pytest.approx(1.0)
    assert C.composition_score(aligned, orthogonal) == 0.0  # what one writes the other ignores


def test_circuits_are_the_heads_slices_with_the_norm_folded_in():
    m = _tiny()
    with torch.no_grad():  # a norm that does nothing but centre: gain 1, bias 0
        for block in m.blocks:
            block.ln_1.weight.fill_(1.0)
            block.ln_1.bias.zero_()
    w = C.head_weights(m, 1, 2)
    x = torch.randn(3, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    xc = x - x.mean(-1, keepdim=True)  # centred, as LayerNorm does before dividing
    torch.testing.assert_close(
        x @ C.qk_circuit(m, 1, 2) @ x.T, (xc @ w["W_Q"].T) @ (xc @ w["W_K"].T).T
    )
    torch.testing.assert_close((C.ov_circuit(m, 1, 2) @ x.T).T, xc @ w["W_V"].T @ w["W_O"].T)
    scores = C.composition_scores(m, "k")
    assert scores.shape == (4, 4) and torch.all((scores > 0) & (scores < 1))
    with pytest.raises(ValueError, match="'q', 'k' or 'v'"):
        C.composition_scores(m, "o")
    with pytest.raises(ValueError, match="earlier layer"):
        C.composition_scores(m, writer_layer=1, reader_layer=1)
    with pytest.raises(ValueError, match="head must be in"):
        C.ov_circuit(m, 0, 4)


def test_copying_score_reads_the_sign_of_the_eigenvalues():
    eye = torch.eye(5, dtype=torch.float64)
    assert C.copying_score(eye) == pytest.approx(1.0)
    assert C.copying_score(-eye) == pytest.approx(-1.0)
    assert C.diagonal_accuracy(eye) == 1.0 and C.diagonal_accuracy(-eye) < 1.0


def test_zero_ablation_equals_removing_the_heads_output_weights():
    m = _tiny()
    tokens = torch.randint(0, 11, (2, 16), generator=torch.Generator().manual_seed(2))
    before = m(tokens)
    with C.ablated_heads(m, [(0, 1), (1, 3)], mode="zero"):
        ablated = m(tokens)
    twin = _tiny()
    with torch.no_grad():
        twin.blocks[0].attn.W_O.weight[:, 4:8] = 0  # head 1's columns (d_h = 4)
        twin.blocks[1].attn.W_O.weight[:, 12:16] = 0  # head 3's
    torch.testing.assert_close(ablated, twin(tokens))
    torch.testing.assert_close(m(tokens), before)  # the hooks are gone afterwards
    with pytest.raises(ValueError, match="mode"):
        with C.ablated_heads(m, [(0, 0)], mode="random"):
            pass


def test_mean_ablation_writes_the_heads_average_output():
    m = _tiny()
    tokens = torch.randint(0, 11, (4, 16), generator=torch.Generator().manual_seed(3))
    seen = []
    # a forward hook sees the input W_O was called with, after the ablation's pre-hook
    hook = m.blocks[0].attn.W_O.register_forward_hook(lambda mod, a, out: seen.append(a[0]))
    with C.ablated_heads(m, [(0, 2)]):
        m(tokens)
    m(tokens)
    hook.remove()
    ablated, clean = seen
    part = ablated[..., 8:12]  # (B, N, d_h)
    torch.testing.assert_close(part, clean[..., 8:12].mean(dim=(0, 1)).expand_as(part))
    torch.testing.assert_close(ablated[..., :8], clean[..., :8])


def test_repeat_position_groups_on_a_hand_made_row():
    tokens = torch.tensor([[5, 6, 5, 7, 5, 6, 5, 7]])  # T = 4: token 5 twice in the first copy
    g = C.repeat_position_groups(tokens, 4)
    assert g["first_copy"][0].tolist() == [True, True, True, False, False, False, False]
    assert g["copy_start"][0].tolist() == [False, False, False, True, False, False, False]
    # positions 4..6 hold 5, 6, 5: 5 is repeated in the first copy, 6 is unique
    assert g["unique"][0].tolist() == [False] * 5 + [True, False]
    assert g["repeated"][0].tolist() == [False] * 4 + [True, False, True]
    with pytest.raises(ValueError, match=r"\[B, 2T\]"):
        C.repeat_position_groups(tokens, 3)


def test_the_shipped_models_circuit_over_seeds():
    """Chapter 07's claims about the circuit, on every two-layer model of the checkpoint:
    the induction head's QK circuit matches a key's previous token, its OV circuit copies,
    and mean-ablating the previous-token head raises the loss on the second copy by nats."""
    models = gpt.load_induction_checkpoint()
    names = [n for n in models if n.startswith("two_layers")]
    assert len(names) >= 3  # several seeds
    rep = gpt.repeated_random_tokens(128, 16, 30, generator=torch.Generator().manual_seed(7))
    for name in names:
        m = models[name][0]
        with torch.no_grad():
            _, w = m(rep, need_weights=True)
        prev = int(gpt.previous_token_scores(w[0]).argmax())
        ind = int(gpt.induction_scores(w[1], 16).argmax())
        emb = C.effective_embedding(m, rep)
        assert C.qk_matching_accuracy(m, prev, ind, embedding=emb).min() > 0.9, name
        assert C.copying_score(C.full_ov_circuit(m, 1, ind, emb)) > 0.9, name
        clean = C.induction_losses(m, rep, 16)["unique"]
        with C.ablated_heads(m, [(0, prev)]):
            ablated = C.induction_losses(m, rep, 16)["unique"]
        assert clean < 0.5 and ablated > clean + 2.0, name
