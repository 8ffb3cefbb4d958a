"""The course as a learner sees it: JupyterLab in headless Chromium, driven by Playwright.

nbval proves that the kernels run; these tests prove that something shows up on screen.
For each notebook: open it in the course's JupyterLab (started by tests/support/course_lab.py with
the course's own settings), Run All Cells from the menu, wait for the kernel, then check
that no cell shows an error, that the browser console stayed clean, that no dialog or
pop-up appeared, and that the chapter's widget renders and redraws when a learner moves
its controls. Screenshots land in test-output/browser/.

Needs Chromium and the `playwright` Python package. Without them these tests skip, with a
message saying how to enable them; in CI (COURSE_REQUIRE_BROWSER=1, set by .ci/run) a
missing browser is a failure. The browser is Chromium from the system (Debian's
`chromium`), so no `playwright install` download is needed; set COURSE_CHROMIUM to use
another Chromium or Chrome binary.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
import urllib.parse
from pathlib import Path

import pytest
from course_lab import ROOT, running_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SHOTS = ROOT / "test-output" / "browser"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
KERNEL_START_S = 120  # opening a notebook starts a kernel: slow on a busy 2-core machine
RUN_ALL_S = 300  # a chapter notebook: ~25 s headless, more in a browser on 2 shared cores
REDRAW_S = 60  # a widget callback round trip through the kernel

# Console errors that are not the course's fault: (pattern, why it is benign). None seen so
# far with the course's settings (no news or update fetches, which would fail offline).
BENIGN_CONSOLE: list[tuple[re.Pattern, str]] = []

KERNEL_IDLE_JS = """() => {
    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
    if (!panel || !panel.querySelector('.jp-Cell')) return false;
    const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
    if (!ind || ind.dataset.status !== 'idle') return false;
    return [...document.querySelectorAll('#jp-main-statusbar .jp-StatusBar-TextItem')]
        .some(e => /\\|\\s*Idle\\s*$/.test(e.textContent) && !/No Kernel/.test(e.textContent));
}"""


# -- the browser ----------------------------------------------------------------------------


def _missing(what: str) -> None:
    how = (
        "To run the browser tests: install the test extra (`make test` does; or "
        "`.venv/bin/pip install playwright`) and Chromium (Debian/Ubuntu: `sudo apt "
        "install chromium`; macOS: Google Chrome; or set COURSE_CHROMIUM=/path/to/chrome; "
        "or `.venv/bin/python -m playwright install chromium`)."
    )
    if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
        pytest.fail(
            f"{what}, but COURSE_REQUIRE_BROWSER=1 (CI) needs the browser tests. {how}",
            pytrace=False,
        )
    pytest.skip(f"{what}. {how}")


MAC_BROWSERS = [
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
]


def find_chromium(playwright=None) -> str | None:
    """COURSE_CHROMIUM, else a Chromium or Chrome on PATH or in /Applications, else the
    browser `python -m playwright install chromium` downloaded, if any."""
    for candidate in (
        os.environ.get("COURSE_CHROMIUM"),
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ):
        if candidate and (path := shutil.which(candidate)):
            return path
    for path in MAC_BROWSERS:
        if os.path.exists(path):
            return path
    if playwright is not None:
        with contextlib.suppress(Exception):
            path = playwright.chromium.executable_path
            if path and os.path.exists(path):
                return path
    return None


@contextlib.contextmanager
def launched_chromium(missing=None, **launch):
    """Chromium (Debian's where installed) under Playwright, with the course's flags; what is
    missing goes to ``missing`` (skip here, fail in CI). The one launcher of every browser test."""
    missing = missing or _missing
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the Python package `playwright` is not installed")
    with sync_playwright() as p:
        executable = find_chromium(p)
        if executable is None:
            missing(
                "no Chromium found (looked for COURSE_CHROMIUM, chromium, "
                "chromium-browser, google-chrome)"
            )
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, **launch)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def browser():
    with launched_chromium(headless=True) as b:
        yield b


@pytest.fixture(scope="module")
def lab(browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.png"):  # screenshots of this run only
        old.unlink()
    # The course's settings, plus one thing only the test needs: no autosave, so the
    # executed notebooks (with outputs) are never written back into the repository.
    overrides = {"@jupyterlab/docmanager-extension:plugin": {"autosave": False}}
    with running_lab(settings_overrides=overrides, log_dir=SHOTS) as server:
        yield server


# -- one notebook in the browser ------------------------------------------------------------


class NotebookPage:
    """A notebook opened in JupyterLab, with what the learner would see checked."""

    def __init__(self, browser, lab, path: str):
        self.path, self.lab = path, lab
        self.name = Path(path).stem
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.console: list[str] = []
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))

    def _on_console(self, msg) -> None:
        if msg.type == "error":
            self.console.append(f"console.error: {msg.text} ({msg.location.get('url', '')})")

    # The open notebook's panel: everything below is looked up inside it.
    @property
    def panel(self):
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").first

    def shot(self, what: str, locator=None) -> Path:
        path = SHOTS / f"{self.name}-{what}.png"
        (locator or self.page).screenshot(path=str(path))
        return path

    def open(self) -> None:
        # A workspace of its own: the page opens just this notebook, as on a first run
        # (the default workspace would also restore what earlier tests had open).
        workspace = re.sub(r"[^A-Za-z0-9]+", "-", self.name)
        self.page.goto(self.lab.url(f"lab/workspaces/test-{workspace}/tree/{self.path}"))
        self.panel.wait_for(state="visible", timeout=KERNEL_START_S * 1000)
        # A kernel (idle) or a dialog in its way ("Select Kernel"): fail fast on the latter.
        self.page.wait_for_function(
            "() => document.querySelector('.jp-Dialog') !== null || (" + KERNEL_IDLE_JS + ")()",
            timeout=KERNEL_START_S * 1000,
            polling=250,
        )
        self.assert_no_popups()

    def wait_for_kernel_idle(self, timeout_s: float) -> None:
        """Until the notebook's kernel is connected and idle.

        The toolbar's execution indicator alone says "idle" before any kernel exists, so
        the status bar ("Python 3 (ipykernel) | Idle", not "No Kernel | ...") must agree.
        """
        self.page.wait_for_function(KERNEL_IDLE_JS, timeout=timeout_s * 1000, polling=250)

    def run_all(self) -> float:
        """Run ▸ Run All Cells, as a learner would; wait until every cell ran (or one failed)."""
        t0 = time.monotonic()
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        self.page.wait_for_function(
            """() => {
                if (!("""
            + KERNEL_IDLE_JS
            + """)()) return false;
                const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
                const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
                    .map(e => e.textContent.trim());
                if (prompts.some(p => p.includes('*'))) return false;
                const failed = panel.querySelector(
                    '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
                return prompts.every(p => /\\[\\d+\\]/.test(p)) || failed !== null;
            }""",
            timeout=RUN_ALL_S * 1000,
            polling=500,
        )
        return time.monotonic() - t0

    # -- what must hold on every page --

    # Text is read with textContent, not innerText: JupyterLab skips painting cells that
    # are off screen (CSS content-visibility), and their innerText reads as empty.
    def assert_ran_without_errors(self) -> None:
        prompts = [
            t.strip()
            for t in self.panel.locator(".jp-CodeCell .jp-InputPrompt").all_text_contents()
        ]
        not_run = [i for i, p in enumerate(prompts) if not re.search(r"\[\d+\]", p)]
        tracebacks = [
            t
            for t in self.panel.locator(
                '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
            ).all_text_contents()
            if re.search(r"Traceback|Error\b", t)
        ]
        if tracebacks or not_run:
            self.shot("error")
        assert not tracebacks, f"{self.path}: a cell shows an error:\n" + "\n---\n".join(
            t[-2000:] for t in tracebacks
        )
        assert not not_run, f"{self.path}: code cells {not_run} did not run (of {len(prompts)})"

    def assert_no_popups(self) -> None:
        """No dialog, and no notification toast (news, updates, kernel choice) on first open."""
        dialogs = self.page.locator(".jp-Dialog").all_text_contents()
        toasts = self.page.locator(".Toastify__toast").all_text_contents()
        if dialogs or toasts:
            self.shot("popup")
        assert not dialogs, f"a dialog is open: {dialogs}"
        assert not toasts, f"a notification popped up: {toasts}"

    def assert_console_clean(self) -> None:
        errors = [
            m
            for m in self.console
            if not any(pattern.search(m) for pattern, _why in BENIGN_CONSOLE)
        ]
        assert not errors, "JavaScript errors in the browser console:\n" + "\n".join(errors)

    def assert_not_saved(self) -> None:
        """The executed notebook was never written back (the server logs every save).

        Read from the server's log, not the file: authors may edit the file meanwhile.
        """
        saves = [line for line in self.lab.log().splitlines() if "Saving file at" in line]
        assert not saves, f"JupyterLab saved files during the browser test: {saves}"

    def close(self) -> None:
        """Close the page and shut the notebook's kernel down (it would keep its memory)."""
        self.context.close()
        for session in self.lab.api("api/sessions"):
            if session["path"] == self.path:
                self.lab.api(f"api/sessions/{session['id']}", method="DELETE")

    # -- widgets --

    def widget(self, css_class: str):
        """The widget whose root carries `css_class`, after it rendered."""
        root = self.panel.locator(f".{css_class}").first
        root.wait_for(state="visible", timeout=REDRAW_S * 1000)
        root.scroll_into_view_if_needed()
        return root

    def wait_for_redraw(self, drawing, before: bytes, what: str) -> bytes:
        """Poll screenshots of `drawing` until they differ from `before` and are stable."""
        deadline = time.monotonic() + REDRAW_S
        while time.monotonic() < deadline:
            self.wait_for_kernel_idle(REDRAW_S)
            self.page.wait_for_timeout(300)  # let the browser paint the kernel's update
            after = drawing.screenshot()
            if after != before:
                self.page.wait_for_timeout(300)  # and it has finished painting:
                if drawing.screenshot() == after:
                    return after
        self.shot(f"no-redraw-{what}")
        raise AssertionError(
            f"{self.path}: {what} did not change what is drawn within {REDRAW_S} s"
        )


@pytest.fixture
def notebook(browser, lab, request):
    opened: list[NotebookPage] = []

    def open_notebook(path: str) -> NotebookPage:
        if not (ROOT / path).exists():
            pytest.skip(f"{path} does not exist yet")
        nb = NotebookPage(browser, lab, path)
        opened.append(nb)
        nb.open()
        return nb

    yield open_notebook
    for nb in opened:
        nb.close()
        nb.assert_not_saved()


def _run_and_check(nb: NotebookPage) -> None:
    nb.assert_no_popups()  # first open: before anything ran
    seconds = nb.run_all()
    print(f"{nb.path}: ran all cells in the browser in {seconds:.1f} s")
    nb.shot("after-run-all")
    nb.assert_ran_without_errors()
    nb.assert_no_popups()


def _slider_step(slider, presses: int = 1, key: str = "ArrowRight") -> None:
    """Move an ipywidgets slider the way a keyboard user does: focus its handle, press keys."""
    handle = slider.locator(".noUi-handle").first
    handle.focus()
    for _ in range(presses):
        handle.press(key)


# -- the course's JupyterLab settings ------------------------------------------------------


def test_a_notebook_without_kernel_opens_without_a_dialog(notebook):
    """A learner's own notebook that names no kernel starts the course's kernel directly,
    instead of a "Select Kernel" dialog (autoStartDefaultKernel in the course's settings)."""
    import nbformat

    path = SHOTS / "no-kernel.ipynb"  # under test-output/, served, ignored by git
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("21 * 2")])
    nb.metadata = {}  # no kernelspec
    nbformat.write(nb, path)
    page = notebook(str(path.relative_to(ROOT)))  # open() fails on any dialog
    assert page.run_all() > 0
    page.assert_ran_without_errors()
    assert "42" in page.panel.locator(".jp-OutputArea-output").first.text_content()
    page.assert_console_clean()


