# Two commands set everything up on a fresh machine with Python 3.11 and make:
#   make demo   create .venv, install, train the digits MLP (examples/digits_mlp.py)
#   make test   create .venv, install, run ruff, pyright, the wheel check and the test suite
#   make docs   create .venv, install the docs extra, build the site into site/ (--strict)
# Editable installs are a plain path in a .pth file (pyproject.toml sets package-dir for
# that): an import hook would hide the package from `pyright --verifytypes` (typings/README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Bytecode for the editable packages, as pip writes it for an installed wheel: where
# PYTHONDONTWRITEBYTECODE is set, Python would otherwise compile every source file on
# every import. Run before each target that imports them; up-to-date files are skipped.
COMPILE := $(PY) -m compileall -q pytreemod adapters

.PHONY: demo test lint dist pytest bench errors-doc docs clean

$(VENV)/.stamp-demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[examples]"
	touch $@

$(VENV)/.stamp-test: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,lint,examples,compare]"
	touch $@

$(VENV)/.stamp-docs: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[docs]"
	touch $@

demo: $(VENV)/.stamp-demo
	$(COMPILE)
	$(PY) examples/digits_mlp.py

lint: $(VENV)/.stamp-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check pytreemod adapters
	$(VENV)/bin/pyright
	$(VENV)/bin/lint-imports

# The sdist and wheel as a user installs them: built, installed, imported and
# type-checked outside the checkout (.ci/check_dist, under a minute).
dist: $(VENV)/.stamp-test
	.ci/check_dist

pytest: $(VENV)/.stamp-test
	$(COMPILE)
	$(PY) -m pytest -n 2 --dist worksteal -q

test: lint dist pytest

bench: $(VENV)/.stamp-test
	$(COMPILE)
	$(PY) -m benchmarks.run_all

docs: $(VENV)/.stamp-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

errors-doc: $(VENV)/.stamp-test
	$(PY) -c 'from pytreemod._errors import errors_markdown; print(errors_markdown())' > docs/errors.md

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site
