"""course_lib: the small library behind "Attention, from RNNs to FlashAttention".

Every notebook starts with::

    from course_lib import env
    env.setup()

which must run before anything imports triton (it decides whether Triton runs on a GPU or
in its CPU interpreter). The other modules are imported where a chapter needs them:
``course_lib.rnn``, ``course_lib.attention``, ``course_lib.multihead``,
``course_lib.positional``, ``course_lib.flash``, ``course_lib.checks``. Names follow
``docs/notation.md``. The grader and the exercise generator are a separate package,
``course_tools``, which this one never imports.
"""

# The one version of the project: pyproject.toml reads it, the grader writes it into
# grades.csv. Bump it (and CHANGELOG.md) with every release.
__version__ = "0.2.0"
