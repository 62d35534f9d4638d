import functools

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

#: The gated tasks of this migration's time (``GATED_PREDICATE`` then).
GATED = "status = 'pending' AND (lock IS NOT NULL OR max_running IS NOT NULL)"


def add_mysql_gated_column(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """MySQL and MariaDB have no partial index (Django makes ``htask_task_gated`` a
    plain one there, its condition dropped): an indexed virtual column takes its place
    (django_htask/store/mysql.py, ``GATED_COLUMN``)."""
    from django_htask.store.mysql import add_gated_column, on_mysql  # noqa: PLC0415

    on_mysql(schema_editor, functools.partial(add_gated_column, predicate=GATED, stored=False))


def drop_mysql_gated_column(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    from django_htask.store.mysql import drop_gated_column, on_mysql  # noqa: PLC0415

    on_mysql(schema_editor, drop_gated_column)


class Migration(migrations.Migration):
    """MySQL/MariaDB only: the gated tasks' index, so that a claim learns whether any
    due task has a lock or a limit without reading every pending task."""

    dependencies = [
        ("django_htask", "0013_task_indexes"),
    ]

    operations = [
        migrations.RunPython(add_mysql_gated_column, drop_mysql_gated_column),
    ]
