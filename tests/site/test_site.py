"""The course's website (`make site`), checked as a reader sees it: in Chromium, offline.

To keep `make test` short this builds two chapters (00 and 02, which have a figure, maths, the
Mermaid diagram and widgets) with the CI training budget; `make site` builds them all with the
learners' budget. The built pages are served from 127.0.0.1 and every request the browser
makes is recorded: none may leave the machine. The test at the bottom (the Makefile's
target) needs no browser; the parts of course_tools/site.py are tested without one in
tests/course_tools/test_site.py.
"""

from __future__ import annotations

import functools
import http.server
import io
import shutil
import threading
from pathlib import Path

import pytest
from course_lab import ROOT

from course_tools import site as S

SITE_CHAPTERS = ["00", "02"]


def _need(what: str) -> None:
    from browser_lab import _missing

    _missing(what)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    for module in ("sphinx", "myst_nb", "sphinx_book_theme"):
        try:
            __import__(module)
        except ImportError:
            _need(f"`{module}` is not installed (the `site` extra: `pip install -e .[site]`)")
    if shutil.which("npm") is None and not (ROOT / "build" / "site-assets" / "static").exists():
        _need("`npm` is not installed (the site bundles MathJax and Mermaid from npm)")
    out = tmp_path_factory.mktemp("site") / "html"
    said = io.StringIO()
    S.build(ROOT, out, only=SITE_CHAPTERS, budget="ci", jobs=2, out=said)
    print(said.getvalue())
    return out


@pytest.fixture(scope="module")
def served(built):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(built))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


class Reader:
    """A Chromium page that records every request and refuses those that leave the machine."""

    def __init__(self, browser, base: str):
        self.base = base
        self.context = browser.new_context(viewport={"width": 1300, "height": 900})
        self.requests: list[str] = []
        self.errors: list[str] = []

        def route(r):
            url = r.request.url
            self.requests.append(url)
            if url.startswith(base) or url.startswith(("data:", "blob:")):
                r.continue_()
            else:
                r.abort()

        self.context.route("**/*", route)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str):
        self.page.goto(self.base + path)
        self.page.wait_for_load_state("load")
        return self.page

    def left_the_machine(self) -> list[str]:
        return [u for u in self.requests if not u.startswith((self.base, "data:", "blob:"))]


@pytest.fixture(scope="module")
def reader(served):
    from browser_lab import launched_chromium

    with launched_chromium(_need) as browser:
        r = Reader(browser, served)
        try:
            yield r
        finally:
            r.context.close()


@pytest.mark.browser
@pytest.mark.slow
def test_front_page_navigates_and_launches(reader):
    page = reader.open("index.html")
    nav = page.locator("nav.bd-docs-nav a.reference.internal").all_text_contents()
    assert any(t.startswith("00") for t in nav) and any(t.startswith("02") for t in nav), nav
    colab = page.locator("a[href^='https://colab.research.google.com/github/']")
    binder = page.locator("a[href^='https://mybinder.org/v2/gh/']")
    assert colab.count() >= 4 and binder.count() >= 4  # lecture and exercises per chapter
    assert reader.left_the_machine() == []


@pytest.mark.browser
@pytest.mark.slow
def test_every_page_states_the_licences_in_its_footer(reader):
    for path in ("index.html", "notebooks/00_setup.html"):
        footer = reader.open(path).locator("footer").all_text_contents()
        text = " ".join(footer)
        assert "Creative Commons Attribution 4.0" in text and "MIT License" in text, (path, text)


@pytest.mark.browser
@pytest.mark.slow
def test_the_docs_pages_lectures_link_to_are_pages_of_the_site(reader):
    """Lectures 04 and 05 link to ../docs/conventions.md: a page of the site, in its nav."""
    for name in S.DOCS:
        page = reader.open(f"docs/{Path(name).stem}.html")
        assert page.locator("article h1").count() >= 1, name
    nav = reader.open("index.html").locator("nav.bd-docs-nav a.reference.internal")
    assert any("onvention" in t for t in nav.all_text_contents())
    assert reader.left_the_machine() == []


@pytest.mark.browser
@pytest.mark.slow
def test_lecture_page_renders_offline(reader):
    page = reader.open("notebooks/02_qkv_attention.html")
    # Maths typeset by the bundled MathJax (SVG output).
    page.wait_for_function(
        "() => document.querySelectorAll('mjx-container svg').length > 20", timeout=60_000
    )
    raw = page.evaluate(
        "() => [...document.querySelectorAll('article p')].filter(p => "
        "/\\$[^$]+\\$/.test(p.textContent)).length"
    )
    assert raw == 0, "paragraphs still show raw $...$"
    # The Mermaid diagram drawn by the bundled Mermaid.
    page.wait_for_function(
        "() => document.querySelector('pre.mermaid svg') !== null", timeout=60_000
    )
    diagram = page.locator("pre.mermaid svg").first
    diagram.scroll_into_view_if_needed()
    assert diagram.locator("g.node").count() >= 5, "the diagram has no nodes"
    assert "softmax" in diagram.text_content()
    box = diagram.bounding_box()
    assert box and box["width"] > 200 and box["height"] > 50, box
    # Figures: the executed notebook's plots, as image files of the site.
    figures = page.locator("div.cell_output img")
    assert figures.count() >= 3
    assert page.evaluate(
        "() => [...document.querySelectorAll('div.cell_output img')]"
        ".every(i => i.complete && i.naturalWidth > 50)"
    ), "a figure did not load"
    # The attention explorer as a static snapshot: controls and its plot.
    snap = page.locator(".course-widget-snapshot:has(.attention-explorer)").first
    assert snap.count() == 1
    assert snap.locator("select").count() >= 2 and snap.locator("img").count() >= 1
    # A launch button per page, to this notebook.
    html = page.content()
    assert "colab.research.google.com/github/" in html
    assert "blob/main/notebooks/02_qkv_attention.ipynb" in html
    assert "urlpath=lab/tree/notebooks/02_qkv_attention.ipynb" in html
    shots = ROOT / "test-output" / "site"
    shots.mkdir(parents=True, exist_ok=True)
    diagram.screenshot(path=str(shots / "02-mermaid.png"))
    snap.screenshot(path=str(shots / "02-explorer-snapshot.png"))
    assert reader.errors == [], reader.errors
    assert reader.left_the_machine() == [], reader.left_the_machine()


@pytest.mark.browser
@pytest.mark.slow
def test_search_finds_a_lecture(reader):
    page = reader.open("search.html?q=softmax")
    page.wait_for_function(
        "() => document.querySelectorAll('#search-results li').length > 0", timeout=60_000
    )
    hits = page.locator("#search-results li a").all_text_contents()
    assert any("02" in h or "Queries" in h for h in hits), hits
    assert reader.left_the_machine() == []


# -- the parts, without a browser ----------------------------------------------------------


def test_make_site_is_wired():
    make = (ROOT / "Makefile").read_text()
    assert "\nsite:" in make and "$(BOOT) site" in make
    assert "\nhtml: site" in make, "make html is retired in favour of make site"
