"""Timeouts and aborts with real ``runscheduler`` processes on PostgreSQL
(docs/timeouts.md): a hung task timed out, an ``async def`` task cancelled at its
``await`` by its timeout, a running task and a schedule run aborted
from another process, which the node hears through ``NOTIFY`` (its poll is 5 s here).
The settings give ``TIMEOUT_GRACE`` 1 s. On MariaDB (test_mariadb_stopping.py) the
nodes hear of an abort at their poll, every 0.5 s there (``site.HEARD_WITHIN``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.acceptance.conftest import wait_until
from tests.cluster.conftest import Site

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HANG = "tests.acceptance.app.tasks:hang"
AHANG = "tests.acceptance.app.tasks:ahang"
ABLOCK = "tests.acceptance.app.tasks:ablock"
ANOOP = "tests.cluster.clusterapp.tasks:anoop"
NOOP = "tests.cluster.clusterapp.tasks:noop"
GIVEN_UP = "; it did not stop when forced, and its worker thread was given up"
ABORTED = "Aborted: an abort was asked for (cancel(token, abort=True) or the admin)"
RUNS = "SELECT status, error, duration, attempt FROM django_htask_run WHERE function = %s"


def hang_runs(site: Site) -> list[tuple[Any, ...]]:
    return site.sql(RUNS, HANG)


def tasks_behind(
    site: Site,
    workers: int,
    first: str,
    args: tuple[str, ...],
    behind: str,
    count: int,
    **opts: int,
) -> None:
    """A node of ``workers`` workers; ``first(*args)`` scheduled with a timeout of 2 s
    (and ``opts``), then ``count`` tasks of ``behind`` due 0.5 s later: returns once
    those have succeeded."""
    site.node("--workers", str(workers))
    given = ", ".join([*map(repr, args), "timeout=2", *(f"{k}={v!r}" for k, v in opts.items())])
    site.django(
        "from django_htask import schedule\n"
        f"schedule({first!r}, {given})\n"
        f"for i in range({count}):\n    schedule({behind!r}, i, delay=0.5)\n"
    )
    done = "SELECT count(*) FROM django_htask_task WHERE status = 'succeeded'"
    wait_until(lambda: site.one(done) == count, 60, f"the {count} tasks behind {first}")


def started(site: Site, kind: str) -> bool:
    return site.log.exists() and f"start {kind}" in site.log.read_text()


@pytest.mark.parametrize(
    ("kind", "forced"),
    [("sleep", False), pytest.param("loop", True, marks=pytest.mark.executor_variant)],
)
def test_a_hung_task_times_out_and_the_tasks_behind_it_run(
    site: Site, kind: str, forced: bool
) -> None:
    tasks_behind(site, 1, HANG, (kind, str(site.log)), NOOP, 20, max_attempts=2)
    wait_until(lambda: len(hang_runs(site)) == 2, 60, "its retry timed out too")
    expected = "TimedOut: the run took longer than its timeout of 2s" + ("" if forced else GIVEN_UP)
    assert [(s, e, a) for s, e, _d, a in hang_runs(site)] == [
        ("failed", expected, 1),
        ("failed", expected, 2),
    ]
    assert all(2 <= d < 4 for _s, _e, d, _a in hang_runs(site))
    assert site.sql("SELECT status FROM django_htask_task WHERE function = %s", HANG) == [
        ("failed",)
    ]


def test_an_async_task_waiting_at_an_await_is_cancelled_by_its_timeout(site: Site) -> None:
    """An ``async def`` task waiting at an ``await`` is cancelled there by its timeout
    (step 1, nothing forced), and its worker's loop runs the async tasks behind it."""
    tasks_behind(site, 1, AHANG, (str(site.log),), ANOOP, 10, max_attempts=1)
    wait_until(lambda: len(site.sql(RUNS, AHANG)) == 1, 30, "its run")
    [(status, error, duration, attempt)] = site.sql(RUNS, AHANG)
    assert (status, error, attempt) == (
        "failed",
        "TimedOut: the run took longer than its timeout of 2s",
        1,
    )
    assert 2 <= duration < 3
    assert [line.split()[0] for line in site.log.read_text().splitlines()] == [
        "start",
        "cancelled",
    ]


