"""course_lib: the small library behind "Attention, from RNNs to FlashAttention".

Every notebook starts with::

    from course_lib import env
    env.setup()

which must run before anything imports triton (it decides whether Triton runs on a GPU or
in its CPU interpreter). The other modules are imported where a chapter needs them:
``course_lib.rnn``, ``course_lib.attention``, ``course_lib.multihead``,
``course_lib.positional``, ``course_lib.flash``, ``course_lib.checks``, ``course_lib.grading``.
"""

__version__ = "0.1.0"
