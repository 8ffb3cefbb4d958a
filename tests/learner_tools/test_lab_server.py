"""The course's JupyterLab starts headless, serves the course, and reads the course's settings.

No browser needed: this talks to the server's REST API. tests/site/test_browser.py drives the
same server in Chromium.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from course_lab import COURSE_SETTINGS, ROOT, bootstrap_module, read_settings_file, running_lab

NOTIFICATION = "@jupyterlab/apputils-extension:notification"


@pytest.fixture(scope="module")
def lab():
    with running_lab() as server:
        yield server


@pytest.mark.slow
def test_serves_the_course_notebooks(lab):
    listing = lab.api("api/contents/notebooks")
    assert listing["type"] == "directory"
    served = {item["name"] for item in listing["content"]}
    on_disk = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert on_disk, "no notebooks in notebooks/?"
    assert on_disk <= served, f"not served: {sorted(on_disk - served)}"

    nb = lab.api("api/contents/notebooks/00_setup.ipynb")
    assert nb["type"] == "notebook"
    assert nb["content"]["metadata"]["kernelspec"]["name"] == "python3"


def test_every_course_notebook_names_the_course_kernel():
    """JupyterLab starts the kernel a notebook names; one that names none (or another) would
    greet the learner with a "Select Kernel" dialog."""
    import nbformat

    for folder in ("notebooks", "solutions", "exercises"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            spec = nbformat.read(path, as_version=4).metadata.get("kernelspec", {})
            assert spec.get("name") == "python3", f"{path.relative_to(ROOT)}: kernelspec {spec}"


@pytest.mark.slow
def test_the_token_is_required(lab):
    req = urllib.request.Request(lab.base + "api/contents/notebooks")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 403


@pytest.mark.slow
def test_the_course_kernel_is_available(lab):
    specs = lab.api("api/kernelspecs")
    assert "python3" in specs["kernelspecs"], specs


@pytest.mark.slow
def test_jupyterlab_reads_the_course_settings(lab):
    """Every file in .jupyter/lab/user-settings is valid and is what JupyterLab reports."""
    files = sorted(COURSE_SETTINGS.rglob("*.jupyterlab-settings"))
    assert files, f"no settings in {COURSE_SETTINGS}"
    for path in files:
        rel = path.relative_to(COURSE_SETTINGS)
        plugin_id = f"{rel.parent.as_posix()}:{rel.name.removesuffix('.jupyterlab-settings')}"
        ours = read_settings_file(path)
        served = lab.api(f"lab/api/settings/{plugin_id}")
        # JupyterLab validates user settings against the plugin's schema and reports them
        # back; a misspelled plugin or key would show up as a difference here.
        assert served["id"] == plugin_id
        assert served["settings"] == ours, (plugin_id, served["settings"], ours)
        assert set(ours) <= set(served["schema"]["properties"]), (
            f"{plugin_id}: unknown keys {sorted(set(ours) - set(served['schema']['properties']))}"
        )
    notes = lab.api(f"lab/api/settings/{NOTIFICATION}")["settings"]
    assert notes["fetchNews"] == "false" and notes["checkForUpdates"] is False


def test_no_news_or_update_requests():
    """The learner's first run does not ask the internet for news (a pop-up) or updates."""
    notes = read_settings_file(
        COURSE_SETTINGS / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    )
    assert notes["fetchNews"] == "false", "the news pop-up asks a first-time learner a question"
    assert notes["checkForUpdates"] is False


def test_make_lab_uses_the_course_settings(tmp_path):
    """tools/bootstrap.py (behind `make lab` and `make test`) points JupyterLab at them."""
    bootstrap = bootstrap_module()
    dest = Path(bootstrap.seed_settings(str(tmp_path / "settings")))
    for path in COURSE_SETTINGS.rglob("*.jupyterlab-settings"):
        copy = dest / path.relative_to(COURSE_SETTINGS)
        assert copy.read_text() == path.read_text(), f"{copy} was not seeded"
    # A learner's own change survives the next `make lab`.
    victim = next(dest.rglob("*.jupyterlab-settings"))
    victim.write_text("{}")
    bootstrap.seed_settings(str(dest))
    assert victim.read_text() == "{}"
    env = bootstrap.lab_env()
    assert Path(env["JUPYTERLAB_SETTINGS_DIR"]).resolve() == Path(bootstrap.LAB_SETTINGS).resolve()
    assert (
        not Path(env["JUPYTERLAB_SETTINGS_DIR"]).resolve().is_relative_to(COURSE_SETTINGS.resolve())
    ), "learners' changes must not land in the tracked defaults"


