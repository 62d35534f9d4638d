"""The store on the Django ORM: everything that works the same on every database."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Max, Q

from django_htask.models import Node, Run, RunStatus, Schedule, Task, TaskStatus, prune_runs

from .base import ClaimedTask, RunOutcome, ScheduleRef, ScheduleRow, StartedTask, Store

__all__ = ["DatabaseStore"]

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
)
#: SQLite allows 999 host parameters in old builds: chunk ``IN (...)`` lists.
_CHUNK = 500


class DatabaseStore(Store):
    """The ORM store over the database alias ``using``."""

    vendor = ""

    def __init__(self, using: str = "default") -> None:
        self.using = using

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

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

    # -- nodes -----------------------------------------------------------------------
    def register_node(
        self, node_id: str, hostname: str, pid: int, version: str, now: datetime
    ) -> None:
        Node.objects.using(self.using).update_or_create(
            id=node_id,
            defaults={
                "hostname": hostname,
                "pid": pid,
                "version": version,
                "started_at": now,
                "last_heartbeat": now,
                "stopped_at": None,
            },
        )

    def heartbeat(self, node_id: str, now: datetime, lease_until: datetime) -> int:
        with self._atomic():
            Node.objects.using(self.using).filter(id=node_id).update(last_heartbeat=now)
            return (
                Task.objects.using(self.using)
                .filter(locked_by=node_id, status__in=(TaskStatus.PENDING, TaskStatus.RUNNING))
                .update(lease_expires_at=lease_until)
            )

    def stop_node(self, node_id: str, now: datetime) -> None:
        Node.objects.using(self.using).filter(id=node_id).update(stopped_at=now)

    def reap(self, now: datetime, dead_before: datetime) -> int:
        """Pending tasks whose lease expired are claimable again as they are; tasks left
        running by a dead node count that attempt (at least once) and go back to pending
        or fail; runs left running by dead nodes fail."""
        tasks = Task.objects.using(self.using)
        count = 0
        with self._atomic():
            lost = tasks.filter(status=TaskStatus.RUNNING, lease_expires_at__lt=now)
            count += lost.filter(attempts__lt=F("max_attempts")).update(
                status=TaskStatus.PENDING,
                locked_by=None,
                lease_expires_at=None,
                last_error="the node running it stopped answering",
            )
            count += lost.update(
                status=TaskStatus.FAILED,
                locked_by=None,
                lease_expires_at=None,
                finished_at=now,
                last_error="the node running it stopped answering",
            )
            live = Node.objects.using(self.using).filter(
                last_heartbeat__gte=dead_before, stopped_at__isnull=True
            )
            count += (
                Run.objects.using(self.using)
                .filter(status=RunStatus.RUNNING)
                .exclude(node__in=live.values("id"))
                .update(
                    status=RunStatus.FAILED,
                    finished_at=now,
                    error="the node running it stopped answering",
                )
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
                .values_list("id", "next_run_at", "version")
            )
            refs = [ScheduleRef(i, n, v) for i, n, v in rows.iterator(chunk_size=10_000)]
        return refs, top

    def _max_version(self) -> int:
        top = Schedule.objects.using(self.using).aggregate(m=Max("version"))["m"]
        return int(top or 0)

    def changed_schedules(self, since: int) -> tuple[list[ScheduleRef], int]:
        rows = (
            Schedule.objects.using(self.using)
            .filter(version__gt=since)
            .order_by("version")
            .values_list("id", "next_run_at", "version", "enabled")
        )
        refs = [ScheduleRef(i, n, v, e) for i, n, v, e in rows]
        return refs, max([since, *(r.version for r in refs)])

    def get_schedule(self, schedule_id: int) -> ScheduleRow | None:
        values = (
            Schedule.objects.using(self.using)
            .filter(id=schedule_id)
            .values_list(*_ROW_FIELDS)
            .first()
        )
        if values is None:
            return None
        data = dict(zip(_ROW_FIELDS, values, strict=True))
        data["payload"] = bytes(data["payload"] or b"")
        return ScheduleRow(**data)

    def running_elsewhere(self, schedule_id: int, node_id: str, dead_before: datetime) -> int:
        live = Node.objects.using(self.using).filter(
            last_heartbeat__gte=dead_before, stopped_at__isnull=True
        )
        return (
            Run.objects.using(self.using)
            .filter(schedule_id=schedule_id, status=RunStatus.RUNNING)
            .exclude(node=node_id)
            .filter(node__in=live.values("id"))
            .count()
        )

    def claim_occurrence(
        self,
        row: ScheduleRow,
        next_run_at: datetime | None,
        now: datetime,
        runs: list[RunOutcome],
    ) -> list[int] | None:
        with self._atomic():
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

    def start_schedule_run(self, outcome: RunOutcome) -> int:
        run = self._run(outcome)
        run.save(using=self.using)
        return run.pk

    # -- one-off tasks ---------------------------------------------------------------
    def _claimable(self, until: datetime, now: datetime) -> Q:
        return Q(status=TaskStatus.PENDING, run_at__lte=until) & (
            Q(locked_by__isnull=True) | Q(lease_expires_at__lt=now)
        )

    def _claim_candidates(self, until: datetime, now: datetime, limit: int) -> list[int]:
        """Ids that look claimable; the conditional update decides. PostgreSQL locks
        them here instead (``FOR UPDATE SKIP LOCKED``)."""
        return list(
            Task.objects.using(self.using)
            .filter(self._claimable(until, now))
            .order_by("-priority", "run_at", "id")
            .values_list("id", flat=True)[:limit]
        )

    def claim_tasks(
        self, node_id: str, until: datetime, now: datetime, lease_until: datetime, limit: int
    ) -> list[ClaimedTask]:
        tasks = Task.objects.using(self.using)
        with self._atomic():
            ids = self._claim_candidates(until, now, limit)
            if not ids:
                return []
            tasks.filter(self._claimable(until, now), id__in=ids).update(
                locked_by=node_id, lease_expires_at=lease_until
            )
            rows = tasks.filter(
                id__in=ids, locked_by=node_id, status=TaskStatus.PENDING
            ).values_list("id", "run_at")
            return [ClaimedTask(i, r) for i, r in rows]

    def start_tasks(self, node_id: str, ids: list[int], now: datetime) -> list[StartedTask]:
        tasks = Task.objects.using(self.using)
        started: list[StartedTask] = []
        with self._atomic():
            for i in range(0, len(ids), _CHUNK):
                chunk = ids[i : i + _CHUNK]
                mine = tasks.filter(id__in=chunk, locked_by=node_id, status=TaskStatus.PENDING)
                wanted = list(mine.values_list("id", flat=True))
                if not wanted:
                    continue
                tasks.filter(id__in=wanted).update(
                    status=TaskStatus.RUNNING, attempts=F("attempts") + 1
                )
                rows = tasks.filter(id__in=wanted).values_list(
                    "id",
                    "token",
                    "function",
                    "payload",
                    "run_at",
                    "attempts",
                    "max_attempts",
                    "priority",
                )
                started.extend(
                    StartedTask(i, t, f, bytes(p), r, a, m, pr) for i, t, f, p, r, a, m, pr in rows
                )
        return started

    def release_tasks(self, node_id: str) -> int:
        return (
            Task.objects.using(self.using)
            .filter(locked_by=node_id, status=TaskStatus.PENDING)
            .update(locked_by=None, lease_expires_at=None)
        )

    def record(self, outcomes: list[RunOutcome]) -> None:
        if not outcomes:
            return
        with self._atomic():
            self._record_runs(outcomes)
            for schedule_id, (status, when) in self._last_statuses(outcomes).items():
                Schedule.objects.using(self.using).filter(id=schedule_id).update(
                    last_status=status, last_run_at=when
                )

    @staticmethod
    def _last_statuses(outcomes: list[RunOutcome]) -> dict[int, tuple[str, datetime]]:
        """Schedule id -> the status and time of its latest run among ``outcomes``."""
        latest: dict[int, tuple[str, datetime]] = {}
        for o in outcomes:
            if o.schedule_id is None:
                continue
            when = o.started_at or o.finished_at
            if o.schedule_id not in latest or latest[o.schedule_id][1] <= when:
                latest[o.schedule_id] = (o.status, when)
        return latest

    def _record_runs(self, outcomes: list[RunOutcome]) -> None:
        """Write the runs and tasks of ``outcomes`` (in the caller's transaction)."""
        runs = Run.objects.using(self.using)
        new_runs: list[Run] = []
        ended: list[RunOutcome] = []
        for o in outcomes:
            if o.task_id is not None:
                if o.handed_back:  # pending again, the attempt not counted
                    Task.objects.using(self.using).filter(
                        id=o.task_id, status=TaskStatus.RUNNING
                    ).update(
                        status=TaskStatus.PENDING,
                        attempts=F("attempts") - 1,
                        locked_by=None,
                        lease_expires_at=None,
                    )
                else:
                    ended.append(o)
                    new_runs.append(self._run(o))
            elif o.run_id is not None:
                runs.filter(id=o.run_id).update(
                    status=o.status,
                    finished_at=o.finished_at,
                    duration=o.duration,
                    error=o.error,
                    traceback=o.traceback,
                )
        if ended:
            self._end_tasks(ended)
        if new_runs:
            runs.bulk_create(new_runs, batch_size=_CHUNK // 2)

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
            "last_error = %s, traceback = %s WHERE id = %s AND status = %s"
        )
        adapt = ops.adapt_datetimefield_value
        params = [
            (
                TaskStatus.PENDING if o.retry_at is not None else o.status,
                adapt(o.retry_at),
                None if o.retry_at is not None else adapt(o.finished_at),
                o.error,
                o.traceback,
                o.task_id,
                TaskStatus.RUNNING,
            )
            for o in outcomes
        ]
        with self.connection.cursor() as cursor:
            cursor.executemany(sql, params)

    def count_pending_tasks(self) -> int:
        return Task.objects.using(self.using).filter(status=TaskStatus.PENDING).count()

    def prune_runs(self, days: int) -> int:
        return prune_runs(days, using=self.using)
