"""course_lib.gpt.checkpoint: trained models saved as plain tensors and numbers, loaded back
with ``torch.load(weights_only=True)``, and the shipped induction-head checkpoint."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from course_lib.gpt import checkpoint as C
from course_lib.gpt.model import GPT, GPTConfig
from course_lib.gpt.training import History

TINY = GPTConfig(vocab_size=23, seq_len=16, d_model=32, num_layers=2, num_heads=2)


def _model(config: GPTConfig = TINY, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(config).eval()


def _history() -> History:
    return History(
        step=[0, 1],
        train_loss=[3.0, 2.5],
        lr=[1e-3, 1e-3],
        probes=[{"step": 1, "induction": [[0.1, 0.2]]}],
        seconds=1.5,
    )


def test_induction_checkpoint_round_trip(tmp_path):
    m = _model()
    path = C.save_induction_checkpoint({"tiny": (m, _history())}, tmp_path / "c.pt")
    loaded, h = C.load_induction_checkpoint(path)["tiny"]
    assert loaded.config == m.config and not loaded.training
    tokens = torch.randint(0, 23, (2, 6), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loaded(tokens), m(tokens))
    assert h.train_loss == [3.0, 2.5] and h.probes[0]["induction"] == [[0.1, 0.2]]
    assert h.step == [0, 1] and h.lr == pytest.approx([1e-3, 1e-3]) and h.seconds == 1.5
    with pytest.raises(FileNotFoundError, match="make_induction_checkpoint"):
        C.load_induction_checkpoint(tmp_path / "missing.pt")


def test_the_file_holds_plain_tensors_and_numbers_only(tmp_path):
    """Every config field is saved (a non-default one too) and the file opens with
    weights_only=True."""
    m = _model(replace(TINY, positions="learned", num_kv_heads=1, mlp=False))
    path = C.save_induction_checkpoint({"a": (m, _history())}, tmp_path / "deep" / "er" / "c.pt")
    assert path == tmp_path / "deep" / "er" / "c.pt" and path.is_file()  # folders made
    payload = torch.load(path, weights_only=True)
    assert payload["a"]["config"]["positions"] == "learned"
    assert set(payload["a"]["config"]) == set(GPTConfig.__dataclass_fields__)
    assert payload["a"]["history"]["train_loss"].dtype == torch.float32
    loaded, _ = C.load_induction_checkpoint(path)["a"]
    assert loaded.config == m.config and loaded.pos_embed is not None
    for name, value in m.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name


def test_several_models_keep_their_names(tmp_path):
    models = {
        "one": (_model(replace(TINY, num_layers=1)), _history()),
        "two": (_model(), _history()),
    }
    loaded = C.load_induction_checkpoint(C.save_induction_checkpoint(models, tmp_path / "c.pt"))
    assert list(loaded) == ["one", "two"]
    assert [m.config.num_layers for m, _ in loaded.values()] == [1, 2]


def test_the_shipped_checkpoint_is_package_data_with_every_seed():
    assert C.INDUCTION_CHECKPOINT.is_file()
    assert C.INDUCTION_CHECKPOINT.parts[-3:] == ("course_lib", "data", "induction_heads.pt")
    models = C.load_induction_checkpoint()
    for seed in ("", "_seed1", "_seed2"):
        two, h2 = models[f"two_layers{seed}"]
        one, _ = models[f"one_layer{seed}"]
        assert (two.config.num_layers, one.config.num_layers) == (2, 1)
        assert not two.training and len(h2.step) == len(h2.train_loss) > 0
