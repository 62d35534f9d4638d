"""What the admin and ``manage.py htask`` share: a schedule in words, a preview of its
next runs, running it now, and whether a node is alive.

Running now comes in two kinds:

:func:`run_schedule_soon`
    hands the occurrence to the scheduler: an enabled schedule's ``next_run_at`` is set
    to now (the running nodes see the change and fire it with the schedule's overlap
    and retry rules; its later occurrences are unchanged); a disabled one is queued as
    a one-off task of the same call.
:func:`run_schedule_inline`
    calls the function in this process, recorded as a run of the schedule (what
    ``manage.py htask run NAME`` does).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from . import clock
from .conf import get_settings
from .models import Node, Run, RunStatus, Schedule
from .signals import run_finished, run_started

__all__ = [
    "describe_schedule",
    "live_nodes",
    "node_alive",
    "node_state",
    "preview_runs",
    "run_schedule_inline",
    "run_schedule_soon",
    "validate_zone",
]

logger = logging.getLogger("django_htask.operations")


def validate_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone ``name``; ValueError naming it if there is none."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r} (an IANA name like 'Europe/Paris')") from exc


def describe_schedule(text: str, zone: str) -> str:
    """The schedule in words, or ``invalid: <why>`` (never raises for bad text)."""
    from django_htask.engine import InvalidSchedule, describe, parse_schedule  # noqa: PLC0415

    try:
        return str(describe(parse_schedule(text, tz=zone or None)))
    except InvalidSchedule as exc:
        return f"invalid: {exc}"


def preview_runs(
    text: str, zone: str, count: int, now: datetime
) -> list[tuple[datetime, datetime]]:
    """The next ``count`` runs after ``now`` as (wall time in ``zone``, UTC) pairs.

    Raises InvalidSchedule (a ValueError) naming the bad text."""
    from django_htask.engine import parse_schedule  # noqa: PLC0415

    parsed = parse_schedule(text, tz=zone or None)
    tz = validate_zone(zone or "UTC")
    runs: list[tuple[datetime, datetime]] = []
    when: datetime | None = now
    while len(runs) < count:
        assert when is not None
        when = parsed.next_after(when)
        if when is None:
            break
        runs.append((when.astimezone(tz), when.astimezone(UTC)))
    return runs


def run_schedule_soon(row: Schedule) -> str:
    """Have the scheduler run ``row`` now (see the module's docstring); say how."""
    if row.enabled:
        now = clock.now()
        with transaction.atomic():
            Schedule.objects.filter(pk=row.pk).update(next_run_at=now)
        from . import node  # noqa: PLC0415

        node.notify_local_change()
        return "is due now: the scheduler runs it within a poll interval"
    from .api import schedule  # noqa: PLC0415

    args, kwargs = row.call
    task = schedule(row.function, *args, **kwargs)
    return f"is disabled, so it was queued once as task {task.pk}"


def run_schedule_inline(row: Schedule, node: str | None = None) -> Run:
    """Call ``row``'s function here and now, recorded as a run of the schedule.

    The run's outcome is returned (a failure is recorded, not raised)."""
    from django_htask.engine import encode_call, registry  # noqa: PLC0415

    node = node or f"{socket.gethostname()}-{os.getpid()}-cli"
    started_at = clock.now()
    run = Run.objects.create(
        schedule=row,
        name=row.name,
        function=row.function,
        node=node,
        scheduled_for=started_at,
        started_at=started_at,
        status=RunStatus.RUNNING,
    )
    info: dict[str, Any] = {
        "name": row.name,
        "function": row.function,
        "node": node,
        "schedule_id": row.pk,
        "task_id": None,
        "scheduled_for": started_at,
        "attempt": 1,
    }
    run_started.send_robust(sender=Run, **info)
    t0 = time.monotonic()
    status, error, tb = RunStatus.SUCCEEDED, "", ""
    try:
        registry.call(bytes(row.payload) or encode_call(row.function, (), {}))
    except Exception as exc:
        status, error = RunStatus.FAILED, f"{type(exc).__name__}: {exc}"
        tb = traceback.format_exc()
    duration = time.monotonic() - t0
    finished_at = clock.now()
    run_finished.send_robust(sender=Run, status=status, error=error, duration=duration, **info)
    run.status, run.error, run.traceback = status, error, tb
    run.finished_at, run.duration = finished_at, duration
    run.save(update_fields=["status", "error", "traceback", "finished_at", "duration"])
    Schedule.objects.filter(pk=row.pk).update(last_run_at=started_at, last_status=status)
    level = logging.INFO if status == RunStatus.SUCCEEDED else logging.WARNING
    logger.log(
        level,
        "%s ran by hand: %s%s",
        row.name,
        status,
        f" ({error})" if error else "",
        extra={"action": "run_inline"},
    )
    return run


def live_nodes(now: datetime | None = None) -> Q:
    """The filter of live nodes: not stopped, heartbeat within ``NODE_TIMEOUT``."""
    cutoff = (now or clock.now()) - timedelta(seconds=get_settings().node_timeout)
    return Q(stopped_at=None, last_heartbeat__gte=cutoff)


def node_alive(node: Node, now: datetime | None = None) -> bool:
    """Whether ``node`` is alive: not stopped and its heartbeat recent."""
    cutoff = (now or clock.now()) - timedelta(seconds=get_settings().node_timeout)
    return node.stopped_at is None and node.last_heartbeat >= cutoff


def node_state(node: Node, now: datetime | None = None) -> str:
    """``"stopped"`` (it said so), ``"live"`` or ``"dead"`` (its heartbeat is too old)."""
    if node.stopped_at is not None:
        return "stopped"
    return "live" if node_alive(node, now) else "dead"
