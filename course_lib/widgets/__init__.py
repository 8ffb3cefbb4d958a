"""Interactive ipywidgets explorers used by the lecture notebooks (thin code over course_lib)."""
