"""Tasks that wait, and why: the due ones waiting on a gate counted by gate for the
overview and ``htask status`` (:func:`waiting_on_gates`), and one task's reasons for
its admin page (:func:`why_waiting`): a task ``waiting`` waits for the tasks it runs
after or, a batch's callback, for its batch (docs/howto-chains.md); a pending due one
for its gates, as the claim weighs them (``pick_gated`` in ``store/base.py``,
docs/howto-exactly-one.md)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q, QuerySet

from django_htask.db import scheduler_alias
from django_htask.flow import RateLimit, flow_key
from django_htask.models import GATED, Batch, Dependency, Queue, RateSlot, Task, TaskStatus
from django_htask.store.database.tasks import flow_gate

__all__ = [
    "CALLBACKS",
    "GATE_KINDS",
    "WAITING_SHOWN",
    "Waiting",
    "callback_of",
    "waiting_on_gates",
    "why_waiting",
]

#: The busiest gates of each kind shown with tasks waiting on them, at most.
WAITING_SHOWN = 5
#: The kinds of gates, and what each is called where tasks are listed waiting on it.
GATE_KINDS = {
    "lock": "lock",
    "limit": "max_running of",
    "key": "max_running per key of",
    "rate": "rate limit of",
}
#: A batch's callbacks, as its row names them, and when each is called.
CALLBACKS = (
    ("on_failure", "at the first member that fails for good"),
    ("on_success", "once every member succeeded"),
    ("on_finish", "once every member ended"),
)


@dataclass(frozen=True)
class Waiting:
    """Due tasks waiting on a lock (``kind`` ``"lock"``: ``name`` is the lock), on a
    function's ``max_running`` (``"limit"``: the function), on a limit per key
    (``"key"``) or a rate limit (``"rate"``): the flow, its function with its per key
    (``myapp.tasks:sync[7]``)."""

    kind: str
    name: str
    count: int

    @property
    def label(self) -> str:
        """What the gate is called (:data:`GATE_KINDS`)."""
        return GATE_KINDS[self.kind]


def waiting_on_gates(
    now: datetime, *, using: str | None = None, shown: int = WAITING_SHOWN
) -> list[Waiting]:
    """The locks, the limited functions, the keys with a limit and the rate-limited
    flows with the most due tasks waiting on them (pending and due at ``now``: a task
    whose gate has room starts at the next claim), ``shown`` of each kind at most,
    busiest first. One query, through the partial index of the pending tasks with a
    lock or a limit; ``htask status`` shows the same."""
    rows = (
        Task.objects.using(using or scheduler_alias())
        .due(now)
        .filter(GATED)
        .order_by()
        .values_list("lock", "function", "max_running", "per_key", "rate_limit")
        .annotate(n=Count("id"))
    )
    counts: dict[str, Counter[str]] = {kind: Counter() for kind in GATE_KINDS}
    for lock, function, max_running, per, rate, n in rows:
        if lock is not None:
            counts["lock"][lock] += n
        if max_running is not None:
            counts["limit" if per is None else "key"][flow_key(function, per)] += n
        if rate is not None:
            counts["rate"][flow_key(function, per)] += n
    return [
        Waiting(kind, name, n)
        for kind, found in counts.items()
        for name, n in sorted(found.items(), key=lambda item: (-item[1], item[0]))[:shown]
    ]


def why_waiting(task: Task, now: datetime, *, using: str | None = None) -> list[str]:
    """Why ``task`` does not start at ``now``. Waiting (status ``waiting``): for the
    tasks it runs after to succeed, or, a batch's callback, for its batch. Pending and
    due: what the claim weighs, its queue paused or full, its lock held, its function
    or its key at their ``max_running``, its rate limit's window full (and when it has
    room), or an earlier task of its flow waiting before it. [] otherwise, or when
    nothing holds it (it starts at the next claim). A few short queries."""
    if task.status == TaskStatus.WAITING:
        return [_composed_reason(task, using)]
    if task.status != TaskStatus.PENDING or task.run_at > now:
        return []
    return _gate_reasons(task, now, using)


def callback_of(task: Task, *, using: str | None = None) -> tuple[Batch, str, str] | None:
    """The batch ``task`` is a callback of, its role and when it is called; None if
    it is none's."""
    callback = Q(on_success=task.pk) | Q(on_failure=task.pk) | Q(on_finish=task.pk)
    batch = Batch.objects.using(using or scheduler_alias()).filter(callback).first()
    if batch is None:
        return None
    role, when = next((r, w) for r, w in CALLBACKS if getattr(batch, f"{r}_id") == task.pk)
    return batch, role, when


