"""Node rows for the admin, command and check tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from django_htask.models import Node


def node_row(node_id: str, now: datetime, silent_for: float = 0.0) -> Node:
    """A registered node whose last heartbeat was ``silent_for`` seconds before ``now``."""
    return Node.objects.create(
        id=node_id,
        hostname="host",
        pid=1,
        started_at=now - timedelta(seconds=silent_for),
        last_heartbeat=now - timedelta(seconds=silent_for),
        version="test",
    )
