"""The course's own files, fingerprinted: a grading run that finds them changed while it
runs (a learner's code that reached them, an instructor's edit) trusts no grade made since."""

from __future__ import annotations

import hashlib
import site
from pathlib import Path


def _hook_files() -> list[Path]:
    """Files Python runs at every start-up: a kernel that planted one would run code in
    every later worker and kernel."""
    files: list[Path] = []
    for d in sorted({*site.getsitepackages(), site.getusersitepackages()}):
        if Path(d).is_dir():
            files += sorted(Path(d).glob("*.pth"))
            files += [
                Path(d) / n
                for n in ("sitecustomize.py", "usercustomize.py")
                if (Path(d) / n).exists()
            ]
    return files


def course_files(root: Path) -> list[Path]:
    """The files a verdict depends on: every file of the packages ``course_lib`` and
    ``course_tools`` (sources, compiled ``__pycache__/*.pyc``, data: a file planted there
    changes the list), and the course's solution notebooks."""
    import course_lib
    import course_tools

    files: set[Path] = set()
    for init in (course_lib.__file__, course_tools.__file__):
        folder = Path(init).resolve().parent
        files |= {f for f in folder.rglob("*") if f.is_file() or f.is_symlink()}
    files |= set(Path(root).resolve().glob("solutions/*.ipynb"))
    return sorted(files)


def hash_files(paths) -> dict[str, str]:
    out = {}
    for f in paths:
        try:
            out[str(f)] = hashlib.sha256(Path(f).read_bytes()).hexdigest()
        except OSError:
            out[str(f)] = "missing"
    return out


def manifest(root: Path) -> dict[str, str]:
    """sha256 of the course files (:func:`course_files`, listed afresh: a new file counts)
    and of the start-up hooks present now."""
    return hash_files(sorted({*map(str, course_files(root)), *map(str, _hook_files())}))


def changed_files(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
