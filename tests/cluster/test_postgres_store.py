"""The PostgreSQL store: versions, notifications, claims and the reaper."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from django_htask.exceptions import NodeFenced, StoreUnavailable
from django_htask.models import Node, Run, RunStatus, Schedule, Task, TaskStatus
from django_htask.retry import RetryPolicy
from django_htask.store import RunOutcome, get_store
from django_htask.store.postgres import REAPER_LOCK, PostgresStore
from tests.integration.store_checks import (
    a_node_back_from_a_long_gap_waits_a_timeout_before_reaping,
    a_node_frozen_inside_a_write_is_declared_dead_after_half_node_timeout,
    a_node_is_declared_dead_only_after_its_write_in_flight_commits,
    claims_skip_locked_rows,
    concurrent_claims_respect_locks_and_limits,
    concurrent_claims_take_disjoint_batches,
    concurrent_ends_follow_once,
    every_kind_of_write_raises_the_version,
    running_run,
    succeeded,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ADD = "tests.integration.testapp.tasks:add"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def make_schedule(name: str = "s", text: str = "@every 1m", **kwargs: Any) -> Schedule:
    row = Schedule(name=name, function=ADD, schedule=text, **kwargs)
    row.set_call((1,))
    row.save()
    return row


def make_tasks(n: int, run_at: datetime = NOW, **kwargs: Any) -> list[int]:
    tasks = Task.objects.bulk_create(
        [Task(**{"function": ADD, "run_at": run_at, **kwargs}) for _ in range(n)]
    )
    return [t.pk for t in tasks]


@pytest.fixture
def store() -> PostgresStore:
    chosen = get_store()
    assert isinstance(chosen, PostgresStore)
    return chosen


def register(store: PostgresStore, *node_ids: str, at: datetime = NOW) -> None:
    for n, node_id in enumerate(node_ids):
        store.register_node(node_id, "host", n + 1, "0", at)


def version_of(pk: int) -> int:
    return Schedule.objects.values_list("version", flat=True).get(pk=pk)


# -- install ---------------------------------------------------------------------------
def test_install_is_idempotent_and_creates_the_triggers(store: PostgresStore) -> None:
    store.install()
    store.install()
    with connection.cursor() as cursor:
        cursor.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1")
        names = [r[0] for r in cursor.fetchall()]
    assert names == [
        "django_htask_node_notify",
        "django_htask_queue_notify",
        "django_htask_schedule_notify",
        "django_htask_schedule_version",
        "django_htask_task_ended",
        "django_htask_task_notify",
    ]


def test_install_leaves_current_triggers_alone_and_locks_nothing(store: PostgresStore) -> None:
    """A node starting next to running ones must not take the lock that replacing a
    trigger takes (it would wait for, or deadlock with, their claims)."""
    store.install()
    other = connection.copy()  # another node's connection, in a claim's transaction
    try:
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute("UPDATE django_htask_task SET priority = priority WHERE false")
            cursor.execute("LOCK TABLE django_htask_schedule IN ROW EXCLUSIVE MODE")
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
        try:
            store.install()  # with the old code: canceling statement due to lock timeout
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
    finally:
        other.rollback()
        other.close()


def test_install_replaces_missing_or_outdated_triggers(store: PostgresStore) -> None:
    store.install()
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER django_htask_task_notify ON django_htask_task")
    store.install()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'django_htask_task_notify'")
        assert cursor.fetchone() == (1,)
        cursor.execute("COMMENT ON FUNCTION django_htask_notify() IS 'an older version'")
    store.install()
    with connection.cursor() as cursor:
        cursor.execute("SELECT obj_description('django_htask_notify()'::regprocedure)")
        [(comment,)] = cursor.fetchall()
    assert comment.startswith("django_htask triggers ")


# -- versions --------------------------------------------------------------------------
def test_every_kind_of_write_raises_the_version(store: PostgresStore) -> None:
    every_kind_of_write_raises_the_version(make_schedule())


def test_versions_grow_inside_one_transaction_too(store: PostgresStore) -> None:
    with transaction.atomic():
        row = make_schedule()
        first = version_of(row.pk)
        Schedule.objects.filter(pk=row.pk).update(grace=1)
        second = version_of(row.pk)
    assert first < second
    _refs, since = store.load_schedules()
    assert since >= second


def test_changed_schedules_reads_only_what_changed(store: PostgresStore) -> None:
    a = make_schedule("a")
    make_schedule("b")
    _refs, since = store.load_schedules()
    assert store.changed_schedules(since)[0] == []
    Schedule.objects.filter(pk=a.pk).update(enabled=False)
    refs, since = store.changed_schedules(since)
    assert [(r.id, r.enabled) for r in refs] == [(a.pk, False)]
    assert store.changed_schedules(since)[0] == []


def test_a_transaction_committing_late_with_a_lower_version_is_not_missed(
    store: PostgresStore, other_client: Callable[..., Any]
) -> None:
    a = make_schedule("a")
    b = make_schedule("b")
    _refs, since = store.load_schedules()
    slow = other_client(autocommit=False)
    slow.execute("UPDATE django_htask_schedule SET grace = 1 WHERE id = %s", [a.pk])
    Schedule.objects.filter(pk=b.pk).update(grace=2)  # a later transaction, committed
    assert version_of(b.pk) > since
    refs, since = store.changed_schedules(since)
    assert [r.id for r in refs] == [b.pk]
    slow.commit()  # the earlier transaction (lower version) commits now
    refs, since = store.changed_schedules(since)
    assert a.pk in [r.id for r in refs]


# -- notifications ---------------------------------------------------------------------
def test_saves_updates_and_raw_sql_notify(listen: Callable[[float], list[str]]) -> None:
    row = make_schedule()
    assert "schedule" in listen(2)
    Schedule.objects.filter(pk=row.pk).update(grace=3)
    assert listen(2) == ["schedule"]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE django_htask_schedule SET grace = 4")
    assert listen(2) == ["schedule"]
    make_tasks(3)
    assert listen(2) == ["task"]  # one notification per statement, not per row
    Task.objects.all().delete()
    assert listen(2) == ["task"]
    from django_htask import limit_queue, pause_queue, resume_queue

    pause_queue("slow")  # the row made, then paused: one transaction
    assert set(listen(2)) == {"queue"}
    limit_queue("slow", 2)
    resume_queue("slow")
    assert listen(2) == ["queue", "queue"]


def test_node_bookkeeping_does_not_notify(
    store: PostgresStore, listen: Callable[[float], list[str]]
) -> None:
    row = make_schedule()
    make_tasks(5)
    assert set(listen(2)) == {"schedule", "task"}
    store.register_node("n1", "host", 1, "0", NOW)
    assert listen(2) == ["node"]
    store.heartbeat("n1", NOW, NOW + timedelta(seconds=60))
    assert len(store.start_tasks("n1", NOW, 10, NOW + timedelta(seconds=60))) == 5
    fired = store.get_schedule(row.pk)
    assert fired is not None
    assert store.claim_occurrence("n1", fired, NOW + timedelta(minutes=1), NOW, []) == []
    assert listen(0.5) == []
    store.stop_node("n1", NOW)
    assert listen(2) == ["node"]


# -- claims ----------------------------------------------------------------------------
LEASE = NOW + timedelta(seconds=60)


def test_claims_skip_rows_locked_by_another_claimer(
    store: PostgresStore, other_client: Callable[..., Any]
) -> None:
    register(store, "n1", "n2", "n3")
    other = other_client(autocommit=False)

    def lock_four() -> list[int]:
        sql = "SELECT id FROM django_htask_task ORDER BY id LIMIT 4 FOR UPDATE"
        return [r[0] for r in other.execute(sql).fetchall()]

    claims_skip_locked_rows(store, make_tasks(10), lock_four, other.rollback)


def test_concurrent_claims_take_disjoint_batches(store: PostgresStore) -> None:
    register(store, *(f"n{i}" for i in range(4)))
    concurrent_claims_take_disjoint_batches(make_tasks(300))


def test_claims_take_due_tasks_by_priority_then_age_and_start_them(
    store: PostgresStore,
) -> None:
    register(store, "n1")
    late = make_tasks(2, NOW - timedelta(seconds=1))
    early = make_tasks(2, NOW - timedelta(seconds=5))
    urgent = make_tasks(1, NOW, priority=5)
    future = make_tasks(1, NOW + timedelta(seconds=1))
    first = store.start_tasks("n1", NOW, 3, LEASE)
    assert [t.id for t in first] == [*urgent, *early]
    second = store.start_tasks("n1", NOW, 3, LEASE)
    assert [t.id for t in second] == late  # the future task is not due
    assert all((t.attempts, t.max_attempts) == (1, 1) for t in first + second)
    rows = Task.objects.filter(id__in=[*late, *early, *urgent])
    assert set(rows.values_list("status", "locked_by", "started_at", "lease_expires_at")) == {
        (TaskStatus.RUNNING, "n1", NOW, LEASE)
    }
    assert Task.objects.get(pk=future[0]).status == TaskStatus.PENDING
    assert store.task_outlook(NOW) == (False, NOW + timedelta(seconds=1))


def test_writes_of_a_node_declared_dead_are_refused(store: PostgresStore) -> None:
    register(store, "n1", "n2")
    make_tasks(2)
    row = make_schedule()
    Node.objects.filter(id="n1").update(stopped_at=NOW)  # what the reaper does
    seen = store.get_schedule(row.pk)
    assert seen is not None
    with pytest.raises(NodeFenced, match="n1 was declared dead"):
        store.start_tasks("n1", NOW, 10, LEASE)
    with pytest.raises(NodeFenced):
        store.claim_occurrence("n1", seen, NOW + timedelta(minutes=1), NOW, [])
    with pytest.raises(NodeFenced):
        store.heartbeat("n1", NOW, LEASE)
    done = RunOutcome(
        status=RunStatus.SUCCEEDED,
        function=ADD,
        name="s",
        node="n1",
        attempt=1,
        scheduled_for=NOW,
        started_at=NOW,
        finished_at=NOW,
        schedule_id=row.pk,
    )
    with pytest.raises(NodeFenced):
        store.record("n1", [done])
    assert Node.objects.get(id="n1").stopped_at == NOW  # the heartbeat did not revive it
    assert Task.objects.filter(status=TaskStatus.PENDING).count() == 2
    assert len(store.start_tasks("n2", NOW, 10, LEASE)) == 2


def test_a_node_is_declared_dead_only_after_its_write_in_flight_commits(
    store: PostgresStore, other_client: Callable[..., Any]
) -> None:
    register(store, "n1")
    reaper = other_client()
    reaper.execute("SET lock_timeout = '300ms'")
    a_node_is_declared_dead_only_after_its_write_in_flight_commits(
        store,
        lambda: reaper.execute("UPDATE django_htask_node SET stopped_at = now() WHERE id = 'n1'"),
        "lock timeout",
    )


def test_a_node_frozen_inside_a_write_holds_the_reaper_back_for_half_node_timeout_only(
    store: PostgresStore, other_client: Callable[..., Any], settings: Any
) -> None:
    """A node frozen (SIGSTOP, a paused VM) inside a write transaction holds its node
    row's lock. PostgreSQL ends its session once it has been idle for half
    NODE_TIMEOUT, so the reaper declares it dead; the node, once it resumes, finds its
    connection gone, and after reconnecting its writes are refused."""
    settings.HTASK = {"NODE_TIMEOUT": 2}
    register(store, "n1")
    reaper = other_client()
    reaper.execute("SET lock_timeout = '10s'")  # the test fails rather than hangs
    a_node_frozen_inside_a_write_is_declared_dead_after_half_node_timeout(
        store,
        lambda: reaper.execute("UPDATE django_htask_node SET stopped_at = now() WHERE id = 'n1'"),
    )


def test_a_write_nested_in_the_callers_transaction_sets_no_idle_bound(
    store: PostgresStore,
) -> None:
    """The bound is for the store's own transactions: inside a caller's transaction
    (a web request's, say) it is left as the caller has it."""
    with transaction.atomic(), store._atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] == "0"
    with store._atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] == "30s"  # half the default NODE_TIMEOUT of 60 s


