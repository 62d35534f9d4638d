"""Where a node's calls run: on its worker threads or in worker processes, behind one
interface (:class:`Executor`), so that the supervisor and the dispatch never ask which.

An executor makes a job's call on the worker thread that asks (:meth:`Executor.execute`)
and does the two forceful steps of stopping one (docs/timeouts.md): raise in the call
(:meth:`Executor.force`) and, when that did not end it, give it up
(:meth:`Executor.give_up`). The cooperative first step, cancelling the job's token, is
the same for both and stays with the supervisor.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable

from django_htask.engine import RunGuard
from django_htask.store import RunOutcome

from .context import NodeContext
from .execution import Call, execute, given_up
from .processes import ProcessPool
from .running import Called, Key

__all__ = ["GATHER", "Executor", "ProcessExecutor", "ThreadExecutor"]

logger = logging.getLogger(__name__)

#: With worker processes, how long a round waits for the task calls just handed out
#: (see :meth:`~django_htask.node.tasks.TaskDispatch.ask`): a process's call ends
#: a round trip later than a thread's, and ends that come together are written in one
#: transaction.
GATHER = 0.005


class Executor(abc.ABC):
    """How a node runs its calls (see the module)."""

    #: Seconds the task dispatch lets the ends of calls gather before it writes them
    #: (0: each is written as it comes).
    gather = 0.0
    #: Whether the node's ``async def`` tasks may run on its async lane
    #: (:mod:`~django_htask.node.lane`), in this process, rather than here.
    lane = False

    @abc.abstractmethod
    def start(self) -> None:
        """Get ready before the node registers (ImproperlyConfigured if it cannot)."""

    @abc.abstractmethod
    def execute(
        self,
        ctx: NodeContext,
        key: Key,
        call: Call,
        guard: RunGuard,
        on_start: Callable[[], object],
    ) -> RunOutcome:
        """Make ``call`` for the worker thread that asks; its outcome (never raises).
        ``on_start`` is called as the call begins (its timeout counts from there)."""

    @abc.abstractmethod
    def force(self, key: Key, called: Called) -> bool:
        """Raise :class:`~django_htask.engine.ForcedStop` in the call of ``called``;
        False if it is not in its call any more."""

    @abc.abstractmethod
    def give_up(self, ctx: NodeContext, key: Key, called: Called) -> bool:
        """End a call that did not stop when forced. True if its worker thread was given
        up: its run is then recorded here; False if the worker thread records it, or
        the call is over."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what it holds; a call still going is ended."""


class ThreadExecutor(Executor):
    """The calls on the worker threads themselves: forced by an exception raised in
    the thread, given up by replacing the thread (its call goes on, unwatched)."""

    lane = True

    def start(self) -> None:
        pass  # the worker threads are the node's own, started with it

    def close(self) -> None:
        pass  # nor are they closed here: the node's worker pool ends them

    def execute(
        self,
        ctx: NodeContext,
        key: Key,
        call: Call,
        guard: RunGuard,
        on_start: Callable[[], object],
    ) -> RunOutcome:
        return execute(
            call,
            clock=ctx.clock,
            refresh=ctx.connections.refresh,
            guard=guard,
            max_result=ctx.settings.result_max_bytes,
            on_start=on_start,
        )

    def force(self, key: Key, called: Called) -> bool:
        return called.guard.interrupt()

    def give_up(self, ctx: NodeContext, key: Key, called: Called) -> bool:
        guard = called.guard
        if not guard.abandon():
            return False
        # Recorded before the thread leaves the pool: a node that stops waits for the
        # pool, then takes the results and hands back what still runs, so the run must
        # be in one or the other by then, never between.
        called.finish(
            given_up(called.call, called.started_at, guard.reason or "", guard.retryable, ctx.clock)
        )
        ctx.jobs.replace_worker(called.thread)
        stuck = ctx.stuck_threads()
        logger.error(
            "%s %s: its thread did not return when forced and was given up (%d stuck)",
            *key,
            stuck,
            extra={"action": "worker_given_up", "job": key, "stuck": stuck},
        )
        return True


class ProcessExecutor(Executor):
    """The calls in the worker processes of a :class:`ProcessPool`: forced by a signal
    in the process, given up by killing it (the worker thread waiting on it then
    records the run)."""

    gather = GATHER

    def __init__(self, pool: ProcessPool) -> None:
        self.pool = pool

    def start(self) -> None:
        self.pool.start()

    def execute(
        self,
        ctx: NodeContext,
        key: Key,
        call: Call,
        guard: RunGuard,
        on_start: Callable[[], object],
    ) -> RunOutcome:
        return self.pool.execute(key, call, guard, on_start)

    def force(self, key: Key, called: Called) -> bool:
        return self.pool.force(key)

    def give_up(self, ctx: NodeContext, key: Key, called: Called) -> bool:
        pid = self.pool.kill(key)
        if pid is not None:
            logger.error(
                "%s %s: its worker process %d did not stop when forced: killed",
                *key,
                pid,
                extra={"action": "process_killed", "job": key, "pid": pid},
            )
        return False

    def close(self) -> None:
        self.pool.close()
