"""The course's JupyterLab defaults (.jupyter/lab/user-settings) as a hub-wide overrides.json.

    python hub/lab_overrides.py SETTINGS_DIR    # e.g. $CONDA_DIR/share/jupyter/lab/settings

JupyterLab reads ``<sys-prefix>/share/jupyter/lab/settings/overrides.json`` as every user's
defaults (a learner's own settings still win). Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

USER_SETTINGS = Path(__file__).resolve().parents[1] / ".jupyter" / "lab" / "user-settings"


def overrides(user_settings: Path = USER_SETTINGS) -> dict:
    """{"@scope/extension:plugin": settings} from each ``*.jupyterlab-settings`` file."""
    out = {}
    for path in sorted(user_settings.rglob("*.jupyterlab-settings")):
        rel = path.relative_to(user_settings)
        text = re.sub(r"^\s*//.*$", "", path.read_text(encoding="utf-8"), flags=re.M)
        out[f"{'/'.join(rel.parts[:-1])}:{path.stem}"] = json.loads(text)
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1]) / "overrides.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(overrides(), indent=1) + "\n", encoding="utf-8")
