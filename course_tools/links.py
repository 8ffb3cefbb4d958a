"""Where the course lives online, in one place: pyproject.toml's ``[project.urls] Repository``
and ``[tool.course] branch``. The Colab cell of every notebook, the launch buttons and badges
of the website and the README's badge table are derived from them (never typed by hand).

Change the repository there, then run ``python -m course_tools.notebook_headers --apply``
(it rewrites every notebook's Colab cell) and ``make site``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path


def load_toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            from pip._vendor import tomli as tomllib
    return tomllib.loads(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Links:
    """The course's repository and its branch. Any git address works for cloning and for
    nbgitpuller (https on any host, ``git@host:path``, ``ssh://``, ``file://``, a local
    path); Colab opens GitHub repositories only, and Binder https ones only: for other
    addresses those links are left out (:attr:`github` is then None)."""

    repository: str
    branch: str = "main"

    @classmethod
    def of(cls, address: str, branch: str = "main") -> Links:
        """``address`` as given, checked (:func:`check_address`); a GitHub https address
        without its ``.git``, as the course's own is written."""
        address = check_address(address)
        if re.fullmatch(r"https://github\.com/[^/]+/[^/]+?(\.git)?", address):
            address = address.removesuffix(".git")
        return cls(address, branch)

    @classmethod
    def load(cls, root: str | Path) -> Links:
        data = load_toml(Path(root) / "pyproject.toml")
        repo = data.get("project", {}).get("urls", {}).get("Repository")
        if not repo:
            raise ValueError("pyproject.toml has no [project.urls] Repository")
        branch = data.get("tool", {}).get("course", {}).get("branch", "main")
        return cls.of(repo, branch)

    @property
    def github(self) -> str | None:
        """``OWNER/NAME`` for a GitHub https address (how Colab names it), else None."""
        m = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)(\.git)?", self.repository)
        return m.group(1) if m else None

    @property
    def clone_url(self) -> str:
        """What ``git clone`` takes: a GitHub address with ``.git``, any other as given."""
        return self.repository + ".git" if self.github else self.repository

    @property
    def folder(self) -> str:
        """The folder a clone makes (``attention-workshop``)."""
        return clone_folder(self.clone_url)

    def colab(self, path: str) -> str | None:
        """Open ``path`` (e.g. ``notebooks/02_qkv_attention.ipynb``) in Google Colab
        (GitHub only: None for another host)."""
        if not self.github:
            return None
        return f"https://colab.research.google.com/github/{self.github}/blob/{self.branch}/{path}"

    def binder(self, path: str) -> str | None:
        """Open ``path`` in JupyterLab on mybinder.org (built from environment.yml): a
        GitHub repository by name, any other https one by its address; None otherwise (a
        path or an ssh address mybinder.org cannot reach)."""
        tail = f"{self.branch}?urlpath=lab/tree/{path}"
        if self.github:
            return f"https://mybinder.org/v2/gh/{self.github}/{tail}"
        if self.repository.startswith("https://"):
            from urllib.parse import quote

            return f"https://mybinder.org/v2/git/{quote(self.clone_url, safe='')}/{tail}"
        return None

    def nbgitpuller(self, hub: str, path: str = "notebooks/00_setup.ipynb") -> str:
        """A JupyterHub link that clones (or updates) the course into each learner's home
        with nbgitpuller and opens ``path`` in JupyterLab; a learner's changes are kept."""
        return nbgitpuller_link(hub, self.clone_url, self.branch, path)

    def colab_badge(self, path: str) -> str:
        url = self.colab(path)
        if url is None:
            return ""
        return (
            f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"
        )

    def binder_badge(self, path: str) -> str:
        url = self.binder(path)
        return f"[![Binder](https://mybinder.org/badge_logo.svg)]({url})" if url else ""


# A git address: https or http on any host, ssh:// or git@host:path, file://, or a path.
_ADDRESS = re.compile(
    r"(https?://[^\s/@]+(:\d+)?/[^\s]+|ssh://[^\s]+|git://[^\s]+|[\w.-]+@[\w.-]+:[^\s]+"
    r"|file://[^\s]+|(/|\./|\.\./|~/)[^\s]*)"
)


