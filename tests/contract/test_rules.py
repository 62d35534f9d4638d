"""Each rule of django_htask/querysets.py in its three forms (the QuerySet verb, the SQL
fragment of the stores' raw statements, the predicate over values of the in-memory
store) picks the same rows, on the database of this pass (SQLite, PostgreSQL,
MariaDB): a change made to one form and not the others fails here."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from django_htask.engine import encode_call
from django_htask.models import GATED, GATED_PREDICATE, Node, Run, RunStatus, Task
from django_htask.querysets import (
    CLAIMABLE_SQL,
    EXPIRED_RUN_SQL,
    EXPIRED_TASK_SQL,
    HOLDING_SQL,
    LIVE_NODE_SQL,
    OWN_EXPIRED_TASK_SQL,
    PLAIN_TASK_SQL,
    SILENT_NODE_SQL,
    claimable_params,
    expired_run,
    expired_task,
    holding_params,
    node_is_live,
    node_is_silent,
    plain_task_sql,
    run_is_expired,
    served_task,
    served_task_sql,
    task_is_claimable,
    task_is_due,
    task_is_expired,
    task_is_holding,
    task_is_lost,
    task_is_plain,
    task_is_served,
    task_success_run,
)
from django_htask.queues import ALL, NONE, QueueFilter
from django_htask.retention import FINAL_STATUSES, Cutoffs, TaskRetention
from django_htask.store import get_store
from django_htask.store.base import RunOutcome
from django_htask.store.memory.records import TaskRecord
from django_htask.store.rules import writes_run

NOW = datetime(2030, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)
ADD = "tests.integration.testapp.tasks:add"

pytestmark = pytest.mark.django_db


def _ids(sql: str, table: str, params: list[Any]) -> set[Any]:
    adapt = connection.ops.adapt_datetimefield_value
    values = [adapt(p) if isinstance(p, datetime) else p for p in params]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {table} WHERE {sql}", values)
        return {row[0] for row in cursor.fetchall()}


def test_a_live_node_is_one_rule_in_its_three_forms() -> None:
    dead_before = NOW - 60 * S
    rows = []
    for i, (stopped, beat) in enumerate(
        itertools.product((None, NOW), (dead_before - S, dead_before, dead_before + S))
    ):
        rows.append(
            Node(
                id=f"n{i}",
                hostname="h",
                pid=i,
                version="0",
                started_at=NOW - 3600 * S,
                last_heartbeat=beat,
                stopped_at=stopped,
            )
        )
    Node.objects.bulk_create(rows)
    by_values = {n.id for n in rows if node_is_live(n.stopped_at, n.last_heartbeat, dead_before)}
    assert by_values == {"n1", "n2"}  # a heartbeat at dead_before counts
    assert set(Node.objects.live(dead_before).values_list("id", flat=True)) == by_values
    table = Node._meta.db_table
    assert _ids(LIVE_NODE_SQL, table, [dead_before]) == by_values
    silent = {n.id for n in rows if node_is_silent(n.stopped_at, n.last_heartbeat, dead_before)}
    assert silent == {"n0"}  # not stopped, heartbeat before dead_before
    assert set(Node.objects.silent(dead_before).values_list("id", flat=True)) == silent
    assert _ids(SILENT_NODE_SQL, table, [dead_before]) == silent


def test_a_claimable_task_is_one_rule_in_its_three_forms() -> None:
    payload = encode_call(ADD, (1,), {})
    cases = itertools.product(
        ("pending", "running", "succeeded"),
        (NOW - S, NOW, NOW + S),  # run_at
        (None, "n1"),  # locked_by
        (None, NOW - S, NOW, NOW + S),  # lease_expires_at
    )
    rows = [
        Task(
            function=ADD,
            payload=payload,
            status=status,
            run_at=run_at,
            locked_by=locked_by,
            lease_expires_at=lease,
        )
        for status, run_at, locked_by, lease in cases
    ]
    created = Task.objects.bulk_create(rows)
    if created[0].pk is None:  # MySQL/MariaDB return no ids: read them back, in order
        for task, pk in zip(
            created, Task.objects.order_by("id").values_list("id", flat=True), strict=True
        ):
            task.pk = pk
    by_values = {
        t.pk
        for t in created
        if task_is_claimable(t.status, t.run_at, t.locked_by, t.lease_expires_at, NOW)
    }
    due = {t.pk for t in created if task_is_due(t.status, t.run_at, NOW)}
    assert 0 < len(by_values) < len(due) < len(created)
    assert set(Task.objects.claimable(NOW).values_list("id", flat=True)) == by_values
    assert set(Task.objects.due(NOW).values_list("id", flat=True)) == due
    assert _ids(CLAIMABLE_SQL, Task._meta.db_table, claimable_params(NOW)) == by_values
    live = ["n2"]  # n1 is not live: its tasks are lost whatever their lease
    lost = {t.pk for t in created if task_is_lost(t.locked_by, t.lease_expires_at, live, NOW)}
    assert set(Task.objects.lost(NOW, live).values_list("id", flat=True)) == lost
    assert set(Task.objects.lost(NOW, ["n1"]).values_list("id", flat=True)) == {
        t.pk for t in created if task_is_lost(t.locked_by, t.lease_expires_at, ["n1"], NOW)
    }


def test_a_task_holding_its_lock_is_one_rule_in_its_three_forms() -> None:
    payload = encode_call(ADD, (1,), {})
    cases = itertools.product(
        ("pending", "running", "failed"),
        (None, NOW - S, NOW, NOW + S),  # lease_expires_at
    )
    Task.objects.bulk_create(
        Task(
            function=ADD,
            payload=payload,
            run_at=NOW - S,
            status=status,
            locked_by=None if lease is None else "n1",
            lease_expires_at=lease,
        )
        for status, lease in cases
    )
    rows = list(Task.objects.values_list("id", "status", "lease_expires_at"))
    by_values = {pk for pk, status, lease in rows if task_is_holding(status, lease, NOW)}
    assert len(by_values) == 2  # running, its lease expiring at NOW or later
    assert set(Task.objects.holding(NOW).values_list("id", flat=True)) == by_values
    assert _ids(HOLDING_SQL, Task._meta.db_table, holding_params(NOW)) == by_values


def test_a_plain_task_is_one_rule_in_its_forms_and_the_others_are_gated() -> None:
    """Plain and gated, as Python (``task_is_plain``, the in-memory store's record), as
    querysets (``plain()``, ``GATED``: the gated index's condition), as SQL (the
    constants, and the predicates this database's store claims with: on MySQL and
    MariaDB, the gated column its migration generates)."""
    payload = encode_call(ADD, (1,), {})
    cases = list(itertools.product(("pending", "running"), (None, "l"), (None, 2), (None, 5)))
    Task.objects.bulk_create(
        Task(
            function=ADD,
            payload=payload,
            run_at=NOW,
            status=status,
            lock=lock,
            max_running=most,
            rate_limit=rate,
            rate_period=None if rate is None else 60,
        )
        for status, lock, most, rate in cases
    )
    rows = list(Task.objects.values_list("id", "status", "lock", "max_running", "rate_limit"))
    by_values = {pk for pk, _s, lock, most, rate in rows if task_is_plain(lock, most, rate)}
    assert len(by_values) == 2  # pending and running, with none of the three
    assert set(Task.objects.plain().values_list("id", flat=True)) == by_values
    table = Task._meta.db_table
    quoted = plain_task_sql(connection.ops.quote_name)
    assert _ids(quoted, table, []) == by_values
    if connection.vendor != "mysql":  # the constant as written: `lock` unquoted on MySQL
        assert _ids(PLAIN_TASK_SQL, table, []) == by_values
    records = {
        pk: TaskRecord(pk, ADD, payload, NOW, lock=lock, max_running=most, rate_limit=rate)
        for pk, _s, lock, most, rate in rows
    }
    assert {pk for pk, record in records.items() if not record.gated} == by_values
    gated = {pk for pk, status, *_g in rows if status == "pending" and pk not in by_values}
    assert set(Task.objects.filter(GATED).values_list("id", flat=True)) == gated
    store = get_store()
    pending = "status = 'pending' AND "
    assert _ids(pending + store.dialect.gated_predicate, table, []) == gated
    assert _ids(store.dialect.plain_predicate, table, []) == by_values
    if connection.vendor != "mysql":
        assert _ids(GATED_PREDICATE, table, []) == gated


def test_a_served_task_is_one_rule_in_its_three_forms() -> None:
    payload = encode_call(ADD, (1,), {})
    cases = list(itertools.product(("default", "mail", "slow"), ("", "b1", "b2")))
    Task.objects.bulk_create(
        Task(function=ADD, payload=payload, run_at=NOW, queue_name=queue, backend=backend)
        for queue, backend in cases
    )
    created = list(Task.objects.values_list("id", "queue_name", "backend"))
    assert len(created) == len(cases)
    filters = [ALL, NONE, QueueFilter.of(["mail", "slow"]), QueueFilter.of(["*"], ["mail"])]
    picked = set()
    for queues, backend in itertools.product(filters, (None, "b1")):
        by_values = {pk for pk, queue, on in created if task_is_served(queue, on, queues, backend)}
        picked.add(len(by_values))
        served = served_task(queues, backend)
        assert set(Task.objects.filter(served).values_list("id", flat=True)) == by_values
        sql, params = served_task_sql(queues, backend)
        assert _ids(f"1 = 1{sql}", Task._meta.db_table, params) == by_values
    assert {0, len(cases)} < picked  # none, all, and some in between


def test_a_task_past_its_retention_is_one_rule_in_its_three_forms() -> None:
    cutoffs = Cutoffs.at(NOW, TaskRetention(7, 30, 0), 30)
    day = 86400 * S
    rows = [
        Task(
            function=ADD,
            payload=encode_call(ADD, (1,), {}),
            run_at=NOW - 100 * day,
            status=status,
            finished_at=None if status in ("pending", "running") else NOW - age,
            retention=retention,
        )
        for status, age, retention in itertools.product(
            ("pending", "running", *FINAL_STATUSES),
            (6 * day, 7 * day, 8 * day, 31 * day),
            (None, 0, 7 * 86400, 10 * 86400),
        )
    ]
    Task.objects.bulk_create(rows)
    by_values = {
        t.pk
        for t in Task.objects.all()
        if task_is_expired(t.status, t.finished_at, t.retention, cutoffs)
    }
    # 7 days: 8 and 31 days old; failed: 31; cancelled: never; own 7 days: 8 and 31
    # of every final status; own 10 days: 31 of each; own 0: never
    assert len(by_values) == 2 + 1 + 3 * 2 + 3 * 1
    own = [0, 7 * 86400, 10 * 86400]
    assert set(Task.objects.filter(expired_task(cutoffs, own)).values_list("pk", flat=True)) == (
        by_values
    )
    table = Task._meta.db_table
    by_sql = set()
    for status, cutoff in cutoffs.tasks:
        by_sql |= _ids(EXPIRED_TASK_SQL, table, [status, cutoff])
    for seconds in own:
        before = cutoffs.own(seconds)
        for status in FINAL_STATUSES if before is not None else ():
            by_sql |= _ids(OWN_EXPIRED_TASK_SQL, table, [seconds, status, before])
    assert by_sql == by_values


def test_a_run_past_its_retention_is_one_rule_in_its_three_forms() -> None:
    cutoff = NOW - 30 * 86400 * S
    rows = [
        Run(name="r", function=ADD, status=status, started_at=started)
        for status, started in itertools.product(
            ("running", "succeeded", "failed", "missed"), (None, cutoff - S, cutoff, cutoff + S)
        )
    ]
    Run.objects.bulk_create(rows)
    by_values = {r.pk for r in Run.objects.all() if run_is_expired(r.status, r.started_at, cutoff)}
    assert len(by_values) == 3  # not running, started before the cutoff
    assert set(Run.objects.filter(expired_run(cutoff)).values_list("pk", flat=True)) == by_values
    assert _ids(EXPIRED_RUN_SQL, Run._meta.db_table, [cutoff, "running"]) == by_values
    assert not Run.objects.filter(expired_run(None)).exists()


def test_a_spent_batch_is_one_rule_in_its_three_forms() -> None:
    from django_htask.models import Batch
    from django_htask.querysets import SPENT_BATCH_SQL, batch_is_spent, spent_batch

    payload = encode_call(ADD, (1,), {})
    cases = [(None, 0), (None, 1), (NOW, 0), (NOW, 1), (NOW, 2)]
    rows = [Batch.objects.create(finished_at=finished) for finished, _members in cases]
    for row, (_finished, members) in zip(rows, cases, strict=True):
        for _ in range(members):
            Task.objects.create(function=ADD, payload=payload, run_at=NOW, batch=row)
    expected = {
        row.pk
        for row, (finished, members) in zip(rows, cases, strict=True)
        if batch_is_spent(finished, members)
    }
    assert expected == {rows[2].pk}
    assert set(Batch.objects.filter(spent_batch()).values_list("pk", flat=True)) == expected
    assert _ids(SPENT_BATCH_SQL, Batch._meta.db_table, []) == expected


def test_a_run_a_task_s_row_stands_for_is_one_rule_with_the_runs_not_written() -> None:
    """The readers' filter of the run rows a task's row stands for
    (``task_success_run``) picks exactly the ends the writers write no row for without
    ``RECORD_EVERY_ATTEMPT`` (``rules.writes_run``), of every status, task's or
    schedule's; those rows exist only when every attempt is recorded."""
    task = Task.objects.create(function=ADD, run_at=NOW, payload=encode_call(ADD, (1,), {}))
    kinds = {}
    for status, on_task in itertools.product(RunStatus.values, (True, False)):
        o = RunOutcome(
            status, ADD, ADD, "n1", 1, NOW, NOW, NOW, task_id=task.pk if on_task else None
        )
        run = Run.objects.create(**o.columns())
        kinds[run.pk] = o
    stood_for = set(Run.objects.filter(task_success_run()).values_list("id", flat=True))
    assert stood_for == {i for i, o in kinds.items() if not writes_run(o, False)}
    assert len(stood_for) == 1 and all(writes_run(o, True) for o in kinds.values())
