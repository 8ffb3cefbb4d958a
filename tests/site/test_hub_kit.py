"""The hub kit (hub/): the image recipe, the Zero to JupyterHub and Littlest JupyterHub
configurations and the work/ copies' server extension, checked as files (no image is built:
that needs a registry and the network). The install steps are the script CI runs."""

from __future__ import annotations

import json
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
    assert re.search(rf"^RUN bash /tmp/course/{re.escape(INSTALL)} python", docker, re.M)
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in docker
    assert "nbgitpuller" in docker and "smollm2 import main" in docker
    tljh = (HUB / "tljh.sh").read_text(encoding="utf-8")
    assert f"bash {INSTALL} " in tljh and "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in tljh
    for script in (ROOT / INSTALL, HUB / "tljh.sh", ROOT / ".ci" / "run"):
        subprocess.run(["bash", "-n", str(script)], check=True)
    # every file the image copies from the course exists
    for rel in re.findall(r"/tmp/course/([\w./-]+)", docker):
        assert (ROOT / rel).exists(), rel


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
    limit_gb = float(single["memory"]["limit"].removesuffix("G"))
    assert len(chapters) >= 12 and both / 1024 + 0.2 <= limit_gb, (both, limit_gb)
    assert single["memory"]["guarantee"] == "1G"
    tljh = (HUB / "tljh.sh").read_text(encoding="utf-8")
    assert f"tljh-config set limits.memory {single['memory']['limit']}" in tljh
    assert single["extraEnv"]["COURSE_BUDGET"] == "ci"
    assert single["extraEnv"]["NBGITPULLER_APP"] == "lab"
    assert single["lifecycleHooks"]["postStart"]["exec"]["command"][-1] == "work_copies"
    seen = {}
    exec(
        compile((HUB / "tljh_course.py").read_text(), "tljh_course.py", "exec"),
        {"get_config": lambda: type("C", (), {"Spawner": type("S", (), {"environment": seen})})},
    )
    assert seen["COURSE_BUDGET"] == "ci" and seen["NBGITPULLER_APP"] == "lab"
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
