"""A claim reads the few tasks it takes, not the whole backlog.

On the database of this pass (SQLite, or PostgreSQL in the PostgreSQL pass), the claim
statement the store sends is planned as a walk of the ``htask_task_claim`` index in the
claim's order (priority, then age), without a sort. Before that index, every claim read
and sorted all the pending tasks: ``bench/cluster.py`` section 6 timed a claim of 8 at
1.30 ms with 2,000 tasks queued and 20.96 ms with 100,000, and at 1.04-1.14 ms with
the index.

The idea comes from django-tasks-db's ``test_index_scan_for_ready`` (not ported: it
checks its own table's index); this is the same check on ours.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_htask.clock import use_clock
from django_htask.engine import FakeClock, encode_call
from django_htask.models import Task, TaskStatus
from django_htask.store import get_store

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ADD = "tests.integration.testapp.tasks:add"
BACKLOG = 5_000


def _plan(sql: str) -> str:
    """The database's plan of ``sql``, as text (not run)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN {sql}")
            return "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


@pytest.mark.django_db(transaction=True)
def test_a_claim_walks_the_claim_index_and_sorts_nothing() -> None:
    payload = encode_call(ADD, (1, 2), {})
    Task.objects.bulk_create(
        Task(
            function=ADD,
            payload=payload,
            run_at=NOW - timedelta(seconds=n % 600),
            priority=n % 3,
            status=TaskStatus.PENDING if n % 4 else TaskStatus.SUCCEEDED,
        )
        for n in range(BACKLOG)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # the planner sees the backlog as it is
    store = get_store()
    with use_clock(FakeClock(NOW)):
        store.register_node("n1", "host", 1, "0", NOW)
        with CaptureQueriesContext(connection) as queries:
            started = store.start_tasks("n1", NOW, 8, NOW + timedelta(minutes=1))

    assert len(started) == 8
    assert {t.priority for t in started} == {2}
    claims = [q["sql"] for q in queries.captured_queries if "ORDER BY" in q["sql"]]
    assert len(claims) == 1, queries.captured_queries
    plan = _plan(claims[0])
    assert "htask_task_claim" in plan, plan
    assert "Sort" not in plan and "TEMP B-TREE" not in plan, plan
