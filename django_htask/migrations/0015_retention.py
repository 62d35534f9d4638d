from typing import Any

import django.db.models.deletion
from django.db import migrations, models

#: The pruner's index (models.task.PRUNE_INDEX), as the model declares it.
PRUNE_INDEX = models.Index(
    condition=models.Q(("finished_at__isnull", False)),
    fields=["retention", "status", "finished_at"],
    name="htask_task_prune",
)


def add_prune_index(apps: Any, schema_editor: Any) -> None:
    # Built CONCURRENTLY on PostgreSQL: until this release no finished task was ever
    # deleted, so the table may hold millions of them, and a plain CREATE INDEX would
    # block every claim while it reads them all. InnoDB builds it online by itself.
    task = apps.get_model("django_htask", "Task")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(task, PRUNE_INDEX, concurrently=True)
    else:
        schema_editor.add_index(task, PRUNE_INDEX)


def remove_prune_index(apps: Any, schema_editor: Any) -> None:
    task = apps.get_model("django_htask", "Task")
    schema_editor.remove_index(task, PRUNE_INDEX)


class Migration(migrations.Migration):
    """Finished tasks are deleted once past their retention: the retention a function
    declares is kept on each task it queues, the pruner reads the finished tasks through
    an index of their own, a node's row counts the rows it deleted, and a run's task is
    no constraint in the database (it cost every run written and every task deleted a
    check of the other table)."""

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("django_htask", "0014_mysql_gated_column"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="pruned_at",
            field=models.DateTimeField(
                blank=True, help_text="when it last deleted rows past their retention", null=True
            ),
        ),
        migrations.AddField(
            model_name="node",
            name="pruned_runs",
            field=models.PositiveBigIntegerField(
                db_default=0, default=0, help_text="runs past their retention it deleted"
            ),
        ),
        migrations.AddField(
            model_name="node",
            name="pruned_tasks",
            field=models.PositiveBigIntegerField(
                db_default=0,
                default=0,
                help_text="finished tasks past their retention it deleted",
            ),
        ),
        migrations.AddField(
            model_name="task",
            name="retention",
            field=models.PositiveIntegerField(
                blank=True,
                editable=False,
                help_text="seconds it is kept once it ended (@task(retention=...) when it "
                "was queued); empty: TASK_RETENTION_DAYS; 0: for ever",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="task",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="runs",
                to="django_htask.task",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="task", index=PRUNE_INDEX)],
            database_operations=[migrations.RunPython(add_prune_index, remove_prune_index)],
        ),
    ]
