"""The store on the Django ORM: everything that works the same on every database."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any, NamedTuple, TypeVar

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    Case,
    Exists,
    F,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Concat

from django_htask.db import scheduler_alias
from django_htask.exceptions import NodeFenced, NotMigrated, StoreUnavailable
from django_htask.keys import superseded_reason
from django_htask.models import (
    GATED_PREDICATE,
    KEY_INDEX,
    Node,
    Run,
    RunStatus,
    Schedule,
    Task,
    TaskStatus,
    prune_runs,
)
from django_htask.querysets import CLAIMABLE_SQL, PLAIN_TASK_SQL, claimable_params
from django_htask.queues import QueueFilter
from django_htask.retry import RetryPolicy

from . import base, rules, values
from .base import (
    INTERFACE,
    Gated,
    RunOutcome,
    ScheduleRef,
    ScheduleRow,
    StartedTask,
    Store,
    pick_gated,
)

__all__ = [
    "DatabaseStore",
    "RefReader",
    "not_migrated",
    "put_back",
    "supersede",
    "unavailable",
]

_ROW_FIELDS = (
    "id",
    "name",
    "function",
    "schedule",
    "timezone",
    "payload",
    "enabled",
    "next_run_at",
    "grace",
    "catch_up",
    "overlap",
    "max_attempts",
    "retry_backoff",
    "version",
    "queue_name",
    "timeout",
    *base.RETRY_COLUMNS[:5],
)
#: How many of :data:`_ROW_FIELDS` are columns of :class:`ScheduleRow` itself.
_ROW_OWN = len(_ROW_FIELDS) - 5
#: What a started task carries, in :class:`StartedTask`'s order.
_STARTED_FIELDS = (
    "id",
    "token",
    "function",
    "payload",
    "run_at",
    "attempts",
    "max_attempts",
    "priority",
    "timeout",
    *base.RETRY_COLUMNS,
)
#: SQLite allows 999 host parameters in old builds: chunk ``IN (...)`` lists.
_CHUNK = 500
#: Candidates with a lock or a limit a claim reads per statement.
_GATED_PAGE = 100
_NODE = Node._meta.db_table
_TASK = Task._meta.db_table
#: django_htask's tables.
_TABLES = frozenset(model._meta.db_table for model in (Node, Run, Schedule, Task))
#: How SQLite and PostgreSQL say a statement's table does not exist.
_NO_SUCH_TABLE = re.compile(
    r'no such table: (?:\w+\.)?(\w+)|relation "(?:\w+\.)?(\w+)" does not exist'
)


class RefReader:
    """Makes the :class:`ScheduleRef` of many rows, sharing equal values: the rows due
    at one instant share one ``datetime`` (parsed once), the rows of one queue one
    string. A node keeps these for every schedule it holds: 100k schedules due at 3,600
    distinct seconds hold 3,600 datetimes, not 100k."""

    __slots__ = ("_parse", "_queues", "_times")

    def __init__(self, parse: Callable[[Any], datetime]) -> None:
        self._parse = parse
        self._times: dict[Any, datetime] = {}
        self._queues: dict[str, str] = {}

    def time(self, raw: Any) -> datetime | None:
        """``raw`` (as the database gives it) as a shared datetime."""
        if raw is None:
            return None
        found = self._times.get(raw)
        if found is None:
            found = self._times[raw] = self._parse(raw)
        return found

    def queue(self, name: str) -> str:
        return self._queues.setdefault(name, name)

    def loaded(self, rows: Iterable[tuple[Any, Any, Any, Any]]) -> list[ScheduleRef]:
        """Refs of ``(id, next_run_at, version, queue)`` rows (enabled ones)."""
        # A dict lookup inline, the method only for a value not seen yet (or None).
        seen, time, named, queue = self._times.get, self.time, self._queues.get, self.queue
        return [
            ScheduleRef(i, seen(n) or time(n), v, True, named(q) or queue(q)) for i, n, v, q in rows
        ]

    def changed(self, rows: Iterable[tuple[Any, Any, Any, Any, Any]]) -> list[ScheduleRef]:
        """Refs of ``(id, next_run_at, version, enabled, queue)`` rows."""
        seen, time, named, queue = self._times.get, self.time, self._queues.get, self.queue
        return [
            ScheduleRef(i, seen(n) or time(n), v, bool(e), named(q) or queue(q))
            for i, n, v, e, q in rows
        ]


def _same(value: datetime) -> datetime:
    return value


def _as_datetime(value: datetime | str) -> datetime:
    """A timestamp read by raw SQL (SQLite gives UTC, as text or a naive datetime), as
    an aware datetime."""
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _served(serving: base.Serving) -> Q:
    """The tasks ``serving`` covers, as a filter."""
    q = Q()
    if serving.backend is not None:
        q &= Q(backend=serving.backend)
    queues = serving.queues
    if queues.only is not None:
        q &= Q(queue_name__in=sorted(queues.only))
    if queues.exclude:
        q &= ~Q(queue_name__in=sorted(queues.exclude))
    return q


def served_sql(serving: base.Serving) -> tuple[str, list[Any]]:
    """The same as :func:`_served`, as an SQL condition (``""`` for every task) and its
    parameters, for the stores' raw claims."""
    parts: list[str] = []
    params: list[Any] = []
    if serving.backend is not None:
        parts.append("backend = %s")
        params.append(serving.backend)
    for column_in, names in (("IN", serving.queues.only), ("NOT IN", serving.queues.exclude)):
        if names is None or (column_in == "NOT IN" and not names):
            continue
        if not names:
            parts.append("1 = 0")
            continue
        parts.append(f"queue_name {column_in} ({', '.join(['%s'] * len(names))})")
        params += sorted(names)
    return "".join(f" AND {p}" for p in parts), params


