"""The repository's scripts (tools/, benchmarks/) imported from their files, for tests.

They are not packages (a learner runs them as ``python benchmarks/notebook_times.py``), so
tests load them by path:

    notebook_times = load_script("benchmarks/notebook_times.py")
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative_path: str) -> ModuleType:
    """A fresh module object from ``ROOT / relative_path`` (run once per call)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
