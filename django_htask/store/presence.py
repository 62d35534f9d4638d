"""A node's presence on a database several nodes share (the PostgreSQL and the
MySQL/MariaDB stores): a session lock named after the node, taken on the connection
that registers it (the thread that starts a node keeps it) and by each of its
heartbeats on the heartbeat's own connection, which the database releases when the
connection ends. Held from registration on, so that a node slow between registering
and its first heartbeat is not taken for gone.

A process killed with SIGKILL (or crashed, or stopped by the OOM killer) has its
connections closed by the operating system at once, and the database ends their
sessions: its lock is free within milliseconds. A paused process (SIGSTOP, a VM
frozen, a swap storm) keeps its connections, and its lock stays held however late its
heartbeat. So a node whose heartbeats stopped and whose lock is free has ended, and
nothing it started can still be running; a node whose heartbeats stopped but which
still holds its lock may only be paused (:mod:`django_htask.node.membership` declares
the first dead at once, and leaves the second to ``NODE_TIMEOUT``).

The lock's name is a hash of the node's id: PostgreSQL's advisory locks belong to one
database (:func:`presence_key`); MySQL's named locks belong to the whole server, so
there the name also hashes the session's database (``DATABASE()``, in SQL: see
:mod:`~django_htask.store.mysql`). A collision of two names only makes a gone node
look present: it is then declared dead by its heartbeat's age (``NODE_TIMEOUT``).
"""

from __future__ import annotations

import hashlib

__all__ = ["PRESENCE_CLASS", "presence_key"]

#: The first half of a PostgreSQL advisory lock key of two ``integer`` s ("ht"): the
#: space of the presence locks, apart from the one-``bigint`` keys of the claims.
PRESENCE_CLASS = 0x6874


def presence_key(node_id: str) -> int:
    """The second half of node ``node_id``'s advisory lock key (PostgreSQL): 31 bits
    of its BLAKE2b hash, so that it reads the same as an ``integer`` and as the ``oid``
    that ``pg_locks`` shows."""
    digest = hashlib.blake2b(node_id.encode(), digest_size=4, person=b"htask-node").digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF
