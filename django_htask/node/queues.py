"""The queues an operator paused or limited, as a node holds them: read from the store
(:meth:`~django_htask.store.Store.queue_states`) at start, at every poll and when a
notification says a queue changed (PostgreSQL), and put in the node's ``serving``,
which every claim and every schedule placed reads. A claim costs nothing more for it:
no query is added to a claim, and with no queue paused or limited the claim's
statements are the ones of a node that never heard of queues.

A queue paused: its schedules are let go (their ``next_run_at`` stays where it is), its
tasks are no longer claimed nor counted as due. Resumed: its schedules are read again
(a full read, then only theirs are placed) and fire at once what fell due meanwhile, by
their own grace and catch-up; the node looks for tasks. A limit changed: the node looks
for tasks (a higher limit may let more start).
"""

from __future__ import annotations

import dataclasses
import logging

from django_htask.queues import QueueStates

from .context import NodeContext
from .firing import Firing
from .tasks import TaskDispatch

__all__ = ["QueueWatch"]

logger = logging.getLogger(__name__)


class QueueWatch:
    """The queue states of one node (see the module)."""

    def __init__(self, ctx: NodeContext, firing: Firing, tasks: TaskDispatch) -> None:
        self.ctx = ctx
        self.firing = firing
        self.tasks = tasks
        #: Asks for a read on the control thread (a notification, a reconnection).
        self.request = ctx.control.once(self._refresh_now)

    def _refresh_now(self) -> None:
        self.ctx.control.guarded(self.refresh, "queue states", retry=self.request)

    def refresh(self) -> None:
        """Read the queue states and apply what changed."""
        self.apply(self.ctx.store.queue_states())

    def apply(self, states: QueueStates) -> None:
        ctx = self.ctx
        before = ctx.serving.states
        if states == before:
            return
        ctx.serving = dataclasses.replace(ctx.serving, states=states)
        paused, resumed = states.paused - before.paused, before.paused - states.paused
        node = ctx.node_id
        for queue in sorted(paused):
            logger.info(
                "node %s: queue %s paused: none of its tasks starts, none of its schedules "
                "fires until it is resumed",
                node,
                queue,
                extra={"action": "queue_paused", "queue": queue, "node": node},
            )
        for queue in sorted(resumed):
            logger.info(
                "node %s: queue %s resumed",
                node,
                queue,
                extra={"action": "queue_resumed", "queue": queue, "node": node},
            )
        limits, was = dict(states.limits), dict(before.limits)
        for queue in sorted(limits.keys() | was.keys()):
            limit = limits.get(queue)
            if limit == was.get(queue):
                continue
            text = f"limited to {limit} tasks running at once" if limit else "no longer limited"
            logger.info(
                "node %s: queue %s %s",
                node,
                queue,
                text,
                extra={"action": "queue_limited", "queue": queue, "node": node},
            )
        if paused:
            self.firing.replace_placed()  # their schedules are let go
        if resumed:
            self.firing.place_again(resumed)
        self.tasks.due = True
        self.tasks.request.request()