def check_address(address: str) -> str:
    """``address`` without a trailing slash, or ValueError when it is no git address."""
    address = (address or "").strip().rstrip("/")
    if not _ADDRESS.fullmatch(address):
        raise ValueError(
            f"not a git address: {address!r} (https://host/ORG/NAME, git@host:ORG/NAME.git, "
            "ssh://..., file:///path/NAME.git or /path/NAME.git)"
        )
    clone_folder(address)
    return address


def clone_folder(repository: str) -> str:
    """The folder a clone of ``repository`` gets: its address's last part without ``.git``
    (``https://host/org/attention-workshop.git`` and ``/srv/attention-workshop`` both give
    ``attention-workshop``)."""
    name = repository.strip().rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    if not name or name in (".", ".."):
        raise ValueError(f"no folder name in the repository address {repository!r}")
    return name


def nbgitpuller_link(
    hub: str, repository: str, branch: str = "main", path: str = "notebooks/00_setup.ipynb"
) -> str:
    """The nbgitpuller link for ``repository`` (any git address: with or without ``.git``,
    a file path, any branch) on the JupyterHub ``hub``.

    nbgitpuller clones into ``targetpath`` (by default the address's last part, *with*
    ``.git`` when it ends so) and then opens ``urlpath``: the link names the folder in both,
    so that the notebook it opens is the one it cloned (a hub's ``NBGITPULLER_PARENTPATH``
    must stay unset).
    """
    from urllib.parse import quote, urlencode

    hub = hub.rstrip("/")
    if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", hub):
        raise ValueError(f"not a JupyterHub address: {hub!r} (e.g. https://hub.example.org)")
    repository = repository.strip().rstrip("/")
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", branch):
        raise ValueError(f"not a branch name: {branch!r}")
    folder = clone_folder(repository)
    query = urlencode(
        {
            "repo": repository,
            "branch": branch,
            "targetpath": folder,
            "urlpath": f"lab/tree/{folder}/{path}",
        },
        quote_via=quote,
    )
    return f"{hub}/hub/user-redirect/git-pull?{query}"


# --------------------------------------------------------------------------- the placeholder

PLACEHOLDER_OWNER = "OWNER"  # pyproject.toml's address until the course is published
PLACEHOLDER_HELP = (
    "set it in one step: python -m course_tools.links --set https://github.com/YOU/NAME "
    "[--branch main]"
)


PLACEHOLDER_OWNERS = (PLACEHOLDER_OWNER, "YOU", "ME", "USER", "ORG")  # and YOUR-anything
EXAMPLE_HOST = re.compile(r"(.+\.)?example(\.(com|org|net|edu))?", re.I)  # RFC 2606


def is_placeholder(links: Links) -> bool:
    """Whether the address is still a placeholder: ``https://github.com/OWNER/...`` (the
    course's own until it is published), the docs' ``YOUR-ORG``, ``YOU`` or ``ME``, or a
    host reserved for examples (``example.org``, ``hub.example.com``)."""
    from urllib.parse import urlsplit

    address = links.repository
    scp = re.fullmatch(r"([\w.-]+)@([\w.-]+):(.*)", address)  # git@host:ORG/NAME
    parts = urlsplit(f"ssh://{scp[1]}@{scp[2]}/{scp[3]}" if scp else address)
    owner = parts.path.strip("/").split("/")[0]
    if owner in PLACEHOLDER_OWNERS or owner.upper().startswith("YOUR-"):
        return True
    return bool(parts.hostname and EXAMPLE_HOST.fullmatch(parts.hostname))


def release_address_problem(address: str) -> str | None:
    """Why ``address`` cannot be an edition's (not a git address, or still a placeholder),
    else None. ``make release`` asks before it installs anything (tools/bootstrap.py), and
    the release itself again."""
    try:
        links = Links.of(address)
    except ValueError as err:
        return str(err)
    if is_placeholder(links):
        return (
            f"the edition's address is still the placeholder {links.repository}: name where "
            "it will live, `make release RELEASE_REPOSITORY=https://github.com/NAME/REPO` (any "
            "git address: another host, git@host:ORG/NAME.git, /srv/NAME.git), or set the "
            "course's own address: python -m course_tools.links --set URL"
        )
    return None


def release_build() -> bool:
    """A release build (``COURSE_RELEASE=1``, as a publishing CI job sets it): the
    placeholder address is an error there, a warning in development."""
    import os

    return os.environ.get("COURSE_RELEASE", "") not in ("", "0")