def test_a_lost_compare_and_set_claims_nothing(store: PostgresStore) -> None:
    row = make_schedule()
    seen = store.get_schedule(row.pk)
    assert seen is not None and seen.next_run_at is not None
    run = RunOutcome(
        status=RunStatus.RUNNING,
        function=ADD,
        name="s",
        node="n1",
        attempt=1,
        scheduled_for=seen.next_run_at,
        started_at=NOW,
        finished_at=NOW,
    )
    later = seen.next_run_at + timedelta(minutes=1)
    register(store, "n1", "n2")
    assert store.claim_occurrence("n1", seen, later, NOW, [run]) is not None
    assert store.claim_occurrence("n2", seen, later, NOW, [run]) is None  # the second node
    assert Run.objects.count() == 1


def test_record_writes_finished_tasks_in_bulk(store: PostgresStore) -> None:
    ids = make_tasks(3, max_attempts=3)
    register(store, "n1")
    started = store.start_tasks("n1", NOW, 10, LEASE)
    outcomes = [
        RunOutcome(
            status=RunStatus.SUCCEEDED if s.id == ids[0] else RunStatus.FAILED,
            function=ADD,
            name=ADD,
            node="n1",
            attempt=s.attempts,
            scheduled_for=s.run_at,
            started_at=NOW,
            finished_at=NOW + timedelta(seconds=1),
            duration=1.0,
            error="" if s.id == ids[0] else "RuntimeError: no",
            task_id=s.id,
            retry_at=NOW + timedelta(seconds=30) if s.id == ids[2] else None,
        )
        for s in started
    ]
    store.record("n1", outcomes)
    rows = {t.pk: t for t in Task.objects.all()}
    assert rows[ids[0]].status == TaskStatus.SUCCEEDED and rows[ids[0]].locked_by is None
    assert (rows[ids[1]].status, rows[ids[1]].last_error) == (
        TaskStatus.FAILED,
        "RuntimeError: no",
    )
    assert rows[ids[2]].status == TaskStatus.PENDING  # a retry, due again later
    assert rows[ids[2]].run_at == NOW + timedelta(seconds=30)
    assert rows[ids[0]].node == "n1"  # its success: on its row, no run row
    runs = Run.objects.filter(task_id__in=ids).order_by("task_id").values_list("task_id", "status")
    assert list(runs) == [(ids[1], "failed"), (ids[2], "failed")]


