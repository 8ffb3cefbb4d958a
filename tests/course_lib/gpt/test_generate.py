"""course_lib.gpt.generate: the sampling distribution, one sampled token, the decoding loop
(with and without a KV cache, with a sliding window) and the work each way does."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from gpt_lab import TINY, one_thread  # noqa: F401  (one_thread: an autouse fixture)
from gpt_lab import tiny_model as _model
from gpt_lab import tiny_tokens as _tokens

from course_lib.gpt import generate as G


class Counting:
    """A stub model: the next token is always the last one + 1 (mod V). It records what each
    call is fed (how many tokens, with or without caches, in which mode), so a test can
    check the loop's schedule; it has ``new_caches`` and train/eval, nothing else."""

    def __init__(self, vocab: int = 50) -> None:
        self.vocab, self.training, self.calls, self.caches_made = vocab, True, [], 0

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    def new_caches(self):
        self.caches_made += 1
        return [object()]

    def __call__(self, tokens: torch.Tensor, caches=None) -> torch.Tensor:
        self.calls.append((tokens.shape[1], caches is not None, self.training))
        nxt = (tokens + 1) % self.vocab  # (B, N)
        return 5.0 * torch.nn.functional.one_hot(nxt, self.vocab).float()  # (B, N, V)


# --------------------------------------------------------------------------- sampling


def test_top_k_probs():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 3.0]])
    p = G.top_k_probs(logits, 2)
    assert torch.equal(p > 0, torch.tensor([[True, False, False, False, True]]))
    torch.testing.assert_close(p.sum(-1), torch.ones(1))
    torch.testing.assert_close(p[0, [0, 4]], torch.softmax(torch.tensor([2.0, 3.0]), -1))
    torch.testing.assert_close(G.top_k_probs(logits, None, 0.5), torch.softmax(logits / 0.5, -1))
    torch.testing.assert_close(G.top_k_probs(logits, 99), torch.softmax(logits, -1))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        G.top_k_probs(logits, 2, 0.0)


def test_top_k_probs_works_on_any_leading_shape():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    p = G.top_k_probs(logits, 3, temperature=2.0)
    assert p.shape == (2, 3, 7) and torch.equal((p > 0).sum(-1), torch.full((2, 3), 3))
    kept = torch.topk(logits, 3, dim=-1).indices
    want = torch.softmax(torch.gather(logits, -1, kept) / 2.0, -1)
    torch.testing.assert_close(torch.gather(p, -1, kept), want)


def test_sample_next_greedy_and_top1():
    logits = torch.randn(4, 10)
    greedy = G.sample_next(logits, temperature=0)
    assert greedy.shape == (4, 1) and torch.equal(greedy, logits.argmax(-1, keepdim=True))
    assert torch.equal(G.sample_next(logits, top_k=1), greedy)


def test_sampling_frequencies_follow_the_distribution():
    logits = torch.tensor([[0.0, 1.0, 2.0]]).repeat(4000, 1)
    draws = G.sample_next(logits, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws[:, 0], minlength=3).float() / 4000
    torch.testing.assert_close(freq, torch.softmax(logits[0], -1), atol=0.03, rtol=0)


def test_top_k_sampling_never_leaves_the_top_k():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9, -1.0]]).repeat(2000, 1)
    draws = G.sample_next(logits, top_k=2, generator=torch.Generator().manual_seed(1))
    assert set(draws[:, 0].tolist()) == {1, 3}


# --------------------------------------------------------------------------- the work


def test_positions_computed_is_the_formula():
    assert G.positions_computed(5, 0, False) == G.positions_computed(5, 0, True) == 0
    assert G.positions_computed(1, 100, False) == 100 * 101 // 2
    assert G.positions_computed(4, 3, False) == 4 + 5 + 6
    assert G.positions_computed(4, 3, True) == 4 + 1 + 1


