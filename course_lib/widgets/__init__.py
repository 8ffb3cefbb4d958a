"""Interactive explorers (ipywidgets) used by the lecture notebooks.

Each chapter's widgets live in their own module (e.g. ``course_lib.widgets.explorer`` for
chapter 02's attention explorer) as thin layers over the rest of ``course_lib``: the
numbers come from the library, the widgets only choose inputs and draw. Every explorer
also runs headless (under nbval), draws with matplotlib into an embedded PNG (no CDN, no
network), and carries CSS class names so that a browser test can find its parts.
"""