def check_published(links: Links, what: str = "the course") -> str | None:
    """None when the address is real; a warning text in development; raises ValueError on a
    release build while the address is still the placeholder."""
    if not is_placeholder(links):
        return None
    msg = (
        f"{what}'s Colab, Binder and GitHub links point at the placeholder "
        f"{links.repository}: {PLACEHOLDER_HELP}"
    )
    if release_build():
        raise ValueError(msg + " (COURSE_RELEASE=1: a release build refuses the placeholder)")
    return "warning: " + msg


# --------------------------------------------------------------------------- setting it

_REPOSITORY_LINE = re.compile(r'^(Repository\s*=\s*)"[^"]*"', re.M)
_BRANCH_LINE = re.compile(r'^(branch\s*=\s*)"[^"]*"', re.M)
GITHUB = re.compile(r"https://github\.com/[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+")


def set_address(root: Path, repository: str, branch: str | None = None) -> Links:
    """Write the repository (and branch) into pyproject.toml, keeping everything else."""
    repository = repository.strip().rstrip("/").removesuffix(".git")
    if not GITHUB.fullmatch(repository):
        raise ValueError(
            f"the repository must be https://github.com/OWNER/NAME (Colab and Binder open "
            f"GitHub repositories), got {repository!r}"
        )
    path = Path(root) / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    if not _REPOSITORY_LINE.search(text):
        raise ValueError('pyproject.toml has no `Repository = "..."` line under [project.urls]')
    text = _REPOSITORY_LINE.sub(lambda m: f'{m.group(1)}"{repository}"', text, count=1)
    if branch is not None:
        if not re.fullmatch(r"[A-Za-z0-9._/-]+", branch):
            raise ValueError(f"not a branch name: {branch!r}")
        text = _BRANCH_LINE.sub(lambda m: f'{m.group(1)}"{branch}"', text, count=1)
    path.write_text(text, encoding="utf-8")
    return Links.load(root)


def main(argv: list[str] | None = None) -> int:
    """``python -m course_tools.links --set URL [--branch B]``: the course's address, set in
    pyproject.toml and carried everywhere it appears (every notebook's Colab cell, the
    README's course map badges; the website reads it when it is built)."""
    import argparse
    import sys

    from .course import CourseRootError, course_root

    parser = argparse.ArgumentParser(
        prog="python -m course_tools.links",
        description="Show or set where the course lives online (Colab, Binder, GitHub links).",
    )
    parser.add_argument("--set", dest="repository", metavar="URL", default=None)
    parser.add_argument("--branch", default=None)
    parser.add_argument("--course", type=Path, default=None, metavar="ROOT")
    parser.add_argument(
        "--nbgitpuller",
        metavar="HUB",
        default=None,
        help="print the JupyterHub link that puts the course (or --repository's edition) in "
        "every learner's home, e.g. --nbgitpuller https://hub.example.org",
    )
    parser.add_argument(
        "--repository", default=None, help="with --nbgitpuller: the edition's address"
    )
    args = parser.parse_args(argv)
    try:
        root = course_root(args.course)
        if args.nbgitpuller:
            links = Links.load(root)
            repository = links.clone_url
            branch = args.branch or links.branch
            if args.repository:  # any git address, kept as given (a GitHub one or not)
                repository = args.repository.strip().rstrip("/")
                branch = args.branch or "main"
                links = Links(repository.removesuffix(".git"), branch)
            note = check_published(links, "the link")
            if note:
                print(note, file=sys.stderr)
            print(nbgitpuller_link(args.nbgitpuller, repository, branch))
            return 0
        if args.repository is None and args.branch is None:
            links = Links.load(root)
            print(f"{links.repository} (branch {links.branch})")
            note = check_published(links)
            if note:
                print(note, file=sys.stderr)
            return 0
        if args.repository is None:
            args.repository = Links.load(root).repository
        links = set_address(root, args.repository, args.branch)
    except (CourseRootError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from . import notebook_headers

    print(f"address: {links.repository} (branch {links.branch})")
    notebook_headers.run(root, apply=True)
    notebook_headers.update_readme(root, apply=True)
    print("The website takes it when it is next built (`make site`). Commit the result.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