def test_the_error_check_catches_a_failing_cell(notebook):
    """The checks above have teeth: a cell that raises is reported, with its message."""
    import nbformat

    path = SHOTS / "failing-cell.ipynb"
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(src)
            for src in ("x = 1", "raise ValueError('the learner sees this')", "y = 2")
        ]
    )
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    page = notebook(str(path.relative_to(ROOT)))
    page.run_all()  # returns once the error stopped the run
    with pytest.raises(AssertionError, match="the learner sees this"):
        page.assert_ran_without_errors()


# -- the notebooks ---------------------------------------------------------------------------


def test_00_setup_widgets_render(notebook):
    """The infrastructure on the smallest notebook: the slider and its label render and talk."""
    nb = notebook("notebooks/00_setup.ipynb")
    _run_and_check(nb)
    slider = nb.panel.locator(".jp-OutputArea-output .widget-hslider").first
    slider.wait_for(state="visible")
    label = nb.panel.locator(".jp-OutputArea-output .widget-label", has_text="√d_k").first
    assert label.text_content().strip() == "√d_k = 2.000"  # set from code in the cell
    box = slider.locator("xpath=..")
    nb.shot("widget-before", box)
    _slider_step(slider)  # 4 -> 5: the kernel's callback updates the label
    label.filter(has_text="√d_k = 2.236").wait_for(timeout=REDRAW_S * 1000)
    nb.shot("widget-after", box)
    nb.assert_ran_without_errors()
    nb.assert_console_clean()


