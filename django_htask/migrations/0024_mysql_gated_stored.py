import functools

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

#: The gated tasks of this migration's time (``GATED_PREDICATE`` then).
GATED = (
    "status = 'pending' AND (lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)"
)


def mysql_gated_column(stored: bool):  # type: ignore[no-untyped-def]
    """The step that makes MySQL's gated column stored (or virtual again), only on
    MySQL/MariaDB."""

    def step(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        from django_htask.store.mysql import (  # noqa: PLC0415
            add_gated_column,
            drop_gated_column,
            on_mysql,
        )

        on_mysql(schema_editor, drop_gated_column)
        on_mysql(schema_editor, functools.partial(add_gated_column, predicate=GATED, stored=stored))

    return step


class Migration(migrations.Migration):
    """MySQL/MariaDB only: the gated tasks' column stored rather than virtual, so that
    reads through its index see the rows another transaction is changing
    (django_htask/store/mysql.py, ``GATED_COLUMN``)."""

    dependencies = [
        ("django_htask", "0023_task_waited"),
    ]

    operations = [
        migrations.RunPython(mysql_gated_column(True), mysql_gated_column(False)),
    ]
