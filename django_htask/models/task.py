"""A one-off call: :class:`Task`, and the indexes a claim reads."""

from __future__ import annotations

import logging
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from django_htask.clock import stamp
from django_htask.enums import TaskStatus
from django_htask.flow import PER_KEY_MAX_LENGTH, RATE_COUNT_MAX, RATE_PERIOD_MAX
from django_htask.keys import KEY_MAX_LENGTH, LOCK_MAX_LENGTH

from .fields import (
    MAX_ATTEMPTS_MAX,
    MAX_RUNNING_MAX,
    MAX_RUNNING_RANGE,
    MAX_SNOOZES_MAX,
    MAX_SNOOZES_RANGE,
    PRIORITY_MAX,
    PRIORITY_MIN,
    PRIORITY_RANGE,
    RATE_LIMIT_RANGE,
    RATE_PERIOD_RANGE,
    RETRY_BACKOFF_MAX,
    RETRY_BACKOFF_RANGE,
    TIMEOUT_MAX,
    TIMEOUT_MIN,
    ConditionsKnown,
    _abort_requested_at,
    _constraint,
    _max_attempts,
    _queue_name,
    _retry_constraints,
    _retry_fields,
    _timeout,
    new_token,
)
from .managers import TaskManager

logger = logging.getLogger(__name__)


#: The tasks not ended (pending, waiting, running): few, beside a history of ended
#: ones. Written as equalities joined by OR, which SQLite matches against one equality
#: of a query (an ``IN`` list it does not); a query of several of them writes them so
#: too (``TaskQuerySet.active``).
NOT_ENDED = (
    Q(status=TaskStatus.PENDING) | Q(status=TaskStatus.WAITING) | Q(status=TaskStatus.RUNNING)
)
#: The index a claim of due tasks reads, in the claim's order (partial: the pending
#: tasks only).
CLAIM_INDEX = "htask_task_claim"
#: The tasks not ended by status and due time (partial): what the claim does not read,
#: the oldest due, the tasks running, waiting, and their counts.
DUE_INDEX = "htask_task_due"
#: The partial unique index behind keys: one pending task per key, across queues; rows
#: without a key are not in it. Its predicate, as SQL, is the conflict target's of
#: ``INSERT … ON CONFLICT`` (store/postgres.py's ``on_conflict``, SQLite's too), which must
#: match it word for word.
KEY_INDEX = "htask_task_pending_key"
KEY_PREDICATE = '"key" IS NOT NULL AND "status" = \'pending\''
#: The pending tasks with a lock or a limit (docs/howto-exactly-one.md), which a claim
#: starts only when their lock is free, their function (or flow) below its limit and
#: their rate limit's window not full; the partial index over them, and its predicate
#: as SQL (a claim's query must imply it word for word for SQLite to read the index).
GATED = Q(status="pending") & (
    Q(lock__isnull=False) | Q(max_running__isnull=False) | Q(rate_limit__isnull=False)
)
GATED_INDEX = "htask_task_gated"
GATED_PREDICATE = (
    "status = 'pending' AND (lock IS NOT NULL OR max_running IS NOT NULL OR rate_limit IS NOT NULL)"
)
#: The tasks a node holds (``locked_by`` set).
HOLDER_INDEX = "htask_task_holder"
#: The finished tasks by retention, status and end: the pruner reads the tasks past
#: their retention as a range of it (django_htask.retention).
PRUNE_INDEX = "htask_task_prune"
#: The members of each batch (partial: a task of no batch writes no entry).
BATCH_INDEX = "htask_task_batch"
#: The ended tasks by status and end: the successes of the last hour or day (a
#: success writes no run row: the metrics and the overview count them here), the
#: failures since a time (``htask retry --failed-since``), the admin's tasks of one
#: final status.
ENDED_INDEX = "htask_task_ended"


