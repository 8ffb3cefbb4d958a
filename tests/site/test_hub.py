"""The course on a real JupyterHub: two learners click the course's nbgitpuller link.

A JupyterHub from PyPI with its proxy from npm (configurable-http-proxy, installed by .ci/run
into build/hub-proxy/, or COURSE_HUB_PROXY), the dummy authenticator and
SimpleLocalProcessSpawner (each learner's server a local process with its own home), all on
127.0.0.1. The edition is what `make release` builds (course_tools.release.build), a local
git repository the link names by its path. Each learner logs in through the login page in
headless Chromium, opens the link printed by `python -m course_tools.links --nbgitpuller`,
and must land in JupyterLab with chapter 00 of the pulled edition open and their work/ copies
made (hub/work_copies.py, the hub kit's server extension). The instructor's side follows
the guide's own blocks as written: day one's release and push into the edition's repository
(a local bare one), day two's update (built into the same folder, pushed); each learner's
second click brings it and keeps what they changed, and the guide's collect and grade
blocks run on the homes.

Marked browser and slow; skips without jupyterhub, nbgitpuller, the proxy or Chromium (fails
for the last under COURSE_REQUIRE_BROWSER=1, as the other browser tests do).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HUB_KIT = ROOT / "hub"
PROXY_CACHE = ROOT / "build" / "hub-proxy"
START_S = 120  # the hub, then a learner's server, on a busy 2-core machine
LEARNERS = ("alice", "bob")


def _proxy() -> str | None:
    for candidate in (
        os.environ.get("COURSE_HUB_PROXY"),
        str(PROXY_CACHE / "node_modules" / ".bin" / "configurable-http-proxy"),
        shutil.which("configurable-http-proxy"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"JupyterHub exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"JupyterHub did not answer at {url}:\n{log.read_text()[-4000:]}")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=Instructor", "-c", "user.email=i@example.org", "-C", str(repo)]
        + list(args),
        check=True,
        capture_output=True,
    )


class Instructor:
    """The instructor's side, as the guide writes it: a clone of the course (``$COURSE``),
    the edition's repository (``$EDITION``, a local bare one, as on a server of one's own),
    and the guide's release, push and update blocks run as written in their shell."""

    def __init__(self, base: Path):
        self.home = base / "instructor"
        self.home.mkdir()
        self.course = base / "attention-course"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(self.course)], check=True)
        self.repository = base / "attention-workshop.git"
        subprocess.run(
            ["git", "init", "-q", "--bare", "-b", "main", str(self.repository)], check=True
        )
        self.release = self.home / "release" / "attention-workshop"

    def run(self, *needles: str) -> str:
        """The guide's block holding every one of ``needles``, run in bash as written."""
        from guide_blocks import GUIDE, blocks

        found = [b for b in blocks(GUIDE.read_text(encoding="utf-8")) if b.lang == "bash"]
        block = next(b for b in found if all(n in b.body for n in needles))
        env = {
            **os.environ,
            "HOME": str(self.home),
            "COURSE": str(self.course),
            "EDITION": str(self.repository),
            "GIT_AUTHOR_NAME": "Instructor",
            "GIT_AUTHOR_EMAIL": "i@example.org",
            "GIT_COMMITTER_NAME": "Instructor",
            "GIT_COMMITTER_EMAIL": "i@example.org",
            "PYTHONPATH": str(self.course),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        proc = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + block.body],
            env=env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f"{block.body}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout


@pytest.fixture(scope="module")
def instructor(tmp_path_factory) -> Instructor:
    """Day one: the guide's release block, then its push block, into $EDITION."""
    who = Instructor(tmp_path_factory.mktemp("day-one"))
    who.run("course_tools.release ~/release/attention-workshop", "python3 -m")
    who.run("remote add origin", "push -u origin main")
    return who


