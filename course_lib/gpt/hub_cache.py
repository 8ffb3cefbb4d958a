"""Finding a checkpoint's folder: a local folder, or a Hugging Face hub name in the local cache.

Nothing is downloaded unless asked (``download=True``, with a network): the course runs
offline, and a name missing from the cache is an error that says how to get the files.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["checkpoint_folder"]


def checkpoint_folder(name_or_path: str | Path, *, download: bool = False) -> Path:
    """The folder of a checkpoint: a local folder, or a hub name looked up in the local cache.

    With ``download=True`` a hub name missing from the cache is fetched (network needed);
    without it nothing is downloaded and the error says how to get the files.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    name = str(name_or_path)
    if path.exists() or name.count("/") != 1 or name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"no checkpoint folder at {path}")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:  # pragma: no cover - a dependency of transformers
        raise ImportError(
            "finding a hub checkpoint needs huggingface_hub: pip install transformers"
        ) from err
    patterns = ["config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer*"]
    patterns += ["vocab.json", "merges.txt", "special_tokens_map.json"]
    try:
        return Path(snapshot_download(name, allow_patterns=patterns, local_files_only=not download))
    except Exception as err:  # the hub's errors differ by version; all mean "not here"
        if download:
            raise FileNotFoundError(
                f"could not download {name!r} from the Hugging Face hub ({err.__class__.__name__}:"
                f" {err}); check the network, or pass a local folder"
            ) from err
        raise FileNotFoundError(
            f"{name!r} is not in the local Hugging Face cache: pass download=True to fetch it "
            "(needs a network), or a folder holding config.json and model.safetensors"
        ) from err
