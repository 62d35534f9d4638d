"""The rules over rows, each written once: what a live node is, what a due and a
claimable task are, which tasks a node serves, which runs the last hour holds and how
they ended, and the work each node holds.

Each rule is here in every form its callers need, side by side: a QuerySet verb (the
models' managers, ``Node.objects.live(dead_before)``), the same condition as an SQL
fragment for the stores' raw statements (:data:`LIVE_NODE_SQL`,
:data:`CLAIMABLE_SQL`), and as a plain predicate over values for the in-memory store
(:func:`node_is_live`, :func:`task_is_claimable`). The store contract suite checks
that the three forms agree (``tests/contract/test_rules.py``), so a change made to one
and not the others fails there.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import models
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery

from .enums import RunStatus, TaskStatus
from .queues import QueueFilter, QueueStates
from .retention import FINAL_STATUSES, Cutoffs

M = TypeVar("M", bound=models.Model)
R = TypeVar("R")

__all__ = [
    "CLAIMABLE_SQL",
    "EXPIRED_RUN_SQL",
    "EXPIRED_TASK_SQL",
    "HOLDING_SQL",
    "LIVE_NODE_SQL",
    "OWN_EXPIRED_TASK_SQL",
    "PLAIN_TASK_SQL",
    "SILENT_NODE_SQL",
    "SPENT_BATCH_SQL",
    "NodeQuerySet",
    "QueueQuerySet",
    "RunQuerySet",
    "TaskQuerySet",
    "batch_is_spent",
    "claimable_params",
    "due_task",
    "expired_run",
    "expired_task",
    "holding_params",
    "live_node",
    "node_is_live",
    "node_is_silent",
    "plain_task_sql",
    "run_is_expired",
    "served_task",
    "served_task_sql",
    "spent_batch",
    "success_run",
    "task_attempts",
    "task_is_claimable",
    "task_is_due",
    "task_is_expired",
    "task_is_holding",
    "task_is_lost",
    "task_is_plain",
    "task_is_served",
    "task_success_run",
]

# -- a live node -------------------------------------------------------------------------
#: A live node, as SQL over the node table; its one parameter is ``dead_before``.
LIVE_NODE_SQL = "stopped_at IS NULL AND last_heartbeat >= %s"
#: A node not stopped whose heartbeat is older than ``dead_before`` (dead, not yet
#: declared so: what a reaper declares dead); one parameter, ``dead_before``.
SILENT_NODE_SQL = "stopped_at IS NULL AND last_heartbeat < %s"


def node_is_live(
    stopped_at: datetime | None, last_heartbeat: datetime, dead_before: datetime
) -> bool:
    """A live node: not stopped, and a heartbeat at ``dead_before`` or later (see
    :meth:`~django_htask.conf.HtaskSettings.dead_before`)."""
    return stopped_at is None and last_heartbeat >= dead_before


def node_is_silent(
    stopped_at: datetime | None, last_heartbeat: datetime, dead_before: datetime
) -> bool:
    """A node not stopped whose heartbeat is older than ``dead_before`` (dead, not yet
    declared so)."""
    return stopped_at is None and last_heartbeat < dead_before


def live_node(dead_before: datetime) -> Q:
    """The live nodes (:func:`node_is_live`), as a filter (the admin's)."""
    return Q(stopped_at__isnull=True, last_heartbeat__gte=dead_before)


def _count(queryset: models.QuerySet[Any], by: str) -> Subquery:
    grouped = queryset.order_by().values(by).annotate(c=Count("pk")).values("c")
    return Subquery(grouped[:1], output_field=IntegerField())


class NodeQuerySet(models.QuerySet[M]):
    """The node rows' verbs (``Node.objects``)."""

    def live(self, dead_before: datetime) -> NodeQuerySet[M]:
        """The live nodes (:func:`node_is_live`)."""
        return self.filter(live_node(dead_before))

    def silent(self, dead_before: datetime) -> NodeQuerySet[M]:
        """The nodes not stopped whose heartbeat is older than ``dead_before``
        (:data:`SILENT_NODE_SQL`)."""
        return self.filter(stopped_at__isnull=True, last_heartbeat__lt=dead_before)

    def not_stopped(self) -> NodeQuerySet[M]:
        """The nodes that did not stop, nor were declared dead (live or silent)."""
        return self.filter(stopped_at__isnull=True)

    def heard_last(self) -> NodeQuerySet[M]:
        """The nodes, the most recent heartbeat first (what a listing shows first)."""
        return self.order_by("-last_heartbeat")

    def with_work(self) -> NodeQuerySet[M]:
        """Each node with the work it holds, counted in the same query: ``n_leased``
        (tasks it holds a lease on), ``n_tasks`` (of those, running) and ``n_runs``
        (schedule runs it is running); None for none."""
        # The models, by name: models.py imports this module.
        task, run = (self.model._meta.apps.get_model("django_htask", m) for m in ("Task", "Run"))
        using = self.db
        mine = task._default_manager.using(using).filter(locked_by=OuterRef("id"))
        runs = run._default_manager.using(using).filter(
            node=OuterRef("id"), status=RunStatus.RUNNING, task=None
        )
        annotated: NodeQuerySet[M] = self.annotate(  # type: ignore[assignment]
            n_leased=_count(mine, "locked_by"),
            n_tasks=_count(mine.filter(status=TaskStatus.RUNNING), "locked_by"),
            n_runs=_count(runs, "node"),
        )
        return annotated


# -- a due task, a claimable task ----------------------------------------------------------
#: A claimable task, as SQL over the task table: pending, due, and not leased (or its
#: lease expired). Its parameters are :func:`claimable_params`. The status is written as
#: it is, not a parameter: SQLite reads the claim index, partial (the pending tasks), by
#: its name (``INDEXED BY``) only where the statement's text implies its condition.
CLAIMABLE_SQL = (
    f"status = '{TaskStatus.PENDING}' AND run_at <= %s "
    "AND (locked_by IS NULL OR lease_expires_at < %s)"
)


def plain_task_sql(quote: Callable[[str], str] = lambda name: f'"{name}"') -> str:
    """:data:`PLAIN_TASK_SQL` with ``lock`` (a reserved word) quoted by ``quote`` (a
    connection's ``ops.quote_name``: MySQL quotes with backticks)."""
    return f"{quote('lock')} IS NULL AND max_running IS NULL AND rate_limit IS NULL"


#: A task without a lock or a limit (claimed in one statement; the others go through
#: :func:`~django_htask.store.base.pick_gated`), as SQL (PostgreSQL, SQLite).
PLAIN_TASK_SQL = plain_task_sql()


def task_is_plain(lock: str | None, max_running: int | None, rate_limit: int | None) -> bool:
    """A task without a lock or a limit (:data:`PLAIN_TASK_SQL`; a pending task is
    otherwise in the gated tasks' index, ``GATED``)."""
    return lock is None and max_running is None and rate_limit is None


def claimable_params(now: Any) -> list[Any]:
    """The parameters of :data:`CLAIMABLE_SQL` at ``now`` (as the database takes a
    timestamp: adapt it first)."""
    return [now, now]


def due_task(now: datetime) -> Q:
    """The due tasks (:func:`task_is_due`), as a filter (a count's)."""
    return Q(status=TaskStatus.PENDING, run_at__lte=now)


def task_is_due(status: str, run_at: datetime, now: datetime) -> bool:
    """A due task: pending, and its ``run_at`` at ``now`` or before."""
    return status == TaskStatus.PENDING and run_at <= now


def task_is_claimable(
    status: str,
    run_at: datetime,
    locked_by: str | None,
    lease_expires_at: datetime | None,
    now: datetime,
) -> bool:
    """A claimable task: due, and held by no node (or its lease expired)."""
    return task_is_due(status, run_at, now) and (
        locked_by is None or (lease_expires_at is not None and lease_expires_at < now)
    )


def task_is_lost(
    locked_by: str | None, lease_expires_at: datetime | None, live: Container[str], now: datetime
) -> bool:
    """A task its node lost (what the reaper hands back when it is running or leased):
    its lease expired, or it is not held by one of the ``live`` nodes."""
    return (lease_expires_at is not None and lease_expires_at < now) or locked_by not in live


def lease_due(lease_expires_at: datetime | None, renew_below: datetime) -> bool:
    """A lease a heartbeat renews: one expiring before ``renew_below`` (or none set)."""
    return lease_expires_at is None or lease_expires_at < renew_below


# -- a task holding its lock and its function's place ---------------------------------------
#: A task that holds its lock and counts toward its function's ``max_running``: running,
#: under a lease not expired (a task whose lease expired is the reaper's, and may be
#: claimed again), as SQL over the task table; its parameters are :func:`holding_params`.
HOLDING_SQL = "status = %s AND lease_expires_at >= %s"


def holding_params(now: Any) -> list[Any]:
    """The parameters of :data:`HOLDING_SQL` at ``now`` (adapted as the database takes
    a timestamp)."""
    return [TaskStatus.RUNNING, now]


def task_is_holding(status: str, lease_expires_at: datetime | None, now: datetime) -> bool:
    """A task holding its lock and its function's place (:data:`HOLDING_SQL`): running,
    its lease expiring at ``now`` or later."""
    return status == TaskStatus.RUNNING and lease_expires_at is not None and lease_expires_at >= now


# -- a task a node serves ----------------------------------------------------------------
def served_task(queues: QueueFilter, backend: str | None = None) -> Q:
    """The tasks a node serving ``queues`` runs (with a ``backend`` alias: only the
    django.tasks tasks enqueued through it), as a filter."""
    q = Q()
    if backend is not None:
        q &= Q(backend=backend)
    if queues.only is not None:
        q &= Q(queue_name__in=sorted(queues.only))
    if queues.exclude:
        q &= ~Q(queue_name__in=sorted(queues.exclude))
    return q


def served_task_sql(queues: QueueFilter, backend: str | None = None) -> tuple[str, list[Any]]:
    """:func:`served_task` as SQL over the task table, to append to a condition
    (``" AND …"``; ``""`` for every task), and its parameters."""
    parts: list[str] = []
    params: list[Any] = []
    if backend is not None:
        parts.append("backend = %s")
        params.append(backend)
    for column_in, names in (("IN", queues.only), ("NOT IN", queues.exclude)):
        if names is None or (column_in == "NOT IN" and not names):
            continue
        if not names:
            parts.append("1 = 0")
            continue
        parts.append(f"queue_name {column_in} ({', '.join(['%s'] * len(names))})")
        params += sorted(names)
    return "".join(f" AND {p}" for p in parts), params


def task_is_served(
    queue_name: str, task_backend: str | None, queues: QueueFilter, backend: str | None = None
) -> bool:
    """A task (of ``queue_name``, enqueued through ``task_backend``) a node serving
    ``queues`` (and ``backend``, if given) runs."""
    if backend is not None and task_backend != backend:
        return False
    return queues.serves(queue_name)


# -- past its retention --------------------------------------------------------------------
#: A finished task of the final status ``%s`` finished before ``%s``, whose function has
#: no retention of its own (``TASK_RETENTION_DAYS`` applies), as SQL over the task table:
#: a range of the pruner's index (``PRUNE_INDEX``).
EXPIRED_TASK_SQL = "retention IS NULL AND status = %s AND finished_at < %s"
#: The same for a task whose function keeps it ``%s`` seconds: status, then end.
OWN_EXPIRED_TASK_SQL = "retention = %s AND status = %s AND finished_at < %s"
#: A run started before ``%s`` that is not running (status ``%s``, ``running``).
EXPIRED_RUN_SQL = "started_at < %s AND status <> %s"
#: A spent batch, as SQL over the batch table: finished (every member ended, its
#: callbacks called) and none of its members left (each deleted past its retention).
SPENT_BATCH_SQL = (
    "finished_at IS NOT NULL AND NOT EXISTS "
    "(SELECT 1 FROM django_htask_task t WHERE t.batch_id = django_htask_batch.id)"
)


def batch_is_spent(finished_at: datetime | None, members_left: int) -> bool:
    """A spent batch (:data:`SPENT_BATCH_SQL`): finished, and none of its members left;
    the pruner deletes its row with its last member."""
    return finished_at is not None and members_left == 0


def spent_batch() -> Q:
    """The spent batches (:func:`batch_is_spent`), as a filter of batches."""
    return Q(finished_at__isnull=False, members__isnull=True)


def task_is_expired(
    status: str, finished_at: datetime | None, retention: int | None, cutoffs: Cutoffs
) -> bool:
    """A task past its retention at ``cutoffs.now``: ended (a final status and a finish
    time), and finished before its function's retention (``retention`` seconds, 0 for
    ever) or, without one, before its status's cutoff (none: kept for ever)."""
    if status not in FINAL_STATUSES or finished_at is None:
        return False
    if retention is not None:
        cutoff = cutoffs.own(retention)
    else:
        cutoff = dict(cutoffs.tasks).get(str(status))
    return cutoff is not None and finished_at < cutoff


def expired_task(cutoffs: Cutoffs, own: Iterable[int] = ()) -> Q:
    """The tasks past their retention (:func:`task_is_expired`), as a filter, for the
    retentions of their own among ``own`` (the tasks of any other are left out)."""
    q = Q(pk__in=[])
    for status, cutoff in cutoffs.tasks:
        q |= Q(retention__isnull=True, status=status, finished_at__lt=cutoff)
    for seconds in own:
        before = cutoffs.own(seconds)
        if before is not None:
            q |= Q(retention=seconds, status__in=FINAL_STATUSES, finished_at__lt=before)
    return q


def run_is_expired(status: str, started_at: datetime | None, cutoff: datetime | None) -> bool:
    """A run past ``RUN_RETENTION_DAYS``: not running, started before ``cutoff`` (None:
    runs kept for ever)."""
    return (
        cutoff is not None
        and status != RunStatus.RUNNING
        and started_at is not None
        and started_at < cutoff
    )


def expired_run(cutoff: datetime | None) -> Q:
    """The runs past ``RUN_RETENTION_DAYS`` (:func:`run_is_expired`), as a filter."""
    if cutoff is None:
        return Q(pk__in=[])
    return Q(started_at__lt=cutoff) & ~Q(status=RunStatus.RUNNING)


class TaskQuerySet(models.QuerySet[M]):
    """The task rows' verbs (``Task.objects``)."""

    def due(self, now: datetime) -> TaskQuerySet[M]:
        """The due tasks (:func:`task_is_due`)."""
        return self.filter(due_task(now))

    def claimable(self, now: datetime) -> TaskQuerySet[M]:
        """The claimable tasks (:func:`task_is_claimable`, :data:`CLAIMABLE_SQL`)."""
        return self.due(now).filter(Q(locked_by__isnull=True) | Q(lease_expires_at__lt=now))

    def lost(self, now: datetime, live: Any) -> TaskQuerySet[M]:
        """The tasks lost by their node (:func:`task_is_lost`); ``live``: the live
        nodes' ids (a list, or a query of them)."""
        return self.filter(Q(lease_expires_at__lt=now) | ~Q(locked_by__in=live))

    def lease_due(self, renew_below: datetime) -> TaskQuerySet[M]:
        """The tasks whose lease a heartbeat renews (:func:`lease_due`)."""
        return self.filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=renew_below))

    def holding(self, now: datetime) -> TaskQuerySet[M]:
        """The tasks holding their lock and their function's place
        (:func:`task_is_holding`, :data:`HOLDING_SQL`)."""
        return self.filter(status=TaskStatus.RUNNING, lease_expires_at__gte=now)

    def plain(self) -> TaskQuerySet[M]:
        """The tasks without a lock or a limit (:data:`PLAIN_TASK_SQL`)."""
        return self.filter(lock__isnull=True, max_running__isnull=True, rate_limit__isnull=True)

    def active(self) -> TaskQuerySet[M]:
        """The tasks pending or running, read through the index of the tasks not ended
        (``DUE_INDEX``, partial), its status an equality each: SQLite reads a partial
        index for ``status = 'pending' OR status = 'running'``, not for an ``IN`` list."""
        return self.filter(Q(status=TaskStatus.PENDING) | Q(status=TaskStatus.RUNNING))

    def overdue(self, before: datetime) -> TaskQuerySet[M]:
        """The pending tasks due before ``before``."""
        return self.filter(status=TaskStatus.PENDING, run_at__lt=before)

    def by_status(self) -> dict[str, int]:
        """How many tasks pending and running there are (statuses absent: none)."""
        rows = self.active().order_by().values_list("status").annotate(n=Count("id"))
        return dict(rows.values_list("status", "n"))

    def succeeded_since(self, since: datetime) -> TaskQuerySet[M]:
        """The tasks that succeeded at ``since`` or later: the successes no run row
        records (:func:`task_success_run`)."""
        return self.filter(status=TaskStatus.SUCCEEDED, finished_at__gte=since).order_by()

    def by_queue(self) -> dict[str, tuple[int, int]]:
        """Queue -> how many of its tasks are pending and running (queues with neither
        absent): the pending and running rows only, read through an index that begins
        with the status, never the finished ones."""
        rows = self.active().order_by().values_list("queue_name", "status").annotate(n=Count("id"))
        counts: dict[str, tuple[int, int]] = {}
        for queue, status, n in rows.values_list("queue_name", "status", "n"):
            pending, running = counts.get(queue, (0, 0))
            if status == TaskStatus.PENDING:
                pending += n
            else:
                running += n
            counts[queue] = (pending, running)
        return counts


