"""course_tools.testmap on small trees: the mirror rule, the import graph, the README."""

from __future__ import annotations

from pathlib import Path

import pytest

from course_tools import testmap


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def tree(tmp_path):
    return _tree(
        tmp_path,
        {
            "course_lib/__init__.py": "",
            "course_lib/base.py": "X = 1\n",
            "course_lib/mid.py": "from .base import X\n",
            "course_lib/pkg/__init__.py": "from .inner import Y\n",
            "course_lib/pkg/inner.py": "from course_lib import mid\nY = 2\n",
            "course_tools/__init__.py": "",
            "course_tools/tool.py": "from course_lib.pkg import Y\n",
            "tools/script.py": "import course_lib.base\n",
            "tests/course_lib/test_base.py": "",
            "tests/course_lib/test_mid.py": "",
            "tests/course_lib/pkg/test_inner.py": "",
            "tests/tools/test_script.py": "",
            "solutions/README.md": "",  # what makes a course folder (course_tools.course)
        },
    )


def test_the_mirrored_path_of_a_module():
    assert testmap.test_file("course_lib/gpt/bpe.py") == "tests/course_lib/gpt/test_bpe.py"
    assert testmap.test_file("tools/bootstrap.py") == "tests/tools/test_bootstrap.py"


def test_a_module_without_its_test_file_is_found(tree):
    assert testmap.modules(tree) == [
        "course_lib/base.py",
        "course_lib/mid.py",
        "course_lib/pkg/inner.py",
        "course_tools/tool.py",
        "tools/script.py",
    ]
    assert testmap.missing_tests(tree) == ["course_tools/tool.py"]
    (tree / "tests/course_tools").mkdir()
    (tree / "tests/course_tools/test_tool.py").write_text("")
    assert testmap.missing_tests(tree) == []


def test_importers_follow_relative_imports_and_packages_transitively(tree):
    users = testmap.importers(tree)
    # base <- mid (relative) <- pkg.inner <- pkg/__init__ <- tool; base <- script (absolute)
    assert users["course_lib/base.py"] == {
        "course_lib/mid.py",
        "course_lib/pkg/inner.py",
        "course_tools/tool.py",
        "tools/script.py",
    }
    assert users["course_tools/tool.py"] == set()
    assert testmap.tests_for("course_lib/mid.py", tree) == [
        "tests/course_lib/test_mid.py",
        "tests/course_lib/pkg/test_inner.py",
        "tests/course_tools/test_tool.py",
    ]


def test_the_readme_lists_every_module_with_its_tests_and_importers(tree):
    text = testmap.readme(tree)
    assert "| `course_lib/mid.py` | `tests/course_lib/test_mid.py` |" in text
    assert "`course_lib/pkg/inner`, `course_tools/tool`" in text
    for folder in testmap.FOLDERS:
        assert f"`{folder}/`" in text


def test_the_command_prints_the_tests_to_run_and_refuses_a_non_module(capsys):
    assert testmap.main(["course_lib/attention.py"]) == 0
    line = capsys.readouterr().out
    assert line.startswith(".venv/bin/python -m pytest -q tests/course_lib/test_attention.py")
    assert testmap.main(["README.md"]) == 2
    assert "is not a module" in capsys.readouterr().err
