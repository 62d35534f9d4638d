"""Functions the integration tests schedule (found by autodiscovery)."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import datetime

from django_htask import periodic, task

#: What ran: function name -> list of arguments.
calls: dict[str, list[object]] = defaultdict(list)
lock = threading.Lock()
#: Set by tests to block ``slow`` until released.
gate = threading.Event()


def record(name: str, value: object) -> None:
    with lock:
        calls[name].append(value)


@task
def add(a: int, b: int = 0) -> int:
    record("add", a + b)
    return a + b


@task
def when(at: datetime) -> None:
    record("when", at)


@task
def boom(message: str = "boom") -> None:
    record("boom", message)
    raise RuntimeError(message)


@task
def slow(label: str = "") -> None:
    record("slow-start", label)
    gate.wait(30)
    record("slow-end", label)


@task(name="custom.name")
def renamed() -> None:
    record("renamed", None)


@periodic("@every 1m", name="testapp-minutely")
def minutely() -> None:
    record("minutely", None)
