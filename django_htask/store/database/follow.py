"""The reads and writes of :func:`~django_htask.store.follow.follow` on the ORM
(:class:`OrmFollow`), in the caller's transaction, the same on every database: only the
ends of tasks others wait on, or of a batch's members, come here, a few statements for
a claim's worth of them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django_htask.models import Batch, Dependency, Task, TaskStatus
from django_htask.store.follow import Edge, Ended, Waiting
from django_htask.store.rules import BatchFacts, Binding

from .core import _CHUNK

__all__ = ["OrmFollow"]


def _chunks(ids: list[int]) -> list[list[int]]:
    return [ids[i : i + _CHUNK] for i in range(0, len(ids), _CHUNK)]


class OrmFollow:
    """:class:`~django_htask.store.follow.FollowIO` on the database ``using``."""

    def __init__(self, using: str) -> None:
        self.using = using
        self.tasks = Task.objects.using(using)

    def ended(self, ids: list[int]) -> dict[int, Ended]:
        found: dict[int, Ended] = {}
        for chunk in _chunks(ids):
            rows = self.tasks.filter(id__in=chunk).values_list(
                "id", "status", "token", "last_error", "batch_id", "followed"
            )
            found.update((row[0], Ended(*row[1:])) for row in rows)
        return found

    def edges_after(self, ids: list[int]) -> list[Edge]:
        edges = Dependency.objects.using(self.using).order_by("id")
        fields = ("task_id", "after_id", "param", "position", "run_anyway")
        return [
            Edge(*row)
            for chunk in _chunks(ids)
            for row in edges.filter(after_id__in=chunk).values_list(*fields)
        ]

    def lock_waiting(self, ids: list[int]) -> dict[int, Waiting]:
        locked: dict[int, Waiting] = {}
        for chunk in _chunks(ids):
            rows = (
                self.tasks.select_for_update()
                .filter(id__in=chunk, status=TaskStatus.WAITING)
                .order_by("id")
                .values_list("id", "token", "waiting_on", "batch_id", "followed")
            )
            locked.update((row[0], Waiting(*row[1:])) for row in rows)
        return locked

    def bindings(self, ids: list[int]) -> dict[int, list[Binding]]:
        edges = [
            row
            for chunk in _chunks(ids)
            for row in Dependency.objects.using(self.using)
            .filter(task_id__in=chunk, param__isnull=False)
            .values_list("task_id", "after_id", "param", "position")
        ]
        # Read apart, not joined: a task it waited for may be gone (pruned).
        after = sorted({after_id for _task, after_id, _param, _position in edges})
        results: dict[int, tuple[str, bytes | None]] = {}
        for chunk in _chunks(after):
            rows = self.tasks.filter(id__in=chunk).values_list("id", "status", "result")
            results.update((i, (status, None if r is None else bytes(r))) for i, status, r in rows)
        bound: dict[int, list[Binding]] = defaultdict(list)
        for task_id, after_id, param, position in edges:
            status, result = results.get(after_id, (TaskStatus.SUCCEEDED, None))
            bound[task_id].append(Binding(param or "", position, status, result))
        return dict(bound)

    def payloads(self, ids: list[int]) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for chunk in _chunks(ids):
            rows = self.tasks.filter(id__in=chunk).values_list("id", "payload")
            found.update((i, bytes(payload)) for i, payload in rows)
        return found

    def write_tasks(self, changes: dict[int, dict[str, Any]]) -> None:
        # Tasks written alike in one statement (a payload makes its task's own).
        alike: dict[tuple[tuple[str, Any], ...], list[int]] = defaultdict(list)
        for task_id, fields in sorted(changes.items()):
            alike[tuple(sorted(fields.items()))].append(task_id)
        for fields_key, ids in alike.items():
            for chunk in _chunks(ids):
                self.tasks.filter(id__in=chunk, status=TaskStatus.WAITING).update(
                    **dict(fields_key)
                )

    def lock_batches(self, ids: list[int]) -> dict[int, BatchFacts]:
        rows = Batch.objects.using(self.using).select_for_update().filter(id__in=ids)
        return {batch.pk: batch for batch in rows.order_by("id")}

    def write_batch(self, batch_id: int, changes: dict[str, Any]) -> None:
        Batch.objects.using(self.using).filter(id=batch_id).update(**changes)
