"""Several ``runscheduler`` nodes on one PostgreSQL database.

A :class:`~django_htask.node.Node` whose store is a
:class:`~django_htask.store.postgres.PostgresStore` gets a :class:`Cluster` (see
:func:`attach`), which adds two things:

Listening
    a :class:`Listener` thread holds its own psycopg connection, ``LISTEN`` s on the
    store's channel, and wakes the node (:meth:`Node.wake`) when a schedule or a task
    changes in any process; the node's slow poll stays as the safety net for a lost
    notification. When the connection drops (a database restart), it reconnects with
    backoff and wakes the node once more, since notifications sent meanwhile are lost.
Partitioning
    each node holds only its share of the schedules: a schedule belongs to the live node
    with the highest rendezvous hash of (node id, schedule id), so a node joining or
    leaving moves only the schedules that hash to it. Membership is re-read at every
    heartbeat and when a node joins or stops (a notification). Nodes may see a change
    at slightly different moments, so a node keeps the schedules it gives away for one
    more heartbeat: a schedule is briefly held by two nodes (the compare-and-set on
    ``next_run_at`` lets one of them fire each occurrence) and never by none.
Standing by
    the member with the second highest hash is the schedule's standby: it holds the
    schedule too, with its timer ``STANDBY_DELAY`` seconds after each occurrence. An
    occurrence the owner has not claimed by then is fired by the standby (the
    compare-and-set still lets only one fire it), and from then on the standby fires
    every schedule it stands by for that owner at its time, until the owner's heartbeat
    is seen to move again. So a node that dies leaves its schedules quiet for about
    ``STANDBY_DELAY`` seconds, not ``NODE_TIMEOUT``; when it is declared dead its
    standby becomes the owner (the next member in the hash order), with nothing to move.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections

from .partition import Partition
from .queues import DEFAULT_QUEUE, QueueFilter
from .store.postgres import CHANNEL, PostgresStore

if TYPE_CHECKING:
    from .node import Node

__all__ = ["Cluster", "Listener", "Partition", "attach", "connection_params", "wait_listening"]
# Partition lives in django_htask.partition (pure); it is re-exported here.

logger = logging.getLogger("django_htask.cluster")


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

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        delay = 0.0
        first = True
        while not self._stop_event.is_set():
            if delay:
                self._stop_event.wait(delay)
                if self._stop_event.is_set():
                    return
            try:
                self._listen(first)
                first = False
            except Exception as exc:  # any driver error: reconnect
                self.listening.clear()
                delay = self._retry if not delay else min(delay * 2, self._retry_max)
                logger.warning(
                    "LISTEN connection lost (%s: %s), reconnecting in %.1fs",
                    type(exc).__name__,
                    exc,
                    delay,
                    extra={"action": "listen_lost"},
                )
            else:
                return

    def _listen(self, first: bool) -> None:
        from psycopg import sql  # noqa: PLC0415

        with self._connect() as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            self.listening.set()
            logger.debug("listening on %s", self.channel, extra={"action": "listening"})
            if not first and self._on_reconnect is not None:
                logger.info("LISTEN connection back", extra={"action": "listen_back"})
                self._on_reconnect()
            while not self._stop_event.is_set():
                for notify in conn.notifies(timeout=0.5):
                    self.received += 1
                    self._on_notify(notify.payload)
                    if self._stop_event.is_set():
                        break


class Cluster:
    """The multi-node part of a node (see the module): a listener and a partition."""

    def __init__(self, node: Node, store: PostgresStore) -> None:
        self.node = node
        self.store = store
        self._lock = threading.Lock()
        self._queues: QueueFilter = node.serving.schedules
        self._partition = Partition(node.node_id, [], self._queues)
        self._previous = self._partition
        self._listener: Listener | None = None
        self._refresh_queued = False
        self._load_owed = False  # a rebalance whose full read of the schedules failed
        #: Owners suspected of being gone: id -> when this node began to stand in.
        self._suspected: dict[str, datetime] = {}

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> None:
        """Read the live nodes and start listening (call after registering the node)."""
        self._partition = self._previous = self._partition_of(self._live())
        params = self._connection_params()
        s = self.node.settings

        def connect() -> Any:
            import psycopg  # noqa: PLC0415

            return psycopg.connect(**params, autocommit=True)

        self._listener = Listener(
            connect,
            self._on_notify,
            on_reconnect=self._on_reconnect,
            retry=s.db_retry,
            retry_max=s.db_retry_max,
            name=f"{self.node.node_id}-listener",
        )
        self._listener.start()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.stop()

    @property
    def listener(self) -> Listener | None:
        return self._listener

    def _connection_params(self) -> dict[str, Any]:
        return connection_params(self.store.using)

    # -- notifications (listener thread) ---------------------------------------------
    def _on_notify(self, payload: str) -> None:
        if payload == "node":
            self.queue_refresh()
        else:
            self.node.wake()

    def _on_reconnect(self) -> None:
        self.node.wake()
        self.queue_refresh()

    def queue_refresh(self) -> None:
        """Re-read the members soon, on the node's control thread."""
        with self._lock:
            if self._refresh_queued:
                return
            self._refresh_queued = True
        self.node._control_later(0, self._queued_refresh)

    def _queued_refresh(self) -> None:
        with self._lock:
            self._refresh_queued = False
        try:
            self.refresh(self.node.clock.now())
        except DatabaseError as exc:
            logger.warning(
                "could not read the live nodes: %s", exc, extra={"action": "members_failed"}
            )
            with contextlib.suppress(DatabaseError):
                self.store.close()  # a broken connection: the next query opens another

    # -- partition (control thread) --------------------------------------------------
    @property
    def members(self) -> tuple[str, ...]:
        return self._partition.members

    def owns(self, schedule_id: int, queue: str = DEFAULT_QUEUE) -> bool:
        """Whether this node owns the schedule, or is handing it over."""
        return self._partition.owns(schedule_id, queue) or self._previous.owns(schedule_id, queue)

    def holding(self, schedule_id: int, queue: str = DEFAULT_QUEUE) -> str | None:
        """This node's part in the schedule: "" to fire it (it owns it, or is handing it
        over), the owner's id to stand by for it, None to leave it."""
        if self._previous is not self._partition and self._previous.owns(schedule_id, queue):
            return ""
        return self._partition.role(schedule_id, queue)

    def _partition_of(self, live: dict[str, tuple[datetime, QueueFilter]]) -> Partition:
        return Partition(
            self.node.node_id, {node: queues for node, (_b, queues) in live.items()}, self._queues
        )

    def standby_delay(self, owner: str) -> float:
        """Seconds after an occurrence of ``owner``'s that this node fires it itself."""
        return 0.0 if owner in self._suspected else self.node.settings.standby_delay

    def suspect(self, owner: str, now: datetime) -> bool:
        """``owner`` left an occurrence unclaimed: stand in for it until its heartbeat
        moves. Return whether it was not suspected yet."""
        with self._lock:
            if owner in self._suspected:
                return False
            self._suspected[owner] = now
            return True

    @property
    def suspected(self) -> dict[str, datetime]:
        with self._lock:
            return dict(self._suspected)

    def _live(self, now: datetime | None = None) -> dict[str, tuple[datetime, QueueFilter]]:
        now = now or self.node.clock.now()
        dead_before = now - timedelta(seconds=self.node.settings.node_timeout)
        return self.store.live_nodes(dead_before)

    def _clear_suspicions(self, live: dict[str, tuple[datetime, QueueFilter]]) -> list[str]:
        """Forget the suspicion of owners whose heartbeat moved since (alive after all)
        or that are no longer members (their standby now owns their schedules)."""
        cleared = []
        with self._lock:
            for owner, since in list(self._suspected.items()):
                beat = live[owner][0] if owner in live else None
                if beat is None or beat > since:
                    del self._suspected[owner]
                    if beat is not None:
                        cleared.append(owner)
        for owner in cleared:
            logger.info(
                "node %s is alive after all: standing by for it again",
                owner,
                extra={"action": "owner_back", "node": owner},
            )
        return cleared

    def refresh(self, now: datetime) -> bool:
        """Re-read the live nodes; rebalance if the members changed, a handover ended
        or an earlier rebalance could not read the schedules. Return whether the
        schedules held changed."""
        live = self._live(now)
        for owner in self._clear_suspicions(live):
            self.node.replace_held(owner)
        current = self._partition_of(live)
        handing_over = self._previous.members != self._partition.members
        changed = current.members != self._partition.members
        if not changed and not handing_over and not self._load_owed:
            return False
        self._previous, self._partition = self._partition, current
        if changed:
            logger.info(
                "nodes now %s: rebalancing the schedules",
                ", ".join(current.members),
                extra={"action": "rebalance", "members": current.members},
            )
            self._load_owed = True
        self._rebalance()
        return True

    def _rebalance(self) -> None:
        """Hold what this node owns or stands by for now (a full read, if the members
        changed since the last one that succeeded), drop what it gave away.

        The full read is owed until it succeeds: the partition has already moved on,
        and the schedules this node gained change only when they fire, which nobody
        does while they wait for this node, so no later sync would bring them in."""
        node = self.node
        if self._load_owed:
            refs, _top = self.store.load_schedules()
            self._load_owed = False
            for ref in refs:
                node._place(ref)  # skips what it neither owns nor stands by for
        node.replace_held()  # roles change with the members; what is left is dropped


def connection_params(using: str = "default") -> dict[str, Any]:
    """``psycopg.connect`` arguments for a plain connection to the database ``using``
    (Django's, without its cursor class and adapters)."""
    params: dict[str, Any] = dict(connections[using].get_connection_params())
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return params


def attach(node: Node) -> Cluster | None:
    """A started :class:`Cluster` for ``node`` if its store is PostgreSQL, else None."""
    if not isinstance(node.store, PostgresStore):
        return None
    cluster = Cluster(node, node.store)
    cluster.start()
    return cluster


def wait_listening(cluster: Cluster | None, timeout: float = 10.0) -> bool:
    """Block until the cluster's listener is listening (for tests and the bench)."""
    if cluster is None or cluster.listener is None:
        return False
    return cluster.listener.listening.wait(timeout)
