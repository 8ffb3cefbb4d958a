"""course_lib.gpt as a package (its ``__init__``): every public name of its modules is handed
on, so ``from course_lib import gpt; gpt.GPT`` and ``from course_lib.gpt import GPT`` both
work. Each module's own tests are in its mirrored file (test_model.py, test_training.py, ...)."""

from __future__ import annotations

import importlib

import pytest

from course_lib import gpt


@pytest.mark.parametrize(
    "module",
    [
        "model",
        "generate",
        "data",
        "training",
        "probes",
        "induction",
        "checkpoint",
        "ablations",
        "pretrained",
    ],
)
def test_the_package_hands_on_every_public_name(module):
    sub = importlib.import_module(f"course_lib.gpt.{module}")
    for name in sub.__all__:
        if name == module:  # generate.generate: the package's name is the module
            continue
        assert getattr(gpt, name) is getattr(sub, name), f"course_lib.gpt.{name} is not {module}'s"


def test_the_package_lists_what_it_hands_on():
    assert len(set(gpt.__all__)) == len(gpt.__all__)
    for name in gpt.__all__:
        assert hasattr(gpt, name), name
