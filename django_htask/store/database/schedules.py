"""The ORM store's schedules: loading them (as :class:`ScheduleRef`), reading one
(as :class:`ScheduleRow`), claiming an occurrence, marking one broken, and a
schedule's run rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Max

from django_htask.models import Node, Run, RunStatus, Schedule
from django_htask.store import base, rules, values
from django_htask.store.base import RunOutcome, ScheduleRef, ScheduleRow

from .core import OrmStore, _same

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


class ScheduleRows(OrmStore):
    """The schedule rows and the runs a fire writes."""

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

    def _claim_occurrence(self, occurrence: values.Occurrence) -> list[int] | None:
        return self.dialect.claim_occurrence(self, occurrence)

    def _mark_broken(self, breakage: values.Breakage) -> bool:
        node_id, schedule_id, version, reason, run = breakage
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

    def start_schedule_run(self, node_id: str, outcome: RunOutcome) -> int:
        with self._fenced(node_id):
            run = self._run(outcome)
            run.save(using=self.using)
        return run.pk


def schedule_row(values: Sequence[Any] | None) -> ScheduleRow | None:
    """The :class:`ScheduleRow` of the values of :data:`_ROW_FIELDS` (None: no row)."""
    if values is None:
        return None
    own = dict(zip(_ROW_FIELDS[:_ROW_OWN], values[:_ROW_OWN], strict=True))
    own["payload"] = bytes(own["payload"] or b"")
    return ScheduleRow(**own, retry=base.RetryColumns(*values[_ROW_OWN:]))
