"""Tasks composed, as ``schedule()`` and the graph builders store them, in the caller's
transaction around :func:`~django_htask.store.inserts.insert_tasks`: the tasks they run
after locked and marked (:func:`lock_after`), the edges and what follows at once from
those that ended already (:func:`attach`), a batch's count (:func:`join_batch`) and
its callbacks released when it is complete (:func:`settle_batch`), and a task
cancelled by a caller followed (:func:`cancelled`).

A task waited for is locked by the first statement that touches it (its ``followed``
set): its end, being written by a node at that moment, is either committed before
(it is read as ended, and what follows is done here) or waits for this transaction
to commit (and its node then finds the new edges: the guard of its end refuses the
write made for a task nothing followed, see ``TaskRows._write_plain_ends``).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import NamedTuple

from django.db.models import F

from django_htask.exceptions import BatchFinished, BatchNotFound, TaskNotFound
from django_htask.models import Batch, Dependency, Task
from django_htask.retention import FINAL_STATUSES

from .database.core import _CHUNK
from .database.follow import OrmFollow
from .follow import Edge, Ended, events_of, follow, move_batches

__all__ = ["After", "NewEdge", "attach", "cancelled", "join_batch", "lock_after", "settle_batch"]


class After(NamedTuple):
    """A task queued before that new tasks run after, locked (:func:`lock_after`)."""

    id: int
    ended: Ended


class NewEdge(NamedTuple):
    """An edge of new tasks: the ``task`` (its place among the tasks inserted) runs
    after ``after``, its place among them too (an int), or the token of a task queued
    before (a str); ``param``, ``position``, ``run_anyway`` as a ``Dependency``'s."""

    task: int
    after: int | str
    param: str | None = None
    position: int | None = None
    run_anyway: bool = False


def lock_after(using: str, tokens: list[str], missing: str) -> dict[str, After]:
    """Lock the tasks of ``tokens`` (new tasks will run after them) and mark them
    ``followed``, in one statement, then read them; TaskNotFound (``missing`` its
    message, ``{token}`` filled in) for a token no task has."""
    tasks = Task.objects.using(using)
    found: dict[str, After] = {}
    for i in range(0, len(tokens), _CHUNK):
        chunk = sorted(set(tokens[i : i + _CHUNK]))
        tasks.filter(token__in=chunk).update(followed=True)
        rows = tasks.filter(token__in=chunk).values_list(
            "id", "token", "status", "last_error", "batch_id"
        )
        for pk, token, status, error, batch_id in rows:
            found[token] = After(pk, Ended(status, token, error, batch_id, True))
    for token in tokens:
        if token not in found:
            raise TaskNotFound(token, missing.format(token=token))
    return found


def attach(
    using: str, tasks: list[Task], edges: list[NewEdge], outside: dict[str, After], now: datetime
) -> None:
    """Store ``edges`` of the new ``tasks`` (inserted ``waiting`` when they have one;
    those of ``outside``: locked by :func:`lock_after`) and count them on each task;
    then what follows at once from the tasks waited for that ended already (released,
    cancelled, their batches told)."""
    ids = [task.pk for task in tasks]

    def task_id(ref: int | str) -> int:
        return outside[ref].id if isinstance(ref, str) else ids[ref]

    rows = [Edge(ids[e.task], task_id(e.after), e.param, e.position, e.run_anyway) for e in edges]
    inside = sorted(
        {r.after_id for r, e in zip(rows, edges, strict=True) if isinstance(e.after, int)}
    )
    Task.objects.using(using).filter(id__in=inside).update(followed=True)
    Dependency.objects.using(using).bulk_create(
        Dependency(
            task_id=r.task_id,
            after_id=r.after_id,
            param=r.param,
            position=r.position,
            run_anyway=r.run_anyway,
        )
        for r in rows
    )
    counts = Counter(r.task_id for r in rows)
    by_count: dict[int, list[int]] = {}
    for pk, n in counts.items():
        by_count.setdefault(n, []).append(pk)
    for n, pks in by_count.items():
        for i in range(0, len(pks), _CHUNK):
            Task.objects.using(using).filter(id__in=pks[i : i + _CHUNK]).update(waiting_on=n)
    ended = {a.id: a.ended for a in outside.values() if a.ended.status in FINAL_STATUSES}
    if ended:
        follow(OrmFollow(using), [], now, events_of(rows, ended))


def join_batch(using: str, batch_id: int, members: int) -> None:
    """Count ``members`` more in batch ``batch_id`` (its row locked until the caller's
    transaction ends); BatchFinished when its members had all ended, BatchNotFound
    when it does not exist."""
    batches = Batch.objects.using(using).filter(id=batch_id)
    if not batches.filter(finished_at__isnull=True).update(total=F("total") + members):
        if batches.exists():
            raise BatchFinished(batch_id)
        raise BatchNotFound(batch_id)


def settle_batch(using: str, batch_id: int, now: datetime) -> None:
    """Release batch ``batch_id``'s callbacks if every member ended (at its making:
    a batch of no members), as the end of its last member would."""
    move_batches(OrmFollow(using), {batch_id: {}}, now)


def cancelled(using: str, task_id: int, now: datetime) -> None:
    """What follows task ``task_id``, just cancelled by a caller (the tasks waiting on
    it cancelled, its batch told), if anything does."""
    follow(OrmFollow(using), [task_id], now)