def test_settings_files_are_plain_json_with_comments():
    for path in COURSE_SETTINGS.rglob("*"):
        if path.is_file():
            assert path.suffix == ".jupyterlab-settings", f"stray file in settings: {path}"
            json.dumps(read_settings_file(path))  # parses


@pytest.mark.slow
def test_every_url_of_the_server_opens_chapter_00(lab):
    """The URL `make lab` prints (or its bare address, typed by hand) opens chapter 00,
    not the Launcher: learners on a headless machine, WSL or a container copy it."""
    import urllib.request

    with urllib.request.urlopen(lab.base + f"?token={lab.token}", timeout=10) as resp:
        assert resp.url.split("?")[0].endswith("/lab/tree/notebooks/00_setup.ipynb"), resp.url
    assert "/lab/tree/notebooks/00_setup.ipynb?token=" in lab.log(), "the printed URL"


def _run_in_kernel(lab, code: str, timeout: float = 90.0) -> str:
    """Start a kernel through the REST API, run ``code`` over the kernel's websocket (as
    JupyterLab does) and return what it printed; the kernel is shut down afterwards."""
    import asyncio
    import uuid

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    kernel = lab.api("api/kernels", method="POST", timeout=30.0)

    async def run() -> str:
        url = lab.base.replace("http", "ws", 1) + f"api/kernels/{kernel['id']}/channels"
        request = HTTPRequest(url, headers={"Authorization": f"token {lab.token}"})
        ws = await websocket_connect(request)
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": "execute_request",
            "session": uuid.uuid4().hex,
            "username": "test",
            "version": "5.3",
        }
        content = {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        await ws.write_message(
            json.dumps(
                {
                    "header": header,
                    "parent_header": {},
                    "metadata": {},
                    "content": content,
                    "channel": "shell",
                    "buffers": [],
                }
            )
        )
        printed = []
        while True:
            reply = json.loads(await ws.read_message())
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if reply["msg_type"] == "stream":
                printed.append(reply["content"]["text"])
            # "idle" on iopub comes after the request's outputs on iopub; the execute_reply
            # (shell channel) may overtake them.
            if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
                ws.close()
                return "".join(printed)

    try:
        return asyncio.run(asyncio.wait_for(run(), timeout))
    finally:
        lab.api(f"api/kernels/{kernel['id']}", method="DELETE", timeout=30.0)


@pytest.mark.slow
def test_the_log_has_no_alarming_lines(lab):
    """Nothing in the terminal a learner would take for a problem, also once a kernel has
    run a cell (over TCP, ipykernel warns of eavesdropping; the course's kernels talk to
    JupyterLab over Unix sockets where the system has them)."""
    assert _run_in_kernel(lab, "print(6 * 7)").strip() == "42"
    log = lab.log()
    assert "Skipped non-installed server" not in log
    assert "No web browser found" not in log
    if os.name == "posix":
        assert "without encryption" not in log, log[-3000:]
        assert list((lab.log_path.parent / "runtime").glob("kernel-*-ipc-*")) == [], (
            "the kernel's sockets outlive it"
        )


def test_kernels_keep_tcp_where_a_socket_path_would_be_too_long():
    from course_lab import bootstrap_module

    bootstrap = bootstrap_module()
    assert bootstrap.kernel_options("/tmp/rt") == (
        ["--KernelManager.transport=ipc"] if os.name == "posix" else []
    )
    assert bootstrap.kernel_options("/home/" + "x" * 80 + "/runtime") == []
    assert bootstrap.kernel_options("") == []


def test_make_lab_needs_no_browser_to_start(monkeypatch):
    from course_lab import bootstrap_module

    bootstrap = bootstrap_module()
    monkeypatch.setattr(bootstrap, "browser_available", lambda: False)
    cmd = bootstrap.lab_command([])
    assert "--no-browser" in cmd and all(opt in cmd for opt in bootstrap.LAB_OPTIONS)
    monkeypatch.setattr(bootstrap, "browser_available", lambda: True)
    assert "--no-browser" not in bootstrap.lab_command([])
