"""A site whose scheduler keeps its tables in a database of its own (issue 26, item 3):
``migrate`` on each alias, ``runscheduler`` running a task end to end, the ``htask``
commands, as ``manage.py`` subprocesses on two SQLite files."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import Scheduler, _env, python, wait_until

pytestmark = pytest.mark.slow

SETTINGS = "tests.acceptance.owndb_settings"
#: conftest.python's settings lines: the acceptance settings, then these.
OWN_SETTINGS = f"from {SETTINGS} import *  # noqa: F403"
NOOP = "tests.acceptance.app.tasks:noop"


class Site:
    """The two SQLite files, and ``manage.py`` on them."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.default = tmp_path / "site.sqlite3"
        self.queue = tmp_path / "queue.sqlite3"

    def env(self) -> dict[str, str]:
        return _env(
            self.default,
            DJANGO_SETTINGS_MODULE=SETTINGS,
            HTASK_ACCEPTANCE_QUEUE_DB=str(self.queue),
        )

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.python("-m", "django", *args)

    def python(self, *args: str) -> subprocess.CompletedProcess[str]:
        return python(
            self.tmp_path,
            OWN_SETTINGS,
            *args,
            database=self.default,
            HTASK_ACCEPTANCE_QUEUE_DB=str(self.queue),
        )

    def query(self, db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        connection = sqlite3.connect(db, timeout=10)
        try:
            return connection.execute(sql, params).fetchall()
        finally:
            connection.close()

    def names(self, db: Path, kind: str) -> set[str]:
        rows = self.query(db, "SELECT name FROM sqlite_master WHERE type = ?", kind)
        return {name for (name,) in rows}


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return Site(tmp_path)


def test_migrate_puts_the_tables_and_triggers_on_the_queue_alias_only(site: Site) -> None:
    # The reported bug: the trigger install ran on "default", which the router keeps the
    # tables out of: OperationalError: no such table: django_htask_schedule.
    done = site.manage("migrate", "--database", "default", "--no-input", "-v", "0")
    assert done.returncode == 0, done.stderr
    tables = site.names(site.default, "table")
    assert "auth_user" in tables
    assert not {t for t in tables if t.startswith("django_htask_")}
    assert not site.names(site.default, "trigger")

    done = site.manage("migrate", "--database", "queue", "--no-input", "-v", "0")
    assert done.returncode == 0, done.stderr
    tables = site.names(site.queue, "table")
    assert {"django_htask_schedule", "django_htask_task", "django_htask_run"} <= tables
    assert any("schedule" in name for name in site.names(site.queue, "trigger"))
    # migrate again on "default" (post_migrate runs again): still nothing there
    again = site.manage("migrate", "--database", "default", "--no-input", "-v", "0")
    assert again.returncode == 0, again.stderr
    assert not site.names(site.default, "trigger")


def test_a_node_runs_a_task_scheduled_in_a_transaction_on_the_queue_alias(site: Site) -> None:
    for alias in ("default", "queue"):
        done = site.manage("migrate", "--database", alias, "--no-input", "-v", "0")
        assert done.returncode == 0, done.stderr
    scheduler = Scheduler(site.default, ["--node-id", "own-db-node"], site.env())
    try:
        scheduler.wait_ready()
        assert str(site.queue) in scheduler.stdout  # the banner names the store's database
        touched = site.tmp_path / "touched"
        code = (
            f"import django\ndjango.setup()\nNOOP = {NOOP!r}\n"
            "from django.db import transaction\n"
            "from django_htask import schedule\n"
            "from django_htask.models import Schedule\n"
            "from tests.acceptance.app.tasks import sleep_then_touch\n"
            "with transaction.atomic(using='queue'):\n"
            f"    task = schedule(sleep_then_touch, 0, {str(touched)!r})\n"
            # the router sends a plain save() there too
            "row = Schedule(name='own-nightly', function=NOOP, schedule='@daily')\n"
            "row.set_call(())\n"
            "row.save()\n"
            "print(task.pk)\n"
        )
        made = site.python("-c", code)
        assert made.returncode == 0, made.stderr
        pk = int(made.stdout.strip())
        wait_until(touched.exists, 30, "the task's file")
        wait_until(
            lambda: (
                site.query(site.queue, "SELECT status FROM django_htask_task WHERE id = ?", pk)
                == [("succeeded",)]
            ),
            30,
            "the task's row to say succeeded",
        )
        status = site.manage("htask", "status")
        assert status.returncode == 0, status.stderr
        assert "nodes: 1 live" in status.stdout
        assert "own-db-node" in status.stdout
        listing = site.manage("htask", "list")
        assert listing.returncode == 0, listing.stderr
        assert "own-nightly" in listing.stdout
        assert site.query(site.queue, "SELECT name FROM django_htask_schedule") == [
            ("own-nightly",)
        ]
        health = site.manage("htask", "health", "--node", "own-db-node")
        assert health.returncode == 0, health.stdout + health.stderr
        scheduler.send(signal.SIGTERM)
        assert scheduler.wait_exit() == 0, scheduler.stderr
    finally:
        scheduler.kill()
