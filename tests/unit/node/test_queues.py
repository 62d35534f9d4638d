"""Queues paused, resumed and limited while nodes run, on the in-memory store (which
tells its listeners ``queue`` as PostgreSQL's trigger does) and the fake clock."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_htask.engine import FakeClock
from django_htask.enums import TaskStatus
from django_htask.node import Node
from django_htask.queues import QueueStates
from django_htask.testing import InMemoryStore
from tests.integration.test_node import wait_for

from . import jobs
from .conftest import ADD, HOLD, START

MakeNode = Callable[..., Node]


def statuses(store: InMemoryStore, ids: list[int]) -> list[str]:
    return [store.tasks[i].status for i in ids]


def test_a_paused_queue_s_tasks_wait_the_others_run_and_all_run_once_resumed(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    nodes = [make_node(poll_interval=3600.0) for _ in range(3)]
    store.set_queue("slow", paused=True)
    clock.advance(0)  # heard at once: no poll
    assert all(node.queue_states.paused == {"slow"} for node in nodes)
    slow = [store.add_task(ADD, n, queue_name="slow") for n in range(3)]
    other = store.add_task(ADD, 7)
    clock.advance(1)
    assert statuses(store, [other, *slow]) == ["succeeded"] + ["pending"] * 3
    assert all(node.next_task_wake() is None for node in nodes)  # nothing to spin on
    store.set_queue("slow", paused=False)
    clock.advance(0)
    assert statuses(store, slow) == ["succeeded"] * 3
    assert sorted(calls["add"]) == [0, 1, 2, 7]


def test_tasks_running_when_their_queue_is_paused_finish(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    first, second = (store.add_task(HOLD, f"pause-{n}", queue_name="q") for n in (1, 2))
    make_node(workers=1, start=False, poll_interval=3600.0).start()
    clock.advance(0, wait=False)
    assert jobs.gate("pause-1")[0].wait(5)
    store.set_queue("q", paused=True)
    jobs.gate("pause-1")[1].set()
    jobs.gate("pause-2")[1].set()
    clock.advance(0)
    assert statuses(store, [first, second]) == [TaskStatus.SUCCEEDED, TaskStatus.PENDING]


def test_a_node_started_while_a_queue_is_paused_starts_paused(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    store.set_queue("slow", paused=True)
    store.set_queue("reports", max_running=2)
    sid = store.add_schedule("s", ADD, "@every 1m", args=(1,), queue_name="slow")
    task = store.add_task(ADD, 1, queue_name="slow")
    node = make_node()
    assert node.queue_states == QueueStates(frozenset({"slow"}), (("reports", 2),))
    assert node.placed_schedules() == {}
    clock.advance(120)
    assert statuses(store, [task]) == ["pending"]
    assert store.runs_of(schedule_id=sid) == []


@pytest.mark.parametrize(
    ("catch_up", "grace", "recorded"),
    [
        ("latest", None, ["skipped"] * 4 + ["succeeded"]),
        ("all", None, ["succeeded"] * 5),
        ("all", 90.0, ["missed"] * 3 + ["succeeded"] * 2),
        ("skip", None, ["missed"] * 5),
    ],
)
def test_a_paused_schedule_s_occurrences_are_run_or_recorded_missed_at_resume(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    catch_up: str,
    grace: float | None,
    recorded: list[str],
) -> None:
    sid = store.add_schedule(
        "s", ADD, "@every 1m", args=(1,), queue_name="q", catch_up=catch_up, grace=grace,
        overlap="allow",
    )  # fmt: skip
    first = store.schedules[sid].next_run_at
    assert first is not None
    make_node(workers=5)
    store.set_queue("q", paused=True)
    clock.advance(0)
    clock.advance(5 * 60 + 30)  # five occurrences due while paused
    assert store.runs_of(schedule_id=sid) == []
    assert store.schedules[sid].next_run_at == first  # it stays where it was
    store.set_queue("q", paused=False)
    clock.advance(0)
    rows = sorted(store.runs_of(schedule_id=sid), key=lambda r: r.scheduled_for or START)
    assert [r.scheduled_for for r in rows] == [first + timedelta(minutes=i) for i in range(5)]
    assert [r.status for r in rows] == recorded  # each run, or recorded as not run
    assert store.schedules[sid].next_run_at == first + timedelta(minutes=5)


def test_a_queue_limit_holds_across_nodes_and_a_new_limit_is_heard(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore
) -> None:
    jobs.running.update(now=0, most=0)
    store.set_queue("q", max_running=1)
    ids = [store.add_task(HOLD, "limit", queue_name="q") for _ in range(4)]
    for _ in range(2):
        make_node(workers=2, start=False, poll_interval=3600.0).start()
    clock.advance(0, wait=False)
    assert jobs.gate("limit")[0].wait(5)
    assert sorted(statuses(store, ids)) == ["pending"] * 3 + ["running"]
    store.set_queue("q", max_running=3)
    wait_for(lambda: statuses(store, ids).count("running") == 3)
    assert statuses(store, ids).count("running") == 3  # not 4: two nodes, four workers
    jobs.gate("limit")[1].set()
    clock.advance(0)
    assert statuses(store, ids) == ["succeeded"] * 4
    assert jobs.running["most"] == 3


def test_each_node_logs_what_it_heard(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    node = make_node()
    caplog.set_level(logging.INFO, logger="django_htask.node.queues")
    store.set_queue("a", paused=True, max_running=2)
    clock.advance(0)
    store.set_queue("a", paused=False, max_running=None)
    clock.advance(0)
    heard = [
        (r.action, r.getMessage())  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "django_htask.node.queues"
    ]
    assert heard == [
        ("queue_paused", f"node {node.node_id}: queue a paused: none of its tasks starts, "
         "none of its schedules fires until it is resumed"),
        ("queue_limited", f"node {node.node_id}: queue a limited to 2 tasks running at once"),
        ("queue_resumed", f"node {node.node_id}: queue a resumed"),
        ("queue_limited", f"node {node.node_id}: queue a no longer limited"),
    ]  # fmt: skip
