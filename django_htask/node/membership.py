"""Several nodes on one database: who fires which schedule, and hearing of changes.

A node whose store supports several nodes (PostgreSQL; see
:attr:`~django_htask.store.Store.supports_several_nodes`) gets a :class:`Membership`:

Listening
    the store's listener (LISTEN/NOTIFY on PostgreSQL) wakes the node when a schedule
    or a task changes in any process, and has it read the queue states again when a
    queue does; the node's slow poll stays as the safety net for a lost notification.
    A listener that reconnects wakes the node once more.
Partitioning
    each node holds only its share of the schedules: a schedule belongs to the live
    node serving its queue with the highest rendezvous hash (see
    :mod:`django_htask.partition`), so a node joining or leaving moves only the
    schedules that hash to it. Membership is re-read at every heartbeat and when a node
    joins or stops (a notification). A node keeps the schedules it gives away for one
    more heartbeat: a schedule is briefly placed by two nodes (the compare-and-set lets
    one of them fire each occurrence) and never by none. A node whose heartbeat is
    late (it missed a whole interval, though it is not yet ``NODE_TIMEOUT`` old; see
    :func:`late`) is left out of the partition: a rebalance gives it nothing, and what
    it owned goes to its standby, which fires it at its time.
Standing by
    the member with the second highest hash is the schedule's standby: it holds the
    schedule too, with its timer ``STANDBY_DELAY`` seconds after each occurrence. An
    occurrence the owner has not claimed by then is fired by the standby (the
    compare-and-set still lets only one fire it), and from then on the standby fires
    every schedule it stands by for that owner at its time, until the owner's heartbeat
    is seen to move again. When the owner is declared dead its standby becomes the
    owner (the next member in the hash order), with nothing to move.
Gone
    a late node whose presence on the database (:meth:`~django_htask.store.Store.absent`:
    a session lock its connections hold) has been gone for a heartbeat interval was
    killed or crashed, not paused: nothing it ran can still be running. It is declared
    dead at once, without waiting for ``NODE_TIMEOUT``: its last run of a schedule no
    longer counts as going on (``overlap``), and the next reap fails that run as lost
    and hands back its tasks. A node only paused keeps its sessions, and with them its
    runs, until ``NODE_TIMEOUT``. Presence is not trusted for
    :data:`TRUST_AFTER_OUTAGE` heartbeats after this node found the database away: a
    restart of the database ends every node's sessions, and each takes its presence
    again only at its next heartbeat that reaches it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta

from django_htask.partition import Partition
from django_htask.queues import DEFAULT_QUEUE, QueueFilter
from django_htask.store import Listening

from .context import NodeContext
from .control import Once
from .firing import Firing

__all__ = ["LATE_BEATS", "Membership", "NodeRoles", "late"]

logger = logging.getLogger(__name__)

Live = dict[str, tuple[datetime, QueueFilter]]


#: A node that has not beaten since this many of the reader's own heartbeats ago is late.
LATE_BEATS = 2
#: Heartbeat intervals after this node last found the database away during which no
#: node counts as gone by its presence (see :meth:`Membership._declare_gone`).
TRUST_AFTER_OUTAGE = 6


def late(live: Live, since: datetime | None, heartbeat_interval: float) -> set[str]:
    """The live nodes whose heartbeat is late: none since ``since``, the reader's own
    heartbeat :data:`LATE_BEATS` beats ago (it missed a whole interval), though not yet
    ``NODE_TIMEOUT`` old. They are given no schedule: what they own goes to their
    standby, which fires it at its time, until their heartbeat moves again or they are
    declared dead. Measured against the reader's own beats, not its clock: while the
    database is away for everyone the reader does not beat either, so nobody is late,
    and a clock that jumps does not make the others late. A reader that has not beaten
    that often yet (it just joined) compares with the freshest heartbeat instead, less
    :data:`LATE_BEATS` intervals."""
    if since is None:
        if not live:
            return set()
        freshest = max(beat for beat, _queues in live.values())
        since = freshest - timedelta(seconds=LATE_BEATS * heartbeat_interval)
    return {node for node, (beat, _queues) in live.items() if beat < since}


class NodeRoles:
    """This node's part in each schedule among the live nodes (the
    :class:`~django_htask.node.firing.Roles` that :class:`~django_htask.node.firing.Firing`
    asks): the partition, the one it is handing over from, and the owners it stands in
    for. Kept apart from :class:`Membership`, which moves it and places the schedules
    again, so that neither Firing nor Membership is wired after it is made."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._queues = ctx.serving.schedules
        self._partition = Partition(ctx.node_id, [], self._queues)
        self._previous = self._partition
        #: Owners suspected of being gone: id -> when this node began to stand in.
        self._suspected: dict[str, datetime] = {}
        #: This node's last heartbeats, as the others read them (for :func:`late`).
        self._beats: deque[datetime] = deque(maxlen=LATE_BEATS + 1)
        #: The live nodes late at the last look (left out of the partition).
        self._late: frozenset[str] = frozenset()

    @property
    def members(self) -> tuple[str, ...]:
        return self._partition.members

    @property
    def handing_over(self) -> bool:
        """Whether the members changed at the last move (what was given away is still
        placed, for one more heartbeat)."""
        return self._previous.members != self._partition.members

    def role(self, schedule_id: int, queue: str = DEFAULT_QUEUE) -> str | None:
        """This node's part in the schedule: "" to fire it (it owns it, or is handing it
        over), the owner's id to stand by for it, None to leave it."""
        if self._previous is not self._partition and self._previous.owns(schedule_id, queue):
            return ""
        return self._partition.role(schedule_id, queue)

    def standby_delay(self, owner: str) -> float:
        """Seconds after an occurrence of ``owner``'s that this node fires it itself."""
        return 0.0 if owner in self._suspected else self.ctx.settings.standby_delay

    def suspect(self, owner: str, now: datetime) -> bool:
        """``owner`` left an occurrence unclaimed: stand in for it until its heartbeat
        moves. Return whether it was not suspected yet."""
        with self._lock:
            if owner in self._suspected:
                return False
            self._suspected[owner] = now
            return True

    def late_nodes(self) -> frozenset[str]:
        """The other nodes late at the last look (see :func:`late`): live, but not
        beaten since two of this node's own heartbeats ago."""
        return self._late

    @property
    def suspected(self) -> dict[str, datetime]:
        with self._lock:
            return dict(self._suspected)

    def begin(self, live: Live) -> None:
        """The first partition (no handover)."""
        self._partition = self._previous = self.partition_of(live)

    def move_to(self, current: Partition) -> None:
        """The members changed or a handover ends: ``current`` is the partition now."""
        self._previous, self._partition = self._partition, current

    def partition_of(self, live: Live) -> Partition:
        """The partition among the live nodes that are not late (see :func:`late`)."""
        node_id, beats = self.ctx.node_id, self._beats
        if node_id in live and (not beats or live[node_id][0] > beats[-1]):
            beats.append(live[node_id][0])
        since = beats[0] if len(beats) > LATE_BEATS else None
        behind = late(live, since, self.ctx.settings.heartbeat_interval) - {node_id}
        self._late = frozenset(behind)
        members = {node: queues for node, (_beat, queues) in live.items() if node not in behind}
        return Partition(self.ctx.node_id, members, self._queues)

    def clear_suspicions(self, live: Live) -> list[str]:
        """Forget the suspicion of owners whose heartbeat moved since (alive after all)
        or that are no longer members (their standby now owns their schedules); return
        those alive after all."""
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


