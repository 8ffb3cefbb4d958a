"""The hub kit (hub/): the image recipe, the Zero to JupyterHub and Littlest JupyterHub
configurations and the work/ copies' server extension, checked as files (no image is built:
that needs a registry and the network). The install steps are the script CI runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HUB = ROOT / "hub"
INSTALL = ".ci/install-python"
sys.path.insert(0, str(HUB))

import lab_overrides  # noqa: E402
import work_copies  # noqa: E402


def test_the_image_and_the_hubs_install_with_the_script_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"bash {INSTALL} .venv/bin/python" in ci
    assert "torch==" not in ci, "torch's version lives in .ci/install-python alone"
    docker = (HUB / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(rf"bash /tmp/src/{re.escape(INSTALL)} python", docker)
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in docker
    assert "nbgitpuller" in docker and "smollm2 import main" in docker
    tljh = (HUB / "tljh.sh").read_text(encoding="utf-8")
    assert f"bash {INSTALL} " in tljh and "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in tljh
    for script in (ROOT / INSTALL, HUB / "tljh.sh", ROOT / ".ci" / "run"):
        subprocess.run(["bash", "-n", str(script)], check=True)
    # every file the image takes from the course exists, and is in the build context
    context = build_context(ROOT)
    for rel in re.findall(r"/tmp/src/([\w./-]+)", docker):
        assert (ROOT / rel).exists(), rel
        assert rel in context or any(c.startswith(rel.rstrip("/") + "/") for c in context), rel


def _dockerignore_rules(text: str) -> list[tuple[bool, str]]:
    """(include?, pattern) per line of a .dockerignore, in order (the last match wins)."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keep = line.startswith("!")
            rules.append((keep, line.lstrip("!").strip("/")))
    return rules


def _ignored(rel: str, rules: list[tuple[bool, str]]) -> bool:
    """Docker's rule: a path is left out when the last pattern matching it or one of the
    folders above it excludes it (``**`` any folders, ``*`` within one name)."""
    parts = rel.split("/")
    ignored = False
    for keep, pattern in rules:
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, "/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            ignored = not keep
    return ignored


def build_context(root: Path) -> set[str]:
    """Every file ``docker build`` would send from ``root`` under its .dockerignore (a
    folder no rule re-includes anything under is not walked)."""
    rules = _dockerignore_rules((root / ".dockerignore").read_text(encoding="utf-8"))
    files = set()
    for folder, dirs, names in os.walk(root):
        here = Path(folder).relative_to(root).as_posix()
        prefix = "" if here == "." else here + "/"
        dirs[:] = [
            d
            for d in dirs
            if not _ignored(prefix + d, rules)
            or any(keep and p.startswith(prefix + d + "/") for keep, p in rules)
        ]
        files |= {prefix + n for n in names if not _ignored(prefix + n, rules)}
    return files


def test_the_images_build_context_holds_no_solution_no_grader_and_no_history():
    """`docker build -f hub/Dockerfile .` once sent the whole folder (a 2.5 GB .venv, .git,
    solutions/) into a layer; the context is now what .dockerignore admits, and the
    Dockerfile copies nothing of it into a layer (it mounts it for one step)."""
    context = build_context(ROOT)
    assert "course_lib/attention.py" in context and "pyproject.toml" in context
    assert ".ci/install-python" in context and "hub/work_copies.py" in context
    for forbidden in (
        "solutions/",
        "course_tools/",
        "tests/",
        ".git/",
        ".venv/",
        "work/",
        "build/",
    ):
        leaked = sorted(f for f in context if f.startswith(forbidden))
        assert not leaked, f"{forbidden} in the image's build context: {leaked[:5]}"
    assert not [f for f in context if "__pycache__" in f or f.endswith(".pyc")]
    docker = (HUB / "Dockerfile").read_text(encoding="utf-8")
    assert not re.search(r"^(COPY|ADD)\b", docker, re.M), "no layer copies the context"
    assert "--mount=type=bind,source=.,target=/tmp/course" in docker
    # the matcher itself: Docker's last-match-wins, with a re-included folder
    rules = _dockerignore_rules("*\n!keep/\n**/secret.txt\n")
    assert _ignored("solutions/a.ipynb", rules) and not _ignored("keep/a.py", rules)
    assert _ignored("keep/deep/secret.txt", rules) and _ignored("top.txt", rules)


