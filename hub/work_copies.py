"""Each learner's ``work/`` copies on a JupyterHub, made without a terminal.

A Jupyter server extension of the learner's server (enabled by ``jupyter_server_config.d/
work_copies.json`` beside it, or ``--ServerApp.jpserver_extensions``). Every two seconds it
looks for the course's editions in the server's root folder (a folder holding
``.course-edition``, as nbgitpuller clones it there) and, when an edition's checkout changed
(a first clone, an update merged by a later click of the link), runs the edition's own
``python tools/learner_files.py sync``: the exercise copies in ``work/``, made once and never
overwritten once a learner has touched them. Standard library and tornado (which the server
has) only.

Run as a script (``python work_copies.py [HOME]``) it does one pass: the start hook of a hub's
image (Zero to JupyterHub's ``lifecycleHooks.postStart``, The Littlest JupyterHub's
``jupyterhub_config.d``) for homes that already hold an edition.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MARKER = ".course-edition"  # course_tools/release.py writes it into every edition
INTERVAL_S = 2.0


def editions(root: Path) -> list[Path]:
    """The editions directly under ``root`` (nbgitpuller clones each into a folder there)."""
    return sorted(p.parent for p in Path(root).glob(f"*/{MARKER}"))


def checkout_stamp(edition: Path) -> int | None:
    """Changes whenever git checks files out or merges (the index is rewritten)."""
    try:
        return (edition / ".git" / "index").stat().st_mtime_ns
    except OSError:
        return None


class WorkCopies:
    """Runs ``learner_files.py sync`` once per change of each edition's checkout."""

    def __init__(self, root: Path):
        self.root = Path(root).expanduser()
        self.seen: dict[Path, int | None] = {}
        self.running: dict[Path, subprocess.Popen] = {}

    def _sync(self, edition: Path) -> subprocess.Popen | None:
        script = edition / "tools" / "learner_files.py"
        if not script.is_file():
            return None
        return subprocess.Popen(
            [sys.executable, str(script), "sync"],
            cwd=edition,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def tick(self) -> None:
        """One look, never blocking: a sync still running is left to finish first."""
        for edition, proc in list(self.running.items()):
            if proc.poll() is not None:
                del self.running[edition]
        for edition in editions(self.root):
            stamp = checkout_stamp(edition)
            if stamp is None or edition in self.running or self.seen.get(edition) == stamp:
                continue
            proc = self._sync(edition)
            self.seen[edition] = stamp
            if proc is not None:
                self.running[edition] = proc

    def once(self) -> None:
        """One pass, waiting for every sync (the start hook)."""
        self.tick()
        for proc in self.running.values():
            proc.wait()
        self.running.clear()


def _jupyter_server_extension_points():
    return [{"module": "work_copies"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from tornado.ioloop import PeriodicCallback

    copies = WorkCopies(Path(serverapp.root_dir))
    copies.tick()
    serverapp.work_copies = PeriodicCallback(copies.tick, INTERVAL_S * 1000)
    serverapp.work_copies.start()
    serverapp.log.info("work_copies: the course's work/ copies are made in %s", copies.root)


if __name__ == "__main__":
    WorkCopies(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home()).once()
