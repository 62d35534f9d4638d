"""LISTEN on PostgreSQL: a thread with a connection of its own that hears the
notifications the store's triggers send (see :mod:`django_htask.store.postgres`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from django_htask.db import scheduler_alias
from django_htask.retry import Backoff, RetryPolicy

__all__ = ["CHANNEL", "ENDED", "Listener", "connection_params"]

logger = logging.getLogger(__name__)

#: The LISTEN/NOTIFY channel; payloads are ``schedule``, ``task``, ``node`` and ``queue``.
CHANNEL = "django_htask"
#: The channel a task that someone waits for announces its end on; payload: its token.
ENDED = "django_htask_ended"


class Listener(threading.Thread):
    """A daemon thread that LISTENs on ``channel`` and calls ``on_notify(payload)``.

    ``connect`` returns a new psycopg connection (autocommit). On any error the
    connection is dropped and opened again after ``retry`` seconds (doubled up to
    ``retry_max``); ``on_reconnect`` runs after each reconnection."""

    def __init__(
        self,
        connect: Callable[[], Any],
        on_notify: Callable[[str], None],
        *,
        channel: str = CHANNEL,
        on_reconnect: Callable[[], None] | None = None,
        retry: float = 0.5,
        retry_max: float = 30.0,
        name: str = "htask-listener",
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._connect = connect
        self._on_notify = on_notify
        self._on_reconnect = on_reconnect
        self.channel = channel
        self._retry = retry
        self._retry_max = retry_max
        self._stop_event = threading.Event()
        self.listening = threading.Event()
        self.received = 0
        #: Connections that came to listen: from the second on, notices may have been
        #: lost in between (``on_reconnect``).
        self.connections = 0

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        backoff = Backoff(RetryPolicy(self._retry, self._retry_max))
        delay = 0.0
        while not self._stop_event.is_set():
            if delay:
                self._stop_event.wait(delay)
                if self._stop_event.is_set():
                    return
            try:
                self._listen()
            except Exception as exc:  # any driver error: reconnect
                self.listening.clear()
                delay = backoff.failed()
                logger.warning(
                    "LISTEN connection lost (%s: %s), reconnecting in %.1fs",
                    type(exc).__name__,
                    exc,
                    delay,
                    extra={"action": "listen_lost"},
                )
            else:
                return

    def _listen(self) -> None:
        from psycopg import sql  # noqa: PLC0415

        with self._connect() as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            self.listening.set()
            self.connections += 1
            logger.debug("listening on %s", self.channel, extra={"action": "listening"})
            if self.connections > 1 and self._on_reconnect is not None:
                logger.info("LISTEN connection back", extra={"action": "listen_back"})
                self._on_reconnect()
            while not self._stop_event.is_set():
                # a short wait: stop() (a node's SIGTERM) is seen within 0.1 s
                for notify in conn.notifies(timeout=0.1):
                    self.received += 1
                    self._on_notify(notify.payload)
                    if self._stop_event.is_set():
                        break


def connection_params(using: str | None = None) -> dict[str, Any]:
    """``psycopg.connect`` arguments for a plain connection to the database ``using``
    (default: the scheduler's; Django's, without its cursor class and adapters)."""
    params: dict[str, Any] = dict(connections[using or scheduler_alias()].get_connection_params())
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return params
