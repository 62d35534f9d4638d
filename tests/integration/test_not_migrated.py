"""``not_migrated``: which database errors mean ``manage.py migrate`` has not run (the
commands and ``schedule()`` as a user runs them: ``tests/acceptance/test_first_hour``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import DatabaseError, OperationalError, ProgrammingError, connection

from django_htask.health import NOT_MIGRATED, Verdict
from django_htask.store.database import not_migrated


@pytest.mark.parametrize(
    ("error", "table"),
    [
        (OperationalError("no such table: django_htask_task"), "django_htask_task"),
        (OperationalError("no such table: main.django_htask_run"), "django_htask_run"),
        (
            ProgrammingError(
                'relation "django_htask_node" does not exist\nLINE 1: SELECT "django_htask_no…'
            ),
            "django_htask_node",
        ),
        (
            ProgrammingError('relation "public.django_htask_schedule" does not exist'),
            "django_htask_schedule",
        ),
    ],
)
def test_a_missing_table_of_django_htask_says_to_run_migrate(
    error: DatabaseError, table: str
) -> None:
    found = not_migrated(error)
    assert found is not None
    database = f"{connection.vendor} {connection.settings_dict['NAME']}"
    assert str(found) == (
        f"the database {database!r} lacks django_htask's table {table}: run `manage.py migrate`"
    )


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("no such table: shop_order"),  # the site's own table
        ProgrammingError('relation "auth_user" does not exist'),
        OperationalError("database is locked"),
        OperationalError("no such column: django_htask_task.priority"),
        DatabaseError("file is not a database"),
    ],
)
def test_any_other_error_is_left_alone(error: DatabaseError) -> None:
    assert not_migrated(error) is None


def test_the_endpoint_says_what_to_do_without_naming_the_database() -> None:
    verdict = Verdict(
        checked_at=datetime(2030, 1, 1, tzinfo=UTC),
        max_late=60,
        not_migrated="the database 'sqlite /srv/db' lacks django_htask's table x: run …",
    )
    assert (
        verdict.line()
        == "unhealthy: the database 'sqlite /srv/db' lacks django_htask's table x: run …"
    )
    body = verdict.as_json()
    assert (body["healthy"], body["database"], body["problem"]) == (False, True, NOT_MIGRATED)
