"""The instructor grader, ``course-grade`` (``python -m course_tools.grading``): see
``docs/instructors.md``.

A submission goes one way, from the command line to ``grades.csv``:

``cli`` reads the :mod:`options` and the submissions (:mod:`collect`) and hands each to
:mod:`pool`, which starts one :mod:`worker` process per submission. The worker passes it
through its stages (:data:`course_tools.grading.worker.STAGES`): read it and name its
assignment (:mod:`identity`), plan the notebook to run once (:mod:`plan`, which reads the
learner's code with :mod:`analysis`), draw the cases (:mod:`cases`), run the notebook in a
sandboxed kernel (:mod:`run`, :mod:`sandbox`) whose harvest cells only record outputs
(:mod:`harvest`), and judge what they recorded in the worker (:mod:`scoring`). Rows and
results travel as the typed records of :mod:`protocol`, signed; :mod:`report` writes the
gradebook and its exports, :mod:`class_report` the class's page, :mod:`merge` joins shards.

:data:`LAYERS` is that order as imports go: a module imports only modules before it (a
project test, ``tests/project/test_grading_layers.py``, holds every module to it).
"""

LAYERS = (
    "protocol",  # statuses, bounds, Row/Result, signed lines: imports nothing of the grader's
    "collect",  # the submissions found in folders and archives
    "integrity",  # the course's own files, fingerprinted
    "sandbox",  # bubblewrap, limits, cgroups
    "options",  # the command line, typed (Options)
    "identity",  # a submission's notebook read safely, its assignment named
    "analysis",  # the learner's code read without running it
    "cases",  # the grader's cases, drawn from the seed
    "harvest",  # the kernel's side: inputs written, outputs recorded
    "plan",  # the notebook to run, planned once
    "scoring",  # recorded outputs judged; verdicts
    "run",  # a notebook run in a sandboxed kernel
    "worker",  # one submission through the stages, in a process of its own
    "report",  # the gradebook, feedback files and exports
    "pool",  # the class: workers started, their signed results read
    "class_report",  # the class's page
    "merge",  # shards joined
    "cli",  # course-grade
    "__main__",
)
