"""Tasks put back to pending (a retry, a reaped or abandoned attempt, an admin's
*send again*), or superseded instead when a pending task holds their key
(:mod:`django_htask.keys`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Subquery, TextField, Value
from django.db.models.functions import Concat

from django_htask.keys import superseded_reason
from django_htask.models import KEY_INDEX, Task, TaskStatus
from django_htask.store import rules

from .core import _CHUNK

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
    holder_reason = Concat(  # superseded_reason(token), the holder's token read in SQL
        Value(prefix), Subquery(holder.values("token")[:1]), Value(suffix), output_field=TextField()
    )
    count = 0
    for i in range(0, len(task_ids), _CHUNK):
        count += (
            tasks.filter(id__in=task_ids[i : i + _CHUNK], status=status, key__isnull=False)
            .filter(Exists(holder))
            .update(**rules.superseded_task(now, holder_reason))
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
