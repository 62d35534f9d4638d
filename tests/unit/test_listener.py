"""``Listener``: the thread that hears PostgreSQL's notices for a node, on a fake
connection (tests/cluster has PostgreSQL's): what it hands on, and the catch-up after a
connection lost and made again."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from django_htask.store.listen import Listener

LOST = object()


class FakeConnections:
    """Hands out connections that hear what is put in :attr:`feed` (:data:`LOST`: the
    connection breaks); ``refuse`` connections fail to open first."""

    def __init__(self, refuse: int = 0) -> None:
        self.feed: queue.Queue[Any] = queue.Queue()
        self.opened = 0
        self.refuse = refuse

    def connect(self) -> FakeConnections:
        if self.refuse:
            self.refuse -= 1
            raise OSError("connection refused")
        self.opened += 1
        return self

    def __enter__(self) -> FakeConnections:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

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


def listener(connections: FakeConnections) -> tuple[Listener, queue.Queue[str], threading.Event]:
    heard: queue.Queue[str] = queue.Queue()
    caught_up = threading.Event()
    started = Listener(
        connections.connect, heard.put, on_reconnect=caught_up.set, retry=0.01, retry_max=0.01
    )
    started.start()
    return started, heard, caught_up


def test_notices_are_handed_on_and_a_lost_connection_is_made_again_then_caught_up() -> None:
    connections = FakeConnections()
    thread, heard, caught_up = listener(connections)
    try:
        connections.feed.put("task")
        assert heard.get(timeout=10) == "task"
        assert not caught_up.is_set()  # the first connection: nothing missed yet
        connections.feed.put(LOST)  # notices sent meanwhile may be lost
        assert caught_up.wait(10)
        connections.feed.put("schedule")
        assert heard.get(timeout=10) == "schedule"
        assert connections.opened == 2
    finally:
        thread.stop()


def test_a_first_connection_that_fails_is_not_a_reconnection() -> None:
    connections = FakeConnections(refuse=2)
    thread, _heard, caught_up = listener(connections)
    try:
        assert thread.listening.wait(10)
        assert not caught_up.is_set()
    finally:
        thread.stop()
