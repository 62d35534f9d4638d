"""``EndWatchers``: how one listening connection per process wakes the callers of
``wait_result`` (the connection is a fake here: tests/integration/test_wait_result.py
has PostgreSQL's)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from django_htask.store import listen
from django_htask.store.listen import EndWatchers

LOST = object()


class FakeConnections:
    """Hands out connections that hear what is put in :attr:`feed` (:data:`LOST`: the
    connection breaks)."""

    def __init__(self) -> None:
        self.feed: queue.Queue[Any] = queue.Queue()
        self.opened = 0
        self.closed = threading.Event()

    def connect(self) -> FakeConnections:
        self.opened += 1
        self.closed.clear()
        return self

    def __enter__(self) -> FakeConnections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()

    def execute(self, statement: object) -> None:
        pass

    def notifies(self, timeout: float) -> Iterator[SimpleNamespace]:
        try:
            payload = self.feed.get(timeout=timeout)
        except queue.Empty:
            return
        if payload is LOST:
            raise OSError("connection lost")
        yield SimpleNamespace(payload=payload)


@pytest.fixture
def fake() -> FakeConnections:
    return FakeConnections()


def test_a_notice_wakes_the_waiters_of_its_token_only(fake: FakeConnections) -> None:
    watchers = EndWatchers(fake.connect)
    first, second, other = watchers.watch("a"), watchers.watch("a"), watchers.watch("b")
    assert first is not None and second is not None and other is not None
    fake.feed.put("a")
    assert first.wait(10) and second.wait(10)
    fake.feed.put("c")  # nobody waits for it; then b's, heard after c's
    fake.feed.put("b")
    assert other.wait(10)
    watchers.unwatch("a", first)
    first.clear()
    fake.feed.put("a")  # heard by the second only
    assert second.wait(10)
    assert not first.is_set()
    watchers.close()
    assert fake.opened == 1


def test_a_lost_connection_wakes_every_waiter_once_it_listens_again(
    fake: FakeConnections,
) -> None:
    watchers = EndWatchers(fake.connect)
    events = [watchers.watch(token) for token in ("a", "b")]
    fake.feed.put(LOST)  # notices sent meanwhile may be lost: each reads again
    assert all(event is not None and event.wait(10) for event in events)
    assert fake.opened == 2
    watchers.close()


def test_the_connection_closes_when_nobody_waits_and_opens_at_the_next_wait(
    fake: FakeConnections,
) -> None:
    watchers = EndWatchers(fake.connect, idle_close=0)
    event = watchers.watch("a")
    assert event is not None
    watchers.unwatch("a", event)
    assert fake.closed.wait(10)
    again = watchers.watch("b")
    assert again is not None and fake.opened == 2
    fake.feed.put("b")
    assert again.wait(10)
    watchers.close()


def test_a_listener_that_cannot_connect_leaves_the_waiter_to_read_at_intervals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listen, "LISTENING_WAIT", 0.05)

    def refused() -> Any:
        raise OSError("connection refused")

    watchers = EndWatchers(refused)
    assert watchers.watch("a") is None
    watchers.close()
