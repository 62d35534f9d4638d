"""LISTEN on PostgreSQL: a thread with a connection of its own that hears the
notifications the store's triggers send (see :mod:`django_htask.store.postgres`), for
a node (:class:`Listener`) or for the callers of ``wait_result`` in a process
(:class:`EndWatchers`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from django_htask.db import scheduler_alias
from django_htask.retry import Backoff, RetryPolicy

__all__ = ["CHANNEL", "ENDED", "EndWatchers", "Listener", "connection_params"]

logger = logging.getLogger(__name__)

#: The LISTEN/NOTIFY channel; payloads are ``schedule``, ``task``, ``node`` and ``queue``.
CHANNEL = "django_htask"
#: The channel a task that someone waits for announces its end on; payload: its token.
ENDED = "django_htask_ended"
#: How long a wait for a task's end gives the listener to be listening before it
#: reads the task's row at intervals instead.
LISTENING_WAIT = 5.0
#: Seconds without a waiter after which the listener of :class:`EndWatchers` closes its
#: connection (the next wait opens one again).
IDLE_CLOSE = 60.0


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


class EndWatchers:
    """Who waits in this process for the end of which task, woken by one
    :class:`Listener` on :data:`ENDED` (one more connection to the database), started
    at the first wait and closed :data:`IDLE_CLOSE` seconds after the last."""

    def __init__(self, connect: Callable[[], Any], idle_close: float = IDLE_CLOSE) -> None:
        self._connect = connect
        self._idle_close = idle_close
        self._lock = threading.Lock()
        self._watching: dict[str, set[threading.Event]] = {}
        self._listener: Listener | None = None
        self._idle: threading.Timer | None = None

    def watch(self, token: str) -> threading.Event | None:
        """An event set when the task ``token`` ends (or when notices may have been
        lost, so the waiter reads again); None if the listener is not listening within
        :data:`LISTENING_WAIT` (the caller polls). Hand it back to :meth:`unwatch`."""
        event = threading.Event()
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            if self._listener is None or not self._listener.is_alive():
                self._listener = Listener(
                    self._connect,
                    self._heard,
                    channel=ENDED,
                    on_reconnect=self._wake_all,
                    name="htask-ends",
                )
                self._listener.start()
            listener = self._listener
            self._watching.setdefault(token, set()).add(event)
        if not listener.listening.wait(LISTENING_WAIT):
            self.unwatch(token, event)
            return None
        return event

    def unwatch(self, token: str, event: threading.Event) -> None:
        with self._lock:
            events = self._watching.get(token, set())
            events.discard(event)
            if not events:
                self._watching.pop(token, None)
            if not self._watching and self._listener is not None and self._idle is None:
                self._idle = threading.Timer(self._idle_close, self._close_if_idle)
                self._idle.daemon = True
                self._idle.start()

    def _close_if_idle(self) -> None:
        with self._lock:
            if self._watching or self._idle is None:
                return  # a wait began meanwhile
            self._idle = None
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def close(self) -> None:
        """Stop listening now (waits in progress read the task at intervals)."""
        with self._lock:
            if self._idle is not None:
                self._idle.cancel()
                self._idle = None
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def _heard(self, token: str) -> None:
        with self._lock:
            events = list(self._watching.get(token, ()))
        for event in events:
            event.set()

    def _wake_all(self) -> None:
        with self._lock:
            events = [event for events in self._watching.values() for event in events]
        for event in events:
            event.set()


def connection_params(using: str | None = None) -> dict[str, Any]:
    """``psycopg.connect`` arguments for a plain connection to the database ``using``
    (default: the scheduler's; Django's, without its cursor class and adapters)."""
    params: dict[str, Any] = dict(connections[using or scheduler_alias()].get_connection_params())
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return params
