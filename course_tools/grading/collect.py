"""Find the submitted notebooks: files, folders and zip archives (as platforms export them).

Everything is read, nothing is written or extracted: a submission is its bytes plus a
stable, human-readable id that names it in the gradebook and places its feedback file.
An id is the submission's path relative to the folder that holds all the inputs, so
``course-grade class/*/02_qkv_attention.ipynb`` names rows ``alice/02_qkv_attention.ipynb``,
``bob/02_qkv_attention.ipynb``; a folder keeps its own name (``subs/alice.ipynb``) and an
archive's entries are named inside it (``export.zip/bob/01_rnn.ipynb``).
"""

from __future__ import annotations

import functools
import os
import unicodedata
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

# A notebook larger than this is not read (a real exercise notebook is well under 1 MB,
# even with outputs and plots); the submission gets an error row instead.
MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
_SKIP_PARTS = {".ipynb_checkpoints", "__MACOSX", ".git", ".venv", "__pycache__"}


def printable(text: str) -> str:
    """``text`` safe to show on a terminal, in a CSV or Markdown file: control characters
    (ANSI escapes, bell, carriage return), bidirectional overrides and bytes that are not
    UTF-8 (a Linux file name may hold any) become ``?``; newlines and tabs are kept."""
    out = []
    for ch in str(text):
        if ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cs") or ch in _BIDI:
            out.append("?")
        else:
            out.append(ch)
    return "".join(out)


_BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _label(text: str) -> str:
    return printable(text).replace("\n", "?").replace("\t", " ")


@dataclass
class Submission:
    """One submitted notebook: its id in the gradebook, its file name and how to read it.

    The bytes are read when the submission is graded (:meth:`read`), not when it is found,
    so a folder of many large files is never held in memory at once. ``read()`` returns
    None when the file cannot be read; ``problem`` then says why. ``link`` is the target
    when the submission was a symbolic link.
    """

    id: str
    name: str
    _data: bytes | None = None
    problem: str = ""
    loader: Callable[[], bytes] | None = field(default=None, repr=False)
    link: str = ""
    size: int = 0  # bytes on disk (or unpacked, for an archive's entry), when known

    def read(self) -> bytes | None:
        if self.problem:
            return None
        if self.loader is None:
            return self._data
        try:
            return self.loader()
        except Exception as err:  # a file removed or made unreadable since it was found
            self.problem = f"could not read the file: {err}"
            return None

    @property
    def data(self) -> bytes | None:
        return self.read()


def _skip(parts: tuple[str, ...]) -> bool:
    return any(p in _SKIP_PARTS or p.startswith("._") for p in parts)


UP, ROOT = "(up)", "(root)"


def _clean_parts(name: str) -> list[str]:
    """An archive entry's path components, safe to reuse under an output folder: ``..``
    becomes ``(up)`` and a leading ``/`` or drive ``(root)``, so that ``../bob/02.ipynb``
    can never take the id (or the feedback file) of the entry ``bob/02.ipynb``."""
    parts = []
    for p in PurePosixPath(name.replace("\\", "/")).parts:
        if p in ("", "."):
            continue
        if p == "/" or p.endswith(":"):
            parts.append(ROOT)
        elif p == "..":
            parts.append(UP)
        else:
            parts.append(p)
    return parts


def _load_file(path: Path) -> bytes:
    with open(path, "rb") as f:  # read-only: a submission is never modified
        data = f.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise OSError(f"the file grew over the {MAX_NOTEBOOK_BYTES / 2**20:.0f} MB limit")
    return data


def _read_file(path: Path, sub_id: str) -> Submission:
    name = _label(path.name)
    link = str(path.resolve()) if path.is_symlink() else ""
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            return Submission(
                sub_id,
                name,
                None,
                f"the file is {size / 2**20:.0f} MB, over the "
                f"{MAX_NOTEBOOK_BYTES / 2**20:.0f} MB limit",
                link=link,
            )
        if not path.is_file():
            return Submission(sub_id, name, None, "not a regular file", link=link)
    except OSError as err:
        return Submission(sub_id, name, None, f"could not read the file: {err}", link=link)
    return Submission(sub_id, name, loader=lambda: _load_file(path), link=link, size=size)


