"""The MySQL/MariaDB store's own parts: the version triggers, the claims that skip
locked rows, and what several nodes need (one reaper, the fence, locks and limits
across claims, READ COMMITTED); the store contract, tests/contract, covers the rest on
every database."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_htask.exceptions import StoreUnavailable
from django_htask.models import Node, Run, RunStatus, Schedule, Task
from django_htask.store import get_store
from django_htask.store.base import SERVE_ALL, RunOutcome
from django_htask.store.mysql import (
    CANDIDATES,
    GATE_SLOTS,
    SPARE,
    TRIGGERS,
    MySQLStore,
    gate_row,
)
from tests.integration.store_checks import (
    LEASE,
    NOW,
    RETRY,
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
    task_ended,
)
from tests.mariadbcluster import connect

pytestmark = [
    pytest.mark.skipif(
        connection.vendor != "mysql",
        reason="MySQL/MariaDB's own store: run it as `python -m tests.mariadbcluster -- pytest`",
    ),
    pytest.mark.django_db(transaction=True),
]

ADD = "tests.integration.testapp.tasks:add"


@pytest.fixture
def store() -> MySQLStore:
    chosen = get_store()
    assert isinstance(chosen, MySQLStore)
    return chosen


@pytest.fixture
def other_client() -> Iterator[Any]:
    """A connection of another client (not Django's), in a transaction of its own."""
    client = connect(connection.settings_dict, autocommit=False)
    yield client
    client.rollback()
    client.close()


def make_schedule(name: str = "s") -> Schedule:
    row = Schedule(name=name, function=ADD, schedule="@every 1m")
    row.set_call((1,))
    row.save()
    return row


def make_tasks(n: int, **fields: Any) -> list[int]:
    tasks = Task.objects.bulk_create(
        [Task(**{"function": ADD, "run_at": NOW, **fields}) for _ in range(n)]
    )
    return [t.pk for t in tasks]


def register(store: MySQLStore, *node_ids: str) -> None:
    for n, node_id in enumerate(node_ids):
        store.register_node(node_id, "host", n + 1, "0", NOW)


def version_of(pk: int) -> int:
    return Schedule.objects.values_list("version", flat=True).get(pk=pk)


def test_install_is_idempotent_and_creates_the_triggers(store: MySQLStore) -> None:
    store.install()
    store.install()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT trigger_name FROM information_schema.triggers "
            "WHERE trigger_schema = DATABASE() ORDER BY 1"
        )
        names = [r[0] for r in cursor.fetchall()]
    assert names == sorted(TRIGGERS)


def test_every_kind_of_write_raises_the_version(store: MySQLStore) -> None:
    every_kind_of_write_raises_the_version(make_schedule())


def test_versions_grow_inside_one_transaction_and_are_read_as_changes(store: MySQLStore) -> None:
    _refs, top = store.load_schedules()
    with transaction.atomic():
        a, b = make_schedule("a"), make_schedule("b")
        Schedule.objects.filter(pk=a.pk).update(grace=1)
    assert version_of(b.pk) < version_of(a.pk)
    changed, seen = store.changed_schedules(top)
    assert {r.id for r in changed} == {a.pk, b.pk}
    assert seen == version_of(a.pk)
    assert store.changed_schedules(seen) == ([], seen)


def test_a_schedule_writer_waits_for_the_version_counter_so_versions_commit_in_order(
    store: MySQLStore, other_client: Any
) -> None:
    """Another client's write of a schedule holds the counter until it commits: a
    write made meanwhile waits, and gets the higher version once the first commits,
    so a node reading "above the highest version seen" misses neither."""
    first, second = make_schedule("first"), make_schedule("second")
    _refs, top = store.load_schedules()
    cursor = other_client.cursor()
    cursor.execute("UPDATE django_htask_schedule SET grace = 3 WHERE id = %s", [first.pk])
    writer = threading.Thread(
        target=lambda: (
            Schedule.objects.filter(pk=second.pk).update(grace=4),
            connection.close(),
        )
    )
    writer.start()
    writer.join(1.0)
    assert writer.is_alive()  # waits for the counter
    assert store.changed_schedules(top) == ([], top)  # neither is committed
    other_client.commit()
    writer.join(30)
    assert not writer.is_alive()
    assert version_of(first.pk) < version_of(second.pk)
    changed, _seen = store.changed_schedules(top)
    assert [r.id for r in changed] == [first.pk, second.pk]