def success_run(task: Any) -> dict[str, Any]:
    """The fields of the run row a success of ``task`` (a ``Task`` row, or a record
    with its fields) would have written: what its row holds of its last attempt."""
    started, finished = task.started_at, task.finished_at
    return {
        "task_id": task.id,
        "name": task.function,
        "function": task.function,
        "node": task.node or "",
        "attempt": task.attempts,
        "scheduled_for": task.run_at,
        "started_at": started,
        "finished_at": finished,
        "status": RunStatus.SUCCEEDED,
        "duration": (finished - started).total_seconds() if started and finished else None,
    }


def task_attempts(runs: list[R], task: Any, make: Callable[..., R]) -> list[R]:
    """The attempts of ``task`` (a ``Task`` row, or a record with its fields): its
    ``runs`` (oldest first), then its success, ``make(**success_run(task))``, unless
    one of them records it (:func:`task_success_run`)."""
    recorded = any(getattr(r, "status", None) == RunStatus.SUCCEEDED for r in runs)
    if task.status == TaskStatus.SUCCEEDED and not recorded:
        return [*runs, make(**success_run(task))]
    return runs


# -- runs of the last hour by outcome --------------------------------------------------------
#: The seconds of runs "the last hour" holds.
HOUR = 3600.0


def task_success_run() -> Q:
    """The run rows of tasks' successes, as a filter of runs. A success writes none
    (its task's row holds it: :func:`django_htask.store.rules.writes_run`) unless
    ``RECORD_EVERY_ATTEMPT`` is set (or rows written before migration 0020): what
    counts a task's successes reads the tasks (:meth:`TaskQuerySet.succeeded_since`)
    and leaves these rows out, so that the count is the same either way
    (``tests/contract/test_rules.py`` ties the two)."""
    return Q(task__isnull=False, status=RunStatus.SUCCEEDED)