@pytest.fixture(scope="module")
def edition(instructor: Instructor) -> Path:
    return instructor.repository


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    pytest.importorskip("jupyterhub", reason="the test extra has jupyterhub")
    pytest.importorskip("nbgitpuller", reason="the test extra has nbgitpuller")
    proxy = _proxy()
    if proxy is None:
        pytest.skip(
            "no configurable-http-proxy: `npm install --prefix build/hub-proxy "
            "configurable-http-proxy` (.ci/run does)"
        )
    base = tmp_path_factory.mktemp("hub")
    homes = base / "home"
    homes.mkdir()
    port, api_port, hub_port = _free_port(), _free_port(), _free_port()
    bin_dir = Path(sys.executable).parent
    config = base / "jupyterhub_config.py"
    config.write_text(
        f"""
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.debug = False
c.JupyterHub.db_url = "sqlite:///{base / "hub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(base / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(base / "hub.pid")!r}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(homes / "{username}")!r}
c.Spawner.cmd = [{str(bin_dir / "jupyterhub-singleuser")!r}]
c.Spawner.default_url = "/lab"
c.Spawner.args = {["--allow-root"] if os.geteuid() == 0 else []!r}  # CI's container runs as root
c.Spawner.start_timeout = {START_S}
c.Spawner.http_timeout = {START_S}
c.Spawner.environment = {{
    "PATH": {str(bin_dir) + os.pathsep + os.environ["PATH"]!r},
    "PYTHONPATH": {str(HUB_KIT)!r},
    "JUPYTER_CONFIG_PATH": {str(HUB_KIT)!r},
    "NBGITPULLER_APP": "lab",
    "COURSE_BUDGET": "ci",
}}
""",
        encoding="utf-8",
    )
    log = base / "jupyterhub.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(bin_dir / "jupyterhub"), "-f", str(config)],
            cwd=base,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(url + "/hub/health", proc, log, START_S)
        yield url, homes, log
    finally:
        import signal

        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the hub stops the proxy and the servers
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def browser():
    from browser_lab import launched_chromium

    with launched_chromium(headless=True) as b:
        yield b


def _link(hub_url: str, edition: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "course_tools.links", "--nbgitpuller", hub_url]
        + ["--repository", str(edition)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip().splitlines()[-1]


def _click(page, link: str, log: Path) -> None:
    """The link, followed until JupyterLab shows chapter 00 of the edition."""
    page.goto(link)
    try:
        page.wait_for_url(
            "**/lab/tree/attention-workshop/notebooks/00_setup.ipynb*", timeout=START_S * 1000
        )
        page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.wait_for(
            state="visible", timeout=START_S * 1000
        )
    except Exception as err:
        _fail(page, f"the link did not open chapter 00 ({err})", log)


def _fail(page, what: str, log: Path) -> None:
    shots = ROOT / "test-output" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "hub.png"))
    pytest.fail(f"{what}; at {page.url} (test-output/browser/hub.png):\n{log.read_text()[-6000:]}")


def _wait_for_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert path.exists(), f"{path} was not made"


def test_learners_click_the_link_on_a_real_hub(hub, edition, instructor, browser):
    hub_url, homes, log = hub
    link = _link(hub_url, edition)
    assert "targetpath=attention-workshop" in link
    pages = {}
    for user in LEARNERS:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{hub_url}/hub/login")
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", "any")
        page.click("input[type=submit], button[type=submit]")
        try:
            page.wait_for_url("**/user/**", timeout=START_S * 1000)
        except Exception as err:
            _fail(page, f"{user}'s server did not start after logging in ({err})", log)
        _click(page, link, log)
        tab = page.locator(".jp-MainAreaWidget .lm-TabBar-tabLabel, .lm-TabBar-tabLabel")
        assert any("00_setup.ipynb" in t for t in tab.all_inner_texts())
        course = homes / user / "attention-workshop"
        assert (course / ".course-edition").exists() and not (course / "solutions").exists()
        _wait_for_file(course / "work" / "00_setup_exercises.ipynb")
        pages[user] = page

    # alice changes her work copy and the lecture; the instructor pushes an update
    course = homes / "alice" / "attention-workshop"
    copy = course / "work" / "00_setup_exercises.ipynb"
    nb = json.loads(copy.read_text(encoding="utf-8"))
    nb["cells"][-1]["source"] = "# alice's work\n"
    copy.write_text(json.dumps(nb), encoding="utf-8")
    lecture = course / "notebooks" / "00_setup.ipynb"
    nb = json.loads(lecture.read_text(encoding="utf-8"))
    nb["cells"].append(
        {"cell_type": "markdown", "id": "alice-note", "metadata": {}, "source": "alice's note"}
    )
    lecture.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    # day two, as the guide says: the course changes, the edition is built into the same
    # folder and pushed (never a new history: nbgitpuller refuses to merge one)
    day_two = instructor.course / "notebooks" / "04_multi_head_attention.ipynb"
    nb = json.loads(day_two.read_text(encoding="utf-8"))
    nb["cells"].insert(
        0, {"cell_type": "markdown", "id": "day-two", "metadata": {}, "source": "Day two."}
    )
    day_two.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
    _git(instructor.course, "commit", "-q", "-am", "day two")
    instructor.run("course_tools.release ~/release/attention-workshop", " push")

    for user in LEARNERS:  # both learners click again: the update, their work kept
        _click(pages[user], link, log)
        lecture_04 = homes / user / "attention-workshop" / day_two.relative_to(instructor.course)
        assert "Day two." in lecture_04.read_text(encoding="utf-8"), user
        assert not list(homes.glob(f"{user}/attention-workshop_backup_*"))
    assert "# alice's work" in copy.read_text(encoding="utf-8")
    assert "alice's note" in lecture.read_text(encoding="utf-8")
    for page in pages.values():
        page.context.close()
    _collect_and_grade_as_the_guide_says(homes, homes.parent / "admin")
    _hand_in_as_the_guide_says(homes, homes.parent / "grader")


