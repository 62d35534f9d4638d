"""What a new user trips over in the first hour, run as they run it (``python -m
django …`` or ``python -c`` in a subprocess), and what they read then."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import manage, python

MIGRATE = "run `manage.py migrate`"
NOOP = "tests.acceptance.app.tasks:noop"


# -- forgetting migrate ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "table"),
    [
        (["htask", "list"], "django_htask_schedule"),
        (["htask", "status"], "django_htask_node"),
        (["htask", "health"], "django_htask_node"),
    ],
)
def test_a_command_before_migrate_says_to_run_migrate(
    tmp_path: Path, args: list[str], table: str
) -> None:
    done = manage(tmp_path, "", *args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"lacks django_htask's table {table}: {MIGRATE}" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_runscheduler_before_migrate_says_to_run_migrate(tmp_path: Path) -> None:
    done = manage(tmp_path, "", "runscheduler")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("CommandError: the database 'sqlite ")
    assert "not applied: 0001_initial, " in done.stderr
    assert done.stderr.rstrip().endswith(MIGRATE)


def test_schedule_before_migrate_raises_not_migrated(tmp_path: Path) -> None:
    code = (
        "import django; django.setup()\n"
        "from django_htask import schedule\n"
        "from django_htask.exceptions import NotMigrated\n"
        "try:\n"
        f"    schedule({NOOP!r}, 'hello')\n"
        "except NotMigrated as exc:\n"
        "    print(exc)\n"
    )
    done = python(tmp_path, "", "-c", code)
    assert done.returncode == 0, done.stderr
    database = tmp_path / "db.sqlite3"
    assert done.stdout == (
        f"the database 'sqlite {database}' lacks django_htask's table django_htask_task: "
        f"{MIGRATE}\n"
    )
