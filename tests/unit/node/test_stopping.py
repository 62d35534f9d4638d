"""Timeouts and aborts on the in-memory store and the fake clock (docs/timeouts.md).

Time moves only by ``clock.advance``; a job that does not end by itself keeps the
workers busy, so time is moved without waiting (``wait=False``) and each step waits,
boundedly, for what it must have done before the next one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_htask.engine import FakeClock
from django_htask.enums import TaskStatus
from django_htask.node import Node
from django_htask.node.supervisor import ABORTED, FORCE_WAIT
from django_htask.testing import InMemoryStore

from . import jobs
from .conftest import ADD, GRACE, started, step, task_runs, until

MakeNode = Callable[..., Node]
SPIN = "tests.unit.node.jobs:spin"
COOPERATIVE = "tests.unit.node.jobs:cooperative"
BLOCKED = "tests.unit.node.jobs:blocked"
SWALLOW = "tests.unit.node.jobs:swallow"
AWAITING = "tests.unit.node.jobs:awaiting"
ADOUBLE = "tests.integration.testapp.tasks:adouble"
TIMED_OUT = "TimedOut: the run took longer than its timeout of 2s"


def test_a_task_past_its_timeout_is_interrupted_after_the_grace(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    tid = store.add_task(SPIN, "spin", timeout=2.0)
    node = start_node()
    started("spin")
    step(clock, node, 2, "the timeout asks the job to stop", pending=1)
    assert "spin" not in jobs.ended  # it ignores its token: still running
    assert store.tasks[tid].status == TaskStatus.RUNNING
    step(clock, node, GRACE, "the grace passes: interrupted", pending=1)
    until(lambda: task_runs(store, tid), "the run recorded")
    assert jobs.ended["spin"] == "ForcedStop"
    assert task_runs(store, tid) == [("failed", TIMED_OUT)]
    assert "ForcedStop" in store.runs_of(task_id=tid)[0].traceback  # where it was stopped
    until(lambda: store.tasks[tid].status == TaskStatus.FAILED, "the task failed")
    assert node.parts.supervisor.given_up == 0


def test_a_cooperative_task_stops_at_the_timeout_without_force(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    tid = store.add_task(COOPERATIVE, "coop", timeout=2.0, max_attempts=2)
    node = start_node()
    started("coop")
    step(clock, node, 2, "the timeout cancels the token", pending=1)
    until(lambda: task_runs(store, tid), "the run recorded")
    assert jobs.ended["coop"] == "token"
    assert task_runs(store, tid) == [("failed", TIMED_OUT)]
    until(lambda: store.tasks[tid].status == TaskStatus.PENDING, "retried by its policy")
    assert store.tasks[tid].run_at > clock.now()


def test_an_async_task_is_cancelled_at_its_await_and_its_worker_s_next_call_runs(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    """The timeout cancels an async task where it awaits, without force. The loop it
    ran on is dropped with the call that raised; the worker's next async call gets a
    new one."""
    tid = store.add_task(AWAITING, "async", timeout=2.0)
    node = start_node()
    started("async")
    step(clock, node, 2, "the timeout cancels the token", pending=1)
    until(lambda: task_runs(store, tid), "the run recorded")
    assert jobs.ended["async"] == "cancelled"
    assert task_runs(store, tid) == [("failed", TIMED_OUT)]
    assert node.parts.supervisor.given_up == 0
    after = store.add_task(ADOUBLE, 21)
    clock.advance(0, wait=False)
    until(lambda: store.tasks[after].status == TaskStatus.SUCCEEDED, "the next call ran")


def test_a_task_under_its_timeout_succeeds(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    tid = store.add_task(ADD, 3, timeout=2.0)
    node = make_node(workers=1)
    clock.advance(5)
    assert task_runs(store, tid) == [("succeeded", "")]
    assert len(node.parts.supervisor.scheduler) == 0  # the timer went with the run


def test_the_default_timeout_applies_to_tasks_without_one(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    tid = store.add_task(COOPERATIVE, "default")
    node = start_node(default_timeout=2.0)
    started("default")
    step(clock, node, 2, "the default timeout cancels the token", pending=1)
    until(lambda: task_runs(store, tid), "the run recorded")
    assert task_runs(store, tid) == [("failed", TIMED_OUT)]


@pytest.mark.parametrize(("job", "how"), [(BLOCKED, "released"), (SWALLOW, "swallowed")])
def test_a_thread_that_does_not_stop_is_given_up_and_replaced(
    start_node: Callable[..., Node],
    clock: FakeClock,
    store: InMemoryStore,
    calls: Any,
    job: str,
    how: str,
) -> None:
    name = f"stuck-{how}"
    tid = store.add_task(job, name, timeout=2.0, max_attempts=2)
    after = store.add_task(ADD, 7)  # queued behind it, one worker
    node = start_node()
    started(name)
    assert calls["add"] == []
    step(clock, node, 2, "the timeout", pending=1)
    step(clock, node, GRACE, "the forced stop", pending=1)
    step(clock, node, FORCE_WAIT, "giving the thread up", pending=0)
    until(lambda: calls["add"] == [7], "the task behind it runs on the new worker")
    until(lambda: task_runs(store, after) == [("succeeded", "")], "its run recorded")
    [(status, error)] = task_runs(store, tid)
    assert status == "failed"
    assert error == (
        f"{TIMED_OUT}; it did not stop when forced, and its worker thread was given up"
    )
    until(lambda: store.tasks[tid].status == TaskStatus.PENDING, "retried by its policy")
    assert node.parts.supervisor.given_up == 1
    assert node.parts.ctx.jobs.abandoned_workers() == 1
    assert node.exit_status == 0
    jobs.gate(name)[1].set()  # it returns at last: its outcome is not recorded again
    until(lambda: node.parts.ctx.jobs.abandoned_workers() == 0, "the thread ended")
    assert jobs.ended[name].startswith(how)
    assert len(store.runs_of(task_id=tid)) == 1


def test_the_heartbeat_publishes_the_stuck_threads_until_they_return(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    store.add_task(BLOCKED, "published", timeout=2.0)
    node = start_node()
    beat = node.settings.heartbeat_interval
    started("published")
    assert store.nodes[node.node_id].stuck_threads == 0
    step(clock, node, 2, "the timeout", pending=1)
    step(clock, node, GRACE, "the forced stop", pending=1)
    step(clock, node, FORCE_WAIT, "giving the thread up", pending=0)
    assert store.nodes[node.node_id].stuck_threads == 0  # not before the next beat
    clock.advance(beat - 2 - GRACE - FORCE_WAIT, wait=False)
    until(lambda: store.nodes[node.node_id].stuck_threads == 1, "the beat writes 1")
    jobs.gate("published")[1].set()  # it returns at last
    until(lambda: node.parts.ctx.jobs.abandoned_workers() == 0, "the thread ended")
    clock.advance(beat, wait=False)
    until(lambda: store.nodes[node.node_id].stuck_threads == 0, "the beat writes 0")


def test_too_many_stuck_threads_stop_the_node_with_status_4(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    store.add_task(BLOCKED, "too-many", timeout=2.0)
    node = start_node(max_abandoned_threads=0)
    started("too-many")
    step(clock, node, 2, "the timeout", pending=1)
    step(clock, node, GRACE, "the forced stop", pending=1)
    step(clock, node, FORCE_WAIT, "giving the thread up", pending=0)
    until(lambda: node.stop_requested, "the node asks to stop")
    assert node.exit_status == 4
    node.stop()
    assert node.done == "1 worker thread is stuck (more than MAX_ABANDONED_THREADS)"


def test_the_stuck_threads_said_at_the_stop_count_those_given_up_while_it_stops(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    """The node stops at the first thread past the limit, and the supervisor goes on
    timing out the calls it waits for: the count said at the end is the last one."""
    store.add_task(BLOCKED, "first", timeout=2.0)
    store.add_task(BLOCKED, "second", timeout=4.0)
    node = start_node(workers=2, max_abandoned_threads=0)
    started("first")
    started("second")
    step(clock, node, 2, "the first's timeout", pending=2)
    step(clock, node, 2, "the second's timeout", pending=2)
    step(clock, node, GRACE - 2, "the first forced", pending=2)
    step(clock, node, FORCE_WAIT, "the first given up", pending=1)
    until(lambda: node.stop_requested, "the node asks to stop")
    stopping = threading.Thread(target=node.stop)
    stopping.start()
    until(lambda: node.stopping, "the node stops, waiting for the second")
    step(clock, node, 2 - FORCE_WAIT, "the second forced", pending=1)
    step(clock, node, FORCE_WAIT, "the second given up", pending=0)
    stopping.join(5)  # not SHUTDOWN_TIMEOUT: the thread given up is not waited for
    assert not stopping.is_alive()
    assert node.done == "2 worker threads are stuck (more than MAX_ABANDONED_THREADS)"


def test_a_thread_given_up_while_the_node_stops_is_recorded_as_timed_out_not_interrupted(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    """The stopping node waits for the pool, then takes the results and hands back what
    still runs. A thread given up leaves the pool at once: its run must be recorded
    before, else the stop, looking right then, finds it still running. Here the pool's
    replacement waits until the stop has looked."""
    tid = store.add_task(BLOCKED, "given-up-at-stop", timeout=2.0, max_attempts=2)
    node = start_node(workers=2)
    ctx = node.parts.ctx
    looked = threading.Event()
    take, replace = ctx.results.take, ctx.jobs.replace_worker

    def take_and_say() -> Any:
        taken = take()
        if threading.current_thread() is stopping:
            looked.set()
        return taken

    def replace_then_wait(thread: threading.Thread) -> bool:
        replaced = replace(thread)
        looked.wait(5)
        return replaced

    stopping = threading.Thread(target=node.stop)
    ctx.results.take = take_and_say  # type: ignore[method-assign]
    ctx.jobs.replace_worker = replace_then_wait  # type: ignore[method-assign]
    started("given-up-at-stop")
    step(clock, node, 2, "the timeout", pending=1)
    step(clock, node, GRACE, "the forced stop", pending=1)
    stopping.start()
    until(lambda: node.stopping, "the node stops, waiting for the task")
    step(clock, node, FORCE_WAIT, "giving the thread up", pending=0)
    stopping.join(5)
    assert not stopping.is_alive()
    assert task_runs(store, tid) == [
        ("failed", f"{TIMED_OUT}; it did not stop when forced, and its worker thread was given up")
    ]
    assert store.tasks[tid].status == TaskStatus.PENDING  # its retry, by its policy
    assert node.unfinished == 0


def test_an_abort_stops_a_running_task_and_it_is_not_retried(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    tid = store.add_task(COOPERATIVE, "abort-me", max_attempts=3)
    start_node()
    started("abort-me")
    assert store.request_abort(task_id=tid)  # the store notifies: the node looks at once
    until(lambda: task_runs(store, tid), "the run recorded")
    assert task_runs(store, tid) == [("failed", ABORTED)]
    until(lambda: store.tasks[tid].status == TaskStatus.FAILED, "failed, not retried")
    assert jobs.ended["abort-me"] == "token"  # it stopped by itself: no force


def test_an_abort_forces_a_task_that_ignores_it_after_the_grace(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    tid = store.add_task(SPIN, "abort-spin")
    node = start_node()
    started("abort-spin")
    assert store.request_abort(task_id=tid)
    scheduler = node.parts.supervisor.scheduler
    until(lambda: len(scheduler) == 1, "the forced step armed")
    step(clock, node, GRACE, "the forced stop", pending=1)
    until(lambda: task_runs(store, tid), "the run recorded")
    assert task_runs(store, tid) == [("failed", ABORTED)]
    assert jobs.ended["abort-spin"] == "ForcedStop"


def test_an_abort_of_a_schedule_run_and_the_next_occurrence_still_fires(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    sid = store.add_schedule(
        "hang", COOPERATIVE, "@every 1m", args=("sched",), max_attempts=3, overlap="skip"
    )
    start_node()
    clock.advance(60, wait=False)
    started("sched")
    [run_id] = [i for i, r in store.runs.items() if r.schedule_id == sid]
    assert store.request_abort(run_id=run_id)
    until(lambda: store.runs[run_id].status == "failed", "the run recorded")
    assert store.runs[run_id].error == ABORTED
    assert [r.status for r in store.runs_of(schedule_id=sid)] == ["failed"]  # no retry
    jobs.gates.pop("sched")
    clock.advance(60, wait=False)
    started("sched")  # overlap=skip: the next occurrence was not skipped


def test_a_schedule_timeout_frees_its_overlap_for_the_next_occurrence(
    start_node: Callable[..., Node], clock: FakeClock, store: InMemoryStore
) -> None:
    sid = store.add_schedule("slow", COOPERATIVE, "@every 1m", args=("slow",), timeout=2.0)
    node = start_node()
    clock.advance(60, wait=False)
    started("slow")
    step(clock, node, 2, "the timeout", pending=1)
    until(lambda: store.runs_of(schedule_id=sid)[0].status == "failed", "recorded")
    assert store.runs_of(schedule_id=sid)[0].error == TIMED_OUT
    jobs.gates.pop("slow")
    clock.advance(58, wait=False)
    started("slow")
    statuses = [r.status for r in store.runs_of(schedule_id=sid)]
    assert statuses == ["failed", "running"]
    assert store.schedules[sid].next_run_at == clock.now() + timedelta(minutes=1)
