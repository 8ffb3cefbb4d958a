"""``make site``: the executed course as a website that works offline.

    python -m course_tools.site                   # every lecture, full budget -> build/site/
    python -m course_tools.site --only 00,02      # some chapters (the test builds these)
    python -m course_tools.site --budget ci       # the short training budget (quicker)

Built with Sphinx, MyST-NB and the Sphinx Book Theme: the Executable Books stack that Jupyter
Book 1 packages, made for books of notebooks. Jupyter Book 2 (MyST's own site generator)
downloads its site theme from the internet at build time; this stack installs entirely from
PyPI and builds with no network. What the site has:

* navigation (chapters in order, lectures then exercises) and full-text search, both working
  from files with no server;
* every lecture **executed** here (outputs, figures), with maths typeset by a bundled MathJax
  and Mermaid diagrams drawn by a bundled Mermaid (both from npm, fetched once into
  ``build/site-assets/``); no page loads anything from the internet (a check after the build
  fails on any external script, style or image);
* interactive widgets shown as **static snapshots** of their state after execution (sliders,
  drop-downs and their plots), with a note to launch the notebook to use them;
* a launch button per page: Colab and Binder (the repository comes from pyproject.toml, as
  for the notebooks' Colab cells), and the course's badge table on the front page.

Execution is cached in ``build/site-cache/`` by the notebook's text, course_lib's code and the
budget: rebuilding after a prose edit executes nothing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

from .course import CourseRootError, course_root
from .links import Links, check_published

NB_VERSION = 4
ASSETS = {  # npm package -> the one file the site needs from it
    "mathjax@3.2.2": ("package/es5/tex-svg-full.js", "mathjax/tex-svg-full.js"),
    "mermaid@11": ("package/dist/mermaid.min.js", "mermaid/mermaid.min.js"),
}
# The docs pages the lectures link to (`../docs/conventions.md`): pages of the site too.
DOCS = ("notation.md", "conventions.md")
CELL_TIMEOUT_S = 600
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
SNAPSHOT_NOTE = (
    "A snapshot of an interactive widget, as it was when the page was built. "
    "Launch the notebook (Colab or Binder, top of the page) to use it."
)
TITLE = "Attention, from RNNs to FlashAttention"


class SiteError(RuntimeError):
    """The site could not be built (the message says why and what to do)."""


# --------------------------------------------------------------------------- bundled assets


def fetch_assets(cache: Path) -> Path:
    """MathJax and Mermaid from npm (once), into ``cache``; returns the folder to serve."""
    static = cache / "static"
    missing = [pkg for pkg, (_, dest) in ASSETS.items() if not (static / dest).exists()]
    if not missing:
        return static
    npm = shutil.which("npm")
    if npm is None:
        raise SiteError(
            "the site bundles MathJax and Mermaid from npm, and `npm` was not found: install "
            "Node.js (Debian/Ubuntu: `sudo apt install npm`; macOS: `brew install node`)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [npm, "pack", "--silent", *missing], cwd=tmp, capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise SiteError(f"`npm pack {' '.join(missing)}` failed:\n{proc.stderr}")
        tarballs = sorted(Path(tmp).glob("*.tgz"))
        for pkg in missing:
            name = pkg.split("@")[0]
            member, dest = ASSETS[pkg]
            tgz = next(t for t in tarballs if re.fullmatch(rf"{name}-[\d.]+\.tgz", t.name))
            with tarfile.open(tgz) as tar:
                f = tar.extractfile(member)
                if f is None:  # a folder or a link, not the file
                    raise SiteError(f"{tgz.name}: {member} is not a regular file")
                data = f.read()
            (static / dest).parent.mkdir(parents=True, exist_ok=True)
            (static / dest).write_bytes(data)
    return static


# --------------------------------------------------------------------------- execution


def _code_hash(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted((root / "course_lib").rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _execute(path: str, budget: str, timeout: int) -> tuple[str, str, float]:
    """Run one notebook in a fresh kernel (in a worker process); returns its JSON."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=NB_VERSION)
    os.environ["COURSE_BUDGET"] = budget
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    t0 = time.monotonic()
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(path).parent)}},
        store_widget_state=True,
        # The kernel's own start-up warnings (e.g. "running over TCP without encryption",
        # about the local connection to this process) are not the course's output.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    client.execute()
    return path, nbformat.writes(nb), time.monotonic() - t0


