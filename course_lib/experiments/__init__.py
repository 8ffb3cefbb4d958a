"""The small experiments the lectures train and measure; not the library proper.

================  ===================================================================
module            what it holds
================  ===================================================================
``coref``         chapter 02: a Winograd-style coreference task and a two-layer model
``recall``        chapters 01 and 08: recall with softmax vs linear attention
``extrapolation`` chapter 08: train short, test long, with RoPE or ALiBi
================  ===================================================================

Each builds its data, trains a model of a few thousand parameters on the CPU in seconds,
and returns the numbers a lecture plots and asserts. The attention they use comes from
the chapter modules (``course_lib.attention``, ``course_lib.variants``).
"""
