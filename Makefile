# django-htask developer commands. Each target installs what it needs into .venv first.
#   make example   run the example project (SQLite) with the scheduler
#   make test      every check CI runs: lint, types, migrations, docs, all tests
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: example test lint typecheck migrations docs pytest bench tox clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,postgres]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

example: $(STAMP)
	$(BIN)/python example_project/run.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

migrations: $(STAMP)
	PYTHONPATH=. $(BIN)/django-admin makemigrations --check --dry-run --settings=tests.settings

pytest: $(STAMP)
	$(BIN)/pytest

test: lint typecheck migrations docs pytest

bench: $(STAMP)
	$(BIN)/python bench/engine.py

tox: $(STAMP)
	$(BIN)/tox

clean:
	rm -rf $(VENV) docs/_build .pytest_cache .mypy_cache .ruff_cache
