"""Reaping where several nodes share a database (the PostgreSQL and the MySQL/MariaDB
stores): one reaper at a time, and none right after the database was away.

Any live node reaps, one at a time: the reaper takes a transaction-level lock first (its
dialect's ``try_lock_reaper``) and the others skip their turn. Nodes
whose heartbeat is older than ``NODE_TIMEOUT`` are marked stopped (declared dead) and
what they held is handed back, in the reaper's transaction, which is fenced as every
write of a node is.

A node whose own last heartbeat came late (more than half the node timeout: most
likely the database was away for everyone) waits one node timeout before reaping, so
that the others have the time to come back too: the store records the gap of every
heartbeat (:meth:`SharedReaper.heartbeat_after`).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django_htask.models import Node
from django_htask.querysets import SILENT_NODE_SQL
from django_htask.retry import RetryPolicy

from .database import DatabaseStore

__all__ = ["SharedReaper"]

logger = logging.getLogger(__name__)

NODE = Node._meta.db_table


class SharedReaper:
    """The reaping of one store where several nodes share its database: the store's
    ``reap`` calls :meth:`reap`, and its ``heartbeat`` :meth:`heartbeat_after`. It
    holds what this node remembers of its own heartbeats (one per store)."""

    def __init__(self) -> None:
        #: How late this node's last heartbeat came after the one before.
        self.heartbeat_gap = timedelta(0)
        #: Until when this node does not reap (it came back from a long gap).
        self.hold_reaping_until: datetime | None = None

    def heartbeat_after(self, gap: timedelta) -> None:
        """Record how long after the one before this node's heartbeat came."""
        self.heartbeat_gap = gap

    def reap(
        self,
        store: DatabaseStore,
        node_id: str,
        now: datetime,
        dead_before: datetime,
        retry: RetryPolicy,
    ) -> int:
        """As the generic reaper, one node at a time (the others skip), after a pause
        when this node's own heartbeat came late (see the module)."""
        timeout = now - dead_before
        if self.heartbeat_gap > timeout / 2:
            self.hold_reaping_until = now + timeout
            self.heartbeat_gap = timedelta(0)
        if self.hold_reaping_until is not None and now < self.hold_reaping_until:
            return 0
        with store._atomic(), store.connection.cursor() as cursor:
            if not store.dialect.try_lock_reaper(store):
                return 0
            store._fence(node_id)
            cursor.execute(
                f"SELECT id FROM {NODE} WHERE {SILENT_NODE_SQL}",
                [store.connection.ops.adapt_datetimefield_value(dead_before)],
            )
            dead = [r[0] for r in cursor.fetchall()]
            count = store._reap(now, dead_before, retry)
            for dead_id in dead:
                logger.warning(
                    "node %s marked dead (no heartbeat since before %s)",
                    dead_id,
                    dead_before.isoformat(),
                    extra={"action": "node_dead", "node": dead_id},
                )
            store.dialect.reaped(store, count, dead)
        return count