def _hand_in_as_the_guide_says(homes: Path, admin: Path) -> None:
    """Homes not in one folder: each learner runs `make submit` (the edition's bootstrap, as
    make runs it) with the kit's COURSE_SUBMIT, their own folder of a hand-in volume; the
    guide's hand-in collect block, as written, gathers them. alice started her copy; bob
    never did, so he has nothing to hand in."""
    from guide_blocks import GUIDE, blocks

    hand_in = homes.parent / "hand-in"
    said = {}
    for user in LEARNERS:
        proc = subprocess.run(
            [sys.executable, "tools/bootstrap.py", "submit"],
            cwd=homes / user / "attention-workshop",
            env={**os.environ, "HOME": str(homes / user), "COURSE_SUBMIT": str(hand_in / user)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        said[user] = (proc.returncode, proc.stdout + proc.stderr)
    assert said["alice"][0] == 0 and "00_setup_exercises.ipynb" in said["alice"][1], said
    assert said["bob"][0] == 1 and "nothing to hand in" in said["bob"][1], said
    block = next(b for b in blocks(GUIDE.read_text(encoding="utf-8")) if '"$HANDIN"/*' in b.body)
    admin.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(admin), "HANDIN": str(hand_in), "CHAPTER": "00_setup"}
    proc = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + block.body],
        env=env,
        cwd=admin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    collected = admin / "collected" / "00_setup"
    assert [p.name for p in collected.iterdir()] == ["alice"]
    assert "# alice's work" in (collected / "alice" / "00_setup_exercises.ipynb").read_text()


def _collect_and_grade_as_the_guide_says(homes: Path, admin: Path) -> None:
    """The guide's collect block and grade block, as written, on the homes the hub made: one
    folder per learner in ~/collected, and one gradebook row per learner (their copies are
    untouched exercises, so "missing"; alice's edit is in a cell no exercise owns)."""
    from grading_lab import require_sandbox
    from guide_blocks import GUIDE, blocks

    require_sandbox()  # the guide grades in the sandbox
    found = [b for b in blocks(GUIDE.read_text(encoding="utf-8")) if b.role == "instructor"]
    collect = next(b for b in found if "mkdir -p ~/collected" in b.body)
    grade = next(b for b in found if "course-grade ~/collected" in b.body)
    admin.mkdir(exist_ok=True)
    bin_dir = admin / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "course-grade"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m course_tools.grading "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "HOME": str(admin),
        "HOMES": str(homes),
        "COURSE": str(ROOT),
        "CHAPTER": "00_setup",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    for block in (collect, grade):
        proc = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + block.body],
            env=env,
            cwd=admin,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    collected = admin / "collected" / "00_setup"
    assert sorted(p.name for p in collected.iterdir()) == sorted(LEARNERS)
    rows = (admin / "grades" / "00_setup" / "grades.csv").read_text(encoding="utf-8")
    for user in LEARNERS:
        assert f"{user}/00_setup_exercises.ipynb,00_setup,00.1,0,1,missing" in rows, rows
