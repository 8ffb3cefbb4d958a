"""The lowest versions pyproject.toml claims, as pip constraints (``name==floor``).

    python .ci/floors.py            print the constraints (one per line, markers kept)
    python .ci/floors.py --verify   exit 1 unless every installed version equals its floor

Used by ``.ci/min-versions``: the floors in pyproject.toml are tested, not hoped for.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        from pip._vendor import tomli as tomllib
    return tomllib.loads(path.read_text(encoding="utf-8"))


def floors() -> list[tuple[str, str, str]]:
    """(name, floor, marker) for every requirement with a ``>=`` bound."""
    project = _toml(ROOT / "pyproject.toml")["project"]
    specs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    out = []
    for spec in specs:
        req, _, marker = spec.partition(";")
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*>=\s*([0-9][^,\s]*)", req)
        if m:
            out.append((m.group(1), m.group(2), marker.strip()))
    return out


def main(argv: list[str]) -> int:
    if "--verify" not in argv:
        for name, floor, marker in floors():
            print(f"{name}=={floor}" + (f"; {marker}" if marker else ""))
        return 0
    bad = []
    for name, floor, marker in floors():
        if marker and "Linux" in marker and not sys.platform.startswith("linux"):
            continue
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            bad.append(f"{name}: not installed (floor {floor})")
            continue
        if have.split("+")[0] != floor and not have.startswith(floor + "."):
            bad.append(f"{name}: {have} installed, floor {floor}")
        print(f"{name:<14} {have}")
    for line in bad:
        print("error:", line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
