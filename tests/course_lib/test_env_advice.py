"""One message about Triton, the same in every notebook, the README and the Colab cell."""

from __future__ import annotations

from pathlib import Path

from course_lib import env

ROOT = Path(__file__).resolve().parents[2]


def test_without_triton_one_message(monkeypatch):
    monkeypatch.setattr(env, "triton_installed", lambda: False)
    notes = env.advice(env.Environment("cpu", False, True, 0))
    assert notes == [env.TRITON_HELP]
    assert "interpreter" not in env.TRITON_HELP.split("Triton kernels runs")[0]


def test_with_triton_on_a_cpu_the_interpreter_note(monkeypatch):
    monkeypatch.setattr(env, "triton_installed", lambda: True)
    assert env.advice(env.Environment("cpu", True, True, 0)) == [env.TRITON_INTERPRETER_NOTE]
    assert env.advice(env.Environment("cuda", True, False, 0)) == []


def test_the_colab_route_is_the_same_everywhere():
    from course_tools.links import Links
    from course_tools.notebook_headers import colab_source

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert (
        "Open in Colab" in env.TRITON_HELP and "first cell installs the course" in env.TRITON_HELP
    )
    assert "first cell installs the course" in readme
    assert "Change runtime type" in env.TRITON_HELP and "Change runtime type" in readme
    assert "pip install -e ." not in env.TRITON_HELP  # the old, different Colab recipe
    assert "--no-deps" in colab_source(Links.load(ROOT), "06")
