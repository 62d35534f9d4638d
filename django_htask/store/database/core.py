"""The ORM store's core, which its parts (:mod:`.nodes`, :mod:`.schedules`,
:mod:`.tasks`) build on: the alias and its connection, the migrations check, the fence
of a node's writes, a run's row, and :func:`unavailable`, the one place a database
error becomes :class:`~django_htask.exceptions.StoreUnavailable`."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_htask.db import scheduler_alias
from django_htask.exceptions import NodeFenced, NotMigrated, StoreUnavailable
from django_htask.models import Node, Run, RunStatus, Schedule, Task, TaskStatus
from django_htask.store.base import Listening, RunOutcome, Store
from django_htask.store.dialect import Dialect
from django_htask.store.values import _RUN_COLUMNS, ListenTo, Probe

#: SQLite allows 999 host parameters in old builds: chunk ``IN (...)`` lists.
_CHUNK = 500
_NODE = Node._meta.db_table
_TASK = Task._meta.db_table
_RUN = Run._meta.db_table
#: django_htask's tables.
_TABLES = frozenset(model._meta.db_table for model in (Node, Run, Schedule, Task))


def _same(value: datetime) -> datetime:
    return value


def _as_datetime(value: datetime | str) -> datetime:
    """A timestamp read by raw SQL (SQLite gives UTC, as text or a naive datetime), as
    an aware datetime."""
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def check_fence(node_id: str, row: tuple[Any, ...] | None) -> None:
    """Raise NodeFenced unless ``row``, the node's row read by a fence (its
    ``stopped_at`` first), says ``node_id`` is registered and not declared dead."""
    if row is None or row[0] is not None:
        raise NodeFenced(node_id, None if row is None else _as_datetime(row[0]))


class FencedAtomic(transaction.Atomic):
    """``transaction.atomic`` whose first statement, run in ``__enter__``, fences node
    ``fence`` (its row read and share-locked with ``lock``, then :func:`check_fence`)
    and, in the same round trip, answers what the transaction would otherwise ask in
    statements of its own:

    - ``probe``: whether that query finds a row (``gated_due``: are tasks with a lock
      or a limit due?);
    - ``running_ids``: whether this node still runs every task of those ids
      (``still_running``: the ids, when it does all; None otherwise, and the caller
      reads which).

    The subqueries lock nothing: PostgreSQL and InnoDB lock the rows of the query the
    locking clause is on, not those its subqueries read. :meth:`_columns` adds columns
    computed for their effect (PostgreSQL's settings for the transaction).

    If the first statement fails (the server went away), the block is left at once:
    Python does not call ``__exit__`` when ``__enter__`` raises, and a block left open
    would wedge the thread's connection for good (Django keeps a connection closed
    inside a transaction until the block ends, so every later query on that thread
    would fail with "the connection is closed")."""

    def __init__(
        self,
        using: str,
        fence: str | None = None,
        *,
        lock: str = "",
        probe: Probe | None = None,
        running_ids: Iterable[int] = (),
        by_id: str = "",
    ) -> None:
        super().__init__(using, savepoint=True, durable=False)
        #: A hint after the task table's name when ``running_ids`` are asked about by id.
        self.by_id = by_id
        #: The node whose transaction it is (None: no fence, :meth:`_columns` only).
        self.fence = fence
        self.lock = lock
        self.probe = probe
        #: Asked about when few enough for one ``IN`` list (else the caller reads).
        self.running_ids = sorted(set(running_ids))
        #: The probe's answer, once entered (None: no probe).
        self.gated_due: bool | None = None
        #: ``running_ids`` when the node still runs them all, once entered; else None.
        self.still_running: set[int] | None = None

    def _columns(self, connection: BaseDatabaseWrapper) -> tuple[list[str], list[Any]]:
        """Columns the first statement selects for their effect, and their parameters
        (asked before the transaction opens)."""
        return [], []

    def __enter__(self) -> None:
        connection = connections[self.using or DEFAULT_DB_ALIAS]
        columns, params = self._columns(connection)
        super().__enter__()
        if self.fence is None and not columns:
            return
        try:
            with connection.cursor() as cursor:
                if self.fence is None:
                    cursor.execute(f"SELECT {', '.join(columns)}", params)
                    return
                self._fence_in(cursor, self.fence, columns, params)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise

    def _fence_in(self, cursor: Any, fence: str, columns: list[str], params: list[Any]) -> None:
        """The first statement of a fenced transaction (see the class)."""
        columns = ["stopped_at", *columns]
        params = list(params)
        if self.probe is not None:
            columns.append(f"EXISTS ({self.probe.sql})")
            params += self.probe.params
        asked = self.running_ids if 0 < len(self.running_ids) <= _CHUNK else []
        if asked:
            columns.append(
                f"(SELECT COUNT(*) FROM {_TASK}{self.by_id}"
                f" WHERE id IN ({', '.join(['%s'] * len(asked))})"
                " AND locked_by = %s AND status = %s)"
            )
            params += [*asked, fence, TaskStatus.RUNNING]
        cursor.execute(
            f"SELECT {', '.join(columns)} FROM {_NODE} WHERE id = %s{self.lock}", [*params, fence]
        )
        row = cursor.fetchone()
        check_fence(fence, row)
        assert row is not None
        if asked and row[-1] == len(asked):
            self.still_running = set(asked)
        if self.probe is not None:
            self.gated_due = bool(row[-2 if asked else -1])


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

    translated._translated = True  # type: ignore[attr-defined]
    return translated  # type: ignore[return-value]


def translated(method: object) -> bool:
    """Whether ``method`` went through :func:`unavailable`."""
    return getattr(method, "_translated", False)


def _translate(cls: type[Store], names: Iterable[str]) -> None:
    """Translate the errors of each method ``names`` of ``cls`` (as ``cls`` resolves
    it: its own, a base's, or a mixin's listed before the store in its bases) that
    does not translate them yet."""
    for name in names:
        method = getattr(cls, name)
        if not translated(method):
            setattr(cls, name, unavailable(method))


class OrmStore(Store):
    """What every part of the ORM store shares: the database alias ``using``, its
    connection and transactions, and the fence of a node's writes."""

    vendor = ""
    #: What this database does its own way (each vendor's store holds its own).
    dialect: ClassVar[Dialect]

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

    @classmethod
    def missing_table(cls, exc: Exception) -> str:
        """The table ``exc`` says does not exist, in this database's words ('' if it
        says something else)."""
        words = cls.dialect.no_such_table
        match = words.search(str(exc)) if words else None
        return match.group(1) if match else ""

    def install(self) -> None:
        pass

    def notify_nodes(self) -> None:
        pass  # no notices on this database: the nodes poll

    def _listen(self, to: ListenTo) -> Listening | None:
        return self.dialect.listen(self, to)

    def describe(self) -> str:
        settings = self.connection.settings_dict
        return f"{self.vendor} {settings.get('NAME')}"

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
        """A transaction of this store's writes (the dialect's)."""
        return self.dialect.atomic(self)

    def _fenced(
        self,
        node_id: str,
        *,
        claim: bool = False,
        probe: Probe | None = None,
        running_ids: Iterable[int] = (),
    ) -> AbstractContextManager[Any]:
        """A write transaction of node ``node_id``, which first checks that the node is
        registered and not declared dead (the dialect's :meth:`Dialect.fenced
        <django_htask.store.dialect.Dialect.fenced>`)."""
        return self.dialect.fenced(self, node_id, claim=claim, probe=probe, running_ids=running_ids)

    # -- fencing ---------------------------------------------------------------------
    def _fence(self, node_id: str) -> None:
        """Raise NodeFenced unless ``node_id`` is registered and not declared dead; call
        inside the write transaction (see the module :mod:`~django_htask.store.base`)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT stopped_at FROM {_NODE} WHERE id = %s{self.dialect.fence_lock}",
                [node_id],
            )
            check_fence(node_id, cursor.fetchone())

    def _insert_runs(self, outcomes: list[RunOutcome]) -> None:
        """Insert a run row for each of ``outcomes`` (in the caller's transaction), by
        one prepared statement: MySQL's driver sends it as one multi-row ``INSERT``,
        SQLite runs it row by row in C. (The ORM's ``bulk_create`` cost more of the
        control thread than the trivial jobs whose runs it wrote.)"""
        if not outcomes:
            return
        adapt = self.connection.ops.adapt_datetimefield_value
        rows = []
        for o in outcomes:
            columns = o.columns()
            rows.append([adapt(v) if isinstance(v, datetime) else v for v in columns.values()])
        with self.connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {_RUN} ({', '.join(_RUN_COLUMNS)}) "
                f"VALUES ({', '.join(['%s'] * len(_RUN_COLUMNS))})",
                rows,
            )

    @staticmethod
    def _run(outcome: RunOutcome, schedule_id: int | None = None) -> Run:
        return Run(
            schedule_id=schedule_id or outcome.schedule_id,
            task_id=outcome.task_id,
            name=outcome.name,
            function=outcome.function,
            node=outcome.node,
            attempt=outcome.attempt,
            scheduled_for=outcome.scheduled_for,
            started_at=outcome.started_at,
            finished_at=None if outcome.status == RunStatus.RUNNING else outcome.finished_at,
            status=outcome.status,
            error=outcome.error,
            traceback=outcome.traceback,
            duration=outcome.duration,
        )