class RunQuerySet(models.QuerySet[M]):
    """The run rows' verbs (``Run.objects``)."""

    def without_task_successes(self) -> RunQuerySet[M]:
        """These runs less those of tasks' successes (:func:`task_success_run`)."""
        return self.exclude(task_success_run())

    def attempts_of(self, task: Any) -> list[M]:
        """The attempts of ``task`` (a ``Task`` row), oldest first: its runs, and its
        success, read from its row (an unsaved run: no id) unless a run records it
        (:func:`task_success_run`)."""
        runs: list[M] = list(self.filter(task=task).order_by("started_at", "id"))
        return task_attempts(runs, task, self.model)

    def started_since(self, since: datetime) -> RunQuerySet[M]:
        """The runs started at ``since`` or later (the ``started_at`` index)."""
        return self.filter(started_at__gte=since).order_by()

    def last_hour(self, now: datetime, window: float = HOUR) -> RunQuerySet[M]:
        """The runs started in the ``window`` seconds (an hour) up to ``now``."""
        return self.started_since(now - timedelta(seconds=window))

    def by_outcome(self, reaped: Q) -> list[dict[str, Any]]:
        """How these runs ended, by name, function and status: ``n`` runs, of which
        ``retries`` were a retry (attempt > 1) and ``reaped`` failed by a reaper
        (``reaped``: the store rules' filter of those,
        :func:`django_htask.store.rules.reaped_runs`)."""
        return [
            dict(row)
            for row in self.order_by()
            .values("name", "function", "status")
            .annotate(
                n=Count("id"),
                retries=Count("id", filter=Q(attempt__gt=1)),
                reaped=Count("id", filter=Q(reaped, status=RunStatus.FAILED)),
            )
        ]


# -- the queues acted on -----------------------------------------------------------------------
class QueueQuerySet(models.QuerySet[M]):
    """The queue rows' verbs (``Queue.objects``)."""

    def states(self) -> QueueStates:
        """The queues paused and limited, as a node holds them (a handful of rows: the
        queues an operator acted on)."""
        return QueueStates.of(self.order_by().values_list("name", "paused", "max_running"))