def test_claims_skip_rows_locked_by_another_claimer(store: MySQLStore, other_client: Any) -> None:
    for n, node_id in enumerate(("n1", "n2", "n3")):
        store.register_node(node_id, "host", n + 1, "0", NOW)
    cursor = other_client.cursor()

    def lock_four() -> list[int]:
        cursor.execute("SELECT id FROM django_htask_task ORDER BY id LIMIT 4 FOR UPDATE")
        return [r[0] for r in cursor.fetchall()]

    claims_skip_locked_rows(store, make_tasks(10), lock_four, other_client.rollback)


def test_concurrent_claims_take_disjoint_batches(store: MySQLStore) -> None:
    for n in range(4):
        store.register_node(f"n{n}", "host", n + 1, "0", NOW)
    concurrent_claims_take_disjoint_batches(make_tasks(300))


def test_recording_runs_does_not_deadlock_with_a_bulk_update_of_the_schedules(
    store: MySQLStore, other_client: Any
) -> None:
    """A node records runs of schedules Y and X while another client, in one
    transaction, updates X and then Y (the admin disabling several schedules): the node
    skips X while the other holds it and writes it afterwards, so neither is rolled back
    as a deadlock's victim (both were, one or the other, before)."""
    store.register_node("n1", "host", 1, "0", NOW)
    x, y = make_schedule("x"), make_schedule("y")
    outcomes = [succeeded(s, running_run(s)) for s in (y, x)]
    admin = other_client.cursor()
    admin.execute("UPDATE django_htask_schedule SET enabled = 0 WHERE id = %s", [x.pk])
    errors: list[BaseException] = []

    def record() -> None:
        try:
            get_store().record("n1", outcomes)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    recorder = threading.Thread(target=record)
    recorder.start()
    recorder.join(1.0)  # the node has written Y and waits for X, holding nothing
    admin.execute("UPDATE django_htask_schedule SET enabled = 0 WHERE id = %s", [y.pk])
    other_client.commit()
    recorder.join(30)
    assert not recorder.is_alive()
    assert errors == []
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}
    for s in (x, y):
        s.refresh_from_db()
        assert (s.enabled, s.last_status, s.last_run_at) == (False, RunStatus.SUCCEEDED, NOW)


def test_a_last_status_leaves_the_version_alone(store: MySQLStore) -> None:
    """A node writing a schedule's last status is no edit the nodes must see: the
    version stays, and the next write of any kind raises it again."""
    store.register_node("n1", "host", 1, "0", NOW)
    row = make_schedule()
    before = version_of(row.pk)
    store.record("n1", [succeeded(row, running_run(row))])
    row.refresh_from_db()
    assert (row.last_status, row.version) == (RunStatus.SUCCEEDED, before)
    Schedule.objects.filter(pk=row.pk).update(grace=2)
    assert version_of(row.pk) > before


# -- several nodes -----------------------------------------------------------------------
def test_install_makes_the_rows_the_reaper_and_the_gates_lock_once(store: MySQLStore) -> None:
    store.install()
    store.install()
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM django_htask_counter WHERE name <> 'schedule'")
        names = sorted(r[0] for r in cursor.fetchall())
    assert names == sorted(["reaper", "pruner", *(f"gate:{i:04d}" for i in range(GATE_SLOTS))])
    assert gate_row("lock:account:7") in names
    assert gate_row("lock:account:7") != gate_row("lock:account:8")


def test_a_node_refuses_to_start_unless_its_connection_reads_committed(
    store: MySQLStore,
) -> None:
    store.check_migrated()
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    try:
        with pytest.raises(ImproperlyConfigured, match=r"at REPEATABLE-READ: .* READ COMMITTED"):
            store.check_migrated()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")


