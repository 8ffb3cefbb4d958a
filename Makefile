# The two commands of the course. Both create .venv on first use and reuse it after.
#   make lab    set up and open the course in JupyterLab
#   make test   set up and run every test (ruff, unit, notebooks, exercises, grader, browser)
# No make (e.g. Windows)? `python3 tools/bootstrap.py lab` does the same.

PYTHON ?= python3
JOBS ?= 2
BOOT = $(PYTHON) tools/bootstrap.py

.PHONY: lab test setup exercises unit notebooks grade-demo html clean

lab:
	@$(BOOT) lab

test:
	@$(BOOT) test -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env \
		tests notebooks solutions

setup:
	@$(BOOT) setup

# Regenerate exercises/ from solutions/ (the single source); commit the result.
exercises:
	@$(BOOT) exercises

# Quicker loops while writing: unit tests only, or the notebooks only.
unit:
	@$(BOOT) test -n $(JOBS) tests -m "not browser"

notebooks:
	@$(BOOT) test -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env notebooks solutions

# The executed course as HTML under build/html, for reading without running.
html: setup
	@mkdir -p build/html
	.venv/bin/python -m jupyter nbconvert --to html --execute --output-dir build/html \
		notebooks/*.ipynb

clean:
	rm -rf build test-output .pytest_cache
