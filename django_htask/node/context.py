"""What the parts of a node share: its identity, clock, settings and store, the
control thread, the workers, the jobs running and the results waiting to be written."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from django_htask.conf import HtaskSettings
from django_htask.engine import Clock
from django_htask.engine import Scheduler as EngineScheduler
from django_htask.retry import RetryPolicy
from django_htask.store import RunOutcome, Serving, Store, ThreadConnections

from .control import ControlThread
from .lane import Lane
from .running import Running

__all__ = ["NodeContext", "Results"]


class Results:
    """Finished runs waiting to be written (in batches, with the next claim)."""

    def __init__(self, on_push: Callable[[], object]) -> None:
        self._lock = threading.Lock()
        self._waiting: list[RunOutcome] = []
        #: Called after each push (the node asks for a dispatch: a worker is free).
        self._on_push = on_push

    def __len__(self) -> int:
        return len(self._waiting)

    def push(self, outcome: RunOutcome) -> None:
        with self._lock:
            self._waiting.append(outcome)
        self._on_push()

    def take(self) -> list[RunOutcome]:
        with self._lock:
            taken, self._waiting = self._waiting, []
        return taken

    def put_back(self, outcomes: list[RunOutcome]) -> None:
        """Outcomes that could not be written (the database away): first in line."""
        with self._lock:
            self._waiting[:0] = outcomes

    def clear(self) -> None:
        with self._lock:
            self._waiting.clear()


@dataclass
class NodeContext:
    """The node's shared state (one per node; see the module)."""

    node_id: str
    clock: Clock
    settings: HtaskSettings
    store: Store
    serving: Serving
    workers: int
    control: ControlThread
    jobs: EngineScheduler
    task_retry: RetryPolicy
    #: The runs finished and not yet written (schedule runs and tasks alike).
    results: Results
    running: Running = field(default_factory=Running)
    #: Whether the node stops: nothing new is started.
    stopping: Callable[[], bool] = lambda: False
    #: What its threads do with the database connections the node cannot see (a
    #: worker's, around each call; every thread's, as it ends).
    connections: ThreadConnections = field(default_factory=ThreadConnections)
    #: Where the node's ``async def`` tasks run, if not on the workers (worker threads).
    lane: Lane | None = None

    def stuck_threads(self) -> int:
        """Worker threads given up, and loops of the async lane, still stuck in a call."""
        lane = self.lane
        return self.jobs.abandoned_workers() + (lane.stuck() if lane is not None else 0)
