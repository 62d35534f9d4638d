"""A claim reads the few tasks it takes, not the whole backlog, whatever the statistics.

On the database of this pass (SQLite, PostgreSQL or MariaDB in their passes), the claim
statement the store sends is planned as a walk of the ``htask_task_claim`` index in the
claim's order (priority, then age), without a sort. Before that index, every claim read
and sorted all the pending tasks: ``bench/cluster.py`` section 6 timed a claim of 8 at
1.30 ms with 2,000 tasks queued and 20.96 ms with 100,000, and at 1.04-1.14 ms with
the index.

The plan must not depend on the table's statistics. A backlog queued since the last
ANALYZE (statistics taken when nothing was pending, then a burst of enqueues) looks
like a row or two to PostgreSQL's planner, which then reads every pending task through
a bitmap and sorts them, and finishing reads every task ever marked running, until
autovacuum analyzes the table again: one node ran 10,000 queued tasks at about 1,600
a second so, and at about 3,100 once analyzed. So both cases are checked here: the
statistics fresh, and the statistics of the same table before the backlog came.

The idea comes from django-tasks-db's ``test_index_scan_for_ready`` (not ported: it
checks its own table's index); this is the same check on ours.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_htask.clock import use_clock
from django_htask.engine import FakeClock, encode_call
from django_htask.enums import RunStatus
from django_htask.models import Task, TaskStatus
from django_htask.store import get_store
from django_htask.store.base import RunOutcome
from django_htask.store.mysql import BY_ID

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ADD = "tests.integration.testapp.tasks:add"
BACKLOG = 5_000


def _tasks(status: TaskStatus | None) -> list[Task]:
    """``BACKLOG`` tasks: all of ``status``, or (None) three pending in four."""
    payload = encode_call(ADD, (1, 2), {})
    return [
        Task(
            function=ADD,
            payload=payload,
            run_at=NOW - timedelta(seconds=n % 600),
            priority=n % 3,
            status=status or (TaskStatus.PENDING if n % 4 else TaskStatus.SUCCEEDED),
        )
        for n in range(BACKLOG)
    ]


def _analyze() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {Task._meta.db_table}")
            cursor.fetchall()
        else:
            cursor.execute("ANALYZE")


def _plan(sql: str, setup: list[str]) -> str:
    """The database's plan of ``sql``, as text (not run), in a transaction that first
    runs ``setup``: the statements the store sent before it in its own transaction
    that set how it is planned."""
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in setup:
            cursor.execute(statement)
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN {sql}")
            return "\n".join(row[0] for row in cursor.fetchall())
        if connection.vendor == "mysql":  # a row per table: its key, "Using filesort"...
            cursor.execute(f"EXPLAIN {sql}")
            return "\n".join(str(row) for row in cursor.fetchall())
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


def _claim(finished: list[RunOutcome]) -> tuple[int, list[str], list[str]]:
    """Claim 8 tasks as a node does, writing ``finished`` first; return how many were
    started, the claim transaction's statements and its planner settings."""
    store = get_store()
    with use_clock(FakeClock(NOW)):
        store.register_node("n1", "host", 1, "0", NOW)
        with CaptureQueriesContext(connection) as queries:
            started = store.start_tasks("n1", NOW, 8, NOW + timedelta(minutes=1), finished=finished)
    sent = [q["sql"] for q in queries.captured_queries]
    setup = [sql for sql in sent if "set_config" in sql]
    return len(started), sent, setup


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("statistics", ["fresh", "stale", "waiting"])
def test_a_claim_walks_the_claim_index_and_sorts_nothing(statistics: str) -> None:
    """``waiting``: as many tasks waiting for others beside the backlog, which the
    claim's walk never reads (they are not in the index's pending range)."""
    if statistics == "stale":  # the planner was last told: nothing pending
        Task.objects.bulk_create(_tasks(TaskStatus.SUCCEEDED))
        _analyze()
    if statistics == "waiting":
        Task.objects.bulk_create(_tasks(TaskStatus.WAITING))
    Task.objects.bulk_create(_tasks(None))
    if statistics in ("fresh", "waiting"):
        _analyze()

    started, sent, setup = _claim([])

    assert started == 8
    # The statement that reads the backlog; on MySQL/MariaDB the candidates it found are
    # then locked by id (a sort of those few rows, read by primary key: BY_ID).
    claims = [sql for sql in sent if "ORDER BY" in sql and BY_ID not in sql]
    assert len(claims) == 1, sent
    plan = _plan(claims[0], setup)
    assert "htask_task_claim" in plan, plan
    assert "Sort" not in plan and "TEMP B-TREE" not in plan and "filesort" not in plan, plan
    assert "Bitmap" not in plan, plan


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("statistics", ["fresh", "stale"])
def test_finishing_reads_the_finished_tasks_by_primary_key(statistics: str) -> None:
    """PostgreSQL writes a claim's finished tasks in one statement that joins their
    outcomes to the task table: the tasks are read by id, not by a scan of every task
    marked running (which, between two vacuums, counts every task that ever ran)."""
    Task.objects.bulk_create(_tasks(TaskStatus.SUCCEEDED))
    if statistics == "stale":
        _analyze()
    Task.objects.bulk_create(_tasks(TaskStatus.RUNNING))  # the same node ran them all
    Task.objects.update(locked_by="n1")
    if statistics == "fresh":
        _analyze()
    ids = list(Task.objects.filter(status=TaskStatus.RUNNING).values_list("id", flat=True)[:8])
    finished = [
        RunOutcome(
            status=RunStatus.SUCCEEDED,
            function=ADD,
            name=ADD,
            node="n1",
            attempt=1,
            scheduled_for=None,
            started_at=NOW,
            finished_at=NOW,
            task_id=task_id,
        )
        for task_id in ids
    ]

    _started, sent, setup = _claim(finished)

    assert Task.objects.filter(id__in=ids, status=TaskStatus.SUCCEEDED).count() == 8
    finishes = [sql for sql in sent if "RETURNING t.id" in sql]
    assert len(finishes) == 1, sent
    plan = _plan(finishes[0], setup)
    assert "django_htask_task_pkey" in plan, plan
    assert "Bitmap" not in plan and "Seq Scan on django_htask_task" not in plan, plan


@pytest.mark.django_db(transaction=True)
def test_ends_nothing_follows_are_written_by_the_claim_s_own_statements() -> None:
    """A claim writing the ends of tasks of no batch, that no task waits for, sends
    no statement more than before tasks could be composed: none reads the edges or
    the batches. The end of a task others wait on does."""
    plain, waited_for = Task.objects.bulk_create(_tasks(TaskStatus.PENDING)[:2])
    Task.objects.filter(pk=waited_for.pk).update(followed=True)

    def ended(task: Task) -> RunOutcome:
        return RunOutcome(
            RunStatus.SUCCEEDED, ADD, ADD, "n1", 1, None, NOW, NOW, task_id=task.pk, follow=True
        )

    store = get_store()
    with use_clock(FakeClock(NOW)):
        store.register_node("n1", "host", 1, "0", NOW)
        assert len(store.start_tasks("n1", NOW, 2, NOW + timedelta(minutes=1))) == 2
    plain_end = dataclasses.replace(ended(plain), follow=False)
    _started, sent, _setup = _claim([plain_end])
    assert not [
        sql for sql in sent if "django_htask_dependency" in sql or "django_htask_batch" in sql
    ], sent
    _started, sent, _setup = _claim([ended(waited_for)])
    assert [sql for sql in sent if "django_htask_dependency" in sql], sent
