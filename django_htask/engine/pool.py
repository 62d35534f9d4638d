"""A worker pool that can be resized while it runs.

``WorkerPool(4)`` keeps four threads taking callables from one queue;
``WorkerPool(0)`` starts a thread for each callable instead. :meth:`WorkerPool.resize`
changes between the two, up or down, without dropping or pausing work: surplus
workers leave after the task in hand, and a pool shrinking to zero drains its queue
first. :meth:`WorkerPool.replace` gives up a worker stuck in a call (a node's forced
stop that did not take) and starts another in its place. ``on_thread_exit``, if
given, runs on each worker thread just before it ends (to close what the thread
opened: the node passes ``django.db.connections.close_all``); :meth:`WorkerPool.shutdown`
waits for it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from .errors import SchedulerClosed

__all__ = ["WorkerPool"]

logger = logging.getLogger(__name__)

_WAKE = None  # a queue item that only makes a worker look at the pool's size


class WorkerPool:
    """Threads running submitted callables; ``workers=0`` means a thread per callable.

    ``on_thread_exit()`` runs on every worker thread as it ends (an exception in it is
    logged)."""

    def __init__(
        self,
        workers: int = 4,
        name: str = "htask",
        on_thread_exit: Callable[[], object] | None = None,
    ) -> None:
        self._check_workers(workers)
        self.name = name
        self._on_thread_exit = on_thread_exit
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        #: Notified whenever a thread leaves the sets below (it ended, or was given up).
        self._left = threading.Condition(self._lock)
        self._target = 0
        self._threads: set[threading.Thread] = set()  # pool workers alive
        self._extra: set[threading.Thread] = set()  # thread-per-task threads running
        self._leaving: set[threading.Thread] = set()  # left the pool, in on_thread_exit
        self._abandoned: set[threading.Thread] = set()  # replaced, still in their call
        self._serial = 0
        self._closed = False
        self.resize(workers)

    @staticmethod
    def _check_workers(workers: object) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"workers must be an int >= 0, got {workers!r}")

    @property
    def workers(self) -> int:
        """The requested number of pool threads (0: a thread per task)."""
        return self._target

    def alive(self) -> int:
        """Threads currently alive: pool workers plus thread-per-task threads."""
        with self._lock:
            return len(self._threads) + len(self._extra) + len(self._leaving)

    def abandoned(self) -> int:
        """Threads given up by :meth:`replace` whose call has not returned yet."""
        with self._lock:
            return len(self._abandoned)

    def replace(self, thread: threading.Thread) -> bool:
        """Give up ``thread``, a worker stuck in its call: it leaves the pool (it ends
        when its call returns, if ever, and :meth:`shutdown` does not wait for it) and a
        new worker takes its place, so the pool's capacity is back. False if ``thread``
        is not a worker of this pool."""
        with self._lock:
            if thread in self._extra:  # a thread per task: nothing to start
                self._extra.discard(thread)
                self._abandoned.add(thread)
                self._left.notify_all()
                return True
            if thread not in self._threads:
                return False
            self._threads.discard(thread)
            self._abandoned.add(thread)
            self._left.notify_all()
            started = None
            if len(self._threads) < self._target and not self._closed:
                self._serial += 1
                started = threading.Thread(
                    target=self._work, name=f"{self.name}-worker-{self._serial}", daemon=True
                )
                self._threads.add(started)
        if started is not None:
            started.start()
        logger.warning(
            "worker pool %r gave up thread %s (stuck in its call) and started another",
            self.name,
            thread.name,
            extra={"action": "worker_replaced"},
        )
        return True

    def is_worker_thread(self) -> bool:
        """True when called from a thread of this pool."""
        current = threading.current_thread()
        with self._lock:
            return current in self._threads or current in self._extra

    def submit(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on a worker. Exceptions are logged; the worker lives on."""
        with self._lock:
            if self._closed:
                raise SchedulerClosed(f"worker pool {self.name!r} is shut down")
            if self._target:
                self._queue.put(fn)
                return
            self._serial += 1
            thread = threading.Thread(
                target=self._run_one,
                args=(fn,),
                name=f"{self.name}-task-{self._serial}",
                daemon=True,
            )
            self._extra.add(thread)
        thread.start()

    def resize(self, workers: int) -> None:
        """Change the number of pool threads now; running tasks are not interrupted."""
        self._check_workers(workers)
        with self._lock:
            if self._closed:
                raise SchedulerClosed(f"worker pool {self.name!r} is shut down")
            self._target = workers
            surplus = len(self._threads) - workers
            started = []
            while len(self._threads) < workers:
                self._serial += 1
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-worker-{self._serial}", daemon=True
                )
                self._threads.add(thread)
                started.append(thread)
            # Inside the lock: every callable queued before the resize is ahead of these.
            for _ in range(max(surplus, 0)):
                self._queue.put(_WAKE)
        for thread in started:
            thread.start()

    def _leave_if_surplus(self, woken: bool) -> bool:
        # Shrinking to zero, a worker leaves only on a wake-up item: those are queued
        # after every callable submitted before the resize, so the queue drains first.
        with self._lock:
            if len(self._threads) > self._target and (self._target or woken):
                current = threading.current_thread()
                self._threads.discard(current)
                if self._on_thread_exit is not None:
                    self._leaving.add(current)  # shutdown() still waits for it
                else:
                    self._left.notify_all()
                return True
            return False

    def _work(self) -> None:
        get = self._queue.get
        while True:
            fn = get()
            if fn is not None:
                self._call(fn)
                if self._abandoned and threading.current_thread() in self._abandoned:
                    self._thread_exit(self._abandoned)  # replaced while in that call
                    return
            if len(self._threads) > self._target and self._leave_if_surplus(fn is None):
                if self._on_thread_exit is not None:
                    self._thread_exit(self._leaving)
                return

    def _run_one(self, fn: Callable[[], object]) -> None:
        try:
            self._call(fn)
        finally:
            self._thread_exit(self._extra)

    def _thread_exit(self, members: set[threading.Thread]) -> None:
        """Run ``on_thread_exit`` on this ending thread, then drop it from ``members``
        (so :meth:`shutdown` returns only once it has run)."""
        try:
            if self._on_thread_exit is not None:
                self._on_thread_exit()
        except BaseException:
            logger.exception(
                "error in on_thread_exit of worker pool %r",
                self.name,
                extra={"action": "worker_exit_error"},
            )
        finally:
            with self._lock:
                members.discard(threading.current_thread())
                self._abandoned.discard(threading.current_thread())
                self._left.notify_all()

    def _call(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except BaseException:
            logger.exception(
                "uncaught error in worker pool %r", self.name, extra={"action": "worker_error"}
            )

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Stop taking work; queued work still runs. Return True if every thread ended.

        With ``wait`` it blocks until the threads have finished (at most ``timeout``
        seconds); a worker calling this does not wait for itself.
        """
        with self._lock:
            if not self._closed:
                self._closed = True
                self._target = 0
                for _ in range(len(self._threads)):
                    self._queue.put(_WAKE)
        if not wait:
            return self.alive() == 0
        deadline = None if timeout is None else time.monotonic() + timeout
        current = threading.current_thread()
        seen: set[threading.Thread] = set()
        # Woken as each thread leaves, rather than joined one by one: a thread given up
        # while it is waited for (replace) leaves without ending.
        with self._left:
            while others := (self._threads | self._extra | self._leaving) - {current}:
                seen |= others
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._left.wait(remaining)
            ended = seen - self._abandoned
        for thread in ended:  # leaving its set was its last step: it ends at once
            thread.join()
        return True

    def __repr__(self) -> str:
        return f"<WorkerPool {self.name!r} workers={self._target} alive={self.alive()}>"
