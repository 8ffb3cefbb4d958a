"""Visible, in-notebook checks of each chapter's exercises.

``check("02.1", numpy_attention)`` runs exercise 02.1's cases on your function and prints
feedback. Each chapter declares its exercises in ``course_lib/checks/chNN.py`` with the
small framework in :mod:`course_lib.checks.core`.
"""

from .core import (
    PLACEHOLDER_MARK,
    Case,
    CheckFailed,
    Exercise,
    Hint,
    all_exercises,
    check,
    compare_values,
    get_exercise,
    register,
    reveal,
)

__all__ = [
    "PLACEHOLDER_MARK",
    "Case",
    "CheckFailed",
    "Exercise",
    "Hint",
    "all_exercises",
    "check",
    "compare_values",
    "get_exercise",
    "register",
    "reveal",
]