# -- the reaper ------------------------------------------------------------------------
RETRY = RetryPolicy(10, 60)


def test_reaper_hands_back_a_dead_nodes_tasks_and_marks_it_dead(
    store: PostgresStore, listen: Callable[[float], list[str]]
) -> None:
    register(store, "dead", "alive")
    retry, last = make_tasks(1, max_attempts=2), make_tasks(1, priority=-1)
    waiting = make_tasks(1, NOW + timedelta(seconds=5))
    store.start_tasks("dead", NOW, 10, NOW + timedelta(seconds=30))
    listen(1)
    later = NOW + timedelta(seconds=61)
    store.heartbeat("alive", later, later + timedelta(seconds=30))
    reaped = PostgresStore().reap("alive", later, later - timedelta(seconds=60), RETRY)
    assert reaped == 3  # the node and its two tasks
    rows = {t.pk: t for t in Task.objects.all()}
    assert (rows[retry[0]].status, rows[retry[0]].attempts) == (TaskStatus.PENDING, 1)
    assert rows[retry[0]].run_at == later + timedelta(seconds=10)  # after the backoff
    assert rows[retry[0]].locked_by is None
    assert (rows[last[0]].status, rows[last[0]].attempts) == (TaskStatus.FAILED, 1)
    assert "stopped answering during attempt 1 of 1" in rows[last[0]].last_error
    assert (rows[waiting[0]].status, rows[waiting[0]].attempts) == (TaskStatus.PENDING, 0)
    runs = Run.objects.order_by("task_id").values_list("task_id", "status", "attempt", "node")
    assert list(runs) == [(retry[0], "failed", 1, "dead"), (last[0], "failed", 1, "dead")]
    assert Node.objects.get(id="dead").stopped_at == later
    assert Node.objects.get(id="alive").stopped_at is None
    assert list(store.live_nodes(later - timedelta(seconds=60))) == ["alive"]
    assert sorted(listen(2)) == ["node", "task"]
    assert PostgresStore().reap("alive", later, later - timedelta(seconds=60), RETRY) == 0


