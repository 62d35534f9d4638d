"""A node's liveness: its heartbeat and the reaping of dead nodes.

The heartbeat runs on a thread of its own, so that a control thread with a long queue
(a burst of fires, the catch-up after the database was away) does not make the other
nodes declare this one dead, reap the tasks it is running and run them a second time.
It stops renewing while the control thread is stuck in one call for a whole
``NODE_TIMEOUT``: a node that can no longer act must not keep its leases.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable
from datetime import datetime, timedelta

from django_htask.engine import Scheduler as EngineScheduler
from django_htask.engine import SchedulerClosed
from django_htask.exceptions import NodeFenced, StoreUnavailable
from django_htask.signals import rows_reaped

from .context import NodeContext
from .control import deadlock_retried

__all__ = ["Liveness"]

logger = logging.getLogger(__name__)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process: alive
        return True
    return True


class Liveness:
    """Heartbeats and reaping for one node (see the module)."""

    def __init__(
        self,
        ctx: NodeContext,
        on_fenced: Callable[[NodeFenced], None],
        on_reaped: Callable[[], object],
        on_beat: Callable[[], object],
    ) -> None:
        self.ctx = ctx
        self._on_fenced = on_fenced
        self._on_reaped = on_reaped
        self._on_beat = on_beat
        self.fenced = False
        self.beat = EngineScheduler(
            1,
            clock=ctx.clock,
            name=f"{ctx.node_id}-heartbeat",
            on_thread_exit=ctx.connections.close,
        )

    def start(self) -> None:
        self.beat.call_soon(self._heartbeat)

    def close(self, timeout: float | None = None, *, wait: bool = True) -> None:
        self.beat.close(wait=wait, timeout=timeout)

    def _heartbeat(self) -> None:
        """Renew the heartbeat and the leases, reap, and have the members re-read. It
        goes on while the node stops (the leases of the jobs that finish)."""
        if self.fenced:
            return
        ctx = self.ctx
        now = ctx.clock.now()
        settings = ctx.settings
        stuck = ctx.control.stuck_for()
        try:
            if stuck > settings.node_timeout:
                logger.warning(
                    "the control thread has been in one call for %.0fs: leases not renewed",
                    stuck,
                    extra={"action": "control_stuck"},
                )
            else:
                self._renew(now, *settings.lease_renewal(now))
            if not ctx.stopping():
                self.reap(now)
        except NodeFenced as exc:
            self.fenced = True
            self._on_fenced(exc)
            return
        except StoreUnavailable as exc:
            ctx.control.backoff.lost(exc, settings.heartbeat_interval)
        except Exception:
            # logged, and the beat goes on: a heartbeat not armed again would have the
            # others declare this node dead while it runs
            logger.exception(
                "unexpected error in the node's heartbeat", extra={"action": "node_error"}
            )
        if not ctx.stopping():
            self._on_beat()
        # From this beat's time, not from now: the work above takes a while, and arming
        # after it would let each beat slip by that much (and by a whole interval if the
        # clock jumped meanwhile).
        with contextlib.suppress(SchedulerClosed):
            self.beat.call_at(now + timedelta(seconds=settings.heartbeat_interval), self._heartbeat)

    def _renew(self, now: datetime, lease_until: datetime, renew_below: datetime) -> None:
        """The heartbeat, with the worker threads given up and still stuck (shown by
        ``htask status``, the health check, the metrics and the admin), tried again at
        once when the database made it a deadlock's victim: backing off a whole
        interval would show this node late to the others."""
        ctx = self.ctx
        stuck = ctx.stuck_threads()
        deadlock_retried(
            lambda: ctx.store.heartbeat(ctx.node_id, now, lease_until, stuck, renew_below),
            "heartbeat",
        )

    def reap(self, now: datetime) -> None:
        """Declare dead the nodes silent for ``NODE_TIMEOUT`` and hand back their work."""
        ctx = self.ctx
        reaped = deadlock_retried(
            lambda: ctx.store.reap(ctx.node_id, now, ctx.settings.dead_before(now), ctx.task_retry),
            "reaper",
        )
        if reaped:
            logger.warning(
                "%d rows held by dead nodes handed back", reaped, extra={"action": "reaped"}
            )
            from django_htask.models import Node  # noqa: PLC0415 - the signal's sender

            rows_reaped.send_robust(sender=Node, node=ctx.node_id, rows=reaped)
            self._on_reaped()

    def declare_gone_predecessors(self) -> None:
        """Declare dead at once the nodes of this host whose process is gone (a node
        killed, then started again): what they held is handed back now, not after
        ``NODE_TIMEOUT``. Only where every node runs on one host (SQLite)."""
        ctx = self.ctx
        now = ctx.clock.now()
        gone = [
            node_id
            for node_id, pid in ctx.store.nodes_on_host(socket.gethostname())
            if node_id != ctx.node_id and pid != os.getpid() and not _pid_alive(pid)
        ]
        if gone and ctx.store.declare_dead(gone, now):
            logger.warning(
                "nodes %s of this host are gone (no such process): handing back their work",
                ", ".join(gone),
                extra={"action": "predecessors_gone", "nodes": gone},
            )
            self.reap(now)
