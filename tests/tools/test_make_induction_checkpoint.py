"""tools/make_induction_checkpoint.py: the models' names, the options, and a run whose
training is replaced by a stub (the real recipe takes minutes per model)."""

from __future__ import annotations

import pytest
import torch
from scripts import load_script

from course_lib import gpt

tool = load_script("tools/make_induction_checkpoint.py")


def _tiny(seed: int = 0) -> gpt.GPT:
    torch.manual_seed(seed)
    cfg = gpt.GPTConfig(vocab_size=11, seq_len=16, d_model=16, num_layers=2, num_heads=4, mlp=False)
    return gpt.GPT(cfg).eval()


def _stub(calls: list):
    def fake_train(config, train_config, progress=True):
        calls.append((config.num_layers, train_config.seed))
        history = gpt.History(step=[0], train_loss=[1.0], lr=[0.1], probes=[], seconds=0.0)
        history.probes = [{"second_copy_loss": 1.0, "first_copy_loss": 2.0, "induction": [[0.0]]}]
        return _tiny(), history

    return fake_train


def test_the_checkpoint_tool_names_seeds_and_keeps_what_is_there(tmp_path, monkeypatch):
    """tools/make_induction_checkpoint.py: seed 0 keeps the old names, --add trains only the
    missing models (training replaced by a stub that records its calls)."""
    assert tool.model_name(2, 0) == "two_layers" and tool.model_name(1, 2) == "one_layer_seed2"
    calls = []
    monkeypatch.setattr(tool.gpt, "train_induction_model", _stub(calls))
    out = tmp_path / "c.pt"
    assert tool.main(["--seeds", "0", "--out", str(out)]) == 0
    assert calls == [(2, 0), (1, 0)]
    assert tool.main(["--seeds", "0", "1", "--add", "--out", str(out)]) == 0
    assert calls[2:] == [(2, 1), (1, 1)]  # seed 0 kept, seed 1 trained
    assert sorted(gpt.load_induction_checkpoint(out)) == [
        "one_layer",
        "one_layer_seed1",
        "two_layers",
        "two_layers_seed1",
    ]


def test_only_one_and_two_layers_have_names():
    with pytest.raises(KeyError):
        tool.model_name(3, 0)


def test_by_default_three_seeds_go_to_the_courses_checkpoint(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(tool.gpt, "train_induction_model", _stub(calls))
    saved = []
    real_save = tool.gpt.save_induction_checkpoint

    def save(models, path):
        saved.append(path)
        return real_save(models, tmp_path / "c.pt")  # never the course's own file

    monkeypatch.setattr(tool.gpt, "save_induction_checkpoint", save)
    assert tool.main([]) == 0
    assert calls == [(layers, seed) for seed in tool.SEEDS for layers in (2, 1)]
    assert set(saved) == {gpt.INDUCTION_CHECKPOINT}  # after each model, and at the end
    assert len(saved) == 2 * len(tool.SEEDS) + 1
    out = capsys.readouterr().out
    assert "two_layers: second-copy loss 1.000 (first copy 2.000)" in out
    assert out.rstrip().endswith("6 models)")


def test_add_without_a_checkpoint_trains_everything(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(tool.gpt, "train_induction_model", _stub(calls))
    out = tmp_path / "new.pt"
    assert tool.main(["--seeds", "2", "--add", "--out", str(out)]) == 0
    assert calls == [(2, 2), (1, 2)] and out.is_file()
    assert tool.main(["--seeds", "2", "--add", "--out", str(out)]) == 0
    assert calls == [(2, 2), (1, 2)]  # everything kept: nothing trained
    assert "two_layers_seed2: kept" in capsys.readouterr().out


def test_seeds_must_be_numbers(capsys):
    with pytest.raises(SystemExit):
        tool.main(["--seeds", "one"])
    assert "invalid int value" in capsys.readouterr().err
