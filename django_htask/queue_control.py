"""Queues acted on live, by an operator: pause one, resume it, limit how many of its
tasks run at once across the nodes, and list them (the admin's queue list and
``manage.py htask queue`` call these)::

    from django_htask import limit_queue, pause_queue, resume_queue

    pause_queue("partner-api")       # its tasks wait, its schedules wait; the rest runs
    resume_queue("partner-api")      # both go on: occurrences due meanwhile by the
                                     # schedule's grace and catch-up
    limit_queue("reports", 2)        # at most 2 of its tasks run at once, on all nodes
    limit_queue("reports", None)     # no limit

Each is one short transaction on the ``Queue`` table; the nodes hear of it within a
second on PostgreSQL (a trigger's ``NOTIFY``) and at their next poll elsewhere. What a
paused or limited queue does is in docs/admin.md, *Queues*.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

from . import clock
from .db import scheduler_alias
from .functions import check_max_running
from .models import Queue, Task
from .queues import check_name

__all__ = ["QueueInfo", "limit_queue", "list_queues", "pause_queue", "resume_queue"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueInfo:
    """A queue as :func:`list_queues` lists it: whether it is paused (and since when),
    its limit (None: none), and how many of its tasks are pending and running."""

    name: str
    paused: bool = False
    paused_at: datetime | None = None
    max_running: int | None = None
    pending: int = 0
    running: int = 0


def pause_queue(name: str, *, using: str | None = None) -> bool:
    """Pause queue ``name``: no node starts a task of it nor fires a schedule of it
    until it is resumed; the tasks already running finish, and tasks go on being
    queued. Return whether it was running (False: paused already). ValueError naming a
    name no queue can have."""
    now = clock.now()
    return _act(name, "paused", "paused", using, ~Q(paused=True), paused=True, paused_at=now)


def resume_queue(name: str, *, using: str | None = None) -> bool:
    """Resume queue ``name``: its tasks are claimed again, and each of its schedules
    fires what fell due while it was paused by its own grace and catch-up (each
    occurrence run, or recorded as missed). Return whether it was paused."""
    return _act(name, "resumed", "resumed", using, Q(paused=True), paused=False, paused_at=None)


def limit_queue(name: str, max_running: int | None, *, using: str | None = None) -> bool:
    """Let at most ``max_running`` tasks of queue ``name`` run at once on all the nodes
    together (None: no limit), counted as ``max_running`` of a function is: a task over
    the limit waits, pending, without spending an attempt, and a dead node's tasks free
    their places with its lease. Lowering a limit stops no task already running.
    Return whether the limit changed. ValueError naming a bad name or limit."""
    if max_running is not None:
        check_max_running(max_running)
        changed = ~Q(max_running=max_running) | Q(max_running__isnull=True)
        text = f"limited to {max_running} tasks running at once"
    else:
        changed = Q(max_running__isnull=False)
        text = "no longer limited"
    return _act(name, "limited", text, using, changed, max_running=max_running)


def _act(
    name: str, what: str, text: str, using: str | None, unless_done: Q, **changes: Any
) -> bool:
    """Write ``changes`` on queue ``name``'s row where ``unless_done`` (the row is
    made first when the change is one a queue without a row lacks), in one
    transaction; log ``text`` (action ``queue_<what>``) and return whether it
    changed."""
    name = check_name(name)
    using = using or scheduler_alias()
    rows = Queue.objects.using(using)
    with transaction.atomic(using=using):
        if changes.get("paused") or changes.get("max_running") is not None:
            rows.get_or_create(name=name)
        changed = rows.filter(unless_done, name=name).update(**changes, updated_at=clock.now())
    if changed:
        logger.info("queue %s %s", name, text, extra={"action": f"queue_{what}", "queue": name})
    return bool(changed)


def list_queues(*, using: str | None = None) -> list[QueueInfo]:
    """Every queue acted on (paused, limited, or once so) and every queue with tasks
    pending or running, by name: the ``Queue`` rows and one count of the pending and
    running tasks (never the finished ones)."""
    using = using or scheduler_alias()
    rows = {q.name: q for q in Queue.objects.using(using)}
    counts = Task.objects.using(using).by_queue()
    listed = []
    for name in sorted(rows.keys() | counts.keys()):
        row = rows.get(name)
        pending, running = counts.get(name, (0, 0))
        if row is None:
            listed.append(QueueInfo(name, pending=pending, running=running))
            continue
        listed.append(QueueInfo(name, row.paused, row.paused_at, row.max_running, pending, running))
    return listed
