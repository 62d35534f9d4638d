"""A timetable: keyed entries, each waiting for its instant, on a :class:`Scheduler`.

::

    table = Timetable(scheduler, on_due=fire)   # fire(list of (key, value)), on a worker
    table.place("report", when, value)           # hold (or move) an entry
    table.drop("report")                         # and let it go

The entries due at one instant share one timer, so a hundred thousand entries cost one
heap entry per distinct instant and a thousand due on the same second cost one timer
and one hand-off. When a timer goes off, its entries are taken out of the table and
handed to ``on_due`` together, in the order they were placed; placing them again is the
caller's business (the next occurrence, computed by the caller's own rules).

The :class:`~django_htask.engine.Cron` runner keeps its entries in one, and so does a
``runscheduler`` node for the schedules it holds: entries and arming are written once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Generic, TypeVar

from .clock import to_us
from .scheduler import Scheduler, TimerHandle

__all__ = ["Timetable"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Slot(Generic[K, V]):
    """The one timer of the entries due at one instant (``key``: its microseconds)."""

    __slots__ = ("entries", "handle", "key")

    def __init__(self, key: int) -> None:
        self.key = key
        self.entries: dict[K, V] = {}
        self.handle: TimerHandle | None = None


class Timetable(Generic[K, V]):
    """Entries by key, each due at an instant (see the module). Thread-safe."""

    def __init__(self, scheduler: Scheduler, on_due: Callable[[list[tuple[K, V]]], object]) -> None:
        self._scheduler = scheduler
        self._on_due = on_due
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[_Slot[K, V], V]] = {}
        self._slots: dict[int, _Slot[K, V]] = {}

    def place(self, key: K, when: datetime, value: V, *, at_us: int | None = None) -> None:
        """Hold ``key`` until ``when`` with ``value`` (moving it if it was held).
        ``at_us``: ``when`` in microseconds, if the caller has it. If the scheduler
        refuses the timer (closed, full), that error is raised and ``key`` is not held."""
        micros = to_us(when) if at_us is None else at_us
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._leave(old[0], key)
            slot = self._slots.get(micros)
            if slot is None:
                slot = _Slot(micros)
                slot.handle = self._scheduler.call_at(when, self._fire, slot)
                self._slots[micros] = slot
            slot.entries[key] = value
            self._entries[key] = (slot, value)

    def drop(self, key: K) -> V | None:
        """Let ``key`` go (its timer is cancelled if it was the last on it); return its
        value, or None if it was not held."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is None:
                return None
            self._leave(old[0], key)
            return old[1]

    def _leave(self, slot: _Slot[K, V], key: K) -> None:
        # Called with the lock held.
        slot.entries.pop(key, None)
        if not slot.entries and self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
            if slot.handle is not None:
                slot.handle.cancel()

    def get(self, key: K) -> V | None:
        """The value of a held entry (None if it is not held)."""
        found = self._entries.get(key)
        return None if found is None else found[1]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[K, V]]:
        """The held entries (a copy)."""
        with self._lock:
            return [(key, value) for key, (_slot, value) in self._entries.items()]

    def clear(self) -> None:
        """Let every entry go and cancel their timers."""
        with self._lock:
            slots = list(self._slots.values())
            self._slots.clear()
            self._entries.clear()
        for slot in slots:
            if slot.handle is not None:
                slot.handle.cancel()

    def _fire(self, slot: _Slot[K, V]) -> None:
        with self._lock:
            if self._slots.get(slot.key) is not slot:
                return  # moved away or cleared meanwhile
            del self._slots[slot.key]
            due = list(slot.entries.items())
            for key in slot.entries:
                del self._entries[key]
        if due:
            self._on_due(due)

    def __repr__(self) -> str:
        return f"<Timetable entries={len(self._entries)} timers={len(self._slots)}>"
