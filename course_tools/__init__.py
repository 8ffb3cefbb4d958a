"""course_tools: the instructor's and the author's machinery, apart from what learners read.

* :mod:`course_tools.exercises` — ``course-exercises``: generate ``exercises/`` from
  ``solutions/`` (the single source) and check that what is committed is fresh;
* :mod:`course_tools.grading` — ``course-grade``: grade a folder of submitted notebooks;
* :mod:`course_tools.py_to_notebook` — write a notebook as a percent-format script.

Both commands take the course folder on the command line (``--course ROOT``, or ``--root``),
defaulting to the current directory when it is a course checkout, so that a wheel install
(not only an editable one) works. This package imports :mod:`course_lib` (the exercises'
checks); ``course_lib`` never imports this package (``tests/project/test_boundary.py``).
"""

import sys

# jsonschema (imported by nbformat) imports the optional package rfc3987_syntax, which
# compiles a grammar at import time: about 2 s of CPU in every process, for a URI format
# check nbformat never uses. Every course_tools command skips it (as the grader's
# processes did already, see course_tools/grading/worker.py).
# (A None entry blocks the import, as documented; typeshed types sys.modules as modules only.)
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

from course_lib import __version__  # noqa: E402

__all__ = ["__version__"]
