"""Where the course lives online, in one place: pyproject.toml's ``[project.urls] Repository``
and ``[tool.course] branch``. The Colab cell of every notebook, the launch buttons and badges
of the website and the README's badge table are derived from them (never typed by hand).

Change the repository there, then run ``python -m course_tools.notebook_headers --apply``
(it rewrites every notebook's Colab cell) and ``make site``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


def load_toml(path: Path) -> dict:
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            from pip._vendor import tomli as tomllib
    return tomllib.loads(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Links:
    """The course's repository (``https://github.com/OWNER/NAME``) and its branch."""

    repository: str
    branch: str = "main"

    @classmethod
    def load(cls, root: str | Path) -> Links:
        data = load_toml(Path(root) / "pyproject.toml")
        repo = data.get("project", {}).get("urls", {}).get("Repository")
        if not repo:
            raise ValueError("pyproject.toml has no [project.urls] Repository")
        branch = data.get("tool", {}).get("course", {}).get("branch", "main")
        return cls(repo.rstrip("/").removesuffix(".git"), branch)

    @property
    def github(self) -> str:
        """``OWNER/NAME`` (Colab and Binder address GitHub repositories this way)."""
        m = re.fullmatch(r"https://github\.com/([^/]+/[^/]+)", self.repository)
        if not m:
            raise ValueError(
                f"[project.urls] Repository must be https://github.com/OWNER/NAME for Colab "
                f"and Binder links, got {self.repository!r}"
            )
        return m.group(1)

    @property
    def clone_url(self) -> str:
        return self.repository + ".git"

    def colab(self, path: str) -> str:
        """Open ``path`` (e.g. ``notebooks/02_qkv_attention.ipynb``) in Google Colab."""
        return f"https://colab.research.google.com/github/{self.github}/blob/{self.branch}/{path}"

    def binder(self, path: str) -> str:
        """Open ``path`` in JupyterLab on mybinder.org (built from environment.yml)."""
        return f"https://mybinder.org/v2/gh/{self.github}/{self.branch}?urlpath=lab/tree/{path}"

    def colab_badge(self, path: str) -> str:
        return (
            f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({self.colab(path)})"
        )

    def binder_badge(self, path: str) -> str:
        return f"[![Binder](https://mybinder.org/badge_logo.svg)]({self.binder(path)})"