def _load_member(path: Path, member: str) -> bytes:
    with zipfile.ZipFile(path) as zf, zf.open(member) as f:
        data = f.read(MAX_NOTEBOOK_BYTES + 1)  # bounded: a lying header cannot blow up
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise OSError(f"the file is over the {MAX_NOTEBOOK_BYTES / 2**20:.0f} MB limit")
    return data


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
            sub_id = _label("/".join([prefix, *parts]))
            name = _label(parts[-1])
            if info.file_size > MAX_NOTEBOOK_BYTES:
                out.append(
                    Submission(
                        sub_id,
                        name,
                        None,
                        f"the file is {info.file_size / 2**20:.0f} MB, over "
                        f"the {MAX_NOTEBOOK_BYTES / 2**20:.0f} MB limit",
                    )
                )
                continue
            # read when graded (corrupt member, unsupported compression or a password then
            # give this submission an error row)
            out.append(
                Submission(
                    sub_id,
                    name,
                    loader=functools.partial(_load_member, path, info.filename),
                    size=info.file_size,
                )
            )
    return out


def _prefixes(inputs: Sequence[str | Path]) -> list[str]:
    """Each input's id prefix: its path relative to the folder holding all the inputs."""
    absolute = [os.path.abspath(str(p)) for p in inputs]
    parents = [os.path.dirname(p.rstrip(os.sep)) or os.sep for p in absolute]
    try:
        common = os.path.commonpath(parents) if parents else os.sep
    except ValueError:  # different drives (Windows): keep the paths as given
        return [str(p) for p in inputs]
    out = []
    for p in absolute:
        rel = os.path.relpath(p, common) if p != common else os.path.basename(p)
        out.append(rel.replace(os.sep, "/"))
    return out


def collect(inputs: Sequence[str | Path]) -> list[Submission]:
    """All notebooks under ``inputs`` (files, folders searched recursively, .zip archives).

    Ids are paths relative to the folder that holds every input (see the module's
    docstring); the same file given twice gets `` (2)``. The order is sorted by id, so the
    gradebook's order never depends on the file system.
    """
    found: list[Submission] = []
    for raw, prefix in zip(inputs, _prefixes(inputs)):
        path = Path(raw)
        label = "/".join(_label(p) for p in prefix.split("/") if p not in ("", "."))
        label = label or _label(path.resolve().name or str(path))
        if not path.exists():
            found.append(Submission(_label(str(raw)), path.name, None, "no such file or folder"))
        elif path.is_dir():
            for nb in sorted(path.rglob("*")):
                rel = nb.relative_to(path)
                if _skip(rel.parts) or not nb.is_file():
                    continue
                sub_id = "/".join([label, *map(_label, rel.parts)])
                if nb.suffix == ".ipynb":
                    found.append(_read_file(nb, sub_id))
                elif nb.suffix == ".zip":
                    found.extend(_from_zip(nb, sub_id))
        elif path.suffix == ".zip":
            found.extend(_from_zip(path, label))
        else:
            found.append(_read_file(path, label))
    # ids are unique: the same input twice gets " (2)"; a clean id is never taken by a
    # cleaned one (sorting puts the names as given first)
    found.sort(key=lambda s: s.id)
    seen: set[str] = set()
    for sub in found:
        base, n = sub.id, 1
        while sub.id in seen:
            n += 1
            sub.id = f"{base} ({n})"
        seen.add(sub.id)
    return sorted(found, key=lambda s: s.id)


def snapshot(subs: list[Submission], folder: Path) -> int:
    """Copy every submission's bytes into ``folder`` (the grader's private scratch) before
    any learner code runs, and read them from there: a kernel that overwrites a later
    submission's file changes nothing. Returns the bytes copied."""
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i, sub in enumerate(subs):
        data = sub.read()
        if data is None:
            continue
        path = folder / f"{i:06d}.ipynb"
        path.write_bytes(data)
        path.chmod(0o400)
        total += len(data)
        sub.loader, sub._data = path.read_bytes, None
    return total