def execute_all(paths: list[Path], cache: Path, key: str, budget: str, jobs: int, out) -> dict:
    """{path: executed notebook}, from the cache where the notebook and code are unchanged."""
    cache.mkdir(parents=True, exist_ok=True)
    done, todo = {}, []
    for path in paths:
        digest = hashlib.sha256(path.read_bytes() + key.encode()).hexdigest()[:16]
        cached = cache / f"{path.stem}.{digest}.ipynb"
        if cached.exists():
            done[path] = nbformat.read(cached, as_version=NB_VERSION)
        else:
            todo.append((path, cached))
    if todo:
        print(
            f"executing {len(todo)} notebook(s) ({jobs} at a time, budget {budget}) ...", file=out
        )
    env_threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    os.environ.update(env_threads)
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            pool.submit(_execute, str(path), budget, CELL_TIMEOUT_S): (path, cached)
            for path, cached in todo
        }
        for future, (path, cached) in futures.items():
            try:
                _, text, seconds = future.result()
            except Exception as err:
                raise SiteError(f"{path.name} failed to execute: {err}") from None
            print(f"  {path.name}: {seconds:.0f} s", file=out)
            for old in cache.glob(f"{path.stem}.*.ipynb"):
                old.unlink()
            cached.write_text(text, encoding="utf-8")
            done[path] = nbformat.reads(text, as_version=NB_VERSION)
    return done


# --------------------------------------------------------------------------- widgets, statically


def _buffers(model: dict) -> dict:
    """{top-level state key: bytes} of a widget model's binary buffers (an Image's value)."""
    found = {}
    for buf in model.get("buffers", []) or []:
        path = buf.get("path") or []
        if len(path) == 1 and buf.get("encoding", "base64") == "base64":
            found[path[0]] = base64.b64decode(buf.get("data", ""))
    return found


class Snapshot:
    """Static HTML for a widget tree, from the widget state nbclient saved."""

    def __init__(self, state: dict):
        self.models = state

    def render(self, model_id: str, depth: int = 0) -> str:
        model = self.models.get(model_id)
        if model is None or depth > 30:
            return ""
        name = model.get("model_name", "")
        s = model.get("state", {})
        css = " ".join(c for c in s.get("_dom_classes", []) if isinstance(c, str))
        desc = html.escape(str(s.get("description", "") or ""))
        label = f'<span class="snap-label">{desc}</span> ' if desc else ""
        if name in ("VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel"):
            kids = "".join(self.render(ref_id(c), depth + 1) for c in s.get("children", []))
            flow = "row" if name == "HBoxModel" else "column"
            return f'<div class="snap-box {css}" style="display:flex;flex-direction:{flow};gap:6px;flex-wrap:wrap">{kids}</div>'
        if name in ("TabModel", "AccordionModel", "StackModel"):
            titles = s.get("titles") or []
            parts = []
            for i, c in enumerate(s.get("children", [])):
                title = html.escape(str(titles[i])) if i < len(titles) and titles[i] else ""
                head = f"<div class='snap-title'>{title}</div>" if title else ""
                parts.append(head + self.render(ref_id(c), depth + 1))
            return f'<div class="snap-box {css}">{"".join(parts)}</div>'
        if name in ("HTMLModel", "HTMLMathModel"):
            return f'<div class="snap-html {css}">{label}{s.get("value", "")}</div>'
        if name == "LabelModel":
            return f'<span class="snap-text {css}">{html.escape(str(s.get("value", "")))}</span>'
        if name == "ImageModel":
            data = _buffers(model).get("value", b"")
            fmt = html.escape(str(s.get("format", "png")))
            src = f"data:image/{fmt};base64,{base64.b64encode(data).decode()}"
            width = f' width="{html.escape(str(s["width"]))}"' if s.get("width") else ""
            return f'<img class="snap-image {css}" src="{src}"{width} alt="{desc or "plot"}">'
        if name.endswith("SliderModel") and "value" in s:
            value = s["value"]
            shown = value if not isinstance(value, list) else "–".join(map(str, value))
            if isinstance(shown, float):
                shown = f"{shown:.3g}"
            return (
                f'<span class="snap-control {css}">{label}<input type="range" disabled '
                f'min="{s.get("min", 0)}" max="{s.get("max", 100)}" '
                f'value="{value if not isinstance(value, list) else value[0]}"> '
                f"<code>{html.escape(str(shown))}</code></span>"
            )
        if name in ("DropdownModel", "SelectModel", "RadioButtonsModel", "ToggleButtonsModel"):
            labels = s.get("_options_labels", [])
            index = s.get("index")
            chosen = labels[index] if isinstance(index, int) and 0 <= index < len(labels) else ""
            return (
                f'<span class="snap-control {css}">{label}<select disabled>'
                f"<option>{html.escape(str(chosen))}</option></select></span>"
            )
        if name in ("CheckboxModel", "ToggleButtonModel"):
            mark = "☑" if s.get("value") else "☐"
            return f'<span class="snap-control {css}">{mark} {desc}</span>'
        if name == "ButtonModel":
            return f'<button class="snap-control {css}" disabled>{desc}</button>'
        if name in ("TextModel", "IntTextModel", "FloatTextModel", "BoundedIntTextModel"):
            value = html.escape(str(s.get("value", "")))
            return f'<span class="snap-control {css}">{label}<code>{value}</code></span>'
        if name == "OutputModel":
            return "".join(render_output(o) for o in s.get("outputs", []))
        return ""