def test_only_one_reaper_at_a_time(store: PostgresStore, other_client: Callable[..., Any]) -> None:
    register(store, "dead", "alive")
    make_tasks(1)
    store.start_tasks("dead", NOW, 10, NOW + timedelta(seconds=1))
    other = other_client(autocommit=False)
    other.execute("SELECT pg_advisory_xact_lock(%s)", [REAPER_LOCK])
    later = NOW + timedelta(seconds=120)
    Node.objects.filter(id="alive").update(last_heartbeat=later)
    assert store.reap("alive", later, later - timedelta(seconds=60), RETRY) == 0  # skipped
    other.rollback()
    assert store.reap("alive", later, later - timedelta(seconds=60), RETRY) == 2


def test_a_node_declared_dead_stays_dead(listen: Callable[[float], list[str]]) -> None:
    a, b = PostgresStore(), PostgresStore()
    register(a, "a", "b")
    for seconds in (10, 20, 30, 40, 50, 60):  # a punctual node
        a.heartbeat("a", NOW + timedelta(seconds=seconds), NOW + timedelta(seconds=90))
    listen(1)
    later = NOW + timedelta(seconds=61)
    assert a.reap("a", later, later - timedelta(seconds=30), RETRY) == 1  # b is dead
    assert Node.objects.get(id="b").stopped_at == later
    assert listen(2) == ["node"]
    with pytest.raises(NodeFenced):  # b was only slow: too late, it must not come back
        b.heartbeat("b", later, later + timedelta(seconds=30))
    assert Node.objects.get(id="b").stopped_at == later
    assert list(a.live_nodes(later - timedelta(seconds=30))) == ["a"]


