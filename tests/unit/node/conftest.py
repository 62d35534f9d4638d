"""The node on the in-memory store and the fake clock: no database, no sleep."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from django_htask.engine import FakeClock
from django_htask.node import Node
from django_htask.testing import InMemoryStore

START = datetime(2030, 1, 1, tzinfo=UTC)
ADD = "tests.integration.testapp.tasks:add"
BOOM = "tests.integration.testapp.tasks:boom"
HOLD = "tests.unit.node.jobs:hold"


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
