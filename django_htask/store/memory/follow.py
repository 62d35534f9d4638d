"""The reads and writes of :func:`~django_htask.store.follow.follow` on the in-memory
store's tables (:class:`MemoryFollow`), with its lock held."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Protocol

from django_htask.enums import TaskStatus
from django_htask.store.follow import Edge, Ended, Waiting
from django_htask.store.rules import BatchFacts, Binding

__all__ = ["MemoryFollow"]


class Tables(Protocol):
    """What :class:`MemoryFollow` reads and writes of the store's tables."""

    tasks: dict[int, Any]
    edges: list[Edge]
    batches: dict[int, Any]


class MemoryFollow:
    """:class:`~django_htask.store.follow.FollowIO` on an in-memory store's tables."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def ended(self, ids: list[int]) -> dict[int, Ended]:
        tasks = self.tables.tasks
        return {
            i: Ended(t.status, t.token, t.last_error, t.batch_id, t.followed)
            for i in ids
            if (t := tasks.get(i)) is not None
        }

    def edges_after(self, ids: list[int]) -> list[Edge]:
        wanted = set(ids)
        return [e for e in self.tables.edges if e.after_id in wanted]

    def lock_waiting(self, ids: list[int]) -> dict[int, Waiting]:
        tasks = self.tables.tasks
        return {
            i: Waiting(t.token, t.waiting_on, t.batch_id, t.followed)
            for i in sorted(ids)
            if (t := tasks.get(i)) is not None and t.status == TaskStatus.WAITING
        }

    def bindings(self, ids: list[int]) -> dict[int, list[Binding]]:
        wanted = set(ids)
        tasks = self.tables.tasks
        bound: dict[int, list[Binding]] = defaultdict(list)
        for e in self.tables.edges:
            if e.task_id in wanted and e.param is not None:
                after = tasks.get(e.after_id)
                status = TaskStatus.SUCCEEDED if after is None else after.status
                result = None if after is None else after.result
                bound[e.task_id].append(Binding(e.param, e.position, status, result))
        return dict(bound)

    def payloads(self, ids: list[int]) -> dict[int, bytes]:
        tasks = self.tables.tasks
        return {i: tasks[i].payload for i in ids if i in tasks}

    def write_tasks(self, changes: dict[int, dict[str, Any]]) -> None:
        for task_id, fields in changes.items():
            task = self.tables.tasks.get(task_id)
            if task is not None and task.status == TaskStatus.WAITING:
                task.__dict__.update(fields)

    def lock_batches(self, ids: list[int]) -> dict[int, BatchFacts]:
        batches = self.tables.batches
        return {i: batches[i] for i in sorted(ids) if i in batches}

    def write_batch(self, batch_id: int, changes: dict[str, Any]) -> None:
        self.tables.batches[batch_id].__dict__.update(changes)