def test_02_attention_explorer_and_diagram(notebook):
    nb = notebook("notebooks/02_qkv_attention.ipynb")
    _run_and_check(nb)

    # The Q/K/V dataflow: Mermaid source in a markdown cell, which JupyterLab draws as an
    # SVG (shown as an <img> with an SVG data URL) or, when Mermaid fails, as a warning.
    diagram = nb.panel.locator(".jp-MarkdownCell .jp-RenderedMermaid").first
    diagram.wait_for(state="attached", timeout=REDRAW_S * 1000)
    diagram.scroll_into_view_if_needed()
    assert "jp-mod-warning" not in (diagram.get_attribute("class") or ""), (
        f"Mermaid could not draw the diagram: {diagram.text_content()[:500]}"
    )
    drawn = diagram.locator("img[src^='data:image/svg+xml'], svg").first
    drawn.wait_for(state="visible", timeout=REDRAW_S * 1000)
    svg = (
        urllib.parse.unquote(drawn.get_attribute("src").split(",", 1)[1])
        if drawn.evaluate("e => e.tagName") == "IMG"
        else drawn.evaluate("e => e.outerHTML")
    )
    assert "<svg" in svg and len(re.findall(r'class="node[ "]', svg)) >= 5, "no diagram nodes"
    assert "softmax" in svg, "the diagram's labels are missing"
    box = drawn.bounding_box()
    assert box and box["width"] > 200 and box["height"] > 50, f"the diagram is tiny: {box}"
    nb.shot("mermaid", diagram)

    # The attention explorer: a PNG of the query's attention that follows the controls.
    explorer = nb.widget("attention-explorer")
    plot = explorer.locator("img.attention-explorer-plot").first
    plot.wait_for(state="visible")
    assert plot.evaluate("img => img.complete && img.naturalWidth > 100"), "no plot drawn"
    summary = explorer.locator(".attention-explorer-summary").first
    nb.shot("explorer-before", explorer)
    before, said = plot.screenshot(), summary.text_content()

    query = explorer.locator(".attention-explorer-query select").first
    options = query.locator("option").all_text_contents()
    assert len(options) > 2, f"the query dropdown offers {options}"
    current = query.evaluate("s => s.selectedIndex")
    query.select_option(index=(current + 2) % len(options))  # another token
    after_query = nb.wait_for_redraw(plot, before, "choosing another query token")
    assert summary.text_content() != said, "the summary line did not follow the query token"
    nb.shot("explorer-query", explorer)

    causal = explorer.locator(".attention-explorer-causal input[type=checkbox]").first
    was_causal = causal.is_checked()
    causal.click()
    assert causal.is_checked() != was_causal
    nb.wait_for_redraw(plot, after_query, "toggling the causal mask")
    nb.shot("explorer-causal", explorer)

    nb.assert_ran_without_errors()
    nb.assert_console_clean()


