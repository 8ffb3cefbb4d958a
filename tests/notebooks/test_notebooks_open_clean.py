"""Opening a notebook changes nothing: the committed metadata is what JupyterLab writes.

A real JupyterLab (the one `make lab` starts) opens copies of committed notebooks in
Chromium; the document must not be marked modified once its kernel is up (no "save
changes?" prompt), and saving it without running anything must write the same bytes, so
`git status` stays clean. The metadata comes from `python -m course_tools.notebook_headers
--apply`, which asks a real kernel; its `--check` (tests/notebooks/test_notebook_headers.py) covers
every notebook, this test proves that what it writes is what JupyterLab writes.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from course_lab import ROOT, running_lab

from course_tools.notebook_headers import lab_metadata

# A lecture, a long lecture, an exercise notebook and a solution: every kind committed.
SAMPLES = [
    "notebooks/00_setup.ipynb",
    "notebooks/06_flash_attention.ipynb",
    "exercises/02_qkv_attention.ipynb",
    "solutions/03_scaling_sqrt_dk.ipynb",
]
SCRATCH = "build/open-clean"  # inside the server's root (ignored by git)


def test_every_notebook_carries_jupyterlabs_metadata():
    meta = lab_metadata()
    for folder in ("notebooks", "solutions", "exercises"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            got = json.loads(path.read_text(encoding="utf-8"))["metadata"]
            assert got.get("kernelspec") == meta["kernelspec"], path.name
            info = dict(got.get("language_info") or {})
            assert info.pop("version", None), f"{folder}/{path.name}: no Python version"
            want = {k: v for k, v in meta["language_info"].items() if k != "version"}
            assert info == want, (
                f"{folder}/{path.name}: run `python -m course_tools.notebook_headers --apply`"
            )


@pytest.mark.browser
@pytest.mark.slow
def test_opening_and_saving_in_jupyterlab_changes_nothing():
    from browser_lab import NotebookPage, launched_chromium

    scratch = ROOT / SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    copies = {}
    for rel in SAMPLES:
        dst = scratch / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst)
        copies[rel] = f"{SCRATCH}/{rel}"
    kernel_version = lab_metadata()["language_info"]["version"]
    overrides = {"@jupyterlab/docmanager-extension:plugin": {"autosave": False}}
    try:
        with running_lab(settings_overrides=overrides) as lab, launched_chromium() as browser:
            for rel, path in copies.items():
                before = (ROOT / rel).read_bytes()
                committed = json.loads(before)["metadata"]["language_info"]["version"]
                nb = NotebookPage(browser, lab, path)
                nb.open()
                nb.wait_for_kernel_idle(120)
                nb.page.wait_for_timeout(1500)  # the kernel's info reply has landed
                tab = nb.page.locator(".lm-TabBar-tab.jp-mod-current")
                dirty = "jp-mod-dirty" in (tab.first.get_attribute("class") or "")
                saves = lab.log().count("Saving file at")
                # a key press can land before the notebook has the focus on a loaded
                # machine: press again every 10 s, for at most 40 s
                deadline, pressed = time.monotonic() + 40, 0.0
                while lab.log().count("Saving file at") == saves:
                    assert time.monotonic() < deadline, f"{rel}: JupyterLab did not save"
                    if time.monotonic() - pressed > 10:
                        nb.page.keyboard.press("Control+s")
                        pressed = time.monotonic()
                    time.sleep(0.2)
                time.sleep(0.5)
                after = (ROOT / path).read_bytes()
                nb.close()
                if committed != kernel_version:  # another Python than the course's
                    a, b = json.loads(before), json.loads(after)
                    a["metadata"]["language_info"].pop("version")
                    b["metadata"]["language_info"].pop("version")
                    assert a == b, f"{rel}: opening changed more than the Python version"
                    continue
                assert not dirty, f"{rel}: JupyterLab marks it modified on opening"
                assert after == before, (
                    f"{rel}: opening and saving in JupyterLab changed the file "
                    "(`python -m course_tools.notebook_headers --apply` fixes the metadata)"
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
