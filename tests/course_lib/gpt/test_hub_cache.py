"""course_lib.gpt.hub_cache: a local folder as it is, a hub name only from the local cache."""

from __future__ import annotations

import pytest

from course_lib.gpt import hub_cache as P


def test_a_local_folder_is_returned_and_a_missing_path_named(tmp_path):
    assert P.checkpoint_folder(tmp_path) == tmp_path
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        P.checkpoint_folder(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        P.checkpoint_folder("./relative/name")


def test_a_hub_name_missing_from_the_cache_is_not_downloaded(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="not in the local Hugging Face cache.*download"):
        P.checkpoint_folder("nobody-here/no-such-model")
