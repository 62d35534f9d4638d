"""What the node's workers are doing: the tasks and schedule runs handed to them, and
which of those have had their function called."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from django_htask.store import RunOutcome, StartedTask

__all__ = ["Running", "Snapshot"]


@dataclass(frozen=True)
class Snapshot:
    """The jobs not finished, at one moment (for a node that stops)."""

    tasks: list[StartedTask]
    runs: list[int]
    calling: set[tuple[str, int]]


class Running:
    """The jobs handed to the workers and not finished, and per schedule how many of its
    runs are among them (overlap). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[int, StartedTask] = {}
        self._runs: dict[int, tuple[int, RunOutcome]] = {}  # run id -> (schedule, started)
        self._busy: dict[int, int] = {}  # schedule id -> its runs here
        #: The jobs whose function has been called: ("task", id) or ("run", run id).
        self._calling: set[tuple[str, int]] = set()
        self.refusing = False  # set when the node stops: a job not called yet is not run

    def __len__(self) -> int:
        with self._lock:
            return len(self._tasks) + len(self._runs)

    def add_tasks(self, tasks: list[StartedTask]) -> None:
        with self._lock:
            for task in tasks:
                self._tasks[task.id] = task

    def add_run(self, schedule_id: int, run_id: int, started: RunOutcome) -> None:
        with self._lock:
            self._busy[schedule_id] = self._busy.get(schedule_id, 0) + 1
            self._runs[run_id] = (schedule_id, started)

    def busy(self, schedule_id: int) -> int:
        """How many runs of the schedule this node is running."""
        with self._lock:
            return self._busy.get(schedule_id, 0)

    def call(self, key: tuple[str, int]) -> bool:
        """A worker is about to call the job's function: False if it must not (the node
        is stopping: the job is handed back, not run)."""
        with self._lock:
            if self.refusing:
                return False
            self._calling.add(key)
            return True

    def task_done(self, task_id: int) -> None:
        with self._lock:
            self._calling.discard(("task", task_id))
            self._tasks.pop(task_id, None)

    def run_done(self, schedule_id: int, run_id: int) -> None:
        with self._lock:
            self._calling.discard(("run", run_id))
            self._runs.pop(run_id, None)
            left = self._busy.get(schedule_id, 1) - 1
            if left:
                self._busy[schedule_id] = left
            else:
                self._busy.pop(schedule_id, None)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(list(self._tasks.values()), list(self._runs), set(self._calling))
