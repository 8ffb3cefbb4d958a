"""The tests are laid out as the modules are: one test file per module at the mirrored path,
every other test folder described, and tests/README.md written from the tree."""

from __future__ import annotations

from pathlib import Path

from course_tools import testmap

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_has_its_test_file_at_the_mirrored_path():
    missing = testmap.missing_tests(ROOT)
    assert not missing, (
        "modules without a test file at the mirrored path (course_lib/x/y.py -> "
        f"tests/course_lib/x/test_y.py): {[(m, testmap.test_file(m)) for m in missing]}"
    )


def test_every_test_folder_is_a_package_mirror_or_described():
    folders = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").iterdir() if p.is_dir()}
    folders -= {"tests/__pycache__"}
    mirrors = {f"tests/{package}" for package in testmap.PACKAGES}
    assert folders - mirrors == set(testmap.FOLDERS), (
        "a folder of tests/ that is neither a package's mirror nor described in "
        f"course_tools/testmap.py FOLDERS: {sorted(folders - mirrors ^ set(testmap.FOLDERS))}"
    )


def test_the_tests_readme_is_the_maps_output():
    written = (ROOT / testmap.README).read_text(encoding="utf-8")
    assert written == testmap.readme(ROOT), (
        "tests/README.md is not what the tree says: run python -m course_tools.testmap --write"
    )
