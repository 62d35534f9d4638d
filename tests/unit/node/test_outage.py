"""The database away, on the in-memory store (:meth:`InMemoryStore.outage`): what a
node does when its store raises StoreUnavailable. Results that cannot be written wait
(put back, never lost), the back-off grows from ``DB_RETRY`` to ``DB_RETRY_MAX``, and
the first success writes what waited. No database, no sleep."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_htask.conf import HtaskSettings
from django_htask.engine import FakeClock
from django_htask.enums import TaskStatus
from django_htask.exceptions import StoreUnavailable
from django_htask.node import Node
from django_htask.retry import RetryPolicy
from django_htask.store.base import INTERFACE
from django_htask.testing import InMemoryStore

from . import jobs
from .conftest import ADD, HOLD, START

MakeNode = Callable[..., Node]

#: The back-off of these tests: 1, 2, 4, 4 ... seconds; the node neither polls nor
#: beats meanwhile, so every failure counted is a claim's or a fire's.
SETTINGS = HtaskSettings(
    db_retry=1.0, db_retry_max=4.0, poll_interval=3600.0, heartbeat_interval=3600.0,
    node_timeout=7200.0,
)  # fmt: skip
DELAYS = [RetryPolicy(1.0, 4.0).delay(n) for n in range(1, 5)]


def actions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "action", "") for r in caplog.records]


def test_in_an_outage_every_method_of_the_interface_raises_store_unavailable(
    store: InMemoryStore,
) -> None:
    calls: dict[str, tuple[Any, ...]] = dict.fromkeys(
        ("check_migrated", "install", "describe", "load_schedules"), ()
    )
    calls["heartbeat"] = ("n1", START, START)
    calls["attempt"] = (lambda: 1,)
    assert set(calls) <= INTERFACE
    with store.outage("connection refused"):
        for name, args in calls.items():
            with pytest.raises(StoreUnavailable, match=r"^connection refused$") as raised:
                getattr(store, name)(*args)
            assert isinstance(raised.value.__cause__, ConnectionError), name
            assert raised.value.reason == "ConnectionError: connection refused"
        store.close()  # dropping a connection needs no database
        store.refresh()
        tid = store.add_task(ADD, 1)  # the helpers are the outside: they go on
        again = pytest.raises(RuntimeError, match=r"in an outage already \(connection refused\)")
        with again, store.outage():
            pass
    assert store.attempt(lambda: 1) == 1
    assert store.tasks[tid].status == TaskStatus.PENDING


def test_results_wait_through_an_outage_and_are_written_after_it(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    tid = store.add_task(HOLD, "outage")
    node = make_node(settings=SETTINGS, start=False)
    node.start()
    clock.advance(0, wait=False)
    backoff = node.parts.ctx.control.backoff
    results = node.parts.ctx.results
    started, release = jobs.gate("outage")
    assert started.wait(5)
    assert store.tasks[tid].status == TaskStatus.RUNNING
    # The heartbeat thread's first beat (a call_soon at start) done, the next an hour
    # away: else, run late, it fails in the outage too and logs its own retry.
    beat = node.parts.liveness.beat
    deadline = time.monotonic() + 5
    while not (beat.idle() and (beat.next_due() or clock.now()) > clock.now()):
        assert time.monotonic() < deadline, "the first heartbeat did not happen"
        time.sleep(0.01)
    waiting = []
    with caplog.at_level(logging.INFO, logger="django_htask"), store.outage():
        release.set()  # the job ends: its result is pushed, the claim that writes it fails
        clock.advance(0)
        for delay in DELAYS[:3]:
            clock.advance(delay)  # each retry of the claim fails, and waits longer
            waiting.append(len(results))
        assert store.tasks[tid].status == TaskStatus.RUNNING  # nothing written
    assert waiting == [1, 1, 1]  # put back each time, never lost
    # Each failure waits longer, up to DB_RETRY_MAX, and is logged as a warning once
    # per delay announced (a claim, or a dispatch a freed worker asked for, may fail
    # twice at one instant: the second is counted, and logged at DEBUG).
    waits = [
        r.args[2]  # type: ignore[index]
        for r in caplog.records
        if getattr(r, "action", "") == "db_unavailable" and r.levelno == logging.WARNING
    ]
    assert len(waits) >= 3 and waits[0] == 1.0 and waits == sorted(waits), waits
    assert set(waits) <= set(DELAYS) and waits[-1] == 4.0 and backoff.delay == 4.0
    with caplog.at_level(logging.INFO, logger="django_htask"):
        caplog.clear()
        clock.advance(DELAYS[3])  # the database back: the next try writes what waited
    assert store.tasks[tid].status == TaskStatus.SUCCEEDED
    assert len(results) == 0 and backoff.delay == 0
    assert actions(caplog) == ["db_back"]
    [run] = store.attempts_of(tid)  # a success: from the task's row, no run row
    assert (run.status, run.node) == ("succeeded", node.node_id)
    assert [r for r in store.runs.values() if r.task_id == tid] == []


def test_the_outage_is_logged_with_the_drivers_error_and_the_next_delay(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    make_node(settings=SETTINGS, poll_interval=600.0)
    with caplog.at_level(logging.WARNING, logger="django_htask"), store.outage("refused"):
        clock.advance(600)  # the poll fails (the heartbeat is not due)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "database unavailable (ConnectionError: refused), retrying in 1.0s"
    ]


def test_a_schedule_due_in_an_outage_fires_once_after_it(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    sid = store.add_schedule(
        "s", ADD, "@every 1h", args=(1,), next_run_at=START + timedelta(seconds=10)
    )
    node = make_node(settings=SETTINGS)
    backoff = node.parts.ctx.control.backoff
    with store.outage():
        clock.advance(10)  # due: the claim fails
        clock.advance(DELAYS[0])  # tried again: fails again
        assert backoff.delay == DELAYS[1]
        assert calls["add"] == []
    clock.advance(DELAYS[1])
    assert calls["add"] == [1]
    clock.advance(60)
    assert calls["add"] == [1]
    assert [r.status for r in store.runs_of(schedule_id=sid)] == ["succeeded"]