def test_the_z2jh_block_and_the_tljh_settings():
    config = yaml.safe_load((HUB / "z2jh.yaml").read_text(encoding="utf-8"))
    single = config["singleuser"]
    assert single["defaultUrl"] == "/lab"
    assert single["cpu"]["guarantee"] <= single["cpu"]["limit"]
    # the limit holds the largest chapter's two kernels (lecture and exercises, the hub's
    # budget) as measured, and the server; the same limit for The Littlest JupyterHub
    sizing = json.loads((ROOT / "benchmarks" / "results" / "kernel_sizing.json").read_text())
    peak = {
        (r["notebook"], r["budget"]): r["peak_rss_mb"] for r in sizing["rows"] if "peak_rss_mb" in r
    }
    chapters = {n.split("/")[1] for n, b in peak if b == "ci"}
    both = max(peak[f"notebooks/{c}", "ci"] + peak[f"solutions/{c}", "ci"] for c in chapters)
    # (GiB throughout: Kubernetes' "Gi"; TLJH's "G" is GiB as well)
    limit = float(single["memory"]["limit"].removesuffix("Gi"))
    guarantee = float(single["memory"]["guarantee"].removesuffix("Gi"))
    server = 0.2  # the JupyterLab server with a learner's notebooks open
    # one more kernel left open: the largest of a chapter without the model (08's lecture)
    one_more = (
        max(
            mib
            for (n, b), mib in peak.items()
            if b == "ci" and not n.split("/")[1].startswith(("10", "11"))
        )
        / 1024
    )
    assert len(chapters) >= 12 and both / 1024 + server + one_more <= limit, (both, limit)
    small = [c for c in chapters if not c.startswith(("10", "11"))]
    most = max(peak[f"notebooks/{c}", "ci"] + peak[f"solutions/{c}", "ci"] for c in small)
    assert most / 1024 + server <= guarantee < limit, (most, guarantee)
    # the guarantees fit the guide's example: 30 learners on 8 cores
    assert 30 * single["cpu"]["guarantee"] <= 8 <= 30 * single["cpu"]["limit"]
    tljh = (HUB / "tljh.sh").read_text(encoding="utf-8")
    assert f"tljh-config set limits.memory {limit:g}G" in tljh
    assert config["cull"]["timeout"] >= 3600 and "services.cull.timeout" in tljh
    culling = json.loads((HUB / "jupyter_server_config.d" / "culling.json").read_text())
    kernels = culling["MappingKernelManager"]
    assert kernels["cull_idle_timeout"] > 0 and kernels["cull_connected"] is False
    docker = (HUB / "Dockerfile").read_text(encoding="utf-8")
    assert "jupyter_server_config.d/culling.json" in docker and "culling.json" in tljh
    assert single["extraEnv"]["COURSE_BUDGET"] == "ci"
    assert single["extraEnv"]["NBGITPULLER_APP"] == "lab"
    assert single["lifecycleHooks"]["postStart"]["exec"]["command"][-1] == "work_copies"
    seen = {}
    exec(
        compile((HUB / "tljh_course.py").read_text(), "tljh_course.py", "exec"),
        {"get_config": lambda: type("C", (), {"Spawner": type("S", (), {"environment": seen})})},
    )
    assert seen["COURSE_BUDGET"] == "ci" and seen["NBGITPULLER_APP"] == "lab"
    alice = type("Sp", (), {"user": type("U", (), {"name": "alice"})})
    assert seen["COURSE_SUBMIT"](alice) == "/srv/hand-in/alice"
    assert "install -d -m 1733 /srv/hand-in" in tljh
    assert single["extraEnv"]["COURSE_SUBMIT"] == "/srv/hand-in"
    (mount,) = single["storage"]["extraVolumeMounts"]
    assert mount["mountPath"] == "/srv/hand-in" and mount["subPath"] == "{username}"
    server = json.loads((HUB / "jupyter_server_config.d" / "work_copies.json").read_text())
    assert server == {"ServerApp": {"jpserver_extensions": {"work_copies": True}}}


def test_the_lab_overrides_are_the_courses_settings():
    found = lab_overrides.overrides()
    assert found["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert len(found) == len(list(lab_overrides.USER_SETTINGS.rglob("*.jupyterlab-settings")))


@pytest.mark.slow  # runs the edition's learner_files.py
def test_the_start_hook_makes_the_work_copies(tmp_path):
    edition = tmp_path / "attention-workshop"
    (edition / "tools").mkdir(parents=True)
    (edition / "exercises").mkdir()
    (edition / ".git").mkdir()
    (edition / ".git" / "index").write_bytes(b"")
    (edition / work_copies.MARKER).write_text("edition\n")
    shutil.copy2(ROOT / "tools" / "learner_files.py", edition / "tools")
    shutil.copy2(ROOT / "exercises" / "00_setup.ipynb", edition / "exercises")
    assert work_copies.editions(tmp_path) == [edition]
    copies = work_copies.WorkCopies(tmp_path)
    copies.once()
    copy = edition / "work" / "00_setup_exercises.ipynb"
    assert copy.exists()
    copy.write_text(copy.read_text() + " ", encoding="utf-8")  # the learner's
    mine = copy.read_text()
    copies.once()  # the checkout did not change: nothing runs
    assert not copies.running and copy.read_text() == mine
