"""The async lane: a node's ``async def`` tasks on one event loop (node/lane.py), its
place among ``WORKERS``, the three steps that stop a call, and the node's stop."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from django_htask.engine import FakeClock
from django_htask.enums import TaskStatus
from django_htask.node import Node
from django_htask.node.supervisor import FORCE_WAIT
from django_htask.testing import InMemoryStore

from . import jobs
from .conftest import GRACE, HOLD, started, step, task_runs, until

AWAITING = "tests.unit.node.jobs:awaiting"
SHRUGS = "tests.unit.node.jobs:shrugs"
BLOCKS = "tests.unit.node.jobs:blocks_its_loop"
ADOUBLE = "tests.integration.testapp.tasks:adouble"
TIMED_OUT = "TimedOut: the run took longer than its timeout of 2s"


def lane_threads(node: Node) -> list[str]:
    prefix = f"{node.node_id}-async-"
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(prefix))


def test_the_lane_begins_no_more_calls_than_workers_with_the_threads_calls_counted(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    """With 2 workers, one busy with a sync task, one async task is in its call at a
    time; the others wait for a place, and each end lets the next one begin."""
    held = store.add_task(HOLD, "sync", priority=10)
    names = [f"async-{i}" for i in range(3)]
    ids = [store.add_task(AWAITING, name) for name in names]
    node = start_node(workers=2)
    started("sync")
    started("async-0")
    assert node.parts.ctx.running.in_call() == 2
    assert not jobs.gate("async-1")[0].wait(0.1)  # no place for it
    jobs.gate("sync")[1].set()  # the sync task ends: its place goes to the lane
    started("async-1")
    assert not jobs.gate("async-2")[0].is_set()
    jobs.gate("async-0")[1].set()
    started("async-2")
    jobs.gate("async-1")[1].set()
    jobs.gate("async-2")[1].set()
    for tid in [held, *ids]:
        until(lambda tid=tid: store.tasks[tid].status == TaskStatus.SUCCEEDED, "all ran")
    assert lane_threads(node) == [f"{node.node_id}-async-1"]


def test_a_call_that_catches_its_cancellation_is_cancelled_again_after_the_grace(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    tid = store.add_task(SHRUGS, "once", 1, timeout=2.0)
    node = start_node()
    started("once")
    step(clock, node, 2, "the timeout cancels it", pending=1)
    until(lambda: jobs.ended.get("once") == "cancelled 1", "the first cancel caught")
    step(clock, node, GRACE, "the grace passes: cancelled again", pending=1)
    until(lambda: task_runs(store, tid), "the run recorded")
    assert jobs.ended["once"] == "cancelled 2"
    assert task_runs(store, tid) == [("failed", TIMED_OUT)]
    assert node.parts.supervisor.given_up == 0


def test_a_call_that_never_stops_is_given_up_and_the_loop_goes_on(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    """The loop ran both cancels: the call is recorded for, and left to go on; the
    calls after it run on the same loop, and no thread counts as stuck."""
    tid = store.add_task(SHRUGS, "never", 1000, timeout=2.0, max_attempts=1)
    node = start_node()
    started("never")
    step(clock, node, 2, "the timeout", pending=1)
    step(clock, node, GRACE, "cancelled again", pending=1)
    until(lambda: jobs.ended.get("never") == "cancelled 2", "the loop ran the second cancel")
    step(clock, node, FORCE_WAIT, "given up", pending=0)
    until(lambda: task_runs(store, tid), "the run recorded")
    assert task_runs(store, tid) == [
        ("failed", f"{TIMED_OUT}; it did not stop when cancelled twice, and was given up")
    ]
    after = store.add_task(ADOUBLE, 21)
    clock.advance(0, wait=False)
    until(lambda: store.tasks[after].status == TaskStatus.SUCCEEDED, "the next call ran")
    assert lane_threads(node) == [f"{node.node_id}-async-1"]
    assert node.parts.ctx.stuck_threads() == 0
    jobs.gate("never")[1].set()  # it returns at last: nothing is recorded again
    until(lambda: node.parts.ctx.lane is not None and node.parts.ctx.lane.idle(), "it ended")
    assert len(store.runs_of(task_id=tid)) == 1


def test_a_call_that_blocks_the_loop_is_given_up_with_it_and_a_new_loop_runs_the_next(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore, calls: object
) -> None:
    """A call that does not await holds up the loop: the cancels never run. Its run is
    recorded for it, its loop's thread counts as stuck until it returns, and the async
    task waiting behind it runs on a new loop, on a new thread."""
    tid = store.add_task(BLOCKS, "blocker", timeout=2.0, max_attempts=2)
    after = store.add_task(ADOUBLE, 21)
    node = start_node(workers=2)
    started("blocker")
    until(lambda: node.parts.ctx.running.waiting() == 1, "the next one handed to the lane")
    step(clock, node, 2, "the timeout", pending=1)
    step(clock, node, GRACE, "cancelled again", pending=1)
    step(clock, node, FORCE_WAIT, "the loop given up", pending=0)
    until(lambda: task_runs(store, tid), "the run recorded")
    [(status, error)] = task_runs(store, tid)
    assert (status, error) == (
        "failed",
        f"{TIMED_OUT}; it blocked the event loop of the node's async tasks, which was given up",
    )
    until(lambda: store.tasks[tid].status == TaskStatus.PENDING, "retried by its policy")
    until(lambda: store.tasks[after].status == TaskStatus.SUCCEEDED, "the next ran")
    node_id = node.node_id
    assert lane_threads(node) == [f"{node_id}-async-1", f"{node_id}-async-2"]
    assert node.parts.ctx.stuck_threads() == 1
    assert node.parts.supervisor.given_up == 1
    jobs.gate("blocker")[1].set()  # it returns at last: its loop and thread end
    until(lambda: node.parts.ctx.stuck_threads() == 0, "the old loop's thread ended")
    assert lane_threads(node) == [f"{node_id}-async-2"]
    assert len(store.runs_of(task_id=tid)) == 1


def test_a_stop_hands_back_the_async_tasks_not_begun_and_waits_for_those_in_a_call(
    make_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore, calls: object
) -> None:
    """The one in its call ends within SHUTDOWN_TIMEOUT and is recorded; the one
    waiting for a place is handed back, pending as it was."""
    first = store.add_task(AWAITING, "in-call", priority=10)
    second = store.add_task(AWAITING, "waits")
    node = make_node(start=False, workers=1)
    node.start()
    clock.advance(0, wait=False)
    started("in-call")
    threading.Timer(0.2, jobs.gate("in-call")[1].set).start()
    node.stop(timeout=5)
    assert store.tasks[first].status == TaskStatus.SUCCEEDED
    assert store.tasks[second].status == TaskStatus.PENDING
    assert store.tasks[second].attempts == 0
    assert node.unfinished == 0
    assert lane_threads(node) == []


def test_without_the_lane_async_tasks_run_on_the_worker_threads(
    make_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore, calls: object
) -> None:
    from django_htask.conf import HtaskSettings

    jobs.threads.clear()
    tid = store.add_task("tests.unit.node.jobs:leaves_a_task", "on-a-worker")
    node = make_node(workers=1, settings=HtaskSettings(async_lane=False))
    clock.advance(0)
    assert store.tasks[tid].status == TaskStatus.SUCCEEDED
    assert node.parts.ctx.lane is None
    [thread] = jobs.threads
    assert thread.startswith(f"{node.node_id}-jobs-worker-")


def test_a_job_whose_own_code_raises_is_logged_and_the_lane_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not a call's failure (its outcome holds that) but a fault of the node's own code
    around it: logged with its traceback, as a worker thread logs it, and its place is
    free for the next."""
    from django_htask.engine import SystemClock
    from django_htask.node.lane import Lane
    from django_htask.node.running import Running

    lane = Lane("n", SystemClock(), Running(), 1, lambda: None)
    ran = threading.Event()

    def broken() -> None:
        raise RuntimeError("broken begin")

    async def failing() -> None:
        raise RuntimeError("broken end")

    async def fine() -> None:
        ran.set()

    with caplog.at_level(logging.ERROR, logger="django_htask"):
        lane.submit([(("task", 1), broken), (("task", 2), failing)])
        lane.submit([(("task", 3), fine)])
        assert ran.wait(5)
        until(lane.idle, "the lane idle")
    lane.close(5)
    failed = [r for r in caplog.records if getattr(r, "action", "") == "task_failed"]
    assert [r.getMessage() for r in failed] == ["task 1 failed", "task 2 failed"]
    assert [str(r.exc_info[1]) for r in failed if r.exc_info] == ["broken begin", "broken end"]


