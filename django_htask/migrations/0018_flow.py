import functools

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

import django_htask.models

#: The gated tasks before this migration and after it (``GATED_PREDICATE``).
GATED_BEFORE = "status = 'pending' AND (lock IS NOT NULL OR max_running IS NOT NULL)"
GATED_AFTER = (
    "status = 'pending' AND (lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)"
)


def mysql_gated_column(predicate: str | None):  # type: ignore[no-untyped-def]
    """The step that makes MySQL's gated column hold ``predicate`` (None: drop it, for
    Django's plain index of the same name), only on MySQL/MariaDB."""

    def step(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        from django_htask.store.mysql import (  # noqa: PLC0415
            add_gated_column,
            drop_gated_column,
            on_mysql,
        )

        if predicate is None:
            on_mysql(schema_editor, drop_gated_column)
        else:
            add = functools.partial(add_gated_column, predicate=predicate, stored=False)
            on_mysql(schema_editor, add)

    return step


class Migration(migrations.Migration):
    """Flow control (docs/howto-exactly-one.md): a task's per key and rate limit, the
    gated tasks' index widened to the rate-limited ones (on MySQL/MariaDB, the virtual
    column that stands for it, as in 0014), and the starts a rate limit counts."""

    dependencies = [
        ("django_htask", "0017_queues"),
    ]

    operations = [
        migrations.RunPython(mysql_gated_column(None), mysql_gated_column(GATED_BEFORE)),
        migrations.RemoveIndex(model_name="task", name="htask_task_gated"),
        migrations.AddField(
            model_name="task",
            name="per_key",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text=(
                    "the value of its function's per= argument: its max_running and rate "
                    "limit count the tasks of its function with this value apart "
                    "(@task(per=...)); empty: none"
                ),
                max_length=200,
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="task",
            name="rate_limit",
            field=models.PositiveIntegerField(
                blank=True,
                editable=False,
                help_text=(
                    "at most this many tasks of its function (with its per key) start in "
                    "any rate_period seconds on all the nodes (1 to 100000; "
                    "@task(rate_limit=...) when it was queued); empty: no rate limit"
                ),
                null=True,
                validators=[django_htask.models.InRange("rate_limit", 1, 100000)],
            ),
        ),
        migrations.AddField(
            model_name="task",
            name="rate_period",
            field=models.PositiveIntegerField(
                blank=True,
                editable=False,
                help_text="the seconds of its rate limit's window (1 to 86400)",
                null=True,
                validators=[django_htask.models.InRange("rate_period", 1, 86400, "seconds")],
            ),
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(
                    ("status", "pending"),
                    models.Q(
                        ("lock__isnull", False),
                        ("max_running__isnull", False),
                        ("rate_limit__isnull", False),
                        _connector="OR",
                    ),
                ),
                fields=["-priority", "run_at", "id"],
                name="htask_task_gated",
            ),
        ),
        migrations.RunPython(mysql_gated_column(GATED_AFTER), mysql_gated_column(None)),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("rate_limit__isnull", True),
                    models.Q(("rate_limit__gte", 1), ("rate_limit__lte", 100000)),
                    _connector="OR",
                ),
                name="htask_task_rate_limit_range",
                violation_error_message="rate_limit must be from 1 to 100000 or empty",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("rate_period__isnull", True),
                    models.Q(("rate_period__gte", 1), ("rate_period__lte", 86400)),
                    _connector="OR",
                ),
                name="htask_task_rate_period_range",
                violation_error_message="rate_period must be from 1 to 86400 or empty",
            ),
        ),
        migrations.AddConstraint(
            model_name="task",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("rate_limit__isnull", True), ("rate_period__isnull", True)),
                    models.Q(("rate_limit__isnull", False), ("rate_period__isnull", False)),
                    _connector="OR",
                ),
                name="htask_task_rate_whole",
                violation_error_message="rate_limit and rate_period are both set or both empty",
            ),
        ),
        migrations.CreateModel(
            name="RateSlot",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "gate",
                    models.BigIntegerField(
                        help_text="the flow's 64-bit key (its function and per key, hashed)"
                    ),
                ),
                ("started_at", models.DateTimeField(help_text="the claim's instant")),
                ("expires_at", models.DateTimeField(help_text="when the start stops counting")),
            ],
            options={
                "indexes": [
                    models.Index(fields=["gate", "expires_at"], name="htask_rate_slot_gate")
                ],
            },
        ),
    ]