def test_mysql_s_differences_are_taken_by_name(
    store: MySQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL 8 cannot be installed where the suite runs; its differences are handled by
    name, checked here on MariaDB with the connection taken for MySQL's
    (``mysql_is_mariadb`` false): the store's transactions set no idle bound (MySQL has
    no ``idle_transaction_timeout``), and the start-up check reads MySQL's
    ``transaction_isolation`` (MariaDB 10.11 knows only ``tx_isolation``)."""
    connection.close()
    connection.ensure_connection()
    monkeypatch.setitem(store.connection.__dict__, "mysql_is_mariadb", False)
    sent: list[str] = []

    def record(execute: Any, sql: str, *args: Any) -> Any:
        sent.append(sql)  # before it runs: a statement that fails is seen too
        return execute(sql, *args)

    try:
        with (
            connection.execute_wrapper(record),
            store._atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute("SELECT @@SESSION.idle_transaction_timeout")
            assert cursor.fetchone()[0] == 0
        assert not [sql for sql in sent if "SET SESSION idle" in sql], sent
        # (a MariaDB without MySQL's name for the variable: an error, the database's)
        with connection.execute_wrapper(record), contextlib.suppress(StoreUnavailable):
            store.check_migrated()
        asked = [sql for sql in sent if "isolation" in sql]
        assert asked == ["SELECT @@SESSION.transaction_isolation"], sent
    finally:
        connection.close()


def test_only_one_reaper_at_a_time(store: MySQLStore, other_client: Any) -> None:
    register(store, "dead", "alive")
    make_tasks(1)
    store.start_tasks("dead", NOW, 10, NOW + timedelta(seconds=1))
    other_client.cursor().execute(
        "SELECT name FROM django_htask_counter WHERE name = 'reaper' FOR UPDATE"
    )
    later = NOW + timedelta(seconds=120)
    Node.objects.filter(id="alive").update(last_heartbeat=later)
    assert store.reap("alive", later, later - timedelta(seconds=60), RETRY) == 0  # skipped
    other_client.rollback()
    assert store.reap("alive", later, later - timedelta(seconds=60), RETRY) == 2


def test_a_node_is_declared_dead_only_after_its_write_in_flight_commits(
    store: MySQLStore, other_client: Any
) -> None:
    register(store, "n1")
    reaper = other_client.cursor()
    reaper.execute("SET SESSION innodb_lock_wait_timeout = 1")

    def declare() -> None:
        reaper.execute("UPDATE django_htask_node SET stopped_at = NOW() WHERE id = 'n1'")
        other_client.commit()

    a_node_is_declared_dead_only_after_its_write_in_flight_commits(
        store, declare, "Lock wait timeout"
    )


def test_a_heartbeat_committed_while_the_reaper_waits_keeps_the_node_alive(
    store: MySQLStore, other_client: Any
) -> None:
    """The reaper's ``UPDATE`` waits for the row a heartbeat holds, then reads it
    again: the node, late when the reaper began, is alive when it gets the row."""
    register(store, "late", "reaper")
    later = NOW + timedelta(seconds=120)
    Node.objects.filter(id="reaper").update(last_heartbeat=later)
    beat = other_client.cursor()
    beat.execute(
        "UPDATE django_htask_node SET last_heartbeat = %s WHERE id = 'late'",
        [later.replace(tzinfo=None)],
    )
    reaped: list[int] = []

    def reap() -> None:
        mine = MySQLStore()
        try:
            reaped.append(mine.reap("reaper", later, later - timedelta(seconds=60), RETRY))
        finally:
            mine.close()

    thread = threading.Thread(target=reap)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # waiting for the heartbeat's row
    other_client.commit()
    thread.join(10)
    assert reaped == [0]
    assert Node.objects.get(id="late").stopped_at is None


def test_a_node_back_from_a_long_gap_waits_a_timeout_before_reaping() -> None:
    a = MySQLStore()
    register(a, "a", "b")
    a_node_back_from_a_long_gap_waits_a_timeout_before_reaping(a)


def test_concurrent_claims_never_both_start_a_task_of_one_lock_or_overfill_a_limit(
    store: MySQLStore,
) -> None:
    concurrent_claims_respect_locks_and_limits(store, make_tasks, rounds=20)


def test_two_nodes_ending_a_batch_s_last_members_at_once_release_each_callback_once(
    store: MySQLStore,
) -> None:
    concurrent_ends_follow_once(store, rounds=20)


def test_the_question_whether_gated_tasks_are_due_reads_only_gated_tasks(
    store: MySQLStore,
) -> None:
    """MySQL/MariaDB have no partial index: the virtual column of migration 0014 and its
    index stand for it, so a claim's look for due tasks with a lock or a limit reads
    those rows only, not every pending task (it read all 10,000 of a backlog, a second
    a claim). What it read is counted by the server's handler counters: rows read in
    index order (``Handler_read_next``) and by a table scan (``Handler_read_rnd_next``)."""
    make_tasks(300)
    locked = make_tasks(2, lock="account:7")
    make_tasks(1, lock="account:8", status="running")

    def handler_reads(cursor: Any) -> dict[str, int]:
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
        return {name: int(value) for name, value in cursor.fetchall()}

    with connection.cursor() as cursor:
        sql, params = store._gated_probe(NOW, SERVE_ALL)
        cursor.execute(f"EXPLAIN {sql}", params)
        columns = [c[0] for c in cursor.description]
        plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        before = handler_reads(cursor)
        cursor.execute(sql, params)
        found = sorted(row[0] for row in cursor.fetchall())
        after = handler_reads(cursor)
    read = {name: after[name] - before[name] for name in after}
    assert found == locked
    assert [step["key"] for step in plan] == ["htask_task_gated"]
    assert read["Handler_read_rnd_next"] == 0  # no table scan
    assert read["Handler_read_next"] <= len(locked)  # the gated rows, in the index


def test_gated_tasks_another_transaction_is_changing_leave_the_others_in_sight(
    store: MySQLStore, other_client: Any
) -> None:
    """While another client's transaction has changed some gated tasks (uncommitted), a
    claim still sees every gated task as committed, through the gated index. Through an
    index on a virtual column (before migration 0024) MariaDB's consistent read found
    none of them: a claim on another node started nothing while one was in flight."""
    register(store, "n1")
    gated = [make_tasks(1, lock=f"account:{n}")[0] for n in range(12)]
    cursor = other_client.cursor()
    in_flight = ", ".join(str(pk) for pk in gated[-3:])
    cursor.execute(f"UPDATE django_htask_task SET status = 'running' WHERE id IN ({in_flight})")
    with connection.cursor() as ours:
        sql, params = store._gated_probe(NOW, SERVE_ALL)
        ours.execute(f"{sql} ORDER BY id", params)
        assert [row[0] for row in ours.fetchall()] == gated
    assert store.task_outlook(NOW)[0] is True
    assert [t.id for t in store.start_tasks("n1", NOW, 3, LEASE)] == gated[:3]


def test_a_claim_whose_candidates_another_claim_holds_reads_on_past_them(
    store: MySQLStore, other_client: Any
) -> None:
    """A claim's candidates come from a plain read (``CANDIDATES`` per task wanted and
    ``SPARE``); when another claim holds every one of them, the claim reads the next
    page of candidates, and takes the tasks after them."""
    register(store, "n1")
    ids = make_tasks(CANDIDATES * 2 + SPARE + 5)
    page = CANDIDATES * 2 + SPARE
    cursor = other_client.cursor()
    cursor.execute("SELECT id FROM django_htask_task ORDER BY id LIMIT %s FOR UPDATE", [page])
    started = store.start_tasks("n1", NOW, 2, LEASE)
    assert [t.id for t in started] == ids[page : page + 2]
    other_client.rollback()
    assert [t.id for t in store.start_tasks("n1", NOW, 3, LEASE)] == ids[:3]


def test_a_claim_that_reads_past_held_candidates_never_holds_their_index_entries(
    store: MySQLStore, other_client: Any
) -> None:
    """Another claim holds every candidate of ours and has not started them yet; ours
    reads on past them and, before it commits, the other starts its tasks, which moves
    their entries in the claim index. The other must not wait for ours: a claim that
    read the claim index with a lock held those entries, and when it then waited for
    one of the other's rows the two were a deadlock
    (store_checks.concurrent_claims_take_disjoint_batches)."""
    register(store, "n1", "n2")
    ids = make_tasks(CANDIDATES * 2 + SPARE + 5)
    page = CANDIDATES * 2 + SPARE
    cursor = other_client.cursor()
    # As a node's session (READ COMMITTED), whose UPDATE by id waits for no other row.
    cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
    cursor.execute(
        f"SELECT id FROM django_htask_task FORCE INDEX (PRIMARY) WHERE id IN "
        f"({', '.join(['%s'] * page)}) FOR UPDATE",
        ids[:page],
    )
    with transaction.atomic():
        started = store.start_tasks("n1", NOW, 2, LEASE)
        assert [t.id for t in started] == ids[page : page + 2]
        cursor.execute(  # waited a second and failed (1205), when ours held the entries
            f"UPDATE django_htask_task SET status = 'running', node = 'n2' WHERE id IN "
            f"({', '.join(['%s'] * page)})",
            ids[:page],
        )
    other_client.commit()
    assert set(Task.objects.filter(node="n2").values_list("id", flat=True)) == set(ids[:page])


def test_a_claim_writing_ends_is_five_statements(store: MySQLStore) -> None:
    """A claim of 8 that writes 8 successes: the fence (which also asks whether gated
    tasks are due and whether the node still runs the 8), the ends (a success writes no
    run row), the candidates, their lock, their start; and the transaction's own. Each
    statement is a round trip, most of a claim's time on MariaDB."""
    register(store, "n1")
    make_tasks(16)
    first = store.start_tasks("n1", NOW, 8, LEASE)
    finished = [task_ended(t.id, NOW + timedelta(milliseconds=n)) for n, t in enumerate(first)]
    with CaptureQueriesContext(connection) as queries:
        second = store.start_tasks("n1", NOW, 8, LEASE, finished=finished)
    assert len(second) == 8
    sent = [q["sql"] for q in queries]
    assert (sent[0], sent[-1]) == ("BEGIN", "COMMIT")  # the transaction's own
    assert len(sent[1:-1]) == 5, [sql[:60] for sql in sent]
    assert Task.objects.filter(status="succeeded").count() == 8
    assert not Run.objects.filter(task__in=[t.id for t in first]).exists()