def test_positions_computed_counts_what_the_model_sees():
    m = _model()
    seen = []
    hook = m.embed.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape[1]))
    for use_cache in (True, False):
        seen.clear()
        m.generate(_tokens(1, 5), 7, temperature=0, use_cache=use_cache)
        assert sum(seen) == G.positions_computed(5, 7, use_cache)
    hook.remove()


# --------------------------------------------------------------------------- the loop


def test_the_loop_prefills_once_then_feeds_one_token():
    stub = Counting()
    out = G.generate(stub, torch.tensor([[0, 1]]), 5, temperature=0)
    assert out.tolist() == [[0, 1, 2, 3, 4, 5, 6]]
    assert [c[:2] for c in stub.calls] == [(2, True)] + [(1, True)] * 4
    assert stub.caches_made == 1
    stub = Counting()
    assert torch.equal(
        G.generate(stub, torch.tensor([[0, 1]]), 5, temperature=0, use_cache=False), out
    )
    assert [c[:2] for c in stub.calls] == [
        (2, False),
        (3, False),
        (4, False),
        (5, False),
        (6, False),
    ]
    assert sum(c[0] for c in stub.calls) == G.positions_computed(2, 5, False)


def test_the_loop_runs_in_eval_mode_and_restores_the_mode():
    stub = Counting()
    G.generate(stub, torch.tensor([[3]]), 3, temperature=0)
    assert not any(training for *_, training in stub.calls) and stub.training
    stub.eval()
    G.generate(stub, torch.tensor([[3]]), 1, temperature=0)
    assert not stub.training
    assert G.generate(stub, torch.tensor([[3, 4]]), 0).tolist() == [[3, 4]] and len(stub.calls) == 4


def test_the_window_restarts_from_its_last_half():
    """window=4: when the context would pass 4 tokens, the model restarts from the last 2
    (with a cache: a new prefill, then one token a step)."""
    prompt = torch.tensor([[0, 1]])
    stub = Counting()
    out = G.generate(stub, prompt, 6, temperature=0, use_cache=False, window=4)
    assert out.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert [n for n, *_ in stub.calls] == [2, 3, 4, 2, 3, 4]
    stub = Counting()
    assert torch.equal(G.generate(stub, prompt, 6, temperature=0, window=4), out)
    assert [c[:2] for c in stub.calls] == [
        (2, True),
        (1, True),
        (1, True),
        (2, True),
        (1, True),
        (1, True),
    ]
    assert stub.caches_made == 2


def test_cached_greedy_generation_equals_uncached():
    m = _model()
    prompt = _tokens(2, 4)
    a = m.generate(prompt, 20, temperature=0, use_cache=True)
    b = G.generate(m, prompt, 20, temperature=0, use_cache=False)
    assert a.shape == (2, 24) and torch.equal(a, b) and torch.equal(a[:, :4], prompt)


def test_windowed_generation_is_cached_or_not_the_same_and_stays_in_context():
    m = _model(replace(TINY, positions="learned"))  # learned positions fail past seq_len
    prompt = _tokens(2, 5)
    a = m.generate(prompt, 40, temperature=0, use_cache=True, window=TINY.seq_len)
    b = m.generate(prompt, 40, temperature=0, use_cache=False, window=TINY.seq_len)
    assert a.shape == (2, 45) and torch.equal(a, b)
    with pytest.raises(ValueError, match="learned positions stop at seq_len=16"):
        m.generate(prompt, 40, temperature=0)


def test_sampled_generation_is_reproducible_with_a_generator():
    m = _model()
    prompt = _tokens(1, 3)
    runs = [
        m.generate(
            prompt,
            15,
            temperature=1.0,
            top_k=5,
            use_cache=c,
            generator=torch.Generator().manual_seed(7),
        )
        for c in (True, True, False)
    ]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def test_generation_restores_training_mode():
    m = _model().train()
    m.generate(_tokens(1, 2), 2, temperature=0)
    assert m.training
