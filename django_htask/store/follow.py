"""What follows the end of a task that others wait on, or that belongs to a batch: one
procedure (:func:`follow`) over a few reads and writes that each store implements
(:class:`FollowIO`), run in the transaction that records the end.

- The tasks waiting on the ones that ended are locked (in id order) and each edge from
  an ended task counts: met (it succeeded, or the edge runs anyway) takes one from the
  waiting task's ``waiting_on``; at 0 it is released (pending, with the results it
  receives, :func:`~django_htask.store.rules.bound_payload`); broken (it failed or was
  cancelled) cancels it with the reason. A task cancelled so has ended too: the tasks
  waiting on it follow, level by level.
- The batches of every task that ended (those given and those cancelled above) are
  locked (in id order) and moved by :func:`~django_htask.store.rules.batch_moved`;
  their callbacks released or cancelled.

Each waiting task's row is locked before it is read, and a batch's row before it is
read: two transactions recording ends that a task or a batch waits for (on two nodes
at once) are serialised on that row, the second reading what the first committed
(READ COMMITTED on PostgreSQL and MySQL/MariaDB; SQLite has one writer), so a task is
released, and a callback called, exactly once.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from django_htask.enums import TaskStatus

from . import rules
from .rules import BatchFacts, Binding

__all__ = [
    "Edge",
    "Ended",
    "Event",
    "FollowIO",
    "Waiting",
    "events_of",
    "follow",
    "move_batches",
]


class Edge(NamedTuple):
    """``task_id`` runs after ``after_id`` (a ``Dependency`` row)."""

    task_id: int
    after_id: int
    param: str | None
    position: int | None
    run_anyway: bool


class Ended(NamedTuple):
    """A task that ended, as what follows reads it."""

    status: str
    token: str
    error: str
    batch_id: int | None
    followed: bool


class Waiting(NamedTuple):
    """A waiting task, locked."""

    token: str
    waiting_on: int
    batch_id: int | None
    followed: bool


@dataclass
class Event:
    """What the ends just recorded mean for one waiting task: ``met`` edges, and the
    reason it is cancelled if one broke."""

    met: int = 0
    broken: str | None = None


class FollowIO(Protocol):
    """The reads and writes :func:`follow` makes, in the caller's transaction."""

    def ended(self, ids: list[int]) -> dict[int, Ended]:
        """The tasks ``ids`` (which ended)."""

    def edges_after(self, ids: list[int]) -> list[Edge]:
        """The edges from the tasks ``ids`` to the tasks that run after them."""

    def lock_waiting(self, ids: list[int]) -> dict[int, Waiting]:
        """Lock the tasks ``ids`` still waiting, in id order, and read them."""

    def bindings(self, ids: list[int]) -> dict[int, list[Binding]]:
        """The results each of the tasks ``ids`` receives (those receiving none absent)."""

    def payloads(self, ids: list[int]) -> dict[int, bytes]: ...

    def write_tasks(self, changes: dict[int, dict[str, Any]]) -> None:
        """Write each task's fields, if it is still waiting."""

    def lock_batches(self, ids: list[int]) -> dict[int, BatchFacts]:
        """Lock the batches ``ids``, in id order, and read them."""

    def write_batch(self, batch_id: int, changes: dict[str, Any]) -> None: ...


def follow(
    io: FollowIO, ended: Iterable[int], now: datetime, events: dict[int, Event] | None = None
) -> bool:
    """Follow the ends of the tasks ``ended`` (and the ``events`` of waiting tasks
    known already: those just queued after tasks that had ended); return whether a
    task was released (pending now)."""
    frontier = io.ended(sorted(set(ended)))
    events = dict(events or {})
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    released = False
    while frontier or events:
        for task in frontier.values():
            if task.batch_id is not None:
                counts[task.batch_id][task.status] += 1
        _edge_events(io, frontier, events)
        if not events:
            break
        frontier, freed = _settle(io, events, now)
        released = released or freed
        events = {}
    if counts:
        released = move_batches(io, counts, now) or released
    return released


def _edge_events(io: FollowIO, ended: dict[int, Ended], events: dict[int, Event]) -> None:
    """Add to ``events`` what the ends of the tasks ``ended`` mean for the tasks that
    run after them."""
    followed = sorted(i for i, task in ended.items() if task.followed)
    if followed:
        events_of(io.edges_after(followed), ended, events)


def events_of(
    edges: Iterable[Edge], ended: dict[int, Ended], events: dict[int, Event] | None = None
) -> dict[int, Event]:
    """``events`` (new if None) with what ``edges`` from the tasks ``ended`` (those
    whose ``after_id`` is among them: the others are still to end) mean for the tasks
    that run after them; returned."""
    events = {} if events is None else events
    for edge in edges:
        after = ended.get(edge.after_id)
        if after is None:
            continue
        event = events.setdefault(edge.task_id, Event())
        if rules.edge_met(after.status, edge.run_anyway):
            event.met += 1
        elif event.broken is None:
            event.broken = rules.after_ended_reason(after.token, after.status, after.error)
    return events


def _settle(io: FollowIO, events: dict[int, Event], now: datetime) -> tuple[dict[int, Ended], bool]:
    """Apply ``events`` to their waiting tasks (locked): cancelled, released, or
    waiting on fewer. Return the tasks that ended so, and whether one was released."""
    rows = io.lock_waiting(sorted(events))
    changes: dict[int, dict[str, Any]] = {}
    ended: dict[int, Ended] = {}
    ready: list[int] = []
    for task_id, row in rows.items():
        event = events[task_id]
        if event.broken is not None:
            changes[task_id] = rules.cancelled_task(now, event.broken)
            ended[task_id] = Ended(TaskStatus.CANCELLED, row.token, event.broken, *row[2:])
        elif row.waiting_on - event.met <= 0:
            ready.append(task_id)
        else:
            changes[task_id] = {"waiting_on": row.waiting_on - event.met}
    bound = io.bindings(ready) if ready else {}
    payloads = io.payloads(sorted(bound)) if bound else {}
    released = False
    for task_id in ready:
        payload, error = None, ""
        if task_id in bound:
            payload, error = rules.bound_payload(payloads[task_id], bound[task_id])
        if error:
            changes[task_id] = rules.closed_task(TaskStatus.FAILED, now, error)
            row = rows[task_id]
            ended[task_id] = Ended(TaskStatus.FAILED, row.token, error, *row[2:])
        else:
            changes[task_id] = {**rules.released_task(payload), "waiting_on": 0}
            released = True
    io.write_tasks(changes)
    return ended, released


def move_batches(io: FollowIO, counts: Mapping[int, Mapping[str, int]], now: datetime) -> bool:
    """Move each batch of ``counts`` by the ends of its members (how many in each final
    status; none: it is only looked at, as when it is made), and release or cancel its
    callbacks; return whether one was released."""
    released = False
    for batch_id, batch in io.lock_batches(sorted(counts)).items():
        move = rules.batch_moved(batch, counts[batch_id], now)
        if move.changes:
            io.write_batch(batch_id, move.changes)
        changes = {i: rules.cancelled_task(now, why) for i, why in move.cancel.items()}
        payloads = io.payloads(move.release) if move.release else {}
        for task_id, payload in payloads.items():
            called, error = rules.callback_payload(payload, move.state)
            if called is None:
                changes[task_id] = rules.closed_task(TaskStatus.FAILED, now, error)
            else:
                changes[task_id] = {**rules.released_task(called), "waiting_on": 0}
                released = True
        if changes:
            io.write_tasks(changes)
    return released
