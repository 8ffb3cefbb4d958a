"""Start the course's JupyterLab headless on a loopback port, for tests; stop it reliably.

(Named course_lab, not jupyter_server: tests/ is on sys.path under pytest, and a
tests/jupyter_server.py would shadow the real `jupyter_server` package.)

Used by tests/learner_tools/test_lab_server.py (REST API only) and, with browser_lab.py, by
the browser tests (Chromium).
The server is the one `make lab` opens: the course's .venv, the repository as its root,
and the course's own settings (`.jupyter/lab/user-settings`, as tools/bootstrap.py's
`lab_env()` sets them). Everything else that JupyterLab would write (workspace state,
runtime files, user config) goes to a temporary folder, so a test run starts like a
learner's very first one and leaves nothing behind in the repository.

    with running_lab() as lab:
        lab.api("api/contents/notebooks")       # JSON from the REST API, token included
        lab.url("lab/tree/notebooks/00_setup.ipynb")
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
COURSE_SETTINGS = ROOT / ".jupyter" / "lab" / "user-settings"
START_TIMEOUT_S = 120.0  # a cold start on a busy 2-core machine can take a while


def bootstrap_module():
    """tools/bootstrap.py (behind `make lab`), imported from its file."""
    return load_script("tools/bootstrap.py")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody is listening on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_settings_file(path: Path) -> dict:
    """A JupyterLab `.jupyterlab-settings` file is JSON5; ours use only `//` comments."""
    text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.MULTILINE)
    return json.loads(text)


@dataclass
class LabServer:
    base: str  # http://127.0.0.1:PORT/
    token: str
    proc: subprocess.Popen
    log_path: Path
    settings_dir: Path

    def url(self, path: str = "lab", **query: str) -> str:
        """A URL of this server that carries the token (as a browser would open it)."""
        q = {"token": self.token, **query}
        return self.base + path.lstrip("/") + "?" + "&".join(f"{k}={v}" for k, v in q.items())

    def api(self, path: str, method: str = "GET", timeout: float = 10.0):
        """Call the REST API with the token; returns the decoded JSON (or None if empty)."""
        req = urllib.request.Request(
            self.base + path.lstrip("/"),
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _wait_until_serving(lab: LabServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if lab.proc.poll() is not None:
            raise RuntimeError(
                f"JupyterLab exited with code {lab.proc.returncode} before it "
                f"served anything. Its log:\n{lab.log()[-4000:]}"
            )
        try:
            lab.api("api/status", timeout=5.0)
            # The server answers before the lab extension is ready; wait for the page too.
            with urllib.request.urlopen(lab.url("lab"), timeout=5.0) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError, ValueError) as e:
            last_error = e
        time.sleep(0.25)
    raise RuntimeError(
        f"JupyterLab did not serve within {timeout:.0f} s (last error: "
        f"{last_error!r}). Its log:\n{lab.log()[-4000:]}"
    )


def _stop(lab: LabServer) -> None:
    """Ask politely (REST shutdown, which also stops kernels), then SIGTERM, then SIGKILL.

    The server runs in its own process group, so the last resort also reaches its kernels.
    """
    proc = lab.proc
    if proc.poll() is None:
        with contextlib.suppress(Exception):
            lab.api("api/shutdown", method="POST", timeout=5.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    if os.name == "posix":  # kernels left behind by a killed server
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def running_lab(
    settings_overrides: dict[str, dict] | None = None,
    log_dir: Path | None = None,
    timeout: float = START_TIMEOUT_S,
) -> Iterator[LabServer]:
    """Run JupyterLab on the repository for the duration of the `with` block.

    settings_overrides: {"@jupyterlab/x-extension:plugin": {key: value}} merged over the
    course's settings in a private copy of them (the course's folder is never written).
    log_dir: where to keep the server's log (default: the temporary folder).
    """
    tmp = Path(tempfile.mkdtemp(prefix="course-lab-"))
    settings = tmp / "user-settings"
    shutil.copytree(COURSE_SETTINGS, settings)
    for plugin_id, values in (settings_overrides or {}).items():
        package, plugin = plugin_id.rsplit(":", 1)
        path = settings / package / f"{plugin}.jupyterlab-settings"
        merged = read_settings_file(path) if path.exists() else {}
        merged.update(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(merged, indent=2) + "\n")
    for sub in ("workspaces", "runtime", "config", "data"):
        (tmp / sub).mkdir()

    env = dict(os.environ)
    env.update(
        {
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),  # a learner's first open
            "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),  # no personal jupyter config
            "JUPYTER_DATA_DIR": str(tmp / "data"),  # no personal kernels or extensions
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("JUPYTER_TOKEN", None)
    token = secrets.token_hex(16)
    port = free_port()
    log_path = (log_dir or tmp) / "jupyterlab.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={ROOT}",
        *bootstrap_module().LAB_OPTIONS,  # as `make lab` starts it
        *bootstrap_module().kernel_options(str(tmp / "runtime")),
    ]
    if os.name == "posix" and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=(os.name == "posix"),
        )
    lab = LabServer(
        base=f"http://127.0.0.1:{port}/",
        token=token,
        proc=proc,
        log_path=log_path,
        settings_dir=settings,
    )
    try:
        _wait_until_serving(lab, timeout)
        yield lab
    finally:
        _stop(lab)
        shutil.rmtree(tmp, ignore_errors=True)
