"""The node on the in-memory store and the fake clock: no database, no sleep."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from django_htask.conf import HtaskSettings
from django_htask.engine import FakeClock
from django_htask.node import Node
from django_htask.testing import InMemoryStore

from . import jobs

START = datetime(2030, 1, 1, tzinfo=UTC)
ADD = "tests.integration.testapp.tasks:add"
BOOM = "tests.integration.testapp.tasks:boom"
HOLD = "tests.unit.node.jobs:hold"
#: The ``TIMEOUT_GRACE`` of the nodes of ``start_node``.
GRACE = 5.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def store(clock: FakeClock) -> InMemoryStore:
    return InMemoryStore(clock)


@pytest.fixture
def calls() -> Iterator[Any]:
    from tests.integration.testapp import tasks

    tasks.calls.clear()
    yield tasks.calls
    tasks.calls.clear()


@pytest.fixture
def make_node(clock: FakeClock, store: InMemoryStore) -> Iterator[Callable[..., Node]]:
    """Start nodes on the shared store; every node is stopped at the end."""
    nodes: list[Node] = []

    def make(start: bool = True, **kwargs: Any) -> Node:
        kwargs.setdefault("workers", 2)
        kwargs.setdefault("node_id", f"node-{len(nodes) + 1}")
        node = Node(store=store, clock=clock, **kwargs)
        nodes.append(node)
        if start:
            node.start()
            clock.advance(0)
        return node

    yield make
    for node in nodes:
        node.stop(timeout=5)


# -- jobs that may hang (test_stopping.py, test_lane.py) ----------------------------------
def until(condition: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.005)


@pytest.fixture
def start_node(make_node: Callable[..., Node], clock: FakeClock) -> Iterator[Callable[..., Node]]:
    """A started node whose jobs may hang: time is moved without waiting for them. At
    the end every gate is opened, before the nodes stop, so no thread is left behind."""

    def start(workers: int = 1, **settings: Any) -> Node:
        settings.setdefault("timeout_grace", GRACE)
        node = make_node(start=False, workers=workers, settings=HtaskSettings(**settings))
        node.start()
        clock.advance(0, wait=False)
        return node

    jobs.ended.clear()
    yield start
    for _started, release in jobs.gates.values():
        release.set()


def started(name: str) -> None:
    assert jobs.gate(name)[0].wait(5), f"{name} never started"


def step(clock: FakeClock, node: Node, seconds: float, what: str, pending: int) -> None:
    """Move time on by ``seconds`` to the supervisor's next timer, then wait until it has
    run and left ``pending`` timers (its next step armed, or none)."""
    scheduler = node.parts.supervisor.scheduler
    fired = scheduler.stats()["fired"] + 1
    clock.advance(seconds, wait=False)

    def done() -> bool:
        stats = scheduler.stats()
        return stats["fired"] == fired and stats["pending"] == pending and scheduler.idle()

    until(done, what)


def task_runs(store: InMemoryStore, task_id: int) -> list[tuple[str, str]]:
    """The task's attempts: its runs, and its success from its row."""
    return [(r.status, r.error) for r in store.attempts_of(task_id)]