def gate_key(key: str) -> int:
    """The key of a lock or function (``lock:…``, ``function:…``) that claims lock to
    serialise its claims (PostgreSQL's advisory lock key; MySQL's gate row is chosen
    by it): 64 bits of its BLAKE2b hash, signed as PostgreSQL's ``bigint``. A
    collision only makes two gates wait for each other."""
    digest = hashlib.blake2b(key.encode(), digest_size=8, person=b"htask-gate").digest()
    return int.from_bytes(digest, "big", signed=True)


def check_fence(node_id: str, row: tuple[Any, ...] | None) -> None:
    """Raise NodeFenced unless ``row``, the node's row read by a fence (its
    ``stopped_at`` first), says ``node_id`` is registered and not declared dead."""
    if row is None or row[0] is not None:
        raise NodeFenced(node_id, None if row is None else _as_datetime(row[0]))


@contextmanager
def _fenced_in(
    atomic: AbstractContextManager[Any], store: DatabaseStore, node_id: str
) -> Iterator[None]:
    with atomic:
        store._fence(node_id)
        yield


def not_migrated(exc: Exception, using: str | None = None) -> NotMigrated | None:
    """The :class:`NotMigrated` that ``exc``, an error of the database ``using``, means
    when it says one of django_htask's tables does not exist; None otherwise.

    Reads the error only, no query: the failed statement may have aborted the
    transaction, and the callers (``schedule()``, the commands) pay nothing until a
    statement fails."""
    match = _NO_SUCH_TABLE.search(str(exc))
    table = next((name for name in match.groups() if name), "") if match else ""
    if table not in _TABLES:
        return None
    return DatabaseStore(using)._not_migrated(f"table {table}")  # using: as the store's


#: How often :func:`put_back` tries again when a task scheduled meanwhile took a key.
_PUT_BACK_TRIES = 5


def supersede(using: str, task_ids: list[int], status: str, now: datetime) -> int:
    """Finish as cancelled the tasks among ``task_ids`` (still in ``status``) whose key
    another task holds as pending: about to be put back to pending, they are superseded
    by it (see :mod:`django_htask.keys`). Return how many. Tasks without a key are not
    looked at."""
    prefix, suffix = superseded_reason("\0").split("\0")
    tasks = Task.objects.using(using)
    holder = tasks.filter(key=OuterRef("key"), status=TaskStatus.PENDING)
    count = 0
    for i in range(0, len(task_ids), _CHUNK):
        count += (
            tasks.filter(id__in=task_ids[i : i + _CHUNK], status=status, key__isnull=False)
            .filter(Exists(holder))
            .update(
                status=TaskStatus.CANCELLED,
                finished_at=now,
                locked_by=None,
                lease_expires_at=None,
                traceback="",
                last_error=Concat(
                    Value(prefix),
                    Subquery(holder.values("token")[:1]),
                    Value(suffix),
                    output_field=TextField(),
                ),
            )
        )
    return count


def put_back(
    using: str,
    task_ids: list[int],
    status: str,
    now: datetime,
    write: Callable[[], int],
) -> tuple[int, int]:
    """Put the tasks ``task_ids`` (in ``status``) back to pending by ``write()``, which
    must leave tasks no longer in ``status`` alone;
    those whose key a pending task holds are superseded instead (:func:`supersede`).
    Return how many ``write`` changed and how many were superseded.

    Race-free: a task scheduled with the same key by another transaction between the
    two statements makes ``write`` fail on the key's unique index; it is undone (a
    savepoint), and both run again, where the new pending task is seen."""
    for attempt in range(1, _PUT_BACK_TRIES + 1):
        superseded = supersede(using, task_ids, status, now)
        try:
            with transaction.atomic(using=using):  # a savepoint
                written = write()
            return written, superseded
        except IntegrityError as exc:
            if attempt == _PUT_BACK_TRIES or not _key_clash(exc):
                raise
    raise AssertionError("unreachable")


def _key_clash(exc: IntegrityError) -> bool:
    """Whether ``exc`` is a violation of the pending-key index (as PostgreSQL or
    SQLite names it)."""
    text = str(exc)
    return KEY_INDEX in text or f"{Task._meta.db_table}.key" in text


Method = TypeVar("Method", bound=Callable[..., Any])