def ref_id(ref: str) -> str:
    return ref.removeprefix("IPY_MODEL_") if isinstance(ref, str) else ""


def render_output(output: dict) -> str:
    """An Output widget's captured output as HTML (images, HTML, text)."""
    data = output.get("data", {})
    if "image/png" in data:
        return f'<img class="snap-image" src="data:image/png;base64,{data["image/png"]}">'
    if "image/svg+xml" in data:
        svg = data["image/svg+xml"]
        return "".join(svg) if isinstance(svg, list) else svg
    if "text/html" in data:
        value = data["text/html"]
        return "".join(value) if isinstance(value, list) else value
    text = output.get("text") or data.get("text/plain", "")
    text = "".join(text) if isinstance(text, list) else text
    return f"<pre>{html.escape(text)}</pre>" if text else ""


def snapshot_widgets(nb) -> int:
    """Replace every widget view by a static snapshot; drop the widget state. Returns how many."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    snap = Snapshot(state)
    count = 0
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            view = data.get(WIDGET_VIEW)
            if not view:
                continue
            body = snap.render(view.get("model_id", ""))
            data.pop(WIDGET_VIEW)
            if body:
                data["text/html"] = (
                    f'<div class="course-widget-snapshot">{body}'
                    f'<p class="snap-note">{SNAPSHOT_NOTE}</p></div>'
                )
                count += 1
    nb.metadata.pop("widgets", None)
    return count


# --------------------------------------------------------------------------- markdown

_MERMAID = re.compile(r"^```mermaid[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def mermaid_blocks(source: str) -> str:
    """```mermaid fences -> raw HTML that the bundled Mermaid draws in the browser."""
    return _MERMAID.sub(
        lambda m: f'<pre class="mermaid">\n{html.escape(m.group(1).rstrip())}\n</pre>\n', source
    )


def prepare(nb, kind: str, links: Links, path: str) -> nbformat.NotebookNode:
    """A notebook as the site shows it."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = mermaid_blocks(cell.source)
    snapshot_widgets(nb)
    # The Colab cell is for Colab; on the site the launch buttons say the same.
    nb.cells = [c for c in nb.cells if c.get("id") != "course-colab"]
    return nb


# --------------------------------------------------------------------------- the Sphinx project

CONF = """\
# Generated by course_tools/site.py: edit that file, not this one.
project = {title!r}
author = "the course's authors"
extensions = ["myst_nb"]
html_theme = "sphinx_book_theme"
html_title = {title!r}
exclude_patterns = ["_build"]
nb_execution_mode = "off"  # executed by course_tools.site (cached), not here
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "html_image"]
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_js_files = [
    "mermaid/mermaid.min.js",
    "course-mermaid.js",
]
mathjax_path = "mathjax/tex-svg-full.js"  # bundled: no CDN
mathjax3_config = {{"tex": {{"inlineMath": [["$", "$"], ["\\\\(", "\\\\)"]], "processEscapes": True}}}}
nb_ipywidgets_js = {{}}  # widgets are static snapshots: no widget manager from a CDN
html_theme_options = {{
    "repository_url": {repo!r},
    "repository_branch": {branch!r},
    "path_to_docs": "",
    "use_repository_button": True,
    "launch_buttons": {{
        "binderhub_url": "https://mybinder.org",
        "colab_url": "https://colab.research.google.com",
        "notebook_interface": "jupyterlab",
    }},
    "show_toc_level": 2,
    "extra_footer": {footer!r},
}}
html_last_updated_fmt = None
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure", "myst.header"]
"""

# Under every page of the site: what may be reused, and how (LICENSE, LICENSE-CONTENT).
LICENCE_FOOTER = (
    "The course's prose, maths and figures are under the "
    '<a href="https://creativecommons.org/licenses/by/4.0/">Creative Commons Attribution 4.0 '
    "International licence</a> (CC BY 4.0); its code, in the notebooks and the repository, "
    'under the <a href="https://opensource.org/license/mit">MIT License</a>.'
)

CSS = """\
.course-widget-snapshot { border: 1px dashed #999; border-radius: 6px; padding: 8px; margin: 4px 0; }
.course-widget-snapshot .snap-note { font-size: 0.8em; color: #666; margin: 6px 0 0 0; }
.course-widget-snapshot img { max-width: 100%; height: auto; }
.course-widget-snapshot input[type=range] { vertical-align: middle; }
pre.mermaid { background: none; border: none; text-align: center; }
"""

MERMAID_JS = """\
// Draw the course's Mermaid diagrams with the bundled Mermaid (no network).
document.addEventListener("DOMContentLoaded", () => {
  if (window.mermaid) {
    window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
    window.mermaid.run({ querySelector: "pre.mermaid" });
  }
});
"""


def launch_table(links: Links, lectures: list[Path], exercises: list[Path]) -> str:
    """Each chapter's lecture and exercises, to open in Colab or Binder (plain links: badge
    images would be fetched from the internet)."""
    have = {p.stem for p in exercises}
    rows = ["| chapter | lecture | exercises |", "|---|---|---|"]

    def launch(path: str) -> str:  # (a host Colab or Binder cannot open: no such link)
        found = [("Colab", links.colab(path)), ("Binder", links.binder(path))]
        return " · ".join(f"[{name}]({url})" for name, url in found if url)

    for p in lectures:
        cells = [launch(f"notebooks/{p.name}")]
        cells.append(launch(f"exercises/{p.name}") if p.stem in have else "")
        rows.append(f"| [{p.stem}](notebooks/{p.stem}) | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


def index_page(root: Path, links: Links, lectures: list[Path], exercises: list[Path]) -> str:
    toc_docs = "\n".join(f"docs/{Path(d).stem}" for d in DOCS if (root / "docs" / d).exists())
    toc_lect = "\n".join(f"notebooks/{p.stem}" for p in lectures)
    toc_ex = "\n".join(f"exercises/{p.stem}" for p in exercises)
    return f"""# {TITLE}

An open course that builds Transformer self-attention from first principles to a working
FlashAttention kernel in Triton. This site shows every lecture **executed**: the numbers,
plots and diagrams are the ones the notebooks produced when the site was built. To run
them yourself, use the launch buttons at the top of each page (Colab or Binder), or clone
[the repository]({links.repository}) and run `make lab`.

## Open a chapter in Colab or Binder

{launch_table(links, lectures, exercises)}

```{{toctree}}
:caption: Lectures
:maxdepth: 1

