"""Exercise generation (``course-exercises``) and the instructor grader (``course-grade``)."""
