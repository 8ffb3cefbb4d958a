"""The cells and pointers every notebook shares, kept in step by one command.

    python -m course_tools.notebook_headers --apply   # rewrite notebooks/ and solutions/,
                                                      # then regenerate exercises/
    python -m course_tools.notebook_headers --check   # exit 1 when a notebook is not up to date
    python -m course_tools.notebook_headers --badges  # the README's table of launch badges

What it maintains (and nothing else; every edit is idempotent):

* **The Colab cell**, the first code cell of every notebook (cell id ``course-colab``): on
  Google Colab it clones the course from the repository named in pyproject.toml and installs
  it (``pip install --no-deps -e``: Colab already has torch, numpy, matplotlib, ipywidgets and
  Triton); anywhere else it does nothing. Chapters that want a GPU say how to get one.
* **Pointers from a lecture to its exercises**: in a lecture's markdown, the learner's copy
  is ``work/NN_topic_exercises.ipynb`` (what ``make lab`` makes), not the pristine
  ``exercises/NN_topic.ipynb`` (which is still named where the text speaks of Colab, Binder
  or "a copy of").
* **The notebook metadata** JupyterLab writes (kernel spec, language info, asked of a real
  kernel), so that opening and saving a notebook without running it changes nothing.
* **The README's course map**: its *open* column, each lecture's Colab and Binder badges.
* **The progress cell** at the end of every solutions notebook (cell id ``course-progress``),
  which ``course-exercises`` copies into exercises/: ``progress.show("NN_topic")`` prints
  the chapter's table from the checks the learner ran.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

import nbformat

from .course import CourseRootError, course_root
from .links import Links

NB_VERSION = 4
COLAB_ID = "course-colab"
PROGRESS_ID = "course-progress"
WORK_SUFFIX = "_exercises"  # work/02_qkv_attention_exercises.ipynb: a tab says what it holds

# Chapters that want a GPU runtime on Colab, and why.
GPU_ADVICE = {
    "06": "the Triton kernels then run compiled instead of in the slow CPU interpreter",
}


def work_name(assignment: str) -> str:
    """The learner's copy of an exercise notebook: ``02_qkv_attention_exercises.ipynb``."""
    return f"{assignment}{WORK_SUFFIX}.ipynb"


# --------------------------------------------------------------------------- the Colab cell


def colab_source(links: Links, chapter: str) -> str:
    """The Colab cell's code (ruff-formatted as it stands; a test keeps it so)."""
    folder = "/content/" + links.folder
    lines = [
        "# On Google Colab this cell installs the course (about a minute, once per session).",
        "# Anywhere else it does nothing: `make lab`, conda and Binder have installed it already.",
        "import sys",
        "",
        'if "google.colab" in sys.modules:',
        "    import os",
        "    import subprocess",
        "",
        f'    REPOSITORY = "{links.clone_url}"',
        f'    COURSE = "{folder}"',
        "    if not os.path.isdir(COURSE):",
        '        subprocess.run(["git", "clone", "--depth=1", REPOSITORY, COURSE], check=True)',
        "    subprocess.run(",
        '        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", COURSE],',
        "        check=True,",
        "    )",
        "    if COURSE not in sys.path:",
        "        sys.path.insert(0, COURSE)",
    ]
    why = GPU_ADVICE.get(chapter)
    if why:
        lines += [
            "    import torch",
            "",
            "    if not torch.cuda.is_available():",
            "        print(",
            '            "This Colab runtime has no GPU. Choose Runtime > Change runtime type > "',
            '            "a GPU (T4 is enough), then run this cell again: "',
            f'            "{why}."',
            "        )",
        ]
    return "\n".join(lines)


def _find(nb, cell_id: str):
    for i, cell in enumerate(nb.cells):
        if cell.get("id") == cell_id:
            return i
    return None