def test_a_call_whose_coroutine_is_closed_ends_with_no_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coroutine closed where it awaits (its loop went, and the garbage collector
    frees it) lets GeneratorExit through: no outcome is made, and no traceback is
    formatted wherever the collector happens to run (on Python 3.11, formatting one
    inside another thread's or a finalizer's ``ast.parse`` raises SystemError)."""
    import asyncio

    from django_htask.engine import RunGuard, SystemClock, registry
    from django_htask.node import execution
    from django_htask.node.execution import Call, aexecute
    from django_htask.signals import run_finished

    finished: list[object] = []

    def receiver(sender: object, **kwargs: object) -> None:
        finished.append(kwargs)

    run_finished.connect(receiver, weak=False)
    formatted: list[str] = []
    monkeypatch.setattr(execution.traceback, "format_exc", lambda: formatted.append("") or "")
    payload = registry.check_call(AWAITING, ("closed",), {})
    call = Call(payload, AWAITING, AWAITING, "n", 1, None, task_id=1)
    coro = aexecute(call, clock=SystemClock(), guard=RunGuard())
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(coro)
        loop.run_until_complete(asyncio.sleep(0.02))
        assert jobs.gate("closed")[0].is_set() and not task.done()
        with pytest.raises(GeneratorExit):  # as close() throws it in
            coro.throw(GeneratorExit)
        assert finished == []  # no run_finished: the call has no end of its own
        assert formatted == []
    finally:
        run_finished.disconnect(receiver)
        jobs.gate("closed")[1].set()
        task.cancel()
        loop.close()