class Task(ConditionsKnown):
    """A one-off call, scheduled for a time, cancellable by its public token."""

    objects = TaskManager()

    token = models.CharField(max_length=64, default=new_token, editable=False)
    key = models.CharField(
        max_length=KEY_MAX_LENGTH,
        null=True,
        blank=True,
        editable=False,
        help_text="at most one pending task has this key (schedule(key=...)); empty: none",
    )
    lock = models.CharField(
        max_length=LOCK_MAX_LENGTH,
        null=True,
        blank=True,
        editable=False,
        help_text="tasks sharing a lock never run at the same time on any node "
        "(schedule(lock=...), @task(lock=...)); empty: none",
    )
    max_running = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        validators=[MAX_RUNNING_RANGE],
        help_text="at most this many tasks of its function run at once on all the nodes "
        "(@task(max_running=...) when it was queued); empty: no limit",
    )
    per_key = models.CharField(
        max_length=PER_KEY_MAX_LENGTH,
        null=True,
        blank=True,
        editable=False,
        help_text="the value of its function's per= argument: its max_running and rate "
        "limit count the tasks of its function with this value apart (@task(per=...)); "
        "empty: none",
    )
    rate_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        validators=[RATE_LIMIT_RANGE],
        help_text=f"at most this many tasks of its function (with its per key) start in "
        f"any rate_period seconds on all the nodes (1 to {RATE_COUNT_MAX}; "
        "@task(rate_limit=...) when it was queued); empty: no rate limit",
    )
    rate_period = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        validators=[RATE_PERIOD_RANGE],
        help_text=f"the seconds of its rate limit's window (1 to {RATE_PERIOD_MAX})",
    )
    retention = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="seconds it is kept once it ended (@task(retention=...) when it was "
        "queued); empty: TASK_RETENTION_DAYS; 0: for ever",
    )
    function = models.CharField(max_length=300)
    payload = models.BinaryField(default=b"", editable=False)
    # Indexed on its own: the admin's list of every task, by due time, and its filter
    # by date.
    run_at = models.DateTimeField(db_index=True)
    # Not indexed on its own: the indexes of tasks not ended and ended begin with it.
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    max_attempts = _max_attempts("runs in all, retries included (1 to 1000)")
    snoozes = models.PositiveIntegerField(
        default=0,
        db_default=0,  # rows inserted by raw SQL or another language's producer
        editable=False,
        help_text="times it snoozed (raise Snooze): ran again later, not counted in attempts",
    )
    max_snoozes = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        validators=[MAX_SNOOZES_RANGE],
        help_text="snoozes allowed before the next fails it (@task(max_snoozes=...) when it "
        "was queued); empty: the MAX_SNOOZES setting",
    )
    retry_backoff = models.FloatField(
        null=True,
        blank=True,
        validators=[RETRY_BACKOFF_RANGE],
        help_text="seconds before the first retry (to 86400); empty: RETRY_BACKOFF",
    )
    retry_kind, retry_backoff_max, retry_jitter, retry_on, give_up_on = _retry_fields()
    queue_name = _queue_name("run it (runscheduler --queue)")
    backend = models.CharField(
        max_length=100,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="the django.tasks backend alias it was enqueued through (runscheduler "
        "--backend), empty for django-htask's own",
    )
    priority = models.SmallIntegerField(
        default=0,
        db_default=0,  # rows inserted by raw SQL or another language's producer
        validators=[PRIORITY_RANGE],
        help_text="among tasks due together, a higher priority starts first (-100 to 100)",
    )
    timeout = _timeout()
    locked_by = models.CharField(max_length=100, blank=True, null=True)
    node = models.CharField(
        max_length=100,
        null=True,
        blank=True,
        editable=False,
        help_text="the node that ran its last attempt (a success writes no run row: "
        "its node is here)",
    )
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    abort_requested_at = _abort_requested_at()
    started_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="when its last attempt started"
    )
    last_error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    return_value = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="what a django.tasks task returned (JSON), once it succeeded",
    )
    result = models.BinaryField(
        null=True,
        blank=True,
        editable=False,
        help_text="what the function returned (msgpack), once it succeeded; empty if None",
    )
    progress = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="what its function last reported with set_progress() (JSON)",
    )
    # Only a database with notices reads it: its end then wakes wait_result().
    waited = models.BooleanField(
        default=False,
        db_default=False,  # rows inserted by raw SQL
        editable=False,
        help_text="someone waits for its end (wait_result): it is announced when it ends",
    )
    # No constraint in the database, as for a run's task: the pruner deletes a batch's
    # row once its members are gone (django_htask.store.compose).
    batch = models.ForeignKey(
        "Batch",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="members",
        db_constraint=False,
        db_index=False,  # the partial index below
        editable=False,
        help_text="the batch it belongs to (django_htask.batch()); empty: none",
    )
    waiting_on = models.PositiveIntegerField(
        default=0,
        db_default=0,  # rows inserted by raw SQL or another language's producer
        editable=False,
        help_text="while waiting: how many of the tasks it runs after have not ended yet",
    )
    followed = models.BooleanField(
        default=False,
        db_default=False,
        editable=False,
        help_text="its end is followed up: it belongs to a batch, or tasks wait on it",
    )

    class Meta:
        ordering = ("run_at", "id")
        # Every status change writes a new version of the row, and PostgreSQL an entry
        # for it in each index whose condition it meets: the indexes that begin with
        # the status are partial, each over the few rows it serves (the work to do, not
        # the history). On MySQL/MariaDB, which have no partial index, Django drops the
        # conditions (InnoDB writes an index only where its columns change).
        indexes = (
            # The tasks not ended, by status and due time: the oldest due, the pending
            # ones in due order, the running and waiting ones, their counts.
            models.Index(fields=("status", "run_at"), condition=NOT_ENDED, name=DUE_INDEX),
            # The claim's order after its status: a claim reads the few rows it takes,
            # not every pending one (a backlog of 100k tasks made each claim sort them
            # all). Pending only: a started task leaves it.
            models.Index(
                fields=("status", "-priority", "run_at", "id"),
                condition=Q(status=TaskStatus.PENDING),
                name=CLAIM_INDEX,
            ),
            # The aborts a node looks for, as for runs.
            models.Index(
                fields=("locked_by",),
                condition=Q(abort_requested_at__isnull=False),
                name="htask_task_abort",
            ),
            # The pending tasks with a lock or a limit, in the claim's order: a claim
            # looks for them here first, and finds none at once when there are none.
            models.Index(fields=("-priority", "run_at", "id"), condition=GATED, name=GATED_INDEX),
            # The tasks a node holds (its heartbeat renews their leases): partial, so
            # that queuing a task, which no node holds yet, does not write it (on
            # MySQL/MariaDB, which have no partial index, Django drops the condition).
            models.Index(
                fields=("locked_by",), condition=Q(locked_by__isnull=False), name=HOLDER_INDEX
            ),
            # The finished tasks, for the pruner: partial, so that a task queued or
            # started writes no entry (on MySQL/MariaDB Django drops the condition).
            models.Index(
                fields=("retention", "status", "finished_at"),
                condition=Q(finished_at__isnull=False),
                name=PRUNE_INDEX,
            ),
            # A batch's members (its page in the admin, the pruner's check that none is
            # left): partial, so a task of no batch writes no entry.
            models.Index(fields=("batch",), condition=Q(batch__isnull=False), name=BATCH_INDEX),
            # The ended tasks by status and end: partial, so that a task queued or
            # started writes no entry (``finished_at >= %s`` implies its condition for
            # SQLite).
            models.Index(
                fields=("status", "finished_at"),
                condition=Q(finished_at__isnull=False),
                name=ENDED_INDEX,
            ),
        )
        constraints = (
            _constraint("task", "max_attempts", 1, MAX_ATTEMPTS_MAX),
            _constraint("task", "retry_backoff", 0, RETRY_BACKOFF_MAX, null=True),
            *_retry_constraints("task"),
            _constraint("task", "priority", PRIORITY_MIN, PRIORITY_MAX),
            _constraint("task", "timeout", TIMEOUT_MIN, TIMEOUT_MAX, null=True),
            _constraint("task", "max_running", 1, MAX_RUNNING_MAX, null=True),
            _constraint("task", "max_snoozes", 0, MAX_SNOOZES_MAX, null=True),
            _constraint("task", "rate_limit", 1, RATE_COUNT_MAX, null=True),
            _constraint("task", "rate_period", 1, RATE_PERIOD_MAX, null=True),
            models.CheckConstraint(
                condition=Q(rate_limit__isnull=True, rate_period__isnull=True)
                | Q(rate_limit__isnull=False, rate_period__isnull=False),
                name="htask_task_rate_whole",
                violation_error_message="rate_limit and rate_period are both set or both empty",
            ),
            models.UniqueConstraint(
                fields=("key",),
                condition=Q(key__isnull=False, status="pending"),
                name=KEY_INDEX,
            ),
            # A constraint rather than unique=True, which on PostgreSQL also builds a
            # second index for LIKE (varchar_pattern_ops) that no query uses and every
            # task queued would write.
            models.UniqueConstraint(fields=("token",), name="htask_task_token"),
        )

    def __str__(self) -> str:
        """``myapp.tasks:send at 2030-01-01 09:00:00 CET (pending)``: its due time in the
        current zone (``TIME_ZONE``), as the admin's pages, which head with it, show
        times."""
        due = stamp(self.run_at, timezone.get_current_timezone())
        return f"{self.function} at {due} ({self.status})"

    @property
    def call(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The stored ``(args, kwargs)``."""
        from django_htask.engine import decode_call  # noqa: PLC0415

        _name, args, kwargs = decode_call(bytes(self.payload))
        return tuple(args), dict(kwargs)

    def result_value(self) -> Any:
        """What the function returned, once the task succeeded; None before, or if it
        returned None. Decoded and converted to the function's return annotation; read
        as decoded (logged, action ``result_as_decoded``) when the function is not
        registered in this process or the value no longer fits its annotation. A
        django.tasks task's value is its JSON ``return_value``. Raises
        ``PayloadError`` if the stored bytes are not a result."""
        from django_htask.engine import registry  # noqa: PLC0415
        from django_htask.engine.codec import decode_result  # noqa: PLC0415
        from django_htask.engine.errors import ArgumentError, FunctionNotRegistered  # noqa: PLC0415

        if self.result is None:
            return self.return_value
        data = bytes(self.result)
        try:
            return registry.read_result(self.function, data)
        except (FunctionNotRegistered, ArgumentError) as exc:
            logger.warning(
                "the result of task %s is read as decoded: %s",
                self.token,
                exc,
                extra={"action": "result_as_decoded", "token": self.token},
            )
            return decode_result(data)