def test_ends_that_differ_are_written_in_statements_of_at_most_a_hundred(
    store: MySQLStore,
) -> None:
    """250 ends at once, differing in their times, statuses, errors and results: each
    task gets its own (``CASE`` on the id, 100 ends a statement)."""
    register(store, "n1")
    ids = make_tasks(250, max_attempts=2)
    store.start_tasks("n1", NOW, 250, LEASE)
    retry_at = NOW + timedelta(minutes=5)

    def end(n: int, task_id: int) -> RunOutcome:
        failed = n % 3 == 0
        return task_ended(
            task_id,
            NOW + timedelta(seconds=n),
            status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
            error=f"error {n}" if failed else "",
            retry_at=retry_at if n % 6 == 0 else None,
            result=None if failed else bytes([n % 256, 0, 255]),
        )

    ends = [end(n, task_id) for n, task_id in enumerate(ids)]
    store.record("n1", ends)
    rows = {t.id: t for t in Task.objects.filter(id__in=ids)}
    for o in ends:
        row = rows[o.task_id]
        assert o.task_id is not None
        if o.retry_at is not None:
            assert (row.status, row.run_at, row.finished_at) == ("pending", retry_at, None)
        else:
            assert (row.status, row.finished_at) == (o.status, o.finished_at)
        assert (row.last_error, row.locked_by) == (o.error, None)
        assert (None if row.result is None else bytes(row.result)) == o.result
    failures = sum(o.status == RunStatus.FAILED for o in ends)  # a success writes none
    assert Run.objects.filter(task__in=ids).count() == failures == 84


