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

import re
import urllib.parse

import pytest
from browser_lab import (
    REDRAW_S,
    SHOTS,
    NotebookPage,
    launched_chromium,
)
from course_lab import ROOT, running_lab

pytestmark = [pytest.mark.browser, pytest.mark.slow]


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
