"""What the admin and ``manage.py htask`` share: a schedule in words, a preview of its
next runs, running it now, and whether a node is alive.

A preview shows the occurrences the scheduler will fire: a saved schedule's start from
its stored ``next_run_at`` (:func:`upcoming_runs`), an edited or new one's from the
time of the save (:func:`edited_runs`, :func:`preview_runs`).

Failed one-off tasks are sent again with :func:`send_again` (the admin's *Send again*
action and ``manage.py htask retry``).

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

import enum
import logging
import re
import zoneinfo
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from . import clock, notices
from .conf import get_settings
from .db import scheduler_alias
from .models import Node, Run, RunStatus, Schedule, Task, TaskStatus
from .querysets import live_node, node_is_live
from .retention import Cutoffs, TaskRetention
from .store import Pruned, get_store, notify_nodes
from .store.database import put_back
from .store.rules import LOST_TASK_PREFIX, TIMED_OUT_PREFIX

__all__ = [
    "FOLLOWED_NOT_SENT",
    "Failure",
    "SentAgain",
    "Upcoming",
    "abort_runs",
    "describe_schedule",
    "edited_runs",
    "failed_tasks",
    "live_nodes",
    "node_alive",
    "node_state",
    "preview_runs",
    "prune_now",
    "run_schedule_inline",
    "run_schedule_soon",
    "send_again",
    "since_time",
    "upcoming_runs",
    "validate_zone",
]

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Upcoming:
    """An occurrence the scheduler will fire.

    ``at`` is the occurrence, in UTC. An ``overdue`` one is a stored ``next_run_at``
    already past: the scheduler fires it as soon as it sees it, ``runs`` times by the
    schedule's catch-up and grace (0: it is recorded as missed, not run).
    """

    at: datetime
    overdue: bool = False
    runs: int = 1

    def text(self, zone: tzinfo) -> str:
        """The occurrence in ``zone``: ``2030-01-01 09:00:00 CET``, or for an overdue
        one ``due now (overdue since …)`` / ``missed (overdue since …)``."""
        when = clock.stamp(self.at, zone)
        if not self.overdue:
            return when
        if self.runs == 0:
            return f"missed (overdue since {when})"
        due = "due now" if self.runs == 1 else f"due now, {self.runs} runs"
        return f"{due} (overdue since {when})"


def _following(parsed: Any, after: datetime, count: int) -> list[Upcoming]:
    """Up to ``count`` occurrences of ``parsed`` strictly after ``after``."""
    runs: list[Upcoming] = []
    when: datetime | None = after
    while len(runs) < count:
        assert when is not None
        when = parsed.next_after(when)
        if when is None:
            break
        runs.append(Upcoming(when.astimezone(UTC)))
    return runs


def preview_runs(text: str, zone: str, count: int, now: datetime) -> list[Upcoming]:
    """The next ``count`` runs of ``text`` in ``zone`` counted from ``now``: what the
    scheduler fires for a schedule saved now with this text (its ``next_run_at`` is
    computed from the time of the save).

    Raises InvalidSchedule (a ValueError) naming the bad text."""
    from django_htask.engine import parse_schedule  # noqa: PLC0415

    return _following(parse_schedule(text, tz=zone or None), now, count)


def upcoming_runs(row: Schedule, count: int, now: datetime) -> list[Upcoming]:
    """The next ``count`` occurrences the scheduler fires for the saved ``row``.

    They start from the stored ``next_run_at``, the occurrence the scheduler fires
    next, then follow it; never from ``now`` (an ``@every 45s`` saved at 19:33:42 runs
    at 19:34:27, whenever the page is opened). A stored time already past is overdue:
    the first entry says so, with how many runs the misfire policy gives it, and the
    next ones follow the policy's next occurrence. None for a disabled row, or an
    enabled one with no ``next_run_at`` (it does not fire until it is saved again).

    Raises InvalidSchedule (a ValueError) if the stored text no longer parses."""
    from django_htask.engine import plan_occurrences  # noqa: PLC0415

    stored = row.next_run_at
    if not row.enabled or stored is None or count <= 0:
        return []
    parsed = row.parsed()
    if stored > now:
        return [Upcoming(stored.astimezone(UTC)), *_following(parsed, stored, count - 1)]
    plan = plan_occurrences(
        parsed,
        stored,
        now,
        grace=row.grace,
        catch_up=str(row.catch_up),
        limit=get_settings().catch_up_limit,
    )
    first = Upcoming(stored.astimezone(UTC), overdue=True, runs=len(plan.to_run))
    if plan.next is None or count == 1:
        return [first]
    return [first, Upcoming(plan.next.astimezone(UTC)), *_following(parsed, plan.next, count - 2)]


def edited_runs(
    row: Schedule | None, text: str, zone: str, enabled: bool, count: int, now: datetime
) -> list[Upcoming]:
    """What the scheduler fires once ``row`` (None: a new schedule) is saved with this
    schedule ``text``, ``zone`` and ``enabled``: the row's own :func:`upcoming_runs`
    when none of the three changed and it has a ``next_run_at`` (the save keeps it),
    else the runs from ``now`` (the save recomputes it, see ``Schedule.save``); none
    when disabled."""
    if not enabled:
        return []
    if (
        row is not None
        and row.next_run_at is not None
        and (row.schedule, row.timezone, row.enabled) == (text, zone, enabled)
    ):
        return upcoming_runs(row, count, now)
    return preview_runs(text, zone, count, now)


def run_schedule_soon(row: Schedule) -> str:
    """Have the scheduler run ``row`` now (see the module's docstring); say how."""
    if row.enabled:
        now = clock.now()
        using = row._state.db or scheduler_alias()
        with transaction.atomic(using=using):
            Schedule.objects.using(using).filter(pk=row.pk).update(next_run_at=now)
        notices.notify_local_change()
        return "is due now: the scheduler runs it within a poll interval"
    from .api import using as options_apart  # noqa: PLC0415

    args, kwargs = row.call
    # using(): every keyword is the schedule's argument, even one named like an option
    task = options_apart().schedule(row.function, *args, **kwargs)
    return f"is disabled, so it was queued once as task {task.pk}"


#: What a run by hand writes once it is over.
_ENDED = ["status", "error", "traceback", "finished_at", "duration"]


def run_schedule_inline(row: Schedule, node: str | None = None) -> Run:
    """Call ``row``'s function here and now, recorded as a run of the schedule.

    The run's outcome is returned (a failure is recorded, not raised). It goes through
    the same code as a node's runs (:func:`django_htask.node.execution.execute`)."""
    from .node import new_node_id  # noqa: PLC0415
    from .node.execution import Call, execute  # noqa: PLC0415
    from .node.planning import schedule_run  # noqa: PLC0415

    node = node or new_node_id("cli")
    started_at = clock.now()
    started = schedule_run(row, node, RunStatus.RUNNING, started_at, started_at)
    using = row._state.db or scheduler_alias()
    run = Run.objects.using(using).create(**started.columns())
    # No refresh of the connections around the call: this thread's are the caller's
    call = Call.of_run(started, bytes(row.payload))
    ended = execute(call, clock=clock.get_clock()).columns()
    for name in _ENDED:
        setattr(run, name, ended[name])
    run.save(using=using, update_fields=_ENDED)
    Schedule.objects.using(using).filter(pk=row.pk).update(
        last_run_at=started_at, last_status=run.status
    )
    level = logging.INFO if run.status == RunStatus.SUCCEEDED else logging.WARNING
    logger.log(
        level,
        "%s ran by hand: %s%s",
        row.name,
        run.status,
        f" ({run.error})" if run.error else "",
        extra={"action": "run_inline"},
    )
    return run


def live_nodes(now: datetime | None = None) -> Q:
    """The filter of live nodes: not stopped, heartbeat within ``NODE_TIMEOUT``."""
    return live_node(get_settings().dead_before(now or clock.now()))


def node_alive(node: Node, now: datetime | None = None) -> bool:
    """Whether ``node`` is alive: not stopped and its heartbeat recent."""
    cutoff = get_settings().dead_before(now or clock.now())
    return node_is_live(node.stopped_at, node.last_heartbeat, cutoff)


def node_state(node: Node, now: datetime | None = None) -> str:
    """``"stopped"`` (it said so), ``"live"`` or ``"dead"`` (its heartbeat is too old)."""
    if node.stopped_at is not None:
        return "stopped"
    return "live" if node_alive(node, now) else "dead"


# -- sending failed tasks again ------------------------------------------------------------
@dataclass(frozen=True)
class SentAgain:
    """What :func:`send_again` did: the tasks ``sent`` (ids), the ones left alone
    because they had not failed (id: status), the ids that name no task, and the
    failed tasks ``superseded`` instead (a newer pending task holds their key: they are
    cancelled, see :mod:`django_htask.keys`), and the failed ones left alone because
    their end was ``followed`` up (docs/howto-chains.md)."""

    sent: tuple[int, ...]
    not_failed: dict[int, str]
    unknown: tuple[int, ...]
    superseded: tuple[int, ...] = ()
    #: Failed tasks left alone because their end was followed up: tasks waiting on
    #: them were cancelled (or ran anyway), or their batch counted them.
    followed: tuple[int, ...] = ()


_CHUNK = 500  # ids in one ``IN (…)``, well under SQLite's limit of bound variables
#: Why a failed task whose end was followed up is not sent again.
FOLLOWED_NOT_SENT = (
    "others waited on it or its batch counted it, so its end was followed up already"
)


def send_again(
    task_ids: Iterable[int], *, now: datetime | None = None, using: str | None = None
) -> SentAgain:
    """Send the failed one-off tasks among ``task_ids`` again, as django-q2's
    *resubmit* does.

    The same row is put back: ``pending``, due ``now``, with a fresh attempt count
    (``attempts = 0``, so it gets its ``max_attempts`` again; ``snoozes = 0`` too) and
    the same function,
    arguments, queue, priority and token (so ``get_task(token)`` and a django.tasks
    result follow it). Its error, traceback and finish time are cleared; its run
    history is kept: the ``Run`` rows of the earlier attempts stay linked to the task,
    and the new attempts add theirs (numbered from 1 again). Tasks that are not
    ``failed`` (pending, running, succeeded, cancelled) are left alone, and so are the
    failed ones whose end was followed up (tasks waiting on them were cancelled, or
    their batch counted them). A failed task whose key a newer pending task holds is
    not sent: it is cancelled, superseded by that one. One transaction; a node in this
    process is told after the commit (another one sees the task at its next poll, or
    through PostgreSQL's ``NOTIFY``)."""
    ids = sorted({int(pk) for pk in task_ids})
    now = now or clock.now()
    using = using or scheduler_alias()
    sent: list[int] = []
    superseded: list[int] = []
    followed: list[int] = []
    statuses: dict[int, str] = {}
    with transaction.atomic(using=using):
        for i in range(0, len(ids), _CHUNK):
            chunk_sent, chunk_superseded = _send_chunk(
                using, ids[i : i + _CHUNK], now, statuses, followed
            )
            sent += chunk_sent
            superseded += chunk_superseded
        if sent:
            transaction.on_commit(notices.notify_local_change, using=using)
    handled = set(sent) | set(superseded) | set(followed)
    result = SentAgain(
        sent=tuple(sent),
        not_failed={pk: status for pk, status in statuses.items() if pk not in handled},
        unknown=tuple(pk for pk in ids if pk not in statuses),
        superseded=tuple(superseded),
        followed=tuple(followed),
    )
    if sent:
        logger.info(
            "sent again: %d failed task(s): %s",
            len(sent),
            ", ".join(map(str, sent[:20])) + (" …" if len(sent) > 20 else ""),
            extra={"action": "send_again"},
        )
    return result


def _send_chunk(
    using: str, chunk: list[int], now: datetime, statuses: dict[int, str], followed: list[int]
) -> tuple[list[int], list[int]]:
    """:func:`send_again` for the ids of ``chunk``: the ids sent, and those superseded;
    each id's status goes to ``statuses``, the failed ones followed up to ``followed``."""
    tasks = Task.objects.using(using)
    rows = tasks.filter(pk__in=chunk).values_list("pk", "status", "followed")
    for pk, status, is_followed in rows:
        statuses[pk] = str(status)
        if is_followed and status == TaskStatus.FAILED:
            followed.append(pk)
    failed = [pk for pk in chunk if statuses.get(pk) == TaskStatus.FAILED and pk not in followed]
    if not failed:
        return [], []
    again = tasks.filter(pk__in=failed, status=TaskStatus.FAILED)
    update = partial(again.update, **_SENT_AGAIN, run_at=now)
    _written, dropped = put_back(using, failed, TaskStatus.FAILED, now, update)
    gone: set[int] = set()
    if dropped:
        cancelled = tasks.filter(pk__in=failed, status=TaskStatus.CANCELLED)
        gone = set(cancelled.values_list("pk", flat=True))
    return [pk for pk in failed if pk not in gone], [pk for pk in failed if pk in gone]


#: What :func:`send_again` writes to a failed task (and ``run_at``).
_SENT_AGAIN: dict[str, Any] = {
    "status": TaskStatus.PENDING,
    "attempts": 0,
    "snoozes": 0,
    "locked_by": None,
    "lease_expires_at": None,
    "started_at": None,
    "finished_at": None,
    "last_error": "",
    "traceback": "",
    "return_value": None,
    "result": None,
    "progress": None,
    "abort_requested_at": None,  # an aborted task sent again runs afresh
}


class Failure(enum.StrEnum):
    """What ended a failed task's last attempt."""

    #: Its function raised (or its worker process died under it).
    ERROR = "error"
    #: It ran past its timeout and was stopped.
    TIMED_OUT = "timed-out"
    #: Its node died while it ran.
    LOST = "lost"
    #: An abort was asked for (``cancel(token, abort=True)``, the admin's *Abort*).
    ABORTED = "aborted"

    def matches(self) -> Q:
        """The failed tasks whose last attempt ended so."""
        aborted = Q(abort_requested_at__isnull=False)
        timed_out = Q(last_error__startswith=TIMED_OUT_PREFIX)
        lost = Q(last_error__startswith=LOST_TASK_PREFIX)
        return {
            Failure.ABORTED: aborted,
            Failure.TIMED_OUT: ~aborted & timed_out,
            Failure.LOST: ~aborted & lost,
            Failure.ERROR: ~aborted & ~timed_out & ~lost,
        }[self]


def failed_tasks(
    since: datetime | None,
    *,
    kinds: Collection[Failure] = tuple(Failure),
    functions: Collection[str] = (),
    error: str = "",
    using: str | None = None,
) -> QuerySet[Task]:
    """The tasks failed since ``since`` (None: whenever) whose last attempt ended as one
    of ``kinds``; of ``functions`` only (registered names), if given; with ``error`` in
    their error, if given (case-insensitive)."""
    rows = Task.objects.using(using or scheduler_alias()).filter(status=TaskStatus.FAILED)
    if since is not None:
        rows = rows.filter(finished_at__gte=since)
    if set(kinds) != set(Failure):
        matches = Q(pk__in=[])
        for kind in kinds:
            matches |= kind.matches()
        rows = rows.filter(matches)
    if functions:
        rows = rows.filter(function__in=sorted(functions))
    if error:
        rows = rows.filter(last_error__icontains=error)
    return rows


def abort_runs(
    run_ids: Iterable[int], *, now: datetime | None = None, using: str | None = None
) -> int:
    """Ask for the abort of the running schedule runs among ``run_ids`` (the admin's
    *Abort*); return how many were asked (runs not running, or asked already, are
    left alone). Their nodes stop them as they stop an aborted task
    (docs/timeouts.md): told at once on PostgreSQL, else at their next poll."""
    ids = sorted({int(pk) for pk in run_ids})
    now = now or clock.now()
    using = using or scheduler_alias()
    asked = 0
    with transaction.atomic(using=using):
        for i in range(0, len(ids), _CHUNK):
            asked += (
                Run.objects.using(using)
                .filter(pk__in=ids[i : i + _CHUNK], status=RunStatus.RUNNING)
                .filter(abort_requested_at__isnull=True)
                .update(abort_requested_at=now)
            )
        if asked:
            notify_nodes(using)
            transaction.on_commit(notices.notify_local_change, using=using)
    if asked:
        logger.info("abort asked for %d run(s)", asked, extra={"action": "abort_runs"})
    return asked


# -- pruning at once --------------------------------------------------------------------------
def prune_now(
    *,
    days: float | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    using: str | None = None,
    progress: Callable[[Pruned], object] = lambda pruned: None,
) -> Pruned | None:
    """Delete now what is past its retention (see :mod:`django_htask.retention`): what
    the nodes delete by themselves every few minutes, in the same batches of
    ``PRUNE_BATCH`` rows, each its own transaction (``progress`` is called with
    the total after each). ``days``: keep every finished task and run that many days
    (instead of ``TASK_RETENTION_DAYS`` and ``RUN_RETENTION_DAYS``; a function's own
    retention still applies); more than 0. ``dry_run``: count what would go, delete
    nothing. Return what was deleted (or would be), or None when a node was pruning at
    that moment (nothing deleted: it prunes the same rows)."""
    settings = get_settings()
    tasks, run_days = settings.task_retention_days, float(settings.run_retention_days)
    if days is not None:
        if isinstance(days, bool) or not isinstance(days, int | float) or not days > 0:
            raise ValueError(
                f"days must be a number > 0 (0 keeps for ever, as in the settings), got {days!r}"
            )
        tasks, run_days = TaskRetention.of(days, "days"), float(days)
    cutoffs = Cutoffs.at(now or clock.now(), tasks, run_days)
    store = get_store(using)
    if dry_run:
        return store.expired(cutoffs)
    from .node import new_node_id  # noqa: PLC0415 - its one format of ids

    me = new_node_id("prune")
    total = Pruned()
    while True:
        pruned = store.prune(me, cutoffs, settings.prune_batch)
        if pruned is None:
            return None if not total.rows else total
        total += pruned
        progress(total)
        if not pruned.more:
            break
    if total.rows:
        logger.info(
            "pruned by hand: %d finished tasks, %d runs and %d node rows",
            total.tasks,
            total.runs,
            total.nodes,
            extra={"action": "pruned", "tasks": total.tasks, "runs": total.runs},
        )
    return total


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def since_time(text: str, now: datetime | None = None) -> datetime:
    """The instant ``text`` names: a duration back from ``now`` (``90s``, ``30m``,
    ``2h``, ``1d``, ``1w``, or seconds) or a date and time in ISO 8601 (``2026-11-24``,
    ``2026-11-24T18:00``, ``2026-11-24 18:00+01:00``; without an offset, in the
    ``TIME_ZONE`` setting). ValueError naming ``text`` otherwise."""
    now = now or clock.now()
    match = _DURATION.match(text)
    if match:
        seconds = float(match.group(1)) * _UNIT[match.group(2).lower()]
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError:
            raise ValueError(f"{text!r} is too far back") from None
    try:
        when = parse_datetime(text.strip()) or parse_datetime(f"{text.strip()}T00:00")
    except ValueError:
        when = None
    if when is None:
        raise ValueError(
            f"{text!r} is neither a duration (90s, 30m, 2h, 1d, 1w) nor an ISO 8601 date "
            "and time (2026-11-24T18:00)"
        )
    if timezone.is_naive(when):
        when = timezone.make_aware(when, timezone.get_default_timezone())
    return when
