"""Reaping where several nodes share a database (the PostgreSQL and the MySQL/MariaDB
stores): one reaper at a time, and none right after the database was away.

Any live node reaps, one at a time: the reaper takes a transaction-level lock first (a
store's :meth:`SharedReaper._try_lock_reaper`) and the others skip their turn. Nodes
whose heartbeat is older than ``NODE_TIMEOUT`` are marked stopped (declared dead) and
what they held is handed back, in the reaper's transaction, which is fenced as every
write of a node is.

A node whose own last heartbeat came late (more than half the node timeout: most
likely the database was away for everyone) waits one node timeout before reaping, so
that the others have the time to come back too: the store records the gap of every
heartbeat (:meth:`SharedReaper._heartbeat_after`).
"""

from __future__ import annotations

import abc
import logging
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_htask.models import Node
from django_htask.querysets import SILENT_NODE_SQL
from django_htask.retry import RetryPolicy

__all__ = ["SharedReaper"]

logger = logging.getLogger(__name__)

NODE = Node._meta.db_table


class SharedReaper(abc.ABC):
    """:meth:`reap` for several nodes; a store defines :meth:`_try_lock_reaper`. Listed
    before :class:`~django_htask.store.database.DatabaseStore` in a store's bases, so
    its :meth:`reap` replaces the generic one."""

    #: How late this node's last heartbeat came after the one before.
    _heartbeat_gap = timedelta(0)
    #: Until when this node does not reap (it came back from a long gap).
    _hold_reaping_until: datetime | None = None

    if TYPE_CHECKING:  # the store's (DatabaseStore), after this in the bases

        @property
        def connection(self) -> BaseDatabaseWrapper: ...

        def _atomic(self) -> AbstractContextManager[Any]: ...

        def _fence(self, node_id: str) -> None: ...

        def _reap(self, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int: ...

    @abc.abstractmethod
    def _try_lock_reaper(self) -> bool:
        """Take the reaper's lock until the transaction ends, without waiting; return
        whether it was taken (False: another node is reaping)."""

    def _reaped(self, count: int, dead: list[str]) -> None:
        """What ``reap`` did, in its transaction: ``count`` rows, ``dead`` nodes
        declared dead (nothing here: PostgreSQL tells the other nodes)."""
        return

    def _heartbeat_after(self, gap: timedelta) -> None:
        """Record how long after the one before this node's heartbeat came."""
        self._heartbeat_gap = gap

    def reap(self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        """As the generic reaper, one node at a time (the others skip), after a pause
        when this node's own heartbeat came late (see the module)."""
        timeout = now - dead_before
        if self._heartbeat_gap > timeout / 2:
            self._hold_reaping_until = now + timeout
            self._heartbeat_gap = timedelta(0)
        if self._hold_reaping_until is not None and now < self._hold_reaping_until:
            return 0
        with self._atomic(), self.connection.cursor() as cursor:
            if not self._try_lock_reaper():
                return 0
            self._fence(node_id)
            cursor.execute(
                f"SELECT id FROM {NODE} WHERE {SILENT_NODE_SQL}",
                [self.connection.ops.adapt_datetimefield_value(dead_before)],
            )
            dead = [r[0] for r in cursor.fetchall()]
            count = self._reap(now, dead_before, retry)
            for dead_id in dead:
                logger.warning(
                    "node %s marked dead (no heartbeat since before %s)",
                    dead_id,
                    dead_before.isoformat(),
                    extra={"action": "node_dead", "node": dead_id},
                )
            self._reaped(count, dead)
        return count
