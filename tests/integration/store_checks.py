"""Checks of what the PostgreSQL and the MySQL/MariaDB stores both do (versions set by
a trigger, claims that skip locked rows, what several nodes need), shared by
tests/cluster/test_postgres_store.py and tests/integration/test_mysql_store.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection

from django_htask.exceptions import NodeFenced
from django_htask.models import Node, RateSlot, Run, RunStatus, Schedule, Task
from django_htask.queues import QueueStates
from django_htask.retry import RetryPolicy
from django_htask.store import RunOutcome, Serving, Store, get_store
from django_htask.store.database import DatabaseStore

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = NOW + timedelta(seconds=60)
ADD = "tests.integration.testapp.tasks:add"
RETRY = RetryPolicy(10, 60)


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


def task_ended(task_id: int, finished_at: datetime = NOW, **fields: Any) -> RunOutcome:
    """How task ``task_id``, started on n1 at NOW, ended at ``finished_at``: succeeded,
    unless ``fields`` say otherwise."""
    return RunOutcome(
        **{
            "status": RunStatus.SUCCEEDED,
            "function": ADD,
            "name": ADD,
            "node": "n1",
            "attempt": 1,
            "scheduled_for": NOW,
            "started_at": NOW,
            "finished_at": finished_at,
            "task_id": task_id,
            **fields,
        }
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


def a_node_frozen_inside_a_write_is_declared_dead_after_half_node_timeout(
    store: DatabaseStore, declare: Callable[[], None]
) -> None:
    """Node n1 (registered; NODE_TIMEOUT 2 s) froze inside a write, holding its node
    row's lock: ``declare``, another client marking n1 dead, waits until the server
    ends n1's idle session (half NODE_TIMEOUT), not for as long as n1 is frozen. When
    n1 resumes its connection is gone, and after reconnecting its writes are refused."""
    waited: list[float] = []

    def frozen_write() -> None:
        with store._atomic():
            store._fence("n1")  # the node's write has begun, and then the node froze
            started = time.monotonic()
            declare()
            waited.append(time.monotonic() - started)
            store._fence("n1")  # the node resumes: its session was ended

    with pytest.raises(DatabaseError):
        frozen_write()
    assert len(waited) == 1 and 0.5 < waited[0] < 5, waited
    connection.close()  # what the node does with a connection it lost
    Task.objects.create(function=ADD, run_at=NOW)
    with pytest.raises(NodeFenced):
        store.start_tasks("n1", NOW, 1, LEASE)


def a_node_back_from_a_long_gap_waits_a_timeout_before_reaping(a: Store) -> None:
    """Node a (of a and b, registered at NOW) comes back after the database was away
    for 100 s: it reaps nothing for one node timeout, then declares b dead."""
    timeout = timedelta(seconds=60)
    back = NOW + timedelta(seconds=100)
    for seconds in range(0, 60, 10):  # heartbeats every 10 s again from then on
        now = back + timedelta(seconds=seconds)
        a.heartbeat("a", now, now + timeout)
        a.reap("a", now, now - timeout, RETRY)
        assert Node.objects.get(id="b").stopped_at is None  # b gets the time to come back
    after = back + timeout
    a.heartbeat("a", after, after + timeout)
    a.reap("a", after, after - timeout, RETRY)
    assert Node.objects.get(id="b").stopped_at == after  # b did not come back


def concurrent_claims_respect_locks_and_limits(
    store: Store, make_tasks: Callable[..., list[int]], rounds: int
) -> None:
    """Four nodes claim at the same instant (a barrier), each on a store connection of
    its own, ``rounds`` times over: one task of the lock starts, two of the limited
    function (another function: a limit counts every running task of its function),
    two of the queue limited to two, two of each key limited to two, and three of the
    flow limited to three starts a minute."""
    nodes = [f"n{i}" for i in range(4)]
    for n, node_id in enumerate(nodes):
        store.register_node(node_id, "host", n + 1, "0", NOW)
    serving = Serving(states=QueueStates(limits=(("q", 2),)))
    for _round in range(rounds):
        Task.objects.all().delete()
        RateSlot.objects.all().delete()
        locked = set(make_tasks(4, lock="account:7"))
        limited = set(make_tasks(6, function=f"{ADD}_limited", max_running=2))
        queued = set(make_tasks(6, queue_name="q"))
        keyed = [set(make_tasks(3, function=f"{ADD}_keyed", max_running=2, per_key=k))
                 for k in ("k1", "k2")]  # fmt: skip
        rated = set(make_tasks(5, function=f"{ADD}_rated", rate_limit=3, rate_period=60))
        barrier = threading.Barrier(len(nodes))
        results: dict[str, list[int]] = {}

        def claim(node_id: str, barrier: threading.Barrier, into: dict[str, list[int]]) -> None:
            mine = get_store()
            try:
                mine.task_outlook(NOW)  # connected before the barrier
                barrier.wait(10)
                into[node_id] = []
                while len(into[node_id]) < 5:  # again while another claim took its choice
                    got = mine.start_tasks(
                        node_id, NOW, 5 - len(into[node_id]), LEASE, serving=serving
                    )
                    into[node_id] += [t.id for t in got]
                    if got.wake_at != NOW:
                        break
            finally:
                mine.close()

        threads = [threading.Thread(target=claim, args=(node, barrier, results)) for node in nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        started = [i for got in results.values() for i in got]
        assert len(results) == len(nodes)
        assert len(started) == len(set(started))
        assert len(locked & set(started)) == 1, results
        assert len(limited & set(started)) == 2, results
        assert len(queued & set(started)) == 2, results
        assert [len(k & set(started)) for k in keyed] == [2, 2], results
        assert len(rated & set(started)) == 3, results


def a_node_is_declared_dead_only_after_its_write_in_flight_commits(
    store: DatabaseStore, declare: Callable[[], None], timed_out: str
) -> None:
    """The fence is the database's: node n1's (registered) write transaction locks its
    node row, so ``declare``, another client marking n1 dead (with a short lock
    timeout), fails with ``timed_out`` while it lasts; after it, n1's writes are
    refused."""
    with store._atomic():
        store._fence("n1")  # what every write of the node begins with
        with pytest.raises(Exception, match=timed_out):
            declare()
    declare()  # once the node's transaction is over
    Task.objects.create(function=ADD, run_at=NOW)
    with pytest.raises(NodeFenced):
        store.start_tasks("n1", NOW, 1, LEASE)
    with pytest.raises(NodeFenced):
        store.heartbeat("n1", NOW, LEASE)


def concurrent_ends_follow_once(store: Store, rounds: int) -> None:
    """Two nodes write, at the same instant (a barrier), the ends of the two members of
    a batch that a third task also runs after, ``rounds`` times over: whichever
    commits second sees the first's, so the task is released and each callback
    released once, the batch's counts exact."""
    from django_htask.api import schedule
    from django_htask.compose import batch
    from django_htask.models import Batch

    callback = "tests.integration.testapp.tasks:batch_done"
    for n, node_id in enumerate(("n1", "n2")):
        store.register_node(node_id, "host", n + 1, "0", NOW)
    for _round in range(rounds):
        with batch(on_success=callback, on_finish=callback) as b:
            tasks = [schedule(ADD, 1), schedule(ADD, 2)]
        after = schedule(ADD, 0, after=tasks).pk
        members = [task.pk for task in tasks]
        for node_id in ("n1", "n2"):
            [started] = store.start_tasks(node_id, NOW, 1, LEASE)
            assert started.id in members and started.follow
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def end(
            node_id: str, task_id: int, barrier: threading.Barrier, errors: list[BaseException]
        ) -> None:
            mine = get_store()
            try:
                mine.task_outlook(NOW)  # connected before the barrier
                barrier.wait(10)
                mine.record(node_id, [task_ended(task_id, follow=True)])
            except BaseException as exc:
                errors.append(exc)
            finally:
                mine.close()

        holders = dict(Task.objects.filter(pk__in=members).values_list("pk", "locked_by"))
        threads = [
            threading.Thread(target=end, args=(holders[m], m, barrier, errors)) for m in members
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        row = Batch.objects.get(pk=b.id)
        assert (row.succeeded, row.failed, row.finished_at is not None) == (2, 0, True)
        released = Task.objects.filter(pk__in=[after, row.on_success_id, row.on_finish_id])
        assert set(released.values_list("status", flat=True)) == {"pending"}
        assert Task.objects.get(pk=after).waiting_on == 0
        Task.objects.all().delete()