class Membership:
    """The several-node part of one node (see the module): it listens, re-reads the live
    nodes into ``roles`` and has ``firing`` hold the schedules again."""

    def __init__(
        self,
        ctx: NodeContext,
        roles: NodeRoles,
        firing: Firing,
        wake: Callable[[], None],
        on_queues: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.roles = roles
        self.firing = firing
        self._wake = wake
        #: Asks for the queue states to be read again (a queue changed).
        self._on_queues = on_queues
        self._listener: Listening | None = None
        self._load_owed = False  # a rebalance whose full read of the schedules failed
        #: Late nodes whose presence is gone -> when it was first seen gone.
        self._absent: dict[str, datetime] = {}
        self.refresher: Once = ctx.control.once(self._refresh_now)

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> None:
        """Read the live nodes and start listening (after the node is registered)."""
        self.roles.begin(self._live())
        settings = self.ctx.settings
        self._listener = self.ctx.store.listen(
            self._on_notify,
            self._on_reconnect,
            retry=settings.db_retry,
            retry_max=settings.db_retry_max,
            name=f"{self.ctx.node_id}-listener",
        )

    def close(self) -> None:
        if self._listener is not None:
            self._listener.stop()

    def wait_listening(self, timeout: float = 10.0) -> bool:
        """Block until the listener listens (for tests and the bench)."""
        return self._listener is not None and self._listener.listening.wait(timeout)

    # -- notifications (the listener's thread) ---------------------------------------
    def _on_notify(self, payload: str) -> None:
        if payload == "node":
            self.refresher.request()
        elif payload == "queue":
            self._on_queues()
        else:
            self._wake()

    def _on_reconnect(self) -> None:
        self._wake()
        self.refresher.request()
        self._on_queues()

    # -- the members (the control thread) --------------------------------------------
    @property
    def members(self) -> tuple[str, ...]:
        return self.roles.members

    def _live(self, now: datetime | None = None) -> Live:
        now = now or self.ctx.clock.now()
        return self.ctx.store.live_nodes(self.ctx.settings.dead_before(now))

    def _refresh_now(self) -> None:
        control, now = self.ctx.control, self.ctx.clock.now()
        if control.guarded(lambda: self.refresh(now), "member refresh"):
            control.guarded(lambda: self._declare_gone(self.roles.late_nodes(), now), "gone nodes")

    def refresh(self, now: datetime) -> bool:
        """Re-read the live nodes; rebalance if the members changed, a handover ended or
        an earlier rebalance could not read the schedules. Return whether the schedules
        placed changed."""
        live, roles = self._live(now), self.roles
        for owner in roles.clear_suspicions(live):
            self.firing.replace_placed(owner)
        current = roles.partition_of(live)
        changed = current.members != roles.members
        if not changed and not roles.handing_over and not self._load_owed:
            return False
        roles.move_to(current)
        if changed:
            logger.info(
                "nodes now %s: rebalancing the schedules",
                ", ".join(current.members),
                extra={"action": "rebalance", "members": current.members},
            )
            self._load_owed = True
        self._rebalance()
        return True

    def _declare_gone(self, late: frozenset[str], now: datetime) -> None:
        """Declare dead the late nodes whose presence has been gone for a heartbeat
        interval (see the module). Not at the first look: a node whose connection the
        database dropped (a restart) takes its presence again at its next heartbeat."""
        store, beat = self.ctx.store, self.ctx.settings.heartbeat_interval
        if self.ctx.control.backoff.lost_within(TRUST_AFTER_OUTAGE * beat):
            # The database was away (a restart ends every session): each node takes its
            # presence again at its first heartbeat that reaches it, which may come a
            # beat or two after this node's.
            self._absent = {}
            return
        absent = store.absent(sorted(late)) if late else []
        self._absent = {node: self._absent.get(node, now) for node in absent}
        interval = timedelta(seconds=beat)
        gone = [node for node, since in self._absent.items() if now - since >= interval]
        if not gone or not store.declare_dead(gone, now):
            return
        for node in gone:
            logger.warning(
                "node %s marked dead: its heartbeat is late and its database session is "
                "gone (its process ended)",
                node,
                extra={"action": "node_dead", "node": node},
            )

    def _rebalance(self) -> None:
        """Hold what this node owns or stands by for now (a full read, if the members
        changed since the last one that succeeded), drop what it gave away.

        The full read is owed until it succeeds: the partition has already moved on,
        and the schedules this node gained change only when they fire, which nobody
        does while they wait for this node, so no later sync would bring them in."""
        if self._load_owed:
            refs, _top = self.ctx.store.load_schedules()
            self._load_owed = False
            for ref in refs:
                self.firing.place(ref)  # skips what it neither owns nor stands by for
        self.firing.replace_placed()  # roles change with the members; what is left goes
