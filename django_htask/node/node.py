"""The node: one ``runscheduler`` process's life, from start to stop.

It wires the parts (firing schedules, claiming tasks, liveness, several nodes) onto
three engine schedulers on one clock — the control thread, the workers, the heartbeat
— and runs the poll that reads what other processes changed. See
:mod:`django_htask.node` for the whole picture.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from django_htask import clock as clocks
from django_htask import notices
from django_htask._version import __version__
from django_htask.conf import POOLS, HtaskSettings, get_settings
from django_htask.engine import Clock
from django_htask.engine import Scheduler as EngineScheduler
from django_htask.exceptions import NodeFenced
from django_htask.queues import ALL, QueueFilter, QueueStates
from django_htask.retry import RetryPolicy
from django_htask.store import (
    DJANGO_CONNECTIONS,
    Serving,
    Store,
    ThreadConnections,
    get_store,
)

from .context import NodeContext, Results
from .control import ControlThread, DatabaseBackoff, Once
from .executors import Executor, ProcessExecutor, ThreadExecutor
from .firing import Firing
from .lane import Lane
from .liveness import Liveness
from .membership import Membership, NodeRoles
from .processes import ProcessPool
from .pruning import Pruner
from .queues import QueueWatch
from .shutdown import shut_down, shut_down_fenced
from .supervisor import ABORTED, Supervisor
from .tasks import TaskDispatch

__all__ = ["EXIT_STUCK", "Node", "NodeStats", "new_node_id"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The exit status of a node that gave up more than ``MAX_ABANDONED_THREADS`` worker
#: threads stuck in their calls: ``runscheduler`` starts afresh in a new process image,
#: or, with ``--exit-when-stuck``, exits with it for its supervisor to restart it.
EXIT_STUCK = 4


def new_node_id(kind: str | None = None) -> str:
    """``host-pid-random`` (or ``host-pid-kind`` for a process that is no node, such as
    ``htask run``): the one format of the ids that runs and tasks name."""
    suffix = kind or secrets.token_hex(3)
    return f"{socket.gethostname()}-{os.getpid()}-{suffix}"


@dataclass(frozen=True)
class NodeStats:
    """What a node loaded at start (for the banner)."""

    schedules: int
    pending_tasks: int
    next_task_due: datetime | None


def _node_settings(
    settings: HtaskSettings, pool: str | None, poll_interval: float | None
) -> HtaskSettings:
    """``settings`` with a node's own ``pool`` and ``poll_interval``, when it is given
    them, in place of the configured ones."""
    if pool is not None and pool != settings.pool:
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {', '.join(POOLS)}, got {pool!r}")
        settings = dataclasses.replace(settings, pool=pool)
    interval = settings.poll_interval if poll_interval is None else float(poll_interval)
    if not 0 < interval < math.inf:
        raise ValueError(f"poll_interval must be a finite number > 0, got {poll_interval!r}")
    if interval != settings.poll_interval:
        settings = dataclasses.replace(settings, poll_interval=interval)
    return settings


def _process_pool(settings: HtaskSettings, node_id: str, clock: Clock, workers: int) -> ProcessPool:
    """The worker processes of a node with ``pool="process"``: one per worker, replaced
    at the limits the settings give."""
    return ProcessPool(
        node_id,
        clock,
        workers,
        max_tasks=settings.max_tasks_per_child,
        max_memory=settings.max_memory_per_child,
        max_result=settings.result_max_bytes,
    )


class Node:
    """One scheduler process over a store (see :mod:`django_htask.node`).

    ``queues``, ``backend``: what it serves (``runscheduler --queue``, ``--backend``);
    ``max_tasks``: stop after that many one-off tasks; ``batch``: stop once nothing is
    due and nothing runs. ``connections``: what its threads do with the database
    connections it cannot see (Django's, by default: a task's own ORM use)."""

    def __init__(
        self,
        *,
        node_id: str | None = None,
        workers: int | None = None,
        poll_interval: float | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
        settings: HtaskSettings | None = None,
        queues: QueueFilter = ALL,
        backend: str | None = None,
        max_tasks: int | None = None,
        batch: bool = False,
        pool: str | None = None,
        connections: ThreadConnections = DJANGO_CONNECTIONS,
    ) -> None:
        if max_tasks is not None and not max_tasks > 0:
            raise ValueError(f"max_tasks must be greater than zero, got {max_tasks!r}")
        self.settings = settings = _node_settings(settings or get_settings(), pool, poll_interval)
        self.clock = clock if clock is not None else clocks.get_clock()
        self.node_id = node_id or new_node_id()
        self.workers = settings.workers if workers is None else workers
        self.poll_interval = settings.poll_interval
        self.store = store or get_store()
        self.connections = connections
        #: The tasks it runs and the schedules it fires (queues, a django.tasks alias).
        self.serving = Serving(queues, backend)
        self.max_tasks = max_tasks
        self.batch = batch
        self.task_retry = RetryPolicy(settings.retry_backoff, settings.retry_backoff_max)
        #: Set by :meth:`request_stop` (from a signal handler: a plain flag, no lock),
        #: by a node that finds it was declared dead, and when it is done.
        self.stop_requested = False
        #: Runs still going when :meth:`stop` gave up waiting (the process must exit).
        self.unfinished = 0
        #: Why the node asked to stop by itself (``max_tasks``, ``batch``), if it did.
        self.done = ""
        self.fenced: NodeFenced | None = None
        #: The process's exit status when the node asks to stop for a fault (else 0).
        self.exit_status = 0
        self._stopping = False
        self._started = False
        self._unsubscribe: Callable[[], None] = lambda: None
        self._parts: _Parts | None = None  # once started
        #: The worker processes (``pool="process"``), started with the node.
        self.processes: ProcessPool | None = None
        #: Where the calls run: the worker threads, or those processes.
        self.executor: Executor = ThreadExecutor()
        if settings.pool == "process":
            self.processes = _process_pool(settings, self.node_id, self.clock, self.workers)
            self.executor = ProcessExecutor(self.processes)

    @property
    def parts(self) -> _Parts:
        """The parts of a started node."""
        if self._parts is None:
            raise RuntimeError(f"node {self.node_id} is not started")
        return self._parts

    @property
    def membership(self) -> Membership | None:
        """The several-node part, if the store supports several nodes."""
        return self._parts.membership if self._parts is not None else None

    # -- life cycle ------------------------------------------------------------------
    def start(self, *, sync: Callable[[], object] | None = None) -> NodeStats:
        """Check the database, register the node, run ``sync`` (the code-defined
        schedules: ``runscheduler`` passes ``decorators.sync_schedules``), load the
        schedules, and start firing."""
        if self._started:
            raise RuntimeError(f"node {self.node_id} is already started")
        self._started = True
        store, now = self.store, self.clock.now()
        self._with_retry(store.check_migrated)
        self._with_retry(store.install)
        self.executor.start()  # ImproperlyConfigured if processes cannot set Django up
        taken = self._with_retry(
            lambda: store.take_over(
                self.node_id, now, self.settings.dead_before(now), self.task_retry
            )
        )
        if taken:
            logger.warning(
                "node %s: a process that ran under this id did not stop (killed?): "
                "handed back what it held (%d rows)",
                self.node_id,
                taken,
                extra={"action": "took_over", "rows": taken},
            )
        self._with_retry(
            lambda: store.register_node(
                self.node_id,
                socket.gethostname(),
                os.getpid(),
                __version__,
                now,
                self.serving.schedules,
            )
        )
        if sync is not None:
            self._with_retry(lambda: store.attempt(sync))
        states = self._with_retry(store.queue_states)  # started while paused: paused
        self.serving = dataclasses.replace(self.serving, states=states)
        parts = self._parts = self._wire()
        if store.single_host:
            self._with_retry(parts.liveness.declare_gone_predecessors)
        if parts.membership is not None:
            self._with_retry(parts.membership.start)
        refs, top = self._with_retry(store.load_schedules)
        parts.firing.load(refs, top)
        pending = self._with_retry(store.count_pending_tasks)
        due, first = self._with_retry(lambda: store.task_outlook(now, self.serving))
        self._unsubscribe = notices.subscribe(self.wake)
        parts.ctx.control.later(0, self._poll)
        parts.liveness.start()
        parts.pruner.start()
        logger.info(
            "node %s started: %d schedules, %d pending tasks",
            self.node_id,
            len(refs),
            pending,
            extra={"action": "node_started"},
        )
        return NodeStats(len(refs), pending, now if due else first)

    def _wire(self) -> _Parts:
        """Make the threads and the parts."""
        backoff = self._backoff()
        close = self.connections.close  # each thread closes its connections as it ends
        control = ControlThread(self.node_id, self.clock, backoff, self._on_fenced, close)
        jobs = EngineScheduler(
            self.workers, clock=self.clock, name=f"{self.node_id}-jobs", on_thread_exit=close
        )

        def dispatch() -> None:
            # The results ask for the dispatch that writes them, which reads them: the
            # one cycle, bound late here (``tasks`` is made below, before a job ends).
            tasks.ask()

        results = Results(dispatch)
        ctx = NodeContext(
            self.node_id,
            self.clock,
            self.settings,
            self.store,
            self.serving,
            self.workers,
            control,
            jobs,
            self.task_retry,
            results,
            stopping=lambda: self._stopping or self.fenced is not None,
            connections=self.connections,
        )
        if self.settings.async_lane and self.executor.lane:
            lane = Lane(self.node_id, self.clock, ctx.running, self.workers, close)
            ctx.lane, ctx.running.freed = lane, lane.freed
        supervisor = Supervisor(ctx, self._too_many_stuck, self.executor)
        roles = NodeRoles(ctx) if self.store.supports_several_nodes else None
        firing = Firing(ctx, supervisor, roles)
        tasks = TaskDispatch(
            ctx, supervisor, self.max_tasks, self._stop_when_done, self.executor.gather
        )
        queues = QueueWatch(ctx, firing, tasks)
        membership = None
        if roles is not None:
            membership = Membership(ctx, roles, firing, self.wake, queues.request.request)
        on_beat = membership.refresher.request if membership is not None else _nothing
        liveness = Liveness(ctx, self._on_fenced, self.wake, on_beat)
        waker = control.once(self._on_wake)
        pruner = Pruner(ctx, self._prune_turn)
        return _Parts(ctx, firing, tasks, liveness, membership, waker, supervisor, queues, pruner)

    def _prune_turn(self) -> bool:
        """Whether this node prunes now: the live node with the smallest id does (a
        store of one host has one node)."""
        if not self.store.supports_several_nodes:
            return True
        live = self.store.live_nodes(self.settings.dead_before(self.clock.now()))
        return not live or min(live) == self.node_id

    def _backoff(self) -> DatabaseBackoff:
        s = self.settings
        return DatabaseBackoff(s.db_retry, s.db_retry_max, self.store.close, self.clock.monotonic)

    def _with_retry(self, fn: Callable[[], T]) -> T:
        """Run a start-up step, retrying while the database is unavailable (until a stop
        is requested: then :class:`~django_htask.exceptions.StartAborted`)."""
        return self._backoff().retrying(
            fn, lambda: self._stopping or self.stop_requested, f"node {self.node_id}"
        )

    def request_stop(self) -> None:
        """Ask the process running the node to stop (safe in a signal handler: a flag)."""
        self.stop_requested = True

    def _on_fenced(self, exc: NodeFenced) -> None:
        """This node was declared dead by the others: start nothing more, stop."""
        if self.fenced is not None:
            return
        self.fenced = exc
        logger.error(
            "%s; this node starts nothing more, writes nothing more, and stops "
            "(start it again: it joins under a new id)",
            exc,
            extra={"action": "node_fenced", "node": self.node_id},
        )
        self.stop_requested = True

    def _too_many_stuck(self, stuck: int) -> None:
        """More worker threads are stuck than ``MAX_ABANDONED_THREADS``: stop, so that
        a fresh process (``runscheduler`` starting afresh, or the supervisor it exits
        to with status :data:`EXIT_STUCK`) runs with all its capacity. :attr:`done`
        says how many are stuck once the node has stopped: more may be given up while
        it stops."""
        logger.error(
            "node %s: %s in calls that did not stop when forced (more than "
            "MAX_ABANDONED_THREADS %d): stopping (status %d)",
            self.node_id,
            _threads_stuck(stuck),
            self.settings.max_abandoned_threads,
            EXIT_STUCK,
            extra={"action": "node_stuck", "stuck": stuck},
        )
        self.exit_status = EXIT_STUCK
        self.stop_requested = True

    @property
    def stuck_threads(self) -> int:
        """Worker threads given up, still stuck in their calls (what the heartbeat
        writes on the node's row)."""
        return self._parts.ctx.stuck_threads() if self._parts is not None else 0

    # -- looking at the database -----------------------------------------------------
    def wake(self) -> None:
        """Look at the database now (a change in this process, or a notification)."""
        if self._parts is not None and not self._stopping:
            self._parts.waker.request()

    def _look(self) -> None:
        self.parts.firing.sync()
        self.parts.tasks.watch()
        self._look_for_aborts()

    def _look_for_aborts(self) -> None:
        """Stop the running jobs whose abort was asked for (reads only while jobs run)."""
        parts = self.parts
        if not len(parts.ctx.running):
            return
        for key in self.store.aborts(self.node_id):
            parts.supervisor.stop(key, ABORTED)

    def _on_wake(self) -> None:
        if self._stopping:
            return
        self.parts.ctx.control.guarded(self._look, "wake-up")
        self.parts.tasks.dispatch()

    def _poll(self) -> None:
        """Every ``POLL_INTERVAL``: read what changed, look for tasks, claim."""
        if self._stopping:
            return
        control = self.parts.ctx.control

        def look() -> None:
            self.store.refresh()
            self.parts.queues.refresh()
            self._look()

        ok = control.guarded(look, "poll")
        self.parts.tasks.dispatch()
        control.later(self.poll_interval if ok else control.backoff.delay, self._poll)

    def _stop_when_done(self) -> None:
        """Ask the process to stop when ``max_tasks`` tasks have run, or, in batch mode,
        when nothing is due any more and nothing runs."""
        if self.stop_requested or not (self.batch or self.max_tasks is not None):
            return
        parts = self.parts
        tasks, ctx, firing = parts.tasks, parts.ctx, parts.firing
        busy = len(ctx.running) + len(ctx.results)
        if self.max_tasks is not None and tasks.finished >= self.max_tasks and not busy:
            why = f"ran the maximum of {self.max_tasks} tasks (--max-tasks)"
        elif self.batch and not (tasks.due or busy or firing.due_now(self.clock.now())):
            why = "nothing is due any more (--batch)"
        else:
            return
        logger.info("node %s: %s: stopping", self.node_id, why, extra={"action": "node_done"})
        self.done = why
        self.stop_requested = True

    # -- stopping --------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self, timeout: float | None = None) -> None:
        """Stop taking work, let running jobs finish (up to ``timeout`` seconds, default
        ``SHUTDOWN_TIMEOUT``), and write it all down. Safe to call twice.

        Jobs still running after the timeout cannot be stopped from here: see
        :mod:`~django_htask.node.shutdown`; :attr:`unfinished` says how many there were,
        and the caller must then end the process at once (``runscheduler`` does)."""
        if self._stopping:
            return
        self._stopping = True
        self._unsubscribe()
        if self._parts is None:
            self.executor.close()
            return
        parts = self._parts
        if parts.membership is not None:
            parts.membership.close()
        parts.pruner.close(timeout)
        try:
            if self.fenced is not None:
                self.unfinished = shut_down_fenced(parts.ctx, parts.liveness)
                return
            timeout = self.settings.shutdown_timeout if timeout is None else timeout
            self.unfinished = shut_down(parts.ctx, parts.liveness, timeout, self._on_fenced)
        finally:
            parts.supervisor.close()  # it times jobs out while the node waits for them
            if self.exit_status == EXIT_STUCK:  # counted now: one number, the last
                stuck = _threads_stuck(self.stuck_threads)
                self.done = f"{stuck} (more than MAX_ABANDONED_THREADS)"

    # -- state, for tests and the banner ---------------------------------------------
    def placed_schedules(self) -> dict[int, datetime]:
        """Schedule id -> due time, as placed (owned or stood by for)."""
        return self._parts.firing.placed() if self._parts is not None else {}

    def owned_schedules(self) -> dict[int, datetime]:
        return self._parts.firing.owned() if self._parts is not None else {}

    @property
    def queue_states(self) -> QueueStates:
        """The queues paused and limited, as the node last read them."""
        return self._parts.ctx.serving.states if self._parts is not None else self.serving.states

    def next_task_wake(self) -> datetime | None:
        """When the node looks for due one-off tasks next (its timer), if it has one."""
        handle = self._parts.tasks.next_wake() if self._parts is not None else None
        return None if handle is None else handle.when

    def running(self) -> int:
        """Jobs handed to the workers and not finished."""
        return len(self._parts.ctx.running) if self._parts is not None else 0

    def idle(self) -> bool:
        if self._parts is None:
            return True
        ctx = self._parts.ctx
        parts = self._parts
        schedulers = (ctx.control.scheduler, ctx.jobs, parts.liveness.beat, parts.pruner.thread)
        return all(s.idle() for s in schedulers) and (ctx.lane is None or ctx.lane.idle())


def _nothing() -> None:
    pass


def _threads_stuck(n: int) -> str:
    return f"{n} worker {'thread is' if n == 1 else 'threads are'} stuck"


@dataclass(frozen=True)
class _Parts:
    """A started node's parts."""

    ctx: NodeContext
    firing: Firing
    tasks: TaskDispatch
    liveness: Liveness
    membership: Membership | None
    waker: Once
    supervisor: Supervisor
    queues: QueueWatch
    pruner: Pruner
