from typing import Any

from django.db import migrations, models
from django.db.models import F

NOT_ENDED = models.Q(
    ("status", "pending"), ("status", "waiting"), ("status", "running"), _connector="OR"
)
#: The indexes that begin with the status, before (every task) and after (partial: the
#: rows each serves), and the index of the ended tasks, as models.task declares them.
SWAPPED = (
    (
        models.Index(fields=["status", "run_at"], name="htask_task_due"),
        models.Index(fields=["status", "run_at"], condition=NOT_ENDED, name="htask_task_due"),
    ),
    (
        models.Index(fields=["status", "-priority", "run_at", "id"], name="htask_task_claim"),
        models.Index(
            fields=["status", "-priority", "run_at", "id"],
            condition=models.Q(("status", "pending")),
            name="htask_task_claim",
        ),
    ),
)
ENDED = models.Index(
    condition=models.Q(("finished_at__isnull", False)),
    fields=["status", "finished_at"],
    name="htask_task_ended",
)


def node_of_running(apps: Any, schema_editor: Any) -> None:
    # The tasks running as this applies end with a success that writes no run row:
    # their node is the one holding them.
    task = apps.get_model("django_htask", "Task")
    task.objects.using(schema_editor.connection.alias).filter(locked_by__isnull=False).update(
        node=F("locked_by")
    )


def indexes(apps: Any, schema_editor: Any) -> None:
    """The indexes that begin with the status made partial, the ended tasks' index
    added. On PostgreSQL each is built CONCURRENTLY (a plain CREATE INDEX would block
    every claim while it reads a table of months of history), a new one beside the old,
    which claims read until it is dropped. MySQL/MariaDB drop an index's condition:
    theirs stay as they are."""
    task = apps.get_model("django_htask", "Task")
    vendor = schema_editor.connection.vendor
    schema_editor.add_index(task, ENDED, **_concurrently(vendor))
    if vendor == "mysql":
        return
    for before, after in SWAPPED:
        _swap(schema_editor, task, before, after)


def indexes_back(apps: Any, schema_editor: Any) -> None:
    task = apps.get_model("django_htask", "Task")
    if schema_editor.connection.vendor != "mysql":
        for before, after in SWAPPED:
            _swap(schema_editor, task, after, before)
    schema_editor.remove_index(task, ENDED)


def _concurrently(vendor: str) -> dict[str, bool]:
    return {"concurrently": True} if vendor == "postgresql" else {}


def _swap(schema_editor: Any, task: Any, old: models.Index, new: models.Index) -> None:
    """Index ``old`` replaced by ``new`` of the same name: on PostgreSQL built under a
    name of its own first, then renamed once ``old`` is gone."""
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.remove_index(task, old)
        schema_editor.add_index(task, new)
        return
    beside = models.Index(fields=new.fields, condition=new.condition, name=f"{new.name}_next")
    schema_editor.add_index(task, beside, concurrently=True)
    schema_editor.remove_index(task, old, concurrently=True)
    quote = schema_editor.quote_name
    schema_editor.execute(f"ALTER INDEX {quote(beside.name)} RENAME TO {quote(new.name)}")


class Migration(migrations.Migration):
    """A task's success writes no run row: the task's row keeps the node that ran its
    last attempt (``node``), as a run row did. Fewer index entries per status change:
    the indexes that begin with the status hold the rows they serve only (the claim
    index the pending tasks, the due index the tasks not ended), and the ended tasks
    have an index by status and end (their successes are counted there, without run
    rows)."""

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("django_htask", "0019_compose"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="node",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text="the node that ran its last attempt (a success writes no run row: "
                "its node is here)",
                max_length=100,
                null=True,
            ),
        ),
        migrations.RunPython(node_of_running, migrations.RunPython.noop),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                *(migrations.RemoveIndex(model_name="task", name=b.name) for b, _a in SWAPPED),
                *(migrations.AddIndex(model_name="task", index=a) for _b, a in SWAPPED),
                migrations.AddIndex(model_name="task", index=ENDED),
            ],
            database_operations=[migrations.RunPython(indexes, indexes_back)],
        ),
    ]
