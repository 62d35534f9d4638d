"""The errors of django-htask's Django layer, all under :class:`HtaskError`.

The engine's errors (``InvalidSchedule``, ``FunctionNotRegistered``, ``PayloadError``,
``ArgumentError``, ``SchedulerFull``, ...) live in :mod:`django_htask.engine.errors`
and share the same base.
"""

from __future__ import annotations

from datetime import datetime

from django_htask.engine import HtaskError

__all__ = ["HtaskError", "NodeFenced", "NotMigrated"]


class NodeFenced(HtaskError, RuntimeError):
    """The node's registration was ended by the others (declared dead): the database
    refuses its writes, and it must start nothing more.

    ``stopped_at`` is when it was declared dead (None if its row is gone)."""

    def __init__(self, node_id: str, stopped_at: datetime | None) -> None:
        self.node_id = node_id
        self.stopped_at = stopped_at
        when = "its row is gone" if stopped_at is None else f"at {stopped_at.isoformat()}"
        super().__init__(
            f"node {node_id} was declared dead by the other nodes ({when}): "
            "its work has been handed to them"
        )


class NotMigrated(HtaskError, RuntimeError):
    """The database lacks django_htask's tables, or some of its migrations: a node
    cannot run there until ``manage.py migrate`` has run (not an outage to wait out)."""
