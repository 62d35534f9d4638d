# django-htask developer commands. Each target installs what it needs into .venv first.
#   make example   run the example project (SQLite) with the scheduler: Python only
#   make test      every check CI runs: lint, types, migrations, docs, all tests,
#                  then the tests again on Django 6.0 (SQLite) and 6.1 (PostgreSQL)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# What `make example` needs: the package alone, no system package (see below).
EXAMPLE_STAMP := $(VENV)/.example-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# Interpreters for the Django 6 runs (Django 6 needs Python >= 3.12).
PYENV_ROOT ?= $(HOME)/.pyenv
TOX_PYTHONS := $(wildcard $(PYENV_ROOT)/versions/3.12.*/bin/python3 $(PYENV_ROOT)/versions/3.13.*/bin/python3)

.PHONY: system-deps example test lint typecheck migrations docs pytest compat bench tox clean

# mysqlclient (in `dev`) builds against libmariadb-dev: system-deps first.
$(STAMP): pyproject.toml | system-deps
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,postgres]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# The example runs on SQLite with the package's own dependencies (pure Python wheels):
# no root, no apt, no compiler. A .venv made by the target above has them already.
$(EXAMPLE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	rm -f $(VENV)/.example-*
	touch $(EXAMPLE_STAMP)

# Debian packages the tests need (not `make example`): Chromium for the browser tests,
# the PostgreSQL server for the multi-node tests, the MariaDB server for the MariaDB pass
# (and its client library and pkg-config, which mysqlclient builds against). Installed
# only when missing (needs root or sudo, and apt).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps:
	@command -v chromium >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	  && command -v mariadbd mariadb-install-db pkg-config >/dev/null \
	  && pkg-config --exists libmariadb || { \
	  command -v apt-get >/dev/null || { \
	    echo "make test needs Chromium, the PostgreSQL server, the MariaDB server, the"; \
	    echo "MariaDB client library and pkg-config (README: Quick start); without apt-get,"; \
	    echo "install them with your system's packages (make example needs none of them)."; \
	    exit 1; }; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium postgresql \
	    mariadb-server libmariadb-dev pkg-config; }

example: $(EXAMPLE_STAMP)
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

# The whole suite on SQLite, then on a throw-away PostgreSQL 15 cluster the tests that
# use the database (tests marked `postgres` run only there; the others, which use no
# database, are deselected there, saying so; it fails if PostgreSQL cannot start), then
# on a throw-away MariaDB the tests that use the database but for those marked
# `postgres` (the store contract, the integration tests, the admin's browser tests;
# tests marked `mariadb`, three nodes and a kill, run only there).
# The SQLite passes run on both cores, a test file per worker (XDIST): each test there
# has its own database files. On PostgreSQL, each worker has a test database of its own
# on the pass's server; tests/cluster then runs one test at a time on that server, since
# its tests measure how soon several node processes react. The MariaDB pass runs one
# test at a time.
XDIST := -n 2 --dist loadfile
pytest: $(STAMP) system-deps
	$(BIN)/pytest -m "not postgres and not mariadb" $(XDIST)
	$(BIN)/python -m tests.pgcluster -- sh -c \
	  '$(BIN)/pytest --ignore=tests/cluster $(XDIST) && $(BIN)/pytest tests/cluster'
	$(BIN)/python -m tests.mariadbcluster -- $(BIN)/pytest

# The suite again on Django 6.0 (Python 3.12, on SQLite) and 6.1 (Python 3.13, on a
# throw-away PostgreSQL): each Django version on one database, each database on 5.2 and
# a 6.x. HTASK_COMPAT leaves out what the Django version changes nothing in (the tests
# that import no Django, the process-level fault tests; on PostgreSQL, as in the main
# PostgreSQL pass, the tests that use no database too): tests/conftest.py, ONCE_ONLY.
compat: $(STAMP) system-deps
	@test -n "$(TOX_PYTHONS)" || { echo "make compat: no Python 3.12/3.13 under $(PYENV_ROOT)/versions (Django 6 needs them)"; exit 1; }
	HTASK_COMPAT=1 $(BIN)/tox -e py312-django60 --discover $(TOX_PYTHONS) -- -m "not postgres and not mariadb" $(XDIST)
	HTASK_COMPAT=1 $(BIN)/python -m tests.pgcluster -- $(BIN)/tox -e py313-django61 --discover $(TOX_PYTHONS) -- $(XDIST)

test: lint typecheck migrations docs pytest compat

bench: $(STAMP)
	$(BIN)/python bench/engine.py

tox: $(STAMP)
	$(BIN)/tox --discover $(TOX_PYTHONS)

clean:
	rm -rf $(VENV) .tox docs/_build .pytest_cache .mypy_cache .ruff_cache