def test_an_async_task_that_blocks_the_loop_is_given_up_and_a_new_loop_runs_the_rest(
    site: Site,
) -> None:
    """An ``async def`` task that blocks the node's async lane (a sleep that does not
    await) holds up the async tasks behind it until its timeout: 2 s, then TIMEOUT_GRACE
    1 s, then FORCE_WAIT 0.5 s. Its run is recorded as given up, and the tasks behind it
    run on a new loop, on a new thread."""
    tasks_behind(site, 2, ABLOCK, (str(site.log),), ANOOP, 10, max_attempts=1)
    [(status, error, duration, attempt)] = site.sql(RUNS, ABLOCK)
    assert (status, attempt) == ("failed", 1)
    assert error == (
        "TimedOut: the run took longer than its timeout of 2s; it blocked the event loop "
        "of the node's async tasks, which was given up"
    )
    assert 3.4 <= duration < 5
    finished = "SELECT min(finished_at) FROM django_htask_task WHERE status = 'succeeded'"
    given_up = "SELECT finished_at FROM django_htask_run WHERE status = 'failed'"
    assert site.one(finished) >= site.one(given_up)  # none ran while the loop was blocked
    assert [line.split()[:2] for line in site.log.read_text().splitlines()] == [["start", "block"]]


@pytest.mark.parametrize(
    ("kind", "pool", "within", "suffix"),
    [
        # It stops at once by itself.
        ("cooperative", "thread", 1, ""),
        # After TIMEOUT_GRACE 1 s and FORCE_WAIT 0.5 s, stuck in C: its thread given up.
        pytest.param("socket", "thread", 3, GIVEN_UP, marks=pytest.mark.executor_variant),
        # After TIMEOUT_GRACE 1 s, the signal that forces it breaks its read.
        pytest.param("socket", "process", 2, "", marks=pytest.mark.executor_variant),
        # An async task on the node's async lane: its asyncio task cancelled at its await.
        ("await", "thread", 1, ""),
    ],
)
def test_an_abort_from_another_process_reaches_the_node(
    site: Site, kind: str, pool: str, within: float, suffix: str
) -> None:
    node = site.node("--workers", "2", "--pool", pool)
    fn, args = (AHANG, (str(site.log),)) if kind == "await" else (HANG, (kind, str(site.log)))
    given = ", ".join(map(repr, args))
    token = site.django(
        "from django_htask import schedule\n"
        f"print(schedule({fn!r}, {given}, max_attempts=3).token)\n"
    ).strip()
    wait_until(lambda: started(site, kind), 30, "the hung task")
    said = site.django(f"from django_htask import abort\nprint(abort({token!r}).value)\n")
    asked = time.monotonic()
    assert said.strip() == "requested"
    wait_until(lambda: site.sql(RUNS, fn), 30, "its run recorded")
    took = time.monotonic() - asked
    assert took < within + site.HEARD_WITHIN, took  # on PostgreSQL: NOTIFY, not the 5 s poll
    [(status, error, _duration, attempt)] = site.sql(RUNS, fn)
    assert (status, error, attempt) == ("failed", ABORTED + suffix, 1)
    assert site.sql("SELECT status, attempts FROM django_htask_task") == [("failed", 1)]
    assert node.process.poll() is None
    if kind == "await":  # cancelled at its await, nothing forced
        lines = site.log.read_text().splitlines()
        assert [line.split()[0] for line in lines] == ["start", "cancelled"]


def test_an_abort_of_a_schedule_run_from_the_admin_operations(site: Site) -> None:
    sid = site.schedule("hangs", "@every 1h", HANG, "cooperative", str(site.log), max_attempts=3)
    site.sql(f"UPDATE django_htask_schedule SET next_run_at = {site.ago_sql(1)} WHERE id = %s", sid)
    site.node("--workers", "1")
    wait_until(lambda: started(site, "cooperative"), 30, "the schedule's run")
    [(run_id,)] = site.sql("SELECT id FROM django_htask_run WHERE schedule_id = %s", sid)
    asked = site.django(
        f"from django_htask.operations import abort_runs\nprint(abort_runs([{run_id}]))\n"
    )
    assert asked.strip() == "1"
    wait_until(
        lambda: (
            site.sql("SELECT status FROM django_htask_run WHERE id = %s", run_id) == [("failed",)]
        ),
        3 + site.HEARD_WITHIN,
        "the run stopped (on PostgreSQL, NOTIFY: before the 5 s poll)",
    )
    assert site.sql("SELECT error FROM django_htask_run WHERE schedule_id = %s", sid) == [
        (ABORTED,)
    ]  # aborted: never retried
