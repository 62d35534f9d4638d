"""The store contract of pruning (``Store.prune``, ``Store.expired``): what every store
deletes and keeps, in batches, and one pruner at a time; on the in-memory store and on
the database of this pass (SQLite, PostgreSQL, MariaDB)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest

from django_htask.enums import RunStatus, TaskStatus
from django_htask.retention import Cutoffs, TaskRetention
from django_htask.store import Pruned

from .test_store import LEASE, NOW, Kit, kit, outcome

__all__ = ["kit"]  # the fixture, from the store contract

DAY = timedelta(days=1)
#: 7 days for succeeded and cancelled tasks, 30 for failed ones, 30 for runs.
CUTOFFS = Cutoffs.at(NOW, TaskRetention(7, 30, 7), 30)


def ended(kit: Kit, status: str, ago: timedelta, retention: int | None = None) -> int:
    """A task that ended ``ago`` before NOW with ``status`` (succeeded or failed: run by
    node n1, with its run; cancelled: before it ran)."""
    at = NOW - ago
    fields = {} if retention is None else {"retention": retention}
    [tid] = kit.add_tasks(1, run_at=at, **fields)
    if status == TaskStatus.CANCELLED:
        _write(kit, tid, status=status, finished_at=at)
        return tid
    [started] = kit.store.start_tasks("n1", at, 1, LEASE)
    assert started.id == tid
    ran = outcome({"task_id": tid}, status=status, started_at=at, finished_at=at)
    kit.store.record("n1", [ran])
    return tid


def _write(kit: Kit, tid: int, **fields: Any) -> None:
    if kit.memory is not None:
        for name, value in fields.items():
            setattr(kit.memory.tasks[tid], name, value)
        return
    from django_htask.models import Task

    Task.objects.filter(pk=tid).update(**fields)


def tasks_left(kit: Kit, ids: list[int]) -> set[int]:
    if kit.memory is not None:
        return {i for i in ids if i in kit.memory.tasks}
    from django_htask.models import Task

    return set(Task.objects.filter(pk__in=ids).values_list("pk", flat=True))


def test_finished_tasks_past_their_retention_go_with_their_runs(kit: Kit, settings: Any) -> None:
    settings.HTASK = {**settings.HTASK, "RECORD_EVERY_ATTEMPT": True}  # a success's run row too
    kit.register("n1")
    gone = [
        ended(kit, TaskStatus.SUCCEEDED, 8 * DAY),
        ended(kit, TaskStatus.FAILED, 31 * DAY),
        ended(kit, TaskStatus.CANCELLED, 8 * DAY),
        ended(kit, TaskStatus.SUCCEEDED, 2 * DAY, retention=3600),  # its function's own hour
    ]
    kept = [
        ended(kit, TaskStatus.SUCCEEDED, 6 * DAY),
        ended(kit, TaskStatus.FAILED, 10 * DAY),
        ended(kit, TaskStatus.SUCCEEDED, 400 * DAY, retention=0),  # for ever
        ended(kit, TaskStatus.SUCCEEDED, 8 * DAY, retention=10 * 86400),
        *kit.add_tasks(1, run_at=NOW - 400 * DAY),  # pending since long ago
    ]
    # the runs of the three that ran, and the run of the one kept for ever: runs go
    # after RUN_RETENTION_DAYS whoever they belong to
    assert kit.store.expired(CUTOFFS) == Pruned(tasks=4, runs=4)
    assert kit.store.prune("n1", CUTOFFS, 100) == Pruned(tasks=4, runs=4)
    assert tasks_left(kit, gone + kept) == set(kept)
    for tid in gone:
        assert kit.runs(task_id=tid) == []
    assert len(kit.runs(task_id=kept[0])) == 1
    me = kit.node("n1")
    assert (me.pruned_tasks, me.pruned_runs, me.pruned_at) == (4, 4, NOW)
    assert kit.store.prune("n1", CUTOFFS, 100) == Pruned()
    assert kit.store.expired(CUTOFFS) == Pruned()


def test_a_batch_stops_at_its_limit_and_says_more_may_be_left(kit: Kit, settings: Any) -> None:
    settings.HTASK = {**settings.HTASK, "RECORD_EVERY_ATTEMPT": True}  # a success's run row too
    kit.register("n1")
    ids = [ended(kit, TaskStatus.SUCCEEDED, (8 + n) * DAY) for n in range(5)]
    assert kit.store.prune("n1", CUTOFFS, 2) == Pruned(tasks=2, runs=2, more=True)
    assert tasks_left(kit, ids) == set(ids[:3])  # the oldest first
    assert kit.store.prune("n1", CUTOFFS, 2) == Pruned(tasks=2, runs=2, more=True)
    assert kit.store.prune("n1", CUTOFFS, 2) == Pruned(tasks=1, runs=1)
    assert tasks_left(kit, ids) == set()


def test_old_runs_and_the_rows_of_nodes_stopped_long_ago_go(kit: Kit) -> None:
    kit.register("n1", at=NOW - 40 * DAY)
    kit.register("old", "recent", at=NOW - 40 * DAY)
    kit.store.stop_node("old", NOW - 31 * DAY)
    kit.store.stop_node("recent", NOW - 29 * DAY)
    sid = kit.add_schedule()
    for ago in (40 * DAY, 31 * DAY, 29 * DAY):
        started = NOW - ago
        run = outcome({"schedule_id": sid}, status=RunStatus.RUNNING, started_at=started)
        run_id = kit.store.start_schedule_run("n1", run)
        if ago != 40 * DAY:  # the oldest never ended: kept while it runs
            done = outcome({"schedule_id": sid, "run_id": run_id}, started_at=started)
            kit.store.record("n1", [done])
    assert kit.store.expired(CUTOFFS) == Pruned(runs=1, nodes=1)
    assert kit.store.prune("n1", CUTOFFS, 1) == Pruned(runs=1, more=True)  # the limit hit
    assert kit.store.prune("n1", CUTOFFS, 1) == Pruned(nodes=1)
    assert sorted(r.status for r in kit.runs(schedule_id=sid)) == ["running", "succeeded"]
    assert list(kit.store.live_nodes(NOW - 400 * DAY)) == ["n1"]
    kit.node("recent")  # stopped 29 days ago: kept


def test_nothing_goes_when_everything_is_kept_for_ever(kit: Kit) -> None:
    kit.register("n1")
    ids = [ended(kit, s, 4000 * DAY) for s in (TaskStatus.SUCCEEDED, TaskStatus.FAILED)]
    forever = Cutoffs.at(NOW, TaskRetention(0, 0, 0), 0)
    assert kit.store.prune("n1", forever, 10) == Pruned()
    assert tasks_left(kit, ids) == set(ids)


def test_one_pruner_at_a_time(kit: Kit) -> None:
    """While another node's batch holds the pruner's lock, a batch deletes nothing and
    says so (None). Where the store serialises every writer (SQLite, the in-memory
    store's lock) a second batch waits instead: there is no lock of its own to ask."""
    store = kit.store
    if kit.memory is not None or not store.supports_several_nodes:
        pytest.skip(f"{store.vendor}: one writer at a time already (no pruner lock)")
    kit.register("n1", "n2")
    tid = ended(kit, TaskStatus.SUCCEEDED, 8 * DAY)
    holding, release = threading.Event(), threading.Event()
    other = type(store)(store.using)  # type: ignore[attr-defined]

    def hold() -> None:
        try:
            with other._atomic():  # type: ignore[attr-defined]
                assert other.dialect.try_lock_pruner(other)  # type: ignore[attr-defined]
                holding.set()
                release.wait(10)
        finally:
            other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        assert store.prune("n2", CUTOFFS, 10) is None
        assert tasks_left(kit, [tid]) == {tid}
    finally:
        release.set()
        thread.join(10)
    assert store.prune("n2", CUTOFFS, 10) == Pruned(tasks=1)  # a success: no run row


def test_cutoffs_follow_the_policy() -> None:
    cutoffs = Cutoffs.at(NOW, TaskRetention.of({"failed": 30, "cancelled": 0}), 0)
    assert cutoffs.tasks == (("succeeded", NOW - 7 * DAY), ("failed", NOW - 30 * DAY))
    assert cutoffs.runs is None
    assert cutoffs.own(0) is None
    assert cutoffs.own(60) == NOW - timedelta(seconds=60)
    at: datetime = Cutoffs.at(NOW, TaskRetention(), 30).runs or NOW
    assert at == NOW - 30 * DAY


def test_a_batch_goes_with_its_last_member_and_edges_with_their_task(kit: Kit) -> None:
    from .test_compose import after, batch_row, make_batch

    kit.register("n1")
    batch_id, members = make_batch(kit, 2)
    [first] = kit.add_tasks(1)
    second = after(kit, [first])
    at = NOW - 10 * DAY
    for task in kit.store.start_tasks("n1", NOW, 4, LEASE):
        ran = outcome({"task_id": task.id, "follow": task.follow}, started_at=at, finished_at=at)
        kit.store.record("n1", [ran])
    assert batch_row(kit, batch_id).finished_at == at
    assert kit.task(second).status == TaskStatus.PENDING
    _write(kit, members[0], finished_at=NOW - DAY)  # the other member is kept a while
    kit.store.prune("n1", CUTOFFS, 100)
    assert tasks_left(kit, members) == {members[0]}
    assert batch_row(kit, batch_id) is not None  # a member is left
    assert edges_left(kit) == 1  # second's, pending: kept
    _write(kit, members[0], finished_at=NOW - 10 * DAY)
    _write(kit, second, status=TaskStatus.SUCCEEDED, finished_at=NOW - 10 * DAY)
    kit.store.prune("n1", CUTOFFS, 100)
    assert tasks_left(kit, [*members, first, second]) == set()
    assert batch_gone(kit, batch_id) and edges_left(kit) == 0


def edges_left(kit: Kit) -> int:
    if kit.memory is not None:
        return len(kit.memory.edges)
    from django_htask.models import Dependency

    return Dependency.objects.count()


def batch_gone(kit: Kit, batch_id: int) -> bool:
    if kit.memory is not None:
        return batch_id not in kit.memory.batches
    from django_htask.models import Batch

    return not Batch.objects.filter(pk=batch_id).exists()


def slots_left(kit: Kit) -> int:
    if kit.memory is not None:
        return len(kit.memory.slots)
    from django_htask.models import RateSlot

    return RateSlot.objects.count()


def test_the_expired_slots_of_rate_limits_go_and_the_live_ones_stay(kit: Kit) -> None:
    """A claim deletes the expired slots of the flows it starts; a flow no claim
    starts any more leaves its slots to the pruner."""
    from .test_store import rated, started_ids

    kit.register("n1")
    quiet = rated(kit, 2, NOW - DAY, per="quiet")
    assert started_ids(kit, "n1", at=NOW - DAY) == quiet
    live = rated(kit, 2, NOW - DAY, per="live")
    assert started_ids(kit, "n1", at=NOW - timedelta(seconds=5)) == live
    assert slots_left(kit) == 4

    assert kit.store.prune("n1", CUTOFFS, 1) == Pruned(more=True)
    assert kit.store.prune("n1", CUTOFFS, 100) == Pruned()
    assert slots_left(kit) == 2  # the live flow's, counted for 5 seconds more