def test_03_temperature_explorer(notebook):
    nb = notebook("notebooks/03_scaling_sqrt_dk.ipynb")
    _run_and_check(nb)
    explorer = nb.widget("temperature-explorer")
    plot = explorer.locator("img.temperature-explorer-plot").first
    plot.wait_for(state="visible")
    assert plot.evaluate("img => img.complete && img.naturalWidth > 100"), "no plot drawn"
    summary = explorer.locator(".temperature-explorer-summary").first
    nb.shot("explorer-before", explorer)
    before, said = plot.screenshot(), summary.text_content()

    slider = explorer.locator(".temperature-explorer-slider").first
    _slider_step(slider, presses=4, key="ArrowLeft")  # cooler: a sharper softmax
    nb.wait_for_redraw(plot, before, "moving the temperature slider")
    assert summary.text_content() != said, "the summary did not follow the temperature"
    nb.shot("explorer-after", explorer)

    nb.assert_ran_without_errors()
    nb.assert_console_clean()


def test_05_rope_explorer(notebook):
    nb = notebook("notebooks/05_positional_encodings.ipynb")
    _run_and_check(nb)
    explorer = nb.widget("rope-explorer")
    drawing = explorer.locator(".rope-drawing").first
    svg = drawing.locator("svg").first
    svg.wait_for(state="visible")
    nb.shot("explorer-before", explorer)
    before, angle = drawing.screenshot(), svg.get_attribute("data-angle-q")

    query_position = explorer.locator(".widget-hslider").first  # "query position m"
    assert "query position" in query_position.text_content()
    _slider_step(query_position, presses=3)  # m += 3: the query arrow turns
    nb.wait_for_redraw(drawing, before, "moving the query position")
    if angle is not None:
        assert svg.get_attribute("data-angle-q") != angle, "the query's angle did not change"
    nb.shot("explorer-after", explorer)

    nb.assert_ran_without_errors()
    nb.assert_console_clean()
