"""The engine running inside the web process: a heartbeat every second."""

from __future__ import annotations

import logging
import threading

from django_htask.engine import Scheduler

logger = logging.getLogger("django_htask.example")


class Heartbeat:
    """Counts beats fired by an engine Scheduler started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scheduler: Scheduler | None = None
        self.beats = 0

    def _beat(self) -> None:
        self.beats += 1
        if self._scheduler is not None and not self._scheduler.closed:
            self._scheduler.call_later(1.0, self._beat)

    def start(self) -> Scheduler:
        with self._lock:
            if self._scheduler is None:
                self._scheduler = Scheduler(workers=2, name="example")
                self._scheduler.call_soon(self._beat)
                logger.info("engine started: a heartbeat every second")
            return self._scheduler


heartbeat = Heartbeat()


def beats() -> int:
    return heartbeat.beats


def stats() -> dict[str, int]:
    return heartbeat.start().stats()