def unavailable(method: Method) -> Method:
    """``method``, whose database errors (the driver's, or Django's ``DatabaseError``,
    ``IntegrityError`` included: a key clash the store could not settle is retried)
    become :class:`~django_htask.exceptions.StoreUnavailable`, the original its
    ``__cause__`` and its message the same. The one place a database store's errors
    are translated: every public method of the interface
    (:data:`~django_htask.store.base.INTERFACE`) goes through it (a ``try`` around the
    call, nothing more on the hot path); :class:`NodeFenced` and
    :class:`NotMigrated` are no database errors and pass as they are."""

    @functools.wraps(method)
    def translated(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except DatabaseError as exc:
            raise StoreUnavailable(str(exc)) from exc

    return translated  # type: ignore[return-value]


def _translate(cls: type[Store], names: Iterable[str]) -> None:
    for name in names:
        setattr(cls, name, unavailable(getattr(cls, name)))


class DatabaseStore(Store):
    """The ORM store over the database alias ``using``. Its public methods, and those
    a subclass defines, raise StoreUnavailable for a database error (:func:`unavailable`)."""

    vendor = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _translate(cls, INTERFACE & vars(cls).keys())

    def __init__(self, using: str | None = None) -> None:
        #: The database alias (default: the scheduler's, django_htask.db).
        self.using = using or scheduler_alias()

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

    def check_migrated(self) -> None:
        """Compare django_htask's migration files with those recorded as applied (a
        listing and one query: loading the whole migration graph would cost more than
        the rest of the start)."""
        import pkgutil  # noqa: PLC0415

        from django.apps import apps  # noqa: PLC0415
        from django.db.migrations.recorder import MigrationRecorder  # noqa: PLC0415

        # The folder, not the package: importing it would import the package's root,
        # which sits above the store.
        folder = os.path.join(apps.get_app_config("django_htask").path, "migrations")
        wanted = {m.name for m in pkgutil.iter_modules([folder]) if m.name[0].isdigit()}
        recorder = MigrationRecorder(self.connection)
        applied = set()
        if recorder.has_table():
            applied = set(
                recorder.migration_qs.filter(app="django_htask").values_list("name", flat=True)
            )
        missing = sorted(wanted - applied)
        if missing:
            raise self._not_migrated(
                f"tables or some of its migrations ({len(missing)} not applied: "
                f"{', '.join(missing)})"
            )

    def _not_migrated(self, lacking: str) -> NotMigrated:
        """What to say when this database lacks ``lacking`` of django_htask's (the
        one wording of ``check_migrated`` and :func:`not_migrated`)."""
        return NotMigrated(
            f"the database {self.describe()!r} lacks django_htask's {lacking}: "
            "run `manage.py migrate`"
        )

    def install(self) -> None:
        pass

    def describe(self) -> str:
        settings = self.connection.settings_dict
        return f"{self.connection.vendor} {settings.get('NAME')}"

    def close(self) -> None:
        self.connection.close()

    def refresh(self) -> None:
        """Drop this thread's connection if it failed and is unusable, or if it is older
        than ``CONN_MAX_AGE`` when that is set (a node polls every second: reconnecting
        each time, as ``CONN_MAX_AGE = 0`` means for requests, would be waste)."""
        conn = self.connection
        if conn.connection is None:
            return
        if conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
                return
        max_age = conn.settings_dict.get("CONN_MAX_AGE") or 0
        if max_age and conn.close_at is not None and time.monotonic() >= conn.close_at:
            conn.close()

    def _atomic(self) -> AbstractContextManager[Any]:
        return transaction.atomic(using=self.using)

    def _fenced(
        self, node_id: str, *, claim: bool = False, probe: Probe | None = None
    ) -> AbstractContextManager[Any]:
        """A write transaction of node ``node_id``, which first checks that the node is
        registered and not declared dead (:meth:`_fence`). ``claim``: a claim's (finished
        tasks written, due ones started), whose plans PostgreSQL pins; ``probe``: an
        ``EXISTS`` the fence may answer in the same statement, as ``gated_due`` of the
        context manager (PostgreSQL: see :meth:`_gated_probe`; ignored here)."""
        return _fenced_in(self._atomic(), self, node_id)

    # -- fencing ---------------------------------------------------------------------
    #: Appended to the fencing read: PostgreSQL locks the node's row for the
    #: transaction (SQLite's write transactions are exclusive already).
    _fence_lock = ""

    def _fence(self, node_id: str) -> None:
        """Raise NodeFenced unless ``node_id`` is registered and not declared dead; call
        inside the write transaction (see the module :mod:`~django_htask.store.base`)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT stopped_at FROM {_NODE} WHERE id = %s{self._fence_lock}", [node_id]
            )
            check_fence(node_id, cursor.fetchone())

    # -- nodes -----------------------------------------------------------------------
    def _register(self, r: values.Registration) -> None:
        node_id, hostname, pid, version, now, queues = r
        Node.objects.using(self.using).update_or_create(
            id=node_id,
            defaults={
                "hostname": hostname,
                "pid": pid,
                "version": version,
                "started_at": now,
                "last_heartbeat": now,
                "stopped_at": None,
                "queues": str(queues),
            },
        )

    def heartbeat(self, node_id: str, now: datetime, lease_until: datetime) -> int:
        with self._fenced(node_id):
            Node.objects.using(self.using).filter(id=node_id).update(last_heartbeat=now)
            return self._renew_leases(node_id, lease_until)

    def _renew_leases(self, node_id: str, lease_until: datetime) -> int:
        return (
            Task.objects.using(self.using)
            .filter(locked_by=node_id, status__in=(TaskStatus.PENDING, TaskStatus.RUNNING))
            .update(lease_expires_at=lease_until)
        )

    def stop_node(self, node_id: str, now: datetime) -> None:
        Node.objects.using(self.using).not_stopped().filter(id=node_id).update(stopped_at=now)

    def _abandon(self, d: values.Departure) -> None:
        node_id, now, abandoned, dead_at, heartbeat_at = d
        tasks = Task.objects.using(self.using)
        with self._fenced(node_id):
            runs = Run.objects.using(self.using)
            task_ids = [a.task_id for a in abandoned if a.task_id is not None]
            held = {
                t.pk: t
                for t in tasks.filter(
                    id__in=task_ids, locked_by=node_id, status=TaskStatus.RUNNING
                ).only("id", "function", "attempts", "max_attempts", "run_at", "started_at")
            }
            new_runs = []
            for a in abandoned:
                if a.run_id is not None:
                    runs.filter(id=a.run_id, status=RunStatus.RUNNING).update(
                        **rules.abandoned_run(a, now)
                    )
                    continue
                task = held.get(a.task_id or 0)
                if task is None:
                    continue
                if a.started:
                    new_runs.append(
                        self._run(rules.crashed_run(task, task.pk, node_id, now, a.error))
                    )
                changes = rules.abandoned_task(a, task.attempts, now, dead_at)
                self._end_lost(task.pk, changes, now, locked_by=node_id)
            runs.bulk_create(new_runs)
            # Dead at dead_at, not before: until then the others count its runs as going on.
            Node.objects.using(self.using).filter(id=node_id).update(last_heartbeat=heartbeat_at)

    def _end_lost(self, task_id: int, changes: dict[str, Any], now: datetime, **held: Any) -> int:
        """Write a rule's ``changes`` (:mod:`~django_htask.store.rules`) on the running
        task ``task_id`` (still ``held`` so): put back to pending through
        :func:`put_back` (superseded by a pending task holding its key); return the rows
        changed."""
        mine = Task.objects.using(self.using).filter(id=task_id, status=TaskStatus.RUNNING, **held)
        if changes["status"] != TaskStatus.PENDING:
            return mine.update(**changes)
        return sum(
            put_back(
                self.using, [task_id], TaskStatus.RUNNING, now, partial(mine.update, **changes)
            )
        )

    def live_nodes(self, dead_before: datetime) -> dict[str, tuple[datetime, QueueFilter]]:
        rows = (
            Node.objects.using(self.using)
            .live(dead_before)
            .order_by("id")
            .values_list("id", "last_heartbeat", "queues")
        )
        return {i: (beat, QueueFilter.parse(queues)) for i, beat, queues in rows}

    def nodes_on_host(self, hostname: str) -> list[tuple[str, int]]:
        return list(
            Node.objects.using(self.using)
            .not_stopped()
            .filter(hostname=hostname)
            .values_list("id", "pid")
        )

    def declare_dead(self, node_ids: list[str], now: datetime) -> int:
        if not node_ids:
            return 0
        return (
            Node.objects.using(self.using)
            .not_stopped()
            .filter(id__in=node_ids)
            .update(stopped_at=now)
        )

    def reap(self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        with self._fenced(node_id):
            return self._reap(now, dead_before, retry)

    def take_over(
        self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy
    ) -> int:
        with self._atomic():
            self._lock_reaper()
            stopped = (
                Node.objects.using(self.using)
                .not_stopped()
                .filter(id=node_id)
                .update(stopped_at=now)
            )
            return self._reap(now, dead_before, retry) if stopped else 0

    def _lock_reaper(self) -> None:
        """Keep other reapers out until the transaction ends (one database: nothing)."""

    def _reap(self, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        """The reaper's work, in the caller's transaction (see :meth:`Store.reap`).

        The node rows are written first: a node's own writes lock its row first too,
        so the two never wait for each other in the opposite order."""
        nodes = Node.objects.using(self.using)
        tasks = Task.objects.using(self.using)
        count = nodes.silent(dead_before).update(stopped_at=now)
        live = nodes.live(dead_before).values("id")
        crashed = list(
            tasks.lost(now, live)
            .filter(status=TaskStatus.RUNNING)
            .only(
                "id",
                "function",
                "attempts",
                "max_attempts",
                "run_at",
                "started_at",
                "locked_by",
                "abort_requested_at",
                *base.RETRY_COLUMNS,
            )
        )
        runs = []
        for task in crashed:
            columns = base.RetryColumns(*(getattr(task, name) for name in base.RETRY_COLUMNS))
            changes = rules.reaped_task(task, task.locked_by, columns, retry, now)
            holder = task.locked_by or "?"
            runs.append(
                self._run(rules.crashed_run(task, task.pk, holder, now, changes["last_error"]))
            )
            count += self._end_lost(task.pk, changes, now)
        Run.objects.using(self.using).bulk_create(runs)
        # Rows found by a plain read first, then written by id: an UPDATE that scans
        # would lock, on MySQL/MariaDB, rows it then leaves alone (the live nodes'
        # tasks and runs, which their nodes are writing), and deadlock with them.
        held = tasks.lost(now, live).filter(status=TaskStatus.PENDING, locked_by__isnull=False)
        if ids := list(held.values_list("id", flat=True)):
            count += held.filter(id__in=ids).update(**rules.UNLOCKED)
        all_runs = Run.objects.using(self.using)
        cut = all_runs.filter(status=RunStatus.RUNNING).exclude(node__in=live)
        if ids := list(cut.values_list("id", flat=True)):
            count += all_runs.filter(id__in=ids, status=RunStatus.RUNNING).update(
                status=RunStatus.FAILED,
                finished_at=now,
                error=Case(  # rules.lost_run_error, in SQL
                    When(error="", then=Value(rules.lost_run_error(""))),
                    default=F("error"),
                    output_field=TextField(),
                ),
            )
        return count

    # -- schedules -------------------------------------------------------------------
    def load_schedules(self) -> tuple[list[ScheduleRef], int]:
        with transaction.atomic(using=self.using):  # one snapshot; reads only
            top = self._max_version()
            rows = (
                Schedule.objects.using(self.using)
                .filter(enabled=True, next_run_at__isnull=False)
                .order_by()
                .values_list("id", "next_run_at", "version", "queue_name")
            )
            refs = RefReader(_same).loaded(rows.iterator(chunk_size=10_000))
        return refs, top

    def _max_version(self) -> int:
        top = Schedule.objects.using(self.using).aggregate(m=Max("version"))["m"]
        return int(top or 0)

    def changed_schedules(self, since: int) -> tuple[list[ScheduleRef], int]:
        rows = (
            Schedule.objects.using(self.using)
            .filter(version__gt=since)
            .order_by("version")
            .values_list("id", "next_run_at", "version", "enabled", "queue_name")
        )
        refs = RefReader(_same).changed(rows)
        return refs, max([since, *(r.version for r in refs)])

    def get_schedule(self, schedule_id: int) -> ScheduleRow | None:
        values = (
            Schedule.objects.using(self.using)
            .filter(id=schedule_id)
            .values_list(*_ROW_FIELDS)
            .first()
        )
        return schedule_row(values)

    def running_elsewhere(self, schedule_id: int, node_id: str, dead_before: datetime) -> list[str]:
        live = Node.objects.using(self.using).live(dead_before)
        nodes = (
            Run.objects.using(self.using)
            .filter(schedule_id=schedule_id, status=RunStatus.RUNNING)
            .exclude(node=node_id)
            .filter(node__in=live.values("id"))
            .values_list("node", flat=True)
        )
        return sorted(set(nodes))

    def _claim_occurrence(self, o: values.Occurrence) -> list[int] | None:
        node_id, row, next_run_at, now, runs = o
        with self._fenced(node_id):
            claimed = (
                Schedule.objects.using(self.using)
                .filter(id=row.id, next_run_at=row.next_run_at, version=row.version, enabled=True)
                .update(**self._after_fire(next_run_at, now, runs))
            )
            if not claimed:
                return None
            created = Run.objects.using(self.using).bulk_create(
                [self._run(o, schedule_id=row.id) for o in runs]
            )
        return [r.pk for r in created]

    def _mark_broken(self, b: values.Breakage) -> bool:
        node_id, schedule_id, version, reason, run = b
        with self._fenced(node_id):
            rows = Schedule.objects.using(self.using).filter(id=schedule_id)
            if version is not None:
                rows = rows.filter(version=version)
            marked = rows.update(
                next_run_at=None,
                broken=rules.broken_reason(reason),
                last_status=run.status,
                last_run_at=run.finished_at,
            )
            if marked:
                self._run(run, schedule_id=schedule_id).save(using=self.using)
        return bool(marked)

    @staticmethod
    def _after_fire(
        next_run_at: datetime | None, now: datetime, runs: list[RunOutcome]
    ) -> dict[str, object]:
        changes: dict[str, object] = {"next_run_at": next_run_at}
        if runs:
            changes["last_run_at"] = now
            changes["last_status"] = runs[-1].status
        return changes

    @staticmethod
    def _run(o: RunOutcome, schedule_id: int | None = None) -> Run:
        return Run(
            schedule_id=schedule_id or o.schedule_id,
            task_id=o.task_id,
            name=o.name,
            function=o.function,
            node=o.node,
            attempt=o.attempt,
            scheduled_for=o.scheduled_for,
            started_at=o.started_at,
            finished_at=None if o.status == RunStatus.RUNNING else o.finished_at,
            status=o.status,
            error=o.error,
            traceback=o.traceback,
            duration=o.duration,
        )

    def start_schedule_run(self, node_id: str, outcome: RunOutcome) -> int:
        with self._fenced(node_id):
            run = self._run(outcome)
            run.save(using=self.using)
        return run.pk

    # -- one-off tasks ---------------------------------------------------------------
    def task_outlook(
        self, now: datetime, serving: base.Serving = base.SERVE_ALL
    ) -> tuple[bool, datetime | None]:
        tasks = Task.objects.using(self.using).filter(_served(serving))
        due = tasks.claimable(now).plain().exists()
        if not due:
            with self.connection.cursor() as cursor:
                due = bool(self._choose_gated(cursor, now, serving, 1))
        first: datetime | None = tasks.filter(status=TaskStatus.PENDING, run_at__gt=now).aggregate(
            m=Min("run_at")
        )["m"]
        return due, first

    def _start_tasks(self, c: values.Claim) -> list[StartedTask]:
        probe = self._gated_probe(c.now, c.serving) if c.limit > 0 else None
        fenced = self._fenced(c.node_id, claim=True, probe=probe)
        with fenced:
            late = self._record_in(c.node_id, c.finished)
            if any(o.gated for o in c.finished):
                self._gate_released()
            # Whether gated tasks are due, if the fence's statement said (PostgreSQL).
            gated_due: bool | None = getattr(fenced, "gated_due", None)
            started = self._start_gated(c, gated_due) if c.limit > 0 else []
            if c.limit > len(started):
                started += self._start_in(c._replace(limit=c.limit - len(started)))
        self._record_late(late)
        return started

    # -- locks and limits (docs/howto-exactly-one.md) ---------------------------------
    #: A hint after the table name of the gated candidates' query (SQLite: their
    #: partial index, which it would not choose itself).
    _gated_indexed_by = ""
    #: Which due tasks have a lock or a limit, as SQL (MySQL quotes ``lock`` its way).
    _gated_predicate = GATED_PREDICATE

    def _gate_released(self) -> None:
        """A task with a lock or a limit ended in this transaction: tell the other
        nodes (nothing here: they poll)."""

    def _lock_gates(self, keys: list[str]) -> bool:
        """Serialise the claims of these locks and functions (``lock:…``,
        ``function:…``) until the transaction ends; return whether the holders must be
        counted again. Nothing here: the claim's transaction is the only writer."""
        return False

    def _holders(self, cursor: Any, now: datetime) -> tuple[set[str], Counter[str]]:
        """The locks of the tasks running with an unexpired lease, and how many such
        tasks each function has (a few rows: the tasks running on every node)."""
        adapt = self.connection.ops.adapt_datetimefield_value
        lock = self.connection.ops.quote_name("lock")
        cursor.execute(
            f"SELECT {lock}, function FROM {_TASK} WHERE status = %s AND lease_expires_at >= %s",
            [TaskStatus.RUNNING, adapt(now)],
        )
        held: set[str] = set()
        running: Counter[str] = Counter()
        for lock, function in cursor.fetchall():
            running[function] += 1
            if lock is not None:
                held.add(lock)
        return held, running

    def _gated_probe(self, now: datetime, serving: base.Serving) -> Probe:
        """The due tasks with a lock or a limit that ``serving`` covers, as a query of
        the partial index over them (its columns: ``id``, ``lock``, ``function``,
        ``max_running``) and its parameters. A claim asks first whether it finds any;
        on PostgreSQL that question rides on the claim's first statement (the fence), so
        that a claim with none due costs no round trip more."""
        adapt = self.connection.ops.adapt_datetimefield_value
        served, served_params = served_sql(serving)
        lock = self.connection.ops.quote_name("lock")
        sql = (
            f"SELECT id, {lock}, function, max_running FROM {_TASK}{self._gated_indexed_by}"
            f" WHERE {self._gated_predicate} AND {CLAIMABLE_SQL}{served}"
        )
        return Probe(sql, [*claimable_params(adapt(now)), *served_params])

    def _choose_gated(
        self,
        cursor: Any,
        now: datetime,
        serving: base.Serving,
        limit: int,
        gated_due: bool | None = None,
    ) -> list[Gated]:
        """The due tasks with a lock or a limit a claim of ``limit`` would start now
        (:func:`~django_htask.store.base.pick_gated`), read through their partial index
        page by page; one short read when there are none (none when ``gated_due``
        already says)."""
        due, params = self._gated_probe(now, serving)
        if gated_due is None:
            cursor.execute(f"{due} LIMIT 1", params)
            gated_due = cursor.fetchone() is not None
        if not gated_due:
            return []
        held, running = self._holders(cursor, now)
        skip = ""
        if 0 < len(held) <= _CHUNK:  # else the walk below skips them
            lock = self.connection.ops.quote_name("lock")
            skip = f" AND {lock} NOT IN ({', '.join(['%s'] * len(held))})"
            params += sorted(held)
        picked: list[Gated] = []
        for offset in itertools.count(0, _GATED_PAGE):
            cursor.execute(
                f"{due}{skip} ORDER BY priority DESC, run_at, id LIMIT %s OFFSET %s",
                [*params, _GATED_PAGE, offset],
            )
            page = [Gated(*row) for row in cursor.fetchall()]
            picked += pick_gated(page, held, running, limit - len(picked))
            if len(picked) >= limit or len(page) < _GATED_PAGE:
                break
        return picked

    def _start_gated(self, c: values.Claim, gated_due: bool | None) -> list[StartedTask]:
        """Claim and start the due tasks with a lock or a limit that may start now, in
        the caller's transaction: chosen, then (where several nodes claim at once) their
        locks and functions locked in one order and the holders counted again, so that
        two claims never both start a task of one lock or overfill a function.
        ``gated_due``: whether any are due, if known already."""
        now, limit, serving = c.now, c.limit, c.serving
        if gated_due is False:
            return []
        with self.connection.cursor() as cursor:
            chosen = self._choose_gated(cursor, now, serving, limit, gated_due)
            if not chosen:
                return []
            keys = {f"lock:{g.lock}" for g in chosen if g.lock is not None}
            keys |= {f"function:{g.function}" for g in chosen if g.max_running is not None}
            if self._lock_gates(sorted(keys)):
                held, running = self._holders(cursor, now)
                chosen = pick_gated(chosen, held, running, limit)
        claimable = Task.objects.using(self.using).claimable(now)
        started = self._mark_started(c, [g.id for g in chosen], claimable)
        return [dataclasses.replace(task, gated=True) for task in started]

    def _mark_started(
        self, c: values.Claim, ids: list[int], claimable: QuerySet[Task]
    ) -> list[StartedTask]:
        """Start the tasks ``ids`` still ``claimable`` as claim ``c``'s (in the caller's
        transaction), and return them."""
        tasks = Task.objects.using(self.using)
        claimable.filter(id__in=ids).update(
            status=TaskStatus.RUNNING,
            attempts=F("attempts") + 1,
            started_at=c.now,
            locked_by=c.node_id,
            lease_expires_at=c.lease_until,
        )
        rows = (
            tasks.filter(id__in=ids, locked_by=c.node_id, status=TaskStatus.RUNNING)
            .order_by()  # read by id, not sorted: the claim above took them in order
            .values_list(*_STARTED_FIELDS)
        )
        return [started_task(row) for row in rows]

    def _start_returning(
        self,
        c: values.Claim,
        lock: str = "",
        adapt: Callable[[Any], Any] = lambda v: v,
        indexed_by: str = "",
    ) -> list[StartedTask]:
        """Claim and start due tasks without a lock or a limit in one ``UPDATE …
        RETURNING`` statement (in the caller's transaction); ``lock``: how the candidate
        rows are locked, ``adapt``: the database's adapter of timestamps,
        ``indexed_by``: a hint after the table name of the candidates' query."""
        node_id, now, limit, lease_until, _finished, serving = c
        served, served_params = served_sql(serving)
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_TASK} SET status = %s, attempts = attempts + 1, started_at = %s,"
                " locked_by = %s, lease_expires_at = %s WHERE id IN ("
                f" SELECT id FROM {_TASK}{indexed_by} WHERE {CLAIMABLE_SQL}"
                f" AND {PLAIN_TASK_SQL}{served}"
                f"  ORDER BY priority DESC, run_at, id LIMIT %s{lock}"
                f") RETURNING {', '.join(_STARTED_FIELDS)}",
                [
                    TaskStatus.RUNNING,
                    adapt(now),
                    node_id,
                    adapt(lease_until),
                    *claimable_params(adapt(now)),
                    *served_params,
                    limit,
                ],
            )
            rows = cursor.fetchall()
        return [started_task(row, _as_datetime) for row in rows]

    #: Lock the candidates of a claim ``FOR UPDATE SKIP LOCKED`` (MySQL, MariaDB), so
    #: claims made at once take disjoint tasks without waiting.
    _skip_locked = False

    def _start_in(self, c: values.Claim) -> list[StartedTask]:
        """Claim and start due tasks without a lock or a limit, in the caller's
        transaction."""
        now, limit, serving = c.now, c.limit, c.serving
        tasks = Task.objects.using(self.using)
        claimable = tasks.claimable(now).plain().filter(_served(serving))
        candidates = claimable
        if self._skip_locked:
            candidates = candidates.select_for_update(skip_locked=True)
        ids = list(
            candidates.order_by("-priority", "run_at", "id").values_list("id", flat=True)[:limit]
        )
        if not ids:
            return []
        # Rows locked FOR UPDATE by this transaction are still claimable: they are
        # started by id alone. Asked again whether they are claimable, InnoDB could walk
        # a secondary index to the rows another claim holds and wait for them while that
        # claim waits for its own: a deadlock (seen 1 in 20 with four nodes claiming).
        return self._mark_started(c, ids, tasks if self._skip_locked else claimable)

    def aborts(self, node_id: str) -> list[tuple[str, int]]:
        # Both read through their small partial index (abort_requested_at IS NOT NULL).
        tasks = Task.objects.using(self.using).filter(
            locked_by=node_id, abort_requested_at__isnull=False, status=TaskStatus.RUNNING
        )
        runs = Run.objects.using(self.using).filter(
            node=node_id, abort_requested_at__isnull=False, status=RunStatus.RUNNING
        )
        return [("task", i) for i in tasks.values_list("id", flat=True)] + [
            ("run", i) for i in runs.values_list("id", flat=True)
        ]

    def record(self, node_id: str, outcomes: list[RunOutcome]) -> None:
        if not outcomes:
            return
        with self._fenced(node_id):
            late = self._record_in(node_id, outcomes)
            if any(o.gated for o in outcomes):
                self._gate_released()
        self._record_late(late)

    def _record_in(
        self, node_id: str, outcomes: list[RunOutcome]
    ) -> dict[int, tuple[str, datetime]]:
        """Write ``outcomes`` in the caller's transaction; return the last statuses of
        schedules left to write afterwards, each in a transaction of its own
        (:meth:`_record_late`)."""
        self._record_runs(node_id, outcomes)
        for schedule_id, (status, when) in values.last_statuses(outcomes).items():
            Schedule.objects.using(self.using).filter(id=schedule_id).update(
                last_status=status, last_run_at=when
            )
        return {}

    def _record_late(self, statuses: dict[int, tuple[str, datetime]]) -> None:
        """Write what :meth:`_record_in` left (nothing here)."""

    def _still_running(self, node_id: str, task_ids: list[int]) -> set[int]:
        """Which of ``task_ids`` this node still runs (the others were reaped meanwhile:
        their outcome is not written)."""
        held: set[int] = set()
        tasks = Task.objects.using(self.using)
        for i in range(0, len(task_ids), _CHUNK):
            held.update(
                tasks.filter(
                    id__in=task_ids[i : i + _CHUNK], locked_by=node_id, status=TaskStatus.RUNNING
                ).values_list("id", flat=True)
            )
        return held

    def _record_runs(self, node_id: str, outcomes: list[RunOutcome]) -> None:
        """Write the runs and tasks of ``outcomes`` (in the caller's transaction)."""
        runs = Run.objects.using(self.using)
        task_outcomes = [o for o in outcomes if o.task_id is not None]
        held = self._still_running(node_id, [o.task_id for o in task_outcomes if o.task_id])
        ended = [o for o in task_outcomes if o.task_id in held]
        for o in outcomes:
            if o.task_id is None and o.run_id is not None:
                runs.filter(id=o.run_id, status=RunStatus.RUNNING).update(
                    status=o.status,
                    finished_at=o.finished_at,
                    duration=o.duration,
                    error=o.error,
                    traceback=o.traceback,
                )
        if ended:
            self._end_tasks(ended)
            runs.bulk_create([self._run(o) for o in ended], batch_size=_CHUNK // 2)

    def _end_tasks(self, outcomes: list[RunOutcome]) -> None:
        """Write the tasks whose attempt ended: finished, or pending again for a retry.

        One prepared statement for all (``executemany``): the ORM's ``update()`` per row
        costs more than the jobs themselves when the jobs are trivial.
        """
        ops = self.connection.ops
        table = ops.quote_name(Task._meta.db_table)
        sql = (
            f"UPDATE {table} SET status = %s, run_at = COALESCE(%s, run_at), "
            "finished_at = %s, locked_by = NULL, lease_expires_at = NULL, "
            "last_error = %s, traceback = %s, result = %s WHERE id = %s AND status = %s"
        )
        adapt = ops.adapt_datetimefield_value
        params = [
            (
                TaskStatus.PENDING if o.retry_at is not None else o.status,
                adapt(o.retry_at),
                None if o.retry_at is not None else adapt(o.finished_at),
                o.error,
                o.traceback,
                o.result,
                o.task_id,
                TaskStatus.RUNNING,
            )
            for o in outcomes
        ]
        retried = [o.task_id for o in outcomes if o.task_id is not None and o.retry_at is not None]

        def write() -> int:
            with self.connection.cursor() as cursor:
                cursor.executemany(sql, params)
            return len(params)

        if not retried:
            write()
            return
        now = max(o.finished_at for o in outcomes)
        put_back(self.using, retried, TaskStatus.RUNNING, now, write)

    def count_pending_tasks(self) -> int:
        return Task.objects.using(self.using).filter(status=TaskStatus.PENDING).count()

    def prune_runs(self, days: int) -> int:
        return prune_runs(days, using=self.using)


_translate(DatabaseStore, INTERFACE)  # its own methods and those it inherits


class Probe(NamedTuple):
    """A query and its parameters (:meth:`DatabaseStore._gated_probe`)."""

    sql: str
    params: list[Any]


def schedule_row(values: Sequence[Any] | None) -> ScheduleRow | None:
    """The :class:`ScheduleRow` of the values of :data:`_ROW_FIELDS` (None: no row)."""
    if values is None:
        return None
    own = dict(zip(_ROW_FIELDS[:_ROW_OWN], values[:_ROW_OWN], strict=True))
    own["payload"] = bytes(own["payload"] or b"")
    return ScheduleRow(**own, retry=base.RetryColumns(*values[_ROW_OWN:]))


def started_task(
    row: Sequence[Any], as_datetime: Callable[[Any], datetime] = lambda v: v
) -> StartedTask:
    """The :class:`StartedTask` of the values of :data:`_STARTED_FIELDS`."""
    i, t, f, p, r, a, m, pr, to, *retry = row
    columns = base.RetryColumns(*retry)
    if columns == base.DEFAULT_RETRY:
        columns = base.DEFAULT_RETRY  # one object for the many tasks without a policy
    return StartedTask(i, t, f, bytes(p), as_datetime(r), a, m, pr, to, columns)
