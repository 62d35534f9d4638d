from typing import Any

from django.db import migrations, models
from django.db.models import F


def node_of_running(apps: Any, schema_editor: Any) -> None:
    # The tasks running as this applies end with a success that writes no run row:
    # their node is the one holding them.
    task = apps.get_model("django_htask", "Task")
    task.objects.using(schema_editor.connection.alias).filter(locked_by__isnull=False).update(
        node=F("locked_by")
    )


class Migration(migrations.Migration):
    """A task's success writes no run row: the task's row keeps the node that ran its
    last attempt (``node``), as a run row did."""

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
    ]
