"""What the node's workers are doing: the tasks and schedule runs handed to them, which
of those have had their function called, and each one's stop switch (a
:class:`~django_htask.engine.RunGuard`, for timeouts and aborts)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django_htask.engine import RunGuard
from django_htask.store import RunOutcome, StartedTask

from .execution import Call

__all__ = ["Called", "Key", "Running", "Snapshot"]

#: A job: ("task", task id) or ("run", run id).
Key = tuple[str, int]


@dataclass(frozen=True)
class Snapshot:
    """The jobs not finished, at one moment (for a node that stops)."""

    tasks: list[StartedTask]
    runs: list[int]
    calling: set[Key]
    #: The jobs an abort asked to stop (not to be retried).
    aborted: frozenset[Key] = frozenset()


@dataclass(frozen=True, slots=True, eq=False)
class Called:
    """A job whose function a worker called: what the watchdog needs to give it up
    (``finish`` records an outcome for it, as the worker would have)."""

    call: Call
    guard: RunGuard
    thread: threading.Thread
    started_at: datetime
    finish: Callable[[RunOutcome], None]


class Running:
    """The jobs handed to the workers and not finished, and per schedule how many of its
    runs are among them (overlap). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[int, StartedTask] = {}
        self._runs: dict[int, tuple[int, RunOutcome]] = {}  # run id -> (schedule, started)
        self._busy: dict[int, int] = {}  # schedule id -> its runs here
        self._guards: dict[Key, RunGuard] = {}  # every job handed to the workers
        #: The jobs whose function has been called.
        self._calling: dict[Key, Called] = {}
        self.refusing = False  # set when the node stops: a job not called yet is not run
        #: Called as a job ends (its place among WORKERS is free: the async lane's).
        self.freed: Callable[[], object] = _nothing

    def __len__(self) -> int:
        with self._lock:
            return len(self._tasks) + len(self._runs)

    def waiting(self) -> int:
        """How many of the jobs handed to the workers no worker has begun yet."""
        with self._lock:
            return len(self._guards) - len(self._calling)

    def in_call(self) -> int:
        """How many jobs are in their call now (lock-free: a count that may be a call
        behind)."""
        return len(self._calling)

    def add_tasks(self, tasks: list[StartedTask]) -> None:
        with self._lock:
            for task in tasks:
                self._tasks[task.id] = task
                self._guards["task", task.id] = RunGuard()

    def add_run(self, schedule_id: int, run_id: int, started: RunOutcome) -> None:
        with self._lock:
            self._busy[schedule_id] = self._busy.get(schedule_id, 0) + 1
            self._runs[run_id] = (schedule_id, started)
            self._guards["run", run_id] = RunGuard()

    def busy(self, schedule_id: int) -> int:
        """How many runs of the schedule this node is running."""
        with self._lock:
            return self._busy.get(schedule_id, 0)

    def call(
        self, key: Key, call: Call, started_at: datetime, finish: Callable[[RunOutcome], None]
    ) -> RunGuard | None:
        """A worker is about to call the job's function: its guard, or None if it must
        not (the node is stopping: the job is handed back, not run). ``finish`` records
        an outcome for the job (the watchdog's, if it gives the worker up)."""
        with self._lock:
            guard = self._guards.get(key)
            if self.refusing or guard is None:
                return None
            thread = threading.current_thread()
            self._calling[key] = Called(call, guard, thread, started_at, finish)
            return guard

    def called(self, key: Key) -> Called | None:
        """The job, if its function was called and it has not finished."""
        with self._lock:
            return self._calling.get(key)

    def guard(self, key: Key) -> RunGuard | None:
        """The stop switch of a job handed to the workers and not finished."""
        with self._lock:
            return self._guards.get(key)

    def task_done(self, task_id: int) -> None:
        key = ("task", task_id)
        with self._lock:
            self._calling.pop(key, None)
            self._guards.pop(key, None)
            self._tasks.pop(task_id, None)
        self.freed()

    def run_done(self, schedule_id: int, run_id: int) -> None:
        key = ("run", run_id)
        with self._lock:
            self._calling.pop(key, None)
            self._guards.pop(key, None)
            self._runs.pop(run_id, None)
            left = self._busy.get(schedule_id, 1) - 1
            if left:
                self._busy[schedule_id] = left
            else:
                self._busy.pop(schedule_id, None)
        self.freed()

    def snapshot(self) -> Snapshot:
        with self._lock:
            aborted = frozenset(k for k, g in self._guards.items() if g.stopped and not g.retryable)
            return Snapshot(
                list(self._tasks.values()), list(self._runs), set(self._calling), aborted
            )


def _nothing() -> None:
    pass
