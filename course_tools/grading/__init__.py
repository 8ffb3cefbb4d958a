"""The instructor grader, ``course-grade`` (``python -m course_tools.grading``): see ``docs/instructors.md``."""
