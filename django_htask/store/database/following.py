"""What follows the ends of tasks in the ORM store's transactions (the node's
records, the reaper's, a departure's): :func:`~django_htask.store.follow.follow` on
:class:`~django_htask.store.database.follow.OrmFollow`, for the tasks others wait on
and the members of batches only."""

from __future__ import annotations

from datetime import datetime

from django_htask.models import Task
from django_htask.retention import FINAL_STATUSES
from django_htask.store.follow import follow

from .core import _CHUNK, OrmStore
from .follow import OrmFollow


class FollowRows(OrmStore):
    """The ends of tasks followed up, in the caller's transaction."""

    def _follow_ends(self, task_ids: list[int], now: datetime) -> None:
        """What follows the ends of ``task_ids`` (tasks others wait on, or of a batch),
        written at ``now`` (:func:`~django_htask.store.follow.follow`), in the caller's
        transaction; the other nodes are told of the tasks it released."""
        if task_ids and follow(OrmFollow(self.using), task_ids, now):
            self.dialect.notify(self, "task")  # tasks were made pending

    def _ended_followed(self, task_ids: list[int]) -> list[int]:
        """Which of ``task_ids`` ended and are followed up (a retry superseded, an
        attempt reaped or abandoned that failed for good)."""
        found: list[int] = []
        tasks = Task.objects.using(self.using).filter(followed=True, status__in=FINAL_STATUSES)
        for i in range(0, len(task_ids), _CHUNK):
            found += tasks.filter(id__in=task_ids[i : i + _CHUNK]).values_list("id", flat=True)
        return found
