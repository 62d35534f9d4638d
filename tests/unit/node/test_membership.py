"""Which live nodes are late (``node/membership.late``): pure, on made-up heartbeats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django_htask.node.membership import late
from django_htask.queues import ALL, QueueFilter

T = datetime(2030, 1, 1, tzinfo=UTC)


def beats(**seconds: float) -> dict[str, tuple[datetime, QueueFilter]]:
    return {node: (T + timedelta(seconds=s), ALL) for node, s in seconds.items()}


def test_a_node_that_has_not_beaten_since_the_readers_beat_two_ago_is_late() -> None:
    live = beats(a=30, b=11, c=10)
    since = T + timedelta(seconds=11)  # the reader's own heartbeat two beats ago
    assert late(live, since, 10.0) == {"c"}  # b beat with it: not late


def test_a_reader_without_two_beats_yet_compares_with_the_freshest() -> None:
    live = beats(a=30, b=10, c=9)
    assert late(live, None, 10.0) == {"c"}  # 21 s behind a; b exactly 20 s
    assert late({}, None, 10.0) == set()


def test_nobody_is_late_while_nobody_beats() -> None:
    """The database away for everyone: the reader's own beats stop too, so ``since``
    stays where it was and every heartbeat is as old as it."""
    live = beats(a=10, b=10, c=9.5)
    assert late(live, T + timedelta(seconds=9), 10.0) == set()
