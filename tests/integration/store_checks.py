"""Checks of what the PostgreSQL and the MySQL/MariaDB stores both do (versions set by
a trigger, claims that skip locked rows), shared by tests/cluster/test_postgres_store.py
and tests/integration/test_mysql_store.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from django.db import connection

from django_htask.models import Run, RunStatus, Schedule, Task
from django_htask.store import RunOutcome, Store, get_store

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = NOW + timedelta(seconds=60)
ADD = "tests.integration.testapp.tasks:add"


def running_run(schedule: Schedule) -> Run:
    """A run of ``schedule`` that node n1 started at NOW."""
    return Run.objects.create(
        schedule=schedule,
        name=schedule.name,
        function=ADD,
        node="n1",
        scheduled_for=NOW,
        started_at=NOW,
        status=RunStatus.RUNNING,
    )


def succeeded(schedule: Schedule, run: Run) -> RunOutcome:
    """The outcome of ``run`` (:func:`running_run`): succeeded a second later."""
    return RunOutcome(
        status=RunStatus.SUCCEEDED,
        function=ADD,
        name=schedule.name,
        node="n1",
        attempt=1,
        scheduled_for=NOW,
        started_at=NOW,
        finished_at=NOW + timedelta(seconds=1),
        run_id=run.pk,
        schedule_id=schedule.pk,
    )


def version_of(pk: int) -> int:
    return Schedule.objects.values_list("version", flat=True).get(pk=pk)


def every_kind_of_write_raises_the_version(row: Schedule) -> None:
    """A save, ``QuerySet.update()`` and raw SQL each raise the version of ``row``
    (saved); an update that sets the version itself is left alone."""
    v1 = version_of(row.pk)
    assert v1 > 0 and row.version == v1
    row.name = "renamed"
    row.save()
    v2 = version_of(row.pk)
    Schedule.objects.filter(pk=row.pk).update(enabled=False)
    v3 = version_of(row.pk)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE django_htask_schedule SET grace = 5 WHERE id = %s", [row.pk])
    v4 = version_of(row.pk)
    assert v1 < v2 < v3 < v4
    Schedule.objects.filter(pk=row.pk).update(version=7)  # set explicitly: left alone
    assert version_of(row.pk) == 7


def claims_skip_locked_rows(
    store: Store, ids: list[int], lock_four: Callable[[], list[int]], release: Callable[[], None]
) -> None:
    """Nodes n1 to n3 (registered) claim ``ids`` (due at NOW) while another client holds
    four of them (``lock_four``, until ``release``): n1 takes the others without
    waiting, n2 the four once released, n3 nothing."""
    locked = lock_four()
    started = store.start_tasks("n1", NOW, 100, LEASE)  # does not wait for the lock
    assert sorted(t.id for t in started) == sorted(set(ids) - set(locked))
    release()
    started = store.start_tasks("n2", NOW, 100, LEASE)
    assert sorted(t.id for t in started) == sorted(locked)
    assert store.start_tasks("n3", NOW, 100, LEASE) == []


def concurrent_claims_take_disjoint_batches(ids: list[int]) -> None:
    """Nodes n0 to n3 (registered) claim 7 at a time from four threads until nothing is
    left: each of ``ids`` is taken once, by the node it is locked by."""
    results: dict[str, list[int]] = {}

    def claim(node_id: str) -> None:
        mine = get_store()
        got: list[int] = []
        try:
            while batch := mine.start_tasks(node_id, NOW, 7, LEASE):
                got += [t.id for t in batch]
            results[node_id] = got
        finally:
            mine.close()

    threads = [threading.Thread(target=claim, args=(f"n{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    everything = [i for got in results.values() for i in got]
    assert len(results) == 4
    assert sorted(everything) == sorted(ids)  # each task once, none left
    owners = dict(Task.objects.values_list("id", "locked_by"))
    assert all(owners[i] == node for node, got in results.items() for i in got)
