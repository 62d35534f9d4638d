"""Limits per key and rate limits under a node, on the in-memory store and the fake
clock: a task held back by its rate limit starts when the window has room, woken by
the node's own timer (its poll is an hour away), and no claim spins meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_htask.engine import FakeClock
from django_htask.node import Node
from django_htask.testing import InMemoryStore

from .conftest import ADD, START

MakeNode = Callable[..., Node]


def started(store: InMemoryStore) -> list[tuple[str | None, Any]]:
    """Each start counted by a rate limit, by flow (the slots)."""
    return sorted((flow, at - START) for flow, at, _expires in store.slots)


def test_a_rate_limited_flow_starts_as_its_window_has_room_by_the_node_s_timer(
    make_node: MakeNode,
    clock: FakeClock,
    store: InMemoryStore,
    calls: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = [
        store.add_task(ADD, n, rate_limit=2, rate_period=10, per_key="a", run_at=START)
        for n in range(5)
    ]
    node = make_node(workers=4, poll_interval=3600.0)
    assert calls["add"] == [0, 1]
    assert node.next_task_wake() == START + timedelta(seconds=10)
    claims: list[object] = []
    claim = store.start_tasks
    monkeypatch.setattr(store, "start_tasks", lambda *a, **k: claims.append(a) or claim(*a, **k))
    clock.advance(9.9)
    assert (calls["add"], claims) == ([0, 1], [])  # no start, and no claim meanwhile
    clock.advance(0.1)
    assert calls["add"] == [0, 1, 2, 3]
    assert node.next_task_wake() == START + timedelta(seconds=20)
    clock.advance(10)
    assert calls["add"] == [0, 1, 2, 3, 4]
    assert [store.tasks[i].status for i in ids] == ["succeeded"] * 5
    assert node.next_task_wake() is None
    assert [at for _flow, at in started(store)] == [timedelta(seconds=20)]  # the others expired


def test_a_key_s_tasks_run_at_most_max_running_at_once_and_the_next_starts_at_an_end(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    for n in range(4):
        store.add_task(ADD, n, max_running=1, per_key="a", run_at=START)
    store.add_task(ADD, 9, max_running=1, per_key="b", run_at=START)
    make_node(workers=4, poll_interval=3600.0)
    clock.advance(0)
    assert sorted(calls["add"]) == [0, 1, 2, 3, 9]  # each end let the next start
