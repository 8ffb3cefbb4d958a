"""The learner's files: exercise copies in work/, and course updates that never conflict.

Used by tools/bootstrap.py (`make lab`, `make update`, ...); standard library only.

* **work/** holds the learner's copies of the exercise notebooks, named
  ``NN_topic_exercises.ipynb`` so that a lecture's tab and its exercises' tab differ. Git
  ignores work/: nothing there is ever overwritten by an update. A copy the learner has not
  started (its cells as they were copied) follows the course: `make lab` and `make update`
  replace it with the new version of the exercises.
* **make update** brings a new version of the course. JupyterLab saves a notebook as soon as
  it runs (outputs, execution counts, its kernel's name, the Python version), so a plain
  `git pull` refuses to update a lecture the learner opened ("Your local changes ... would
  be overwritten by merge"). `make update` first copies every file that the update changes
  and the learner changed too (a lecture they ran or edited, an exercise opened from
  exercises/) to ``work/backup/<date-time>/``, restores the course's version, then merges:
  nothing the learner made is lost, and the merge cannot conflict. Notebooks the update
  does not change keep their outputs where they are.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

WORK_SUFFIX = "_exercises"

# As JupyterLab writes it (course_tools/notebook_headers.py sets it in every notebook).
COURSE_KERNELSPEC = {
    "display_name": "Python 3 (ipykernel)",
    "language": "python",
    "name": "python3",
}
# What JupyterLab (and its extensions) write into a cell's metadata as view state.
CELL_VIEW_KEYS = ("collapsed", "scrolled", "execution", "ExecuteTime", "jupyter", "trusted")
NOTEBOOK_VIEW_KEYS = ("widgets", "toc", "varInspector", "vscode")


def _lines(source):
    """nbformat stores multi-line text as a list of lines; accept a plain string too."""
    if isinstance(source, str):
        return source.splitlines(True)
    return source


def clean_notebook(nb):
    """The notebook as the course commits it (modified in place and returned)."""
    meta = nb.setdefault("metadata", {})
    spec = meta.get("kernelspec")
    if spec is None or (isinstance(spec, dict) and spec.get("name") in ("python3", None)):
        meta["kernelspec"] = dict(COURSE_KERNELSPEC)
    info = meta.get("language_info")
    if info is None or (isinstance(info, dict) and info.get("name", "python") == "python"):
        meta["language_info"] = {"name": "python"}
    for key in NOTEBOOK_VIEW_KEYS:
        meta.pop(key, None)
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict):
            continue
        if "source" in cell:
            cell["source"] = _lines(cell["source"])
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cmeta = cell.setdefault("metadata", {})
        for key in CELL_VIEW_KEYS:
            cmeta.pop(key, None)
        if cmeta.get("tags") == []:
            del cmeta["tags"]
    return nb


def work_name(assignment: str) -> str:
    """``02_qkv_attention`` -> ``02_qkv_attention_exercises.ipynb``."""
    return f"{assignment}{WORK_SUFFIX}.ipynb"


# --------------------------------------------------------------------------- work/ copies


def fingerprint(nb: dict) -> str:
    """What the learner can change in a copy: its cells (no outputs, no JupyterLab state)."""
    nb = clean_notebook(json.loads(json.dumps(nb)))
    nb.get("metadata", {}).pop("course", None)
    nb["metadata"] = {}  # the kernelspec etc. are not the learner's work
    text = json.dumps(nb, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _copy_with_origin(src: Path, dst: Path) -> None:
    """Copy an exercise notebook into work/, remembering what it was copied from."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    course = nb.setdefault("metadata", {}).setdefault("course", {})
    course["copied_from"] = fingerprint(nb)
    dst.write_text(
        json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def untouched(copy: Path) -> bool:
    """True when a copy's cells are still those it was copied with (outputs do not count)."""
    try:
        nb = json.loads(copy.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    origin = nb.get("metadata", {}).get("course", {}).get("copied_from")
    return origin is not None and fingerprint(nb) == origin


def sync_work(root: Path, out=sys.stdout) -> list[str]:
    """Give the learner a copy of every exercise notebook in work/; returns what changed.

    New chapters get a copy; a copy of the old name (``02_qkv_attention.ipynb``) is renamed;
    a copy the learner has not started follows a changed exercise notebook; a started one is
    never touched (a note says when the course's version changed).
    """
    src_dir, work = root / "exercises", root / "work"
    if not src_dir.is_dir():
        return []
    work.mkdir(exist_ok=True)
    notes = []
    for src in sorted(src_dir.glob("*.ipynb")):
        dst = work / work_name(src.stem)
        old_name = work / src.name
        if not dst.exists() and old_name.exists():
            old_name.rename(dst)
            notes.append(f"renamed work/{src.name} to work/{dst.name}")
        if not dst.exists():
            _copy_with_origin(src, dst)
            notes.append(f"new: work/{dst.name}")
            continue
        fresh = fingerprint(json.loads(src.read_text(encoding="utf-8")))
        try:
            mine = json.loads(dst.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        origin = mine.get("metadata", {}).get("course", {}).get("copied_from")
        if origin == fresh:
            continue
        if untouched(dst):
            _copy_with_origin(src, dst)
            notes.append(f"updated (you had not started it): work/{dst.name}")
        elif origin is not None:
            notes.append(
                f"exercises/{src.name} changed; your work/{dst.name} is kept as it is "
                "(compare the two, or copy your solution cells into a fresh copy)"
            )
    for note in notes:
        print(note, file=out)
    return notes


# --------------------------------------------------------------------------- git


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, encoding="utf-8"
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"`git {' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout}")
    return proc


def is_git_checkout(root: Path) -> bool:
    try:
        return git(root, "rev-parse", "--is-inside-work-tree", check=False).returncode == 0
    except FileNotFoundError:  # no git at all
        return False


def _head_bytes(root: Path, path: str) -> bytes | None:
    proc = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=root, capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


def update(root: Path, out=sys.stdout) -> int:
    """`make update`: bring the course up to date, keeping every file the learner changed."""
    if not is_git_checkout(root):
        print("error: this course folder is not a git clone; download the course again.", file=out)
        return 1
    tracked = git(root, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{u}", check=False)
    if tracked.returncode != 0:
        print(
            "error: this clone follows no remote branch, so there is nothing to update from "
            "(git says: " + tracked.stderr.strip() + ").",
            file=out,
        )
        return 1
    upstream = tracked.stdout.strip()
    print(f"Fetching the course from {upstream} ...", file=out)
    fetched = git(root, "fetch", "--quiet", check=False)
    if fetched.returncode != 0:
        print("error: `git fetch` failed: " + fetched.stderr.strip(), file=out)
        return 1
    before = git(root, "rev-parse", "--short", "HEAD").stdout.strip()
    base = git(root, "merge-base", "HEAD", upstream).stdout.strip()
    incoming = [
        p for p in git(root, "diff", "--name-only", "-z", base, upstream).stdout.split("\0") if p
    ]
    stamp = time.strftime("%Y-%m-%d_%H%M%S")
    backup = root / "work" / "backup" / stamp
    kept = []
    for rel in incoming:
        path = root / rel
        if not path.is_file():
            continue
        committed = _head_bytes(root, rel)
        mine = path.read_bytes()
        if committed is not None and mine == committed:
            continue
        # A notebook that differs only in outputs is kept too: they are the learner's.
        dest = backup / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        kept.append(rel)
        if committed is None:
            path.unlink()  # untracked here, arriving with the update
        else:
            git(root, "checkout", "HEAD", "--", rel)
    merged = git(root, "merge", "--ff-only", "--quiet", upstream, check=False)
    if merged.returncode != 0:
        merged = git(root, "merge", "--no-edit", "--quiet", upstream, check=False)
        if merged.returncode != 0:
            git(root, "merge", "--abort", check=False)
            print(
                "error: your own commits in this clone conflict with the update; git says:\n"
                + merged.stdout
                + merged.stderr,
                file=out,
            )
            return 1
    after = git(root, "rev-parse", "--short", "HEAD").stdout.strip()
    if before == after:
        print("The course was already up to date.", file=out)
    else:
        print(f"Updated the course from {before} to {after}.", file=out)
    if kept:
        print(
            f"Your versions of {len(kept)} file(s) the update replaced are in "
            f"{backup.relative_to(root).as_posix()}/:",
            file=out,
        )
        for rel in kept:
            print(f"  {rel}", file=out)
    sync_work(root, out=out)
    return 0


def submit(root: Path, folder: str | None = None, out=sys.stdout) -> int:
    """Hand in: every exercise copy in work/ that the learner started, copied into
    ``folder`` (``$COURSE_SUBMIT``: on a hub, the learner's own folder of a volume the
    instructor reads, see docs/instructors.md), replacing what was handed in before. A copy
    never started (still as the course made it) is not handed in."""
    import os

    folder = folder or os.environ.get("COURSE_SUBMIT", "")
    if not folder:
        print(
            "no folder to hand in to: this hub sets none (COURSE_SUBMIT); ask your "
            "instructor how to hand in (or download work/*.ipynb)",
            file=out,
        )
        return 2
    dest = Path(folder)
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)  # (classmates cannot read it)
    handed = []
    for copy in sorted((root / "work").glob(f"*{WORK_SUFFIX}.ipynb")):
        if copy.is_symlink() or untouched(copy):
            continue
        partial = dest / f".{copy.name}.part"
        shutil.copyfile(copy, partial)
        partial.replace(dest / copy.name)  # whole or not at all
        handed.append(copy.name)
    if not handed:
        print("nothing to hand in: no exercise copy in work/ has been started", file=out)
        return 1
    print(f"handed in to {dest}: " + ", ".join(handed), file=out)
    return 0


if __name__ == "__main__":  # python tools/learner_files.py update|sync|submit
    ROOT = Path(__file__).resolve().parents[1]
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "update":
        sys.exit(update(ROOT))
    if what == "sync":
        sync_work(ROOT)
        sys.exit(0)
    if what == "submit":
        sys.exit(submit(ROOT))
    sys.exit("usage: python tools/learner_files.py update|sync|submit")
