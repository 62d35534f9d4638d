"""Pruning: the nodes delete by themselves what is past its retention
(:mod:`django_htask.retention`): finished tasks with their runs, old runs, the rows of
nodes stopped long ago.

One node at a time: each round, only the live node with the smallest id prunes (a
node dying hands the turn to the next at the following round), and each batch takes
the store's pruner lock, so that two nodes that both believe it their turn (the
membership just changed) take turns by batch and never both delete at once.

A round runs batches of ``PRUNE_BATCH`` tasks (5,000) with their runs, each its own
short transaction on the pruner's own thread and connection, so a claim never waits
behind it (the batch deletes only rows past their retention, which no claim reads) and
a replica never sees a large transaction. Between two batches the pruner waits half as
long as the last one took (at least :data:`MIN_PAUSE`): it has at most two thirds of
its connection's time, and the node's claims the rest of the server. A round ends when
a batch stops short of its limit (nothing is left), then the next starts
``PRUNE_INTERVAL`` (300 s) later.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from django_htask.engine import Scheduler as EngineScheduler
from django_htask.engine import SchedulerClosed
from django_htask.exceptions import StoreUnavailable
from django_htask.retention import Cutoffs
from django_htask.signals import rows_pruned
from django_htask.store import Pruned

from .context import NodeContext
from .control import deadlock_retried

__all__ = ["FIRST_DELAY", "Pruner"]

logger = logging.getLogger(__name__)

#: Seconds after the node's start before its first round (its start-up goes first; or
#: the ``PRUNE_INTERVAL`` setting, when shorter).
FIRST_DELAY = 10.0
#: Seconds between two batches at least.
MIN_PAUSE = 0.05
#: Seconds between two lines of a long round's progress in the log.
PROGRESS_EVERY = 30.0


class Pruner:
    """The pruning of one node (see the module). ``my_turn``: whether this node is
    the one that prunes now (the membership's answer, or always on one host)."""

    def __init__(self, ctx: NodeContext, my_turn: Callable[[], bool]) -> None:
        self.ctx = ctx
        self._my_turn = my_turn
        self.thread = EngineScheduler(
            1,
            clock=ctx.clock,
            name=f"{ctx.node_id}-prune",
            on_thread_exit=ctx.connections.close,
        )
        #: What this round has deleted so far.
        self._round = Pruned()
        #: What this node has deleted since it started.
        self.total = Pruned()
        self._reported_at = 0.0

    @property
    def interval(self) -> float:
        return self.ctx.settings.prune_interval

    def start(self) -> None:
        self._later(min(FIRST_DELAY, self.interval), self.prune)

    def close(self, timeout: float | None = None) -> None:
        self.thread.close(wait=True, timeout=timeout)

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        with contextlib.suppress(SchedulerClosed):
            self.thread.call_later(delay, fn)

    def cutoffs(self) -> Cutoffs:
        s = self.ctx.settings
        return Cutoffs.at(self.ctx.clock.now(), s.task_retention_days, s.run_retention_days)

    def prune(self) -> None:
        """Start a round if it is this node's turn (else look again at the next)."""
        if self.ctx.stopping():
            return
        try:
            mine = self._my_turn()
        except StoreUnavailable as exc:
            logger.info("pruning put off: %s", exc.reason, extra={"action": "prune_put_off"})
            mine = False
        if not mine:
            self._later(self.interval, self.prune)
            return
        self._round = Pruned()
        self._reported_at = self.ctx.clock.monotonic()
        self._batch()

    def _batch(self) -> None:
        """Delete one batch; the next after a pause, or the round is over."""
        ctx = self.ctx
        if ctx.stopping():
            return
        started = ctx.clock.monotonic()
        try:
            cutoffs = self.cutoffs()
            pruned = deadlock_retried(
                lambda: ctx.store.prune(ctx.node_id, cutoffs, ctx.settings.prune_batch),
                "pruner",
            )
        except StoreUnavailable as exc:
            logger.warning(
                "pruning stopped for this round: %s", exc.reason, extra={"action": "prune_failed"}
            )
            pruned = None
        except Exception:
            logger.exception("unexpected error while pruning", extra={"action": "node_error"})
            pruned = None
        if pruned is not None:
            self._round += pruned
            self.total += pruned
            if pruned.more:
                now = ctx.clock.monotonic()
                if now - self._reported_at >= PROGRESS_EVERY:
                    self._reported_at = now
                    logger.info(
                        "pruning: %d finished tasks and %d runs deleted so far",
                        self._round.tasks,
                        self._round.runs,
                        extra={"action": "pruning"},
                    )
                self._later(max((now - started) / 2, MIN_PAUSE), self._batch)
                return
        self._done()

    def _done(self) -> None:
        """The round is over: say what it deleted, and start the next later."""
        done = self._round
        if done.rows:
            logger.info(
                "pruned: %d finished tasks, %d runs and %d node rows past their retention",
                done.tasks,
                done.runs,
                done.nodes,
                extra={"action": "pruned", "tasks": done.tasks, "runs": done.runs},
            )
            from django_htask.models import Node  # noqa: PLC0415 - the signal's sender

            rows_pruned.send_robust(
                sender=Node,
                node=self.ctx.node_id,
                tasks=done.tasks,
                runs=done.runs,
                nodes=done.nodes,
            )
        self._later(self.interval, self.prune)