def test_a_node_frozen_inside_a_write_holds_the_reaper_back_for_half_node_timeout_only(
    store: MySQLStore, other_client: Any, settings: Any
) -> None:
    """A node frozen (SIGSTOP, a paused VM) inside a write transaction holds its node
    row's shared lock. MariaDB ends its session once it has been idle in that
    transaction for half NODE_TIMEOUT (``idle_transaction_timeout``), so the reaper
    declares it dead; the node, once it resumes, finds its connection gone, and after
    reconnecting its writes are refused. (Without the bound, the reaper waited until
    its lock wait timeout, 10 s here.)"""
    settings.HTASK = {"NODE_TIMEOUT": 2}
    register(store, "n1")
    connection.close()  # a connection of the node's, bounded at its first transaction
    reaper = other_client.cursor()
    reaper.execute("SET SESSION innodb_lock_wait_timeout = 10")  # fails rather than hangs
    a_node_frozen_inside_a_write_is_declared_dead_after_half_node_timeout(
        store,
        lambda: (
            reaper.execute("UPDATE django_htask_node SET stopped_at = NOW(6) WHERE id = 'n1'"),
            other_client.commit(),
        ),
    )


def test_a_write_nested_in_the_callers_transaction_sets_no_idle_bound(
    store: MySQLStore,
) -> None:
    """The bound is set by the store's own transactions: one nested in a caller's
    transaction (a web request's, say) leaves the session as the caller has it."""
    connection.close()
    with transaction.atomic(), store._atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.idle_transaction_timeout")
        assert cursor.fetchone()[0] == 0
    with store._atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.idle_transaction_timeout")
        assert cursor.fetchone()[0] == 30  # half the default NODE_TIMEOUT of 60 s
    connection.close()
