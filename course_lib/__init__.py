"""course_lib: the small library behind "Attention, from RNNs to FlashAttention".

Every notebook starts with::

    from course_lib import env
    env.setup()

which must run before anything imports triton (it decides whether Triton runs on a GPU or
in its CPU interpreter). The rest is laid out by chapter (docs/architecture.md):

=======  ===============================  ==========================================
chapter  module                           what it holds
=======  ===============================  ==========================================
01       ``course_lib.rnn``                the recurrence, its gradients, the recall task
02       ``course_lib.attention``          scaled dot-product attention and masks
03       ``course_lib.scaling``            the variance argument for 1/sqrt(d_k)
04       ``course_lib.multihead``          multi-head attention, GQA/MQA, the KV cache
05       ``course_lib.positional``         sinusoidal encodings, RoPE and its scaling
06       ``course_lib.flash``              FlashAttention in Triton, by pass
07       ``course_lib.gpt``                a tiny GPT; real checkpoints (10, 11)
08       ``course_lib.variants``           FlexAttention, masks, ALiBi, windows, MLA, linear
09       ``course_lib.context_parallel``   ring attention and Ulysses over processes
11       ``course_lib.stats``              exact tests, their power, intervals over units
=======  ===============================  ==========================================

Beside the chapters: ``course_lib.experiments`` (the small models the lectures train and
measure: coreference, recall, extrapolation), ``course_lib.checks`` and
``course_lib.widgets`` (the exercises' checks and the lectures' widgets, thin over the
modules above), ``course_lib.progress`` (the learner's self-check) and the foundation every
module uses (``env``, ``validation``, ``timing``). Names follow ``docs/notation.md``. The
grader and the exercise generator are a separate package, ``course_tools``, which this one
never imports.
"""

# The one version of the project: pyproject.toml reads it, the grader writes it into
# grades.csv. Bump it (and CHANGELOG.md) with every release.
__version__ = "0.3.0"