def _composed_reason(task: Task, using: str | None) -> str:
    """What a waiting task waits for: its batch (a callback) or its dependencies."""
    found = callback_of(task, using=using)
    if found is not None:
        batch, role, when = found
        left = batch.total - batch.succeeded - batch.failed - batch.cancelled
        return (
            f"the {role} callback of batch {batch.pk}: called {when} ({left} of its "
            f"{batch.total} members not ended)"
        )
    edges = Dependency.objects.using(using or scheduler_alias()).filter(task_id=task.pk)
    return (
        f"for {task.waiting_on} of the {edges.count()} tasks it runs after to succeed "
        "(see its graph)"
    )


def _gate_reasons(task: Task, now: datetime, using: str | None) -> list[str]:
    """What holds a pending due task: the claim's gates (:func:`why_waiting`)."""
    rows = Task.objects.using(using or scheduler_alias())
    holding = rows.holding(now).exclude(pk=task.pk)
    reasons = _queue_reasons(task, holding, using)
    if task.lock is not None and holding.filter(lock=task.lock).exists():
        reasons.append(f"its lock {task.lock!r} is held by a running task")
    flow = flow_key(task.function, task.per_key)
    if task.max_running is not None:
        mine = holding.filter(function=task.function)
        if task.per_key is not None:
            mine = mine.filter(per_key=task.per_key)
        running = mine.count()
        if running >= task.max_running:
            what = flow if task.per_key is not None else task.function
            reasons.append(f"{running} of {what} running: its max_running of {task.max_running}")
    if task.rate_limit is not None and task.rate_period is not None:
        reasons += _rate_reasons(RateLimit(task.rate_limit, task.rate_period), flow, now, using)
    if not reasons and (task.per_key is not None or task.rate_limit is not None):
        earlier = rows.claimable(now).filter(function=task.function, per_key=task.per_key)
        first = earlier.order_by("-priority", "run_at", "id").values_list("pk", flat=True)[:1]
        if list(first) != [task.pk]:
            reasons.append(f"an earlier task of {flow} waits: its tasks start in due order")
    return reasons


def _queue_reasons(task: Task, holding: QuerySet[Task], using: str | None) -> list[str]:
    """Its queue paused, or running its limit."""
    states = Queue.objects.using(using or scheduler_alias()).states()
    queue = task.queue_name
    if queue in states.paused:
        return [f"its queue {queue!r} is paused"]
    cap = dict(states.limits).get(queue)
    running = holding.filter(queue_name=queue).count() if cap is not None else 0
    if cap is not None and running >= cap:
        return [f"its queue {queue!r} runs {running} tasks: its limit of {cap}"]
    return []


def _rate_reasons(limit: RateLimit, flow: str, now: datetime, using: str | None) -> list[str]:
    """Its rate limit's window full, and when it has room."""
    slots = RateSlot.objects.using(using or scheduler_alias()).filter(
        gate=flow_gate(flow), expires_at__gt=now
    )
    window = slots.aggregate(n=Count("id"), first=Min("expires_at"))
    if window["n"] < limit.count:
        return []
    period = timedelta(seconds=limit.period)
    return [
        f"{window['n']} starts of {flow} in the last {period}: its rate limit of {limit}; "
        f"room at {window['first']:%Y-%m-%d %H:%M:%S.%f} UTC"
    ]