{toc_lect}
```

```{{toctree}}
:caption: Exercises
:maxdepth: 1

{toc_ex}
```

```{{toctree}}
:caption: Reference
:maxdepth: 1

{toc_docs}
```

## Licence

The prose, maths and figures of the course are under the
[Creative Commons Attribution 4.0 International licence](https://creativecommons.org/licenses/by/4.0/)
(CC BY 4.0; `LICENSE-CONTENT` in [the repository]({links.repository}) suggests an attribution
line); the code, the notebooks' code cells, `course_lib` and `course_tools`, under the
[MIT License](https://opensource.org/license/mit) (`LICENSE`). To report a way around the
grader's sandbox: `SECURITY.md`, privately, not in a public issue.
"""


def external_references(site: Path) -> list[str]:
    """Scripts, styles, images or fonts a built page would load from another host."""
    bad = []
    pattern = re.compile(
        r"""<(script|link|img|iframe|source)\b[^>]*?\b(src|href)=["'](https?:)?//""", re.I
    )
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8", errors="replace")
        for m in pattern.finditer(text):
            tag = text[m.start() : text.find(">", m.start()) + 1]
            if m.group(1).lower() == "link" and not re.search(
                r"""rel=["'](stylesheet|preload|icon|modulepreload)""", tag
            ):
                continue  # a <link rel="canonical"> or similar, loaded by no one
            bad.append(f"{page.relative_to(site)}: {tag[:200]}")
    for css in site.rglob("*.css"):
        for m in re.finditer(r"url\(\s*['\"]?(https?:)?//[^)]+\)", css.read_text(errors="replace")):
            bad.append(f"{css.relative_to(site)}: {m.group(0)[:200]}")
    return bad


def build(
    root: Path,
    out_dir: Path,
    only: list[str] | None = None,
    budget: str = "full",
    jobs: int = 2,
    out=sys.stdout,
) -> Path:
    """Build the site into ``out_dir``; returns the path of its front page."""
    t0 = time.monotonic()
    links = Links.load(root)
    try:  # the placeholder address: an error on a release build, a warning otherwise
        note = check_published(links, "the website")
    except ValueError as err:
        raise SiteError(str(err)) from None
    if note:
        print(note, file=out)
    build_dir = root / "build"
    static = fetch_assets(build_dir / "site-assets")

    def chosen(folder: str) -> list[Path]:
        paths = sorted((root / folder).glob("*.ipynb"))
        return [p for p in paths if not only or p.name[:2] in only]

    lectures, exercises = chosen("notebooks"), chosen("exercises")
    if not lectures:
        raise SiteError(f"no lecture notebooks selected (only={only})")
    key = f"{budget}:{_code_hash(root)}"
    executed = execute_all(lectures, build_dir / "site-cache", key, budget, jobs, out)

    src = build_dir / "site-src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "_static").mkdir(parents=True)
    shutil.copytree(static, src / "_static", dirs_exist_ok=True)
    (src / "_static" / "course.css").write_text(CSS)
    (src / "_static" / "course-mermaid.js").write_text(MERMAID_JS)
    (src / "conf.py").write_text(
        CONF.format(title=TITLE, repo=links.repository, branch=links.branch, footer=LICENCE_FOOTER)
    )
    (src / "index.md").write_text(index_page(root, links, lectures, exercises))
    for name in DOCS:  # the lectures link to them as ../docs/NAME.md
        if (root / "docs" / name).exists():
            (src / "docs").mkdir(exist_ok=True)
            shutil.copy2(root / "docs" / name, src / "docs" / name)
    for path in lectures:
        nb = prepare(executed[path], "lecture", links, f"notebooks/{path.name}")
        (src / "notebooks").mkdir(exist_ok=True)
        nbformat.write(nb, src / "notebooks" / path.name)
    for path in exercises:
        nb = prepare(nbformat.read(path, as_version=NB_VERSION), "exercise", links, "")
        (src / "exercises").mkdir(exist_ok=True)
        nbformat.write(nb, src / "exercises" / path.name)

    shutil.rmtree(out_dir, ignore_errors=True)
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "1", str(src), str(out_dir)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SiteError(f"sphinx-build failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    warnings = [w for w in proc.stderr.splitlines() if "WARNING" in w or "ERROR" in w]
    for w in warnings[:20]:
        print(f"  sphinx: {w}", file=out)
    bad = external_references(out_dir)
    if bad:
        raise SiteError("the site would load files from the internet:\n  " + "\n  ".join(bad[:20]))
    print(
        f"site: {out_dir / 'index.html'} ({len(lectures)} lectures, {len(exercises)} exercise "
        f"notebooks) in {time.monotonic() - t0:.0f} s",
        file=out,
    )
    return out_dir / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_tools.site", description="Build the course's website."
    )
    parser.add_argument("--course", type=Path, default=None, metavar="ROOT")
    parser.add_argument("--out", type=Path, default=None, help="default: build/site")
    parser.add_argument("--only", default="", help="chapters to include, e.g. 00,02 (default: all)")
    parser.add_argument(
        "--budget",
        choices=("full", "ci"),
        default=os.environ.get("COURSE_BUDGET", "full"),
        help="training budget of the executed notebooks (default: full, as learners run them)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="notebooks executed at once")
    args = parser.parse_args(argv)
    try:
        root = course_root(args.course)
        only = [c.strip() for c in args.only.split(",") if c.strip()] or None
        build(root, args.out or root / "build" / "site", only, args.budget, args.jobs)
    except (CourseRootError, SiteError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
