"""course_tools: the instructor's and the author's machinery, apart from what learners read.

* :mod:`course_tools.exercises` — ``course-exercises``: generate ``exercises/`` from
  ``solutions/`` (the single source) and check that what is committed is fresh;
* :mod:`course_tools.grading` — ``course-grade``: grade a folder of submitted notebooks;
* :mod:`course_tools.py_to_notebook` — write a notebook as a percent-format script.

Both commands take the course folder on the command line (``--course ROOT``, or ``--root``),
defaulting to the current directory when it is a course checkout, so that a wheel install
(not only an editable one) works. This package imports :mod:`course_lib` (the exercises'
checks); ``course_lib`` never imports this package (``tests/test_boundary.py``).
"""

from course_lib import __version__

__all__ = ["__version__"]