def set_colab_cell(nb, source: str) -> None:
    """The Colab cell, just before the first other code cell (inserted or updated)."""
    i = _find(nb, COLAB_ID)
    if i is not None:
        cell = nb.cells.pop(i)
        cell.source = source
    else:
        cell = nbformat.v4.new_code_cell(source)
        cell.id = COLAB_ID
    cell.metadata = {"course": {"role": "colab"}}
    first_code = next((j for j, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, cell)


# --------------------------------------------------------------------------- pointers

# `NN_topic` is how the text speaks of every chapter at once.
_EXERCISES = re.compile(r"`exercises/((?:\d\d|NN)_[a-z0-9_]+?)\.ipynb`")
_OLD_WORK = re.compile(r"`work/((?:\d\d|NN)_[a-z0-9_]+?)(?<!" + WORK_SUFFIX + r")\.ipynb`")
# Where the text means the pristine notebook, it keeps naming it.
_KEEP = re.compile(r"(copy of|colab|binder)(\W+\w+){0,2}\W*$", re.IGNORECASE)


def rewrite_pointers(text: str) -> str:
    """Point a lecture's mentions of an exercise notebook at the learner's copy in work/."""
    text = _OLD_WORK.sub(lambda m: f"`work/{work_name(m.group(1))}`", text)

    def exercise(m: re.Match) -> str:
        before = text[max(0, m.start() - 30) : m.start()]
        if _KEEP.search(before.replace("\n", " ")):
            return m.group(0)
        return f"`work/{work_name(m.group(1))}`"

    return _EXERCISES.sub(exercise, text)


# --------------------------------------------------------------------------- progress


def progress_source(assignment: str) -> str:
    return "\n".join(
        [
            "# Where you stand in this chapter, from the checks you ran above. For the whole",
            "# course, from your copies in work/: `make progress` in a terminal, or",
            "# `progress.show()` in any notebook.",
            "from course_lib import progress",
            "",
            f'progress.show("{assignment}")',
        ]
    )


def set_progress_cell(nb, assignment: str) -> None:
    """The progress cell, last in the notebook (appended or updated)."""
    i = _find(nb, PROGRESS_ID)
    if i is not None:
        cell = nb.cells.pop(i)
        cell.source = progress_source(assignment)
    else:
        cell = nbformat.v4.new_code_cell(progress_source(assignment))
        cell.id = PROGRESS_ID
    cell.metadata = {"course": {"role": "progress"}}
    nb.cells.append(cell)


# --------------------------------------------------------------------------- the whole course


# --------------------------------------------------------------------------- metadata

KERNEL = "python3"


@functools.cache
def lab_metadata(kernel: str = KERNEL) -> dict:
    """The notebook metadata JupyterLab writes when it opens a notebook with ``kernel``: the
    kernel spec as the kernel spec manager names it ("Python 3 (ipykernel)") and the
    language info the kernel itself reports (a kernel is started once to ask it)."""
    import subprocess

    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import start_new_kernel

    spec = KernelSpecManager().get_kernel_spec(kernel)
    km, kc = start_new_kernel(kernel_name=kernel, startup_timeout=120, stderr=subprocess.DEVNULL)
    try:
        msg_id = kc.kernel_info()
        while True:
            reply = kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        info = dict(reply["content"]["language_info"])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return {
        "kernelspec": {
            "display_name": spec.display_name,
            "language": spec.language,
            "name": kernel,
        },
        "language_info": info,
    }


def set_lab_metadata(nb, meta: dict) -> None:
    """Make ``nb``'s kernel spec and language info what JupyterLab writes, so that opening
    and saving it changes nothing. A Python version already there is kept (the one the
    course is tested with), so that running this on another Python rewrites nothing."""
    info = dict(meta["language_info"])
    old = nb.metadata.get("language_info") or {}
    if isinstance(old, dict) and old.get("version"):
        info["version"] = old["version"]
    nb.metadata["kernelspec"] = dict(meta["kernelspec"])
    nb.metadata["language_info"] = info


def updated(nb, kind: str, assignment: str, links: Links, meta: dict | None = None):
    """A copy of ``nb`` with the course-wide cells as they should be (kind: lecture|solution)
    and, given ``meta`` (:func:`lab_metadata`), JupyterLab's notebook metadata."""
    import copy

    nb = copy.deepcopy(nb)
    if meta is not None:
        set_lab_metadata(nb, meta)
    set_colab_cell(nb, colab_source(links, assignment[:2]))
    if kind == "lecture":
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = rewrite_pointers(cell.source)
    else:
        set_progress_cell(nb, assignment)
    return nb


def _dump(nb) -> str:
    text = nbformat.writes(nb, version=NB_VERSION)
    return text if text.endswith("\n") else text + "\n"


def targets(root: Path) -> list[tuple[Path, str]]:
    found = [(p, "lecture") for p in sorted((root / "notebooks").glob("*.ipynb"))]
    return found + [(p, "solution") for p in sorted((root / "solutions").glob("*.ipynb"))]


def run(root: Path, apply: bool, out=sys.stdout) -> list[str]:
    """Files that are (check) or were (apply) out of date. With apply, exercises/ follows."""
    links = Links.load(root)
    meta = lab_metadata()
    stale = []
    for path, kind in targets(root):
        old = path.read_text(encoding="utf-8")
        nb = nbformat.reads(old, as_version=NB_VERSION)
        new = _dump(updated(nb, kind, path.stem, links, meta))
        if new != old:
            stale.append(str(path.relative_to(root)))
            if apply:
                path.write_text(new, encoding="utf-8")
    for s in stale:
        print(("updated: " if apply else "not up to date: ") + s, file=out)
    if apply and stale:
        from .exercises import generate

        generate(root, out=out)
    if not stale:
        print("every notebook's course-wide cells are up to date", file=out)
    return stale


def badge_table(root: Path) -> str:
    """Markdown: one row per chapter with its Colab and Binder badges (lecture, exercises)."""
    links = Links.load(root)
    rows = ["| # | lecture | exercises |", "|---|---|---|"]
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        lecture = f"notebooks/{path.name}"
        exercises = f"exercises/{path.name}"
        ex_cell = (
            f"{links.colab_badge(exercises)} {links.binder_badge(exercises)}"
            if (root / exercises).exists()
            else ""
        )
        rows.append(
            f"| {path.name[:2]} | {links.colab_badge(lecture)} {links.binder_badge(lecture)} "
            f"| {ex_cell} |"
        )
    return "\n".join(rows)


# --------------------------------------------------------------------------- the README

# A row of the README's course map: | NN | [title](notebooks/NN_topic.ipynb) | ... |
_MAP_ROW = re.compile(r"^\| (\d\d) \| \[[^\]]*\]\((notebooks/\d\d_[a-z0-9_]+\.ipynb)\) \|")
# The Quick start's clone line and the cd after it.
_CLONE = re.compile(r"^git clone https://github\.com/\S+\.git\ncd \S+\n", re.M)


def readme_text(text: str, links: Links) -> str:
    """The README with its course map's *open* column (Colab and Binder badges of each
    lecture) derived from the course's address."""
    text = _CLONE.sub(f"git clone {links.clone_url}\ncd {links.folder}\n", text)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = _MAP_ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        badges = f"{links.colab_badge(m.group(2))} {links.binder_badge(m.group(2))}"
        if "badge" in cells[-1]:  # the open column is the last one
            cells = cells[:-1]
        cells = cells + [badges]
        lines[i] = "| " + " | ".join(cells) + " |"
    return "\n".join(lines)


def update_readme(root: Path, apply: bool, out=sys.stdout) -> bool:
    """Whether README.md's course-map badges were (apply) or are (check) out of date."""
    path = root / "README.md"
    if not path.exists():
        return False
    old = path.read_text(encoding="utf-8")
    new = readme_text(old, Links.load(root))
    if new == old:
        return False
    if apply:
        path.write_text(new, encoding="utf-8")
    print(
        ("updated: " if apply else "not up to date: ") + "README.md (course map badges)", file=out
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.notebook_headers",
        description="Keep the course-wide cells of every notebook in step (Colab cell, "
        "pointers to work/, progress cell).",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--apply", action="store_true", help="rewrite what is out of date")
    what.add_argument("--check", action="store_true", help="exit 1 if anything is out of date")
    what.add_argument("--badges", action="store_true", help="print the README's badge table")
    parser.add_argument("--course", type=Path, default=None, metavar="ROOT")
    args = parser.parse_args(argv)
    try:
        root = course_root(args.course)
    except CourseRootError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.badges:
        print(badge_table(root))
        return 0
    stale = run(root, apply=args.apply)
    if update_readme(root, apply=args.apply):
        stale.append("README.md")
    if args.check and stale:
        print(
            "run `python -m course_tools.notebook_headers --apply` and commit the result",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
