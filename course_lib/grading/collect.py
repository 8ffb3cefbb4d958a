"""Find the submitted notebooks: files, folders and zip archives (as platforms export them).

Everything is read, nothing is written or extracted: a submission is its bytes plus a
stable, human-readable id (``folder/alice/00_setup.ipynb``, ``export.zip/bob/01_rnn.ipynb``)
that names it in the gradebook and places its feedback file.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# A notebook larger than this is not read (a real exercise notebook is well under 1 MB,
# even with outputs and plots); the submission gets an error row instead.
MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
_SKIP_PARTS = {".ipynb_checkpoints", "__MACOSX", ".git", ".venv", "__pycache__"}


@dataclass
class Submission:
    """One submitted notebook: its id in the gradebook, its file name and its bytes.

    ``data`` is None when the file could not be read; ``problem`` then says why.
    """

    id: str
    name: str
    data: bytes | None
    problem: str = ""


def _skip(parts: tuple[str, ...]) -> bool:
    return any(p in _SKIP_PARTS or p.startswith("._") for p in parts)


def _clean_parts(name: str) -> list[str]:
    """Path components that are safe to reuse under an output folder (no '..', no root)."""
    parts = []
    for p in PurePosixPath(name.replace("\\", "/")).parts:
        if p in ("", ".", "..", "/") or p.endswith(":"):
            continue
        parts.append(p)
    return parts


def _read_file(path: Path, sub_id: str) -> Submission:
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            return Submission(sub_id, path.name, None,
                              f"the file is {size / 2**20:.0f} MB, over the "
                              f"{MAX_NOTEBOOK_BYTES / 2**20:.0f} MB limit")
        with open(path, "rb") as f:  # read-only: a submission is never modified
            return Submission(sub_id, path.name, f.read())
    except OSError as err:
        return Submission(sub_id, path.name, None, f"could not read the file: {err}")


def _from_zip(path: Path, prefix: str) -> list[Submission]:
    out: list[Submission] = []
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as err:
        return [Submission(prefix, path.name, None, f"not a readable zip archive: {err}")]
    with zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            parts = _clean_parts(info.filename)
            if info.is_dir() or not parts or not parts[-1].endswith(".ipynb"):
                continue
            if _skip(tuple(parts)):
                continue
            sub_id = "/".join([prefix, *parts])
            if info.file_size > MAX_NOTEBOOK_BYTES:
                out.append(Submission(sub_id, parts[-1], None,
                                      f"the file is {info.file_size / 2**20:.0f} MB, over "
                                      f"the {MAX_NOTEBOOK_BYTES / 2**20:.0f} MB limit"))
                continue
            try:
                with zf.open(info) as f:  # bounded read: a lying header cannot blow up
                    data = f.read(MAX_NOTEBOOK_BYTES + 1)
            except Exception as err:  # corrupt member, unsupported compression, password
                out.append(Submission(sub_id, parts[-1], None,
                                      f"could not read it from the zip archive: {err}"))
                continue
            if len(data) > MAX_NOTEBOOK_BYTES:
                out.append(Submission(sub_id, parts[-1], None, "the file is over the "
                                      f"{MAX_NOTEBOOK_BYTES / 2**20:.0f} MB limit"))
                continue
            out.append(Submission(sub_id, parts[-1], data))
    return out


def collect(inputs: list[str | Path]) -> list[Submission]:
    """All notebooks under ``inputs`` (files, folders searched recursively, .zip archives).

    Ids are ``<input name>/<path inside it>`` for folders and zips and the file name for a
    single notebook; a clash gets a `` (2)`` suffix. The order is sorted by id, so the
    gradebook's order never depends on the file system.
    """
    found: list[Submission] = []
    for raw in inputs:
        path = Path(raw)
        label = path.name or path.resolve().name or str(path)
        if not path.exists():
            found.append(Submission(str(raw), label, None, "no such file or folder"))
        elif path.is_dir():
            for nb in sorted(path.rglob("*")):
                rel = nb.relative_to(path)
                if _skip(rel.parts) or not nb.is_file():
                    continue
                if nb.suffix == ".ipynb":
                    found.append(_read_file(nb, "/".join([label, *rel.parts])))
                elif nb.suffix == ".zip":
                    found.extend(_from_zip(nb, "/".join([label, *rel.parts])))
        elif path.suffix == ".zip":
            found.extend(_from_zip(path, label))
        else:
            found.append(_read_file(path, label))
    seen: dict[str, int] = {}
    for sub in found:
        n = seen.get(sub.id, 0) + 1
        seen[sub.id] = n
        if n > 1:
            sub.id = f"{sub.id} ({n})"
    return sorted(found, key=lambda s: s.id)
