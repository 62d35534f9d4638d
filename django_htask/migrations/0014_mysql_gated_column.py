from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def add_mysql_gated_column(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """MySQL and MariaDB have no partial index (Django does not create
    ``htask_task_gated`` there): an indexed virtual column stands for it
    (django_htask/store/mysql.py, ``GATED_COLUMN``)."""
    from django_htask.db import holds_tables  # noqa: PLC0415

    if schema_editor.connection.vendor == "mysql" and holds_tables(schema_editor.connection.alias):
        from django_htask.store.mysql import add_gated_column  # noqa: PLC0415

        add_gated_column(schema_editor.connection)


def drop_mysql_gated_column(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    from django_htask.db import holds_tables  # noqa: PLC0415

    if schema_editor.connection.vendor == "mysql" and holds_tables(schema_editor.connection.alias):
        from django_htask.store.mysql import drop_gated_column  # noqa: PLC0415

        drop_gated_column(schema_editor.connection)


class Migration(migrations.Migration):
    """MySQL/MariaDB only: the gated tasks' index (issue 26: a claim read every pending
    task to learn whether any had a lock or a limit)."""

    dependencies = [
        ("django_htask", "0013_task_indexes"),
    ]

    operations = [
        migrations.RunPython(add_mysql_gated_column, drop_mysql_gated_column),
    ]
