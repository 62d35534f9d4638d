"""Due tasks that wait on a gate, and why: counted by gate for the overview and
``htask status`` (:func:`waiting_on_gates`), and said of one task for its admin page
(:func:`why_waiting`). The rule they explain is the claim's, ``pick_gated`` in
``store/base.py`` (docs/howto-exactly-one.md)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min, QuerySet

from django_htask.db import scheduler_alias
from django_htask.flow import RateLimit, flow_key
from django_htask.models import GATED, Queue, RateSlot, Task, TaskStatus
from django_htask.store.database.tasks import flow_gate

__all__ = ["GATE_KINDS", "WAITING_SHOWN", "Waiting", "waiting_on_gates", "why_waiting"]

#: The busiest gates of each kind shown with tasks waiting on them, at most.
WAITING_SHOWN = 5
#: The kinds of gates, and what each is called where tasks are listed waiting on it.
GATE_KINDS = {
    "lock": "lock",
    "limit": "max_running of",
    "key": "max_running per key of",
    "rate": "rate limit of",
}


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
    """What keeps ``task``, pending and due at ``now``, from starting, as the claim
    weighs it: its queue paused or full, its lock held, its function or its key at
    their ``max_running``, its rate limit's window full (and when it has room), or an
    earlier task of its flow waiting before it. [] when it is not pending and due, or
    nothing holds it (it starts at the next claim). A few short queries."""
    if task.status != TaskStatus.PENDING or task.run_at > now:
        return []
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
