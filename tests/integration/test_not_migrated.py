"""``not_migrated``: which database errors mean ``manage.py migrate`` has not run (the
commands and ``schedule()`` as a user runs them: ``tests/acceptance/test_first_hour``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import DatabaseError, OperationalError, ProgrammingError, connection

from django_htask.api import schedule
from django_htask.exceptions import NotMigrated
from django_htask.health import NOT_MIGRATED, Verdict
from django_htask.models import Task
from django_htask.store import not_migrated
from django_htask.store.database.core import OrmStore
from django_htask.store.mysql import MySQLStore
from django_htask.store.postgres import PostgresStore
from django_htask.store.sqlite import SQLiteStore
from tests.integration.testapp import tasks

# The words of each database for a table that does not exist (MySQL's and MariaDB's
# error 1146, as mysqlclient raises it: code and text).
WORDS = [
    (SQLiteStore, OperationalError("no such table: django_htask_task"), "django_htask_task"),
    (SQLiteStore, OperationalError("no such table: main.django_htask_run"), "django_htask_run"),
    (
        PostgresStore,
        ProgrammingError(
            'relation "django_htask_node" does not exist\nLINE 1: SELECT "django_htask_no…'
        ),
        "django_htask_node",
    ),
    (
        PostgresStore,
        ProgrammingError('relation "public.django_htask_schedule" does not exist'),
        "django_htask_schedule",
    ),
    (
        MySQLStore,
        ProgrammingError(1146, "Table 'htask.django_htask_task' doesn't exist"),
        "django_htask_task",
    ),
]


@pytest.mark.parametrize(("store", "error", "table"), WORDS)
def test_each_database_names_the_missing_table_in_its_words(
    store: type[OrmStore], error: DatabaseError, table: str
) -> None:
    assert store.missing_table(error) == table
    others = {SQLiteStore, PostgresStore, MySQLStore} - {store}
    assert [other.missing_table(error) for other in others] == ["", ""]


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("no such table: shop_order"),  # the site's own table
        ProgrammingError('relation "auth_user" does not exist'),
        ProgrammingError(1146, "Table 'shop.shop_order' doesn't exist"),
        OperationalError("database is locked"),
        OperationalError("no such column: django_htask_task.priority"),
        DatabaseError("file is not a database"),
    ],
)
def test_any_other_error_is_left_alone(error: DatabaseError) -> None:
    assert not_migrated(error) is None


@pytest.mark.django_db(transaction=True)
def test_schedule_on_a_database_without_the_task_table_says_to_run_migrate() -> None:
    """The database's own error, on each database of the passes: the table renamed
    away (DDL: MySQL and MariaDB commit it, hence a transactional test), put back."""
    table = Task._meta.db_table
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {quote(table)} RENAME TO {quote('htask_renamed')}")
    try:
        with pytest.raises(NotMigrated) as raised:
            schedule(tasks.add, 1, 2)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {quote('htask_renamed')} RENAME TO {quote(table)}")
    database = f"{connection.vendor} {connection.settings_dict['NAME']}"
    assert str(raised.value) == (
        f"the database {database!r} lacks django_htask's table {table}: run `manage.py migrate`"
    )


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
