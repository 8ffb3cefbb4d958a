"""Chromium for the browser tests, and a notebook in JupyterLab as a learner sees it.

Shared by tests/site/test_browser.py, tests/site/test_site.py, tests/site/test_hub.py,
tests/notebooks/test_notebooks_open_clean.py and tests/course_tools/grading/test_class_report.py (this
folder is on pytest's path). The browser is Chromium from the system (Debian's `chromium`);
COURSE_CHROMIUM names another binary.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from course_lab import ROOT

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
