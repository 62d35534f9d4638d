"""Tasks composed, on a node: a task released by the end of the one it waits for is
claimed by the claim that writes that end (no poll, no wake-up), and a batch's
callback runs once its last member's end is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_htask.engine import FakeClock
from django_htask.enums import TaskStatus
from django_htask.node import Node
from django_htask.testing import InMemoryStore

from .conftest import ADD

MakeNode = Callable[..., Node]
CALLBACK = "tests.integration.testapp.tasks:batch_done"


def test_a_chain_runs_through_without_a_poll(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    first = store.add_task(ADD, 1)
    second = store.add_task(ADD, 2, after=[first])
    third = store.add_task(ADD, 0, bind={"b": second})
    make_node(workers=1, poll_interval=3600.0)
    for _ in range(20):  # the clock never moves: no poll, no timer
        if store.tasks[third].status == TaskStatus.SUCCEEDED:
            break
        clock.advance(0)
    assert [store.tasks[i].status for i in (first, second, third)] == ["succeeded"] * 3
    assert calls["add"] == [1, 2, 2]  # the third received the second's result


def test_a_batch_s_callback_runs_once_its_last_member_ended(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    batch = store.add_batch("pages", on_finish=CALLBACK)
    for n in range(3):
        store.add_task(ADD, n, batch=batch)
    make_node(workers=2, poll_interval=3600.0)
    for _ in range(20):
        if calls["batch_done:"]:
            break
        clock.advance(0)
    [state] = calls["batch_done:"]
    assert (state.id, state.name, state.total, state.succeeded) == (batch, "pages", 3, 3)
