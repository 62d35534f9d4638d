"""Fixtures for the multi-node tests on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


def connect(autocommit: bool = True) -> Any:
    """A new psycopg connection to the test database (another client of the server)."""
    import psycopg

    from django_htask.store.listen import connection_params

    return psycopg.connect(**connection_params(), autocommit=autocommit)


@pytest.fixture
def other_client() -> Iterator[Callable[..., Any]]:
    """Open psycopg connections of another client; all closed at the end."""
    opened: list[Any] = []

    def open_(autocommit: bool = True) -> Any:
        conn = connect(autocommit)
        opened.append(conn)
        return conn

    yield open_
    for conn in opened:
        conn.close()


@pytest.fixture
def listen(other_client: Callable[..., Any]) -> Callable[[float], list[str]]:
    """LISTEN on the store's channel; ``listen(timeout)`` returns the payloads received
    so far (waiting up to ``timeout`` seconds for the first one)."""
    from django_htask.store.postgres import CHANNEL

    conn = other_client()
    conn.execute(f"LISTEN {CHANNEL}")

    def received(timeout: float = 0.5) -> list[str]:
        payloads = [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
        payloads += [n.payload for n in conn.notifies(timeout=0.05)]
        return payloads

    return received
