"""What tests write into an in-memory store from outside, as another process would
(``Schedule(...).save()``, ``schedule()``, ``cancel()``, ``abort()``, ``pause_queue()``),
and what they read back (:meth:`~OutsideWrites.runs_of`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django_htask.engine import encode_call, parse_schedule
from django_htask.enums import RunStatus, TaskStatus
from django_htask.exceptions import DuplicateKey
from django_htask.graph import AfterFailure
from django_htask.keys import OnConflict, check_key, check_lock
from django_htask.querysets import task_attempts
from django_htask.queues import DEFAULT_QUEUE
from django_htask.retention import FINAL_STATUSES
from django_htask.store.base import DEFAULT_RETRY, RetryColumns, RunOutcome
from django_htask.store.follow import Edge, events_of, follow

from .follow import MemoryFollow
from .records import BatchRecord, MemoryTables, QueueRecord, ScheduleRecord, TaskRecord

#: Leaves a queue's value as it is (:meth:`OutsideWrites.set_queue`).
_KEEP: Any = object()


#: What a task moved to a new call by ``on_conflict="replace"`` takes from it.
_REPLACED = (
    "function",
    "payload",
    "run_at",
    "max_attempts",
    "priority",
    "queue_name",
    "timeout",
    "retry",
    "lock",
    "max_running",
    "max_snoozes",
    "per_key",
    "rate_limit",
    "rate_period",
)


class OutsideWrites(MemoryTables):
    """The helpers for tests: rows as another process would write them."""

    def add_schedule(
        self,
        name: str,
        function: str,
        schedule: str,
        *,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        next_run_at: datetime | None = None,
        **fields: Any,
    ) -> int:
        """A schedule, as ``Schedule(...).save()`` makes it (``next_run_at``: the next
        occurrence after now, unless given). Return its id."""
        tz = fields.get("timezone", "UTC")
        if next_run_at is None and fields.get("enabled", True):
            next_run_at = parse_schedule(schedule, tz=tz or None).next_after(self.clock.now())
        with self._lock:
            row = ScheduleRecord(
                next(self._ids),
                name,
                function,
                schedule,
                payload=encode_call(function, tuple(args), dict(kwargs or {})),
                next_run_at=next_run_at,
                version=next(self._versions),
                **fields,
            )
            self.schedules[row.id] = row
        self._notify("schedule")
        return row.id

    def end_sessions(self, node_id: str) -> None:
        """The node's process has ended (killed, crashed): the database ends its
        sessions, and with them its presence (:meth:`absent`)."""
        with self._lock:
            self.sessions.discard(node_id)

    def update_schedule(self, schedule_id: int, **changes: Any) -> None:
        """Change a schedule's fields, as ``QuerySet.update()`` or raw SQL would (its
        version rises)."""
        with self._lock:
            row = self.schedules[schedule_id]
            for key, value in changes.items():
                setattr(row, key, value)
            row.version = next(self._versions)
        self._notify("schedule")

    def add_task(
        self,
        function: str,
        *args: Any,
        run_at: datetime | None = None,
        max_attempts: int = 1,
        priority: int = 0,
        queue_name: str = DEFAULT_QUEUE,
        timeout: float | None = None,
        retry: RetryColumns = DEFAULT_RETRY,
        key: str | None = None,
        on_conflict: str = OnConflict.IGNORE,
        lock: str | None = None,
        max_running: int | None = None,
        retention: int | None = None,
        max_snoozes: int | None = None,
        per_key: str | None = None,
        rate_limit: int | None = None,
        rate_period: int | None = None,
        after: Sequence[int] = (),
        bind: Mapping[str, int] | None = None,
        after_failure: str = AfterFailure.CANCEL,
        batch: int | None = None,
        **kwargs: Any,
    ) -> int:
        """A pending one-off task ``function(*args, **kwargs)``, as ``schedule()`` makes
        it (due now unless ``run_at``). Return its id. With a ``key`` another pending
        task holds, ``on_conflict`` decides, as for ``schedule()``: that task's id is
        returned (``replace``: moved to this call first), or DuplicateKey is raised.

        ``after`` (task ids) and ``bind`` (parameter -> task id: that one's result
        passed under the name): it waits for them, as ``schedule(after=...)`` makes it
        (``after_failure``: what their failure does to it); ``batch``: a member of that
        batch (:meth:`add_batch`)."""
        columns: dict[str, Any] = {
            "max_attempts": max_attempts,
            "priority": priority,
            "queue_name": queue_name,
            "timeout": timeout,
            "retry": retry,
            "max_running": max_running,
            "retention": retention,
            "max_snoozes": max_snoozes,
            "per_key": per_key,
            "rate_limit": rate_limit,
            "rate_period": rate_period,
        }
        if after or bind or batch is not None:
            if key is not None:
                raise ValueError("a task with a key cannot wait for others nor join a batch")
            return self._add_composed(function, args, kwargs, after, bind or {}, after_failure,
                                      batch, run_at=run_at, lock=lock, **columns)  # fmt: skip
        conflict = OnConflict.of(on_conflict)
        return self._add_pending(function, args, kwargs, run_at, key, lock, conflict, columns)

    def _add_pending(
        self,
        function: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_at: datetime | None,
        key: str | None,
        lock: str | None,
        conflict: OnConflict,
        columns: dict[str, Any],
    ) -> int:
        """:meth:`add_task` for a task that waits for nothing: pending at once, unless a
        pending task holds its ``key`` (``conflict`` decides)."""
        with self._lock:
            task = TaskRecord(
                next(self._ids),
                function,
                encode_call(function, args, kwargs),
                run_at or self.clock.now(),
                key=None if key is None else check_key(key),
                lock=None if lock is None else check_lock(lock),
                **columns,
            )
            kept = self._keep(task, conflict)
            if kept is not task:
                return kept.id
        self._notify("task")
        return task.id

    def _keep(self, task: TaskRecord, conflict: OnConflict) -> TaskRecord:
        """Keep the new ``task`` (returned), unless a pending task holds its key:
        ``conflict`` decides (that task returned, moved to this call by ``replace``;
        DuplicateKey raised). Under the lock."""
        holder = self._pending_with(task.key)
        if holder is None:
            self.tasks[task.id] = task
            return task
        if conflict is OnConflict.RAISE:
            raise DuplicateKey(holder.key or "", holder.token)
        if conflict is OnConflict.REPLACE:
            for name in _REPLACED:
                setattr(holder, name, getattr(task, name))
            holder.attempts = holder.snoozes = 0
            holder.locked_by = holder.lease_expires_at = None
            holder.last_error = holder.traceback = ""
        return holder

    def _add_composed(
        self,
        function: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        after: Sequence[int],
        bind: Mapping[str, int],
        after_failure: str,
        batch: int | None,
        **fields: Any,
    ) -> int:
        """:meth:`add_task` for a task that waits for others or joins a batch."""
        run = AfterFailure.of(after_failure) is AfterFailure.RUN
        with self._lock:
            now = self.clock.now()
            fields["run_at"] = fields["run_at"] or now
            task = TaskRecord(next(self._ids), function, encode_call(function, args, kwargs),
                              **fields)  # fmt: skip
            edges = [Edge(task.id, a, None, None, run) for a in after]
            edges += [Edge(task.id, a, param, None, run) for param, a in bind.items()]
            unknown = [e.after_id for e in edges if e.after_id not in self.tasks]
            if unknown:
                raise LookupError(f"no task has the id {unknown[0]}")
            if batch is not None:
                row = self.batches[batch]
                if row.finished_at is not None:
                    raise ValueError(f"batch {batch} has finished: it takes no more tasks")
                row.total += 1
                task.batch_id, task.followed = batch, True
            if edges:
                task.status, task.waiting_on = TaskStatus.WAITING, len(edges)
            self.tasks[task.id] = task
            self.edges += edges
            for e in edges:
                self.tasks[e.after_id].followed = True
            io = MemoryFollow(self)
            ended = {e.after_id for e in edges if self.tasks[e.after_id].status in FINAL_STATUSES}
            follow(io, [], now, events_of(edges, io.ended(sorted(ended))))
        self._notify("task")
        return task.id

    def add_batch(
        self,
        name: str = "",
        *,
        on_success: str | None = None,
        on_failure: str | None = None,
        on_finish: str | None = None,
    ) -> int:
        """A batch (``django_htask.batch()``), its callbacks (registered names) waiting
        for it; return its id. Members join it by :meth:`add_task`'s ``batch``."""
        with self._lock:
            row = BatchRecord(next(self._ids), name)
            for role, fn in (("on_success", on_success), ("on_failure", on_failure),
                             ("on_finish", on_finish)):  # fmt: skip
                if fn is not None:
                    callback = TaskRecord(next(self._ids), fn, encode_call(fn, [None], {}),
                                          self.clock.now(), status=TaskStatus.WAITING,
                                          waiting_on=1)  # fmt: skip
                    self.tasks[callback.id] = callback
                    setattr(row, f"{role}_id", callback.id)
            self.batches[row.id] = row
        return row.id

    def cancel_task(self, task_id: int) -> bool:
        """Cancel a pending or waiting task (``cancel(token)``), and what follows (the
        tasks waiting on it cancelled, its batch told); False if it is neither."""
        with self._lock:
            task = self.tasks[task_id]
            if task.status not in (TaskStatus.PENDING, TaskStatus.WAITING):
                return False
            now = self.clock.now()
            task.status, task.finished_at = TaskStatus.CANCELLED, now
            task.locked_by = task.lease_expires_at = None
            if task.followed:
                self._ended.append(task.id)
                self._follow_ended(now)
        self._notify("task")
        return True

    def request_abort(self, *, task_id: int | None = None, run_id: int | None = None) -> bool:
        """Ask for the abort of a running task or schedule run (as ``abort(token)`` and
        the admin do); False if it is not running, or was asked already."""
        with self._lock:
            now = self.clock.now()
            if task_id is not None:
                task = self.tasks[task_id]
                if task.status != TaskStatus.RUNNING or task.abort_requested_at is not None:
                    return False
                task.abort_requested_at = now
            elif run_id is not None:
                if self.runs[run_id].status != RunStatus.RUNNING or run_id in self.run_aborts:
                    return False
                self.run_aborts.add(run_id)
        self._notify("task")
        return True

    def set_queue(
        self, name: str, *, paused: bool = _KEEP, max_running: int | None = _KEEP
    ) -> None:
        """Pause or resume queue ``name``, or set its limit (None: none), as
        ``pause_queue``, ``resume_queue`` and ``limit_queue`` do (its row made if
        needed); the listeners hear ``queue``."""
        with self._lock:
            row = self.queues.setdefault(name, QueueRecord(name))
            if paused is not _KEEP:
                row.paused = paused
            if max_running is not _KEEP:
                row.max_running = max_running
        self._notify("queue")

    def attempts_of(self, task_id: int) -> list[RunOutcome]:
        """The attempts of a task: its runs, and its success from its row (a success
        writes no run row), as ``Run.objects.attempts_of(task)`` reads them."""
        with self._lock:
            return task_attempts(self.runs_of(task_id=task_id), self.tasks[task_id], RunOutcome)

    def runs_of(
        self, *, schedule_id: int | None = None, task_id: int | None = None
    ) -> list[RunOutcome]:
        """The runs of a schedule or a task, in the order they were written (copies)."""
        with self._lock:
            return [
                dataclasses.replace(r)
                for r in self.runs.values()
                if (schedule_id is None or r.schedule_id == schedule_id)
                and (task_id is None or r.task_id == task_id)
            ]