def test_a_node_back_from_a_long_gap_waits_a_timeout_before_reaping() -> None:
    a = PostgresStore()
    register(a, "a", "b")
    a_node_back_from_a_long_gap_waits_a_timeout_before_reaping(a)


# -- a connection lost, a lock held by another client ----------------------------------
def _in_thread(fn: Callable[[], None]) -> threading.Thread:
    """Run ``fn`` on a thread of its own (a connection of its own); ``join_ok()`` re-raises."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.errors = errors  # type: ignore[attr-defined]
    return thread


def _wait(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_connection_lost_as_a_transaction_begins_does_not_wedge_the_thread(
    other_client: Callable[..., Any],
) -> None:
    """The quiet transaction's first statement runs on entering it: the connection lost
    right then must leave no transaction open, or Django keeps the closed connection for
    good and every later query of the thread fails ("the connection is closed")."""

    def lose_and_come_back() -> None:
        store = PostgresStore()
        store.register_node("n1", "host", 1, "0", NOW)
        with store.connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        monitor = other_client()
        monitor.execute("SELECT pg_terminate_backend(%s)", [pid])
        _wait(
            lambda: (
                not monitor.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]
                ).fetchall()
            )
        )
        with pytest.raises(StoreUnavailable) as raised:
            store.heartbeat("n1", NOW, NOW)  # fails on its first statement
        assert isinstance(raised.value.__cause__, DatabaseError)
        assert not store.connection.in_atomic_block
        store.close()  # what a node does when the database is away
        later = NOW + timedelta(seconds=1)
        store.heartbeat("n1", later, later)  # a new connection
        assert Node.objects.get(id="n1").last_heartbeat == later

    thread = _in_thread(lose_and_come_back)
    thread.join(30)
    assert not thread.is_alive()
    if thread.errors:  # type: ignore[attr-defined]
        raise thread.errors[0]  # type: ignore[attr-defined]


def test_recording_runs_does_not_deadlock_with_a_bulk_update_of_the_schedules(
    store: PostgresStore, other_client: Callable[..., Any]
) -> None:
    """A node records runs of schedules X and Y while another client, in one
    transaction, updates X and then Y (the admin disabling several schedules): the
    node never waits for X while it holds Y, so neither of them is aborted."""
    x, y = make_schedule("x"), make_schedule("y")
    outcomes = [succeeded(s, running_run(s)) for s in (y, x)]  # a deadlock's order
    admin = other_client(autocommit=False)
    admin.execute("SET lock_timeout = '10s'")
    admin.execute("UPDATE django_htask_schedule SET enabled = false WHERE id = %s", [x.pk])
    register(store, "n1")
    recorder = _in_thread(lambda: PostgresStore().record("n1", outcomes))
    monitor = other_client()
    _wait(  # the node waits for x
        lambda: monitor.execute(
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%%django_htask_schedule%%'"
        ).fetchall()
    )
    admin.execute("UPDATE django_htask_schedule SET enabled = false WHERE id = %s", [y.pk])
    admin.commit()
    recorder.join(30)
    assert not recorder.is_alive()
    assert not recorder.errors  # type: ignore[attr-defined]
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}
    for s in (x, y):
        s.refresh_from_db()
        assert (s.enabled, s.last_status, s.last_run_at) == (False, RunStatus.SUCCEEDED, NOW)


def test_a_late_status_does_not_overwrite_a_later_run(store: PostgresStore) -> None:
    row = make_schedule()
    Schedule.objects.filter(pk=row.pk).update(
        last_status=RunStatus.RUNNING, last_run_at=NOW + timedelta(minutes=1)
    )
    register(store, "n1")
    store.record(
        "n1",
        [
            RunOutcome(
                status=RunStatus.SUCCEEDED,
                function=ADD,
                name="s",
                node="n1",
                attempt=1,
                scheduled_for=NOW,
                started_at=NOW,
                finished_at=NOW,
                schedule_id=row.pk,
            )
        ],
    )
    row.refresh_from_db()
    assert (row.last_status, row.last_run_at) == (RunStatus.RUNNING, NOW + timedelta(minutes=1))


# -- locks and limits ------------------------------------------------------------------
def test_concurrent_claims_never_both_start_a_task_of_one_lock_or_overfill_a_limit(
    store: PostgresStore,
) -> None:
    concurrent_claims_respect_locks_and_limits(store, make_tasks, rounds=40)


def test_two_nodes_ending_a_batch_s_last_members_at_once_release_each_callback_once(
    store: PostgresStore,
) -> None:
    concurrent_ends_follow_once(store, rounds=20)


def test_the_end_of_a_gated_task_notifies_the_other_nodes(
    store: PostgresStore, listen: Callable[[float], list[str]]
) -> None:
    register(store, "n1")
    gated, plain = make_tasks(1, lock="l"), make_tasks(1)
    listen(2)
    store.start_tasks("n1", NOW, 5, LEASE)
    done = NOW + timedelta(seconds=1)

    def ended(task_id: int, **fields: Any) -> RunOutcome:
        return RunOutcome(
            RunStatus.SUCCEEDED, ADD, ADD, "n1", 1, NOW, NOW, done, task_id=task_id, **fields
        )

    store.start_tasks("n1", NOW, 5, LEASE, finished=[ended(plain[0])])
    assert listen(0.5) == []  # bookkeeping stays quiet
    store.start_tasks("n1", NOW, 5, LEASE, finished=[ended(gated[0], gated=True)])
    assert listen(2) == ["task"]
    store.record("n1", [])
    assert Task.objects.get(pk=gated[0]).status == TaskStatus.SUCCEEDED
