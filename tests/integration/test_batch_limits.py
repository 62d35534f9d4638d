"""A claim of n tasks starts at most n, and a prune batch of n deletes at most n, however
the database plans the statement.

PostgreSQL's claim and pruner each write the rows a sub-select picks ``… LIMIT n FOR
UPDATE SKIP LOCKED``. Written as ``WHERE id IN (sub-select)``, the planner may put the
sub-select on the inner side of a nested loop without keeping its rows: it is then run
again for each row of the outer scan, and each run skips the rows the statement itself
already wrote and locks the next n. Statistics taken when the rows looked different (a
table analyzed while its tasks were pending, then those tasks finished) make the outer
scan look like a row or so, which is when the planner does it: a prune batch of 2
deleted all 5 expired tasks in a CI run. Here the statistics are made so, and the
batches must still stop at their limit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_htask.engine import encode_call
from django_htask.models import Task, TaskStatus
from django_htask.retention import Cutoffs, TaskRetention
from django_htask.store import Pruned, get_store

from .test_claim_plan import _analyze

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ADD = "tests.integration.testapp.tasks:add"
DAY = timedelta(days=1)


def _add(count: int, status: TaskStatus = TaskStatus.PENDING) -> list[int]:
    payload = encode_call(ADD, (1, 2), {})
    tasks = Task.objects.bulk_create(
        Task(function=ADD, payload=payload, run_at=NOW - DAY, status=status) for _ in range(count)
    )
    return [t.pk for t in tasks]


@pytest.mark.django_db(transaction=True)
def test_a_prune_batch_deletes_at_most_its_limit_with_stale_statistics() -> None:
    ids = _add(5)
    _analyze()  # the planner is told: nothing has finished
    for n, pk in enumerate(ids):  # the oldest last, so an outer scan by id meets it first
        Task.objects.filter(pk=pk).update(
            status=TaskStatus.SUCCEEDED, finished_at=NOW - (20 - n) * DAY
        )
    cutoffs = Cutoffs.at(NOW, TaskRetention(7, 30, 7), 30)
    store = get_store()
    store.register_node("n1", "host", 1, "0", NOW)

    assert store.prune("n1", cutoffs, 2) == Pruned(tasks=2, more=True)
    assert set(Task.objects.values_list("pk", flat=True)) == set(ids[2:])


@pytest.mark.django_db(transaction=True)
def test_a_claim_starts_at_most_its_limit_with_stale_statistics() -> None:
    _add(1, TaskStatus.SUCCEEDED)
    _analyze()  # the planner is told: the table holds one row
    ids = _add(5)
    store = get_store()
    store.register_node("n1", "host", 1, "0", NOW)

    started = store.start_tasks("n1", NOW, 2, NOW + timedelta(minutes=1))

    assert sorted(t.id for t in started) == ids[:2]
    assert Task.objects.filter(status=TaskStatus.RUNNING).count() == 2
