"""Which queues a node serves (``runscheduler --queue`` / ``--exclude-queue``).

Tasks and schedules carry a ``queue_name`` (``"default"`` unless given). A node serves
every queue unless told otherwise; what it serves is written in its ``Node`` row as a
short text, so that the other nodes share out each schedule only among the nodes that
serve its queue::

    "*"          every queue (the default)
    "a,b"        only the queues a and b
    "*,-slow"    every queue but slow
    ""           none (a node run with --backend serves no schedules)

What operators set on queues live (``pause_queue``, ``limit_queue``: the ``Queue``
rows) reaches a node as :class:`QueueStates`: the queues paused, and the limits on how
many tasks of a queue run at once across the nodes.

Pure Python: no Django import.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ALL", "DEFAULT_QUEUE", "NONE", "NO_STATES", "QueueFilter", "QueueStates"]

#: The queue of a task or schedule that names none.
DEFAULT_QUEUE = "default"
#: The longest queue name (the width of the column).
MAX_LENGTH = 100


def check_name(name: object) -> str:
    """``name`` if it can be a queue name; ValueError naming it otherwise."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > MAX_LENGTH
        or name != name.strip()
        or any(c in name for c in ",*")
        or name.startswith("-")
    ):
        raise ValueError(
            f"a queue name must be 1 to {MAX_LENGTH} characters, without ',' or '*', not "
            f"starting with '-' or a space, got {name!r}"
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """The queues served: ``only`` those (None: every queue), minus ``exclude``."""

    only: frozenset[str] | None = None
    exclude: frozenset[str] = frozenset()

    @classmethod
    def of(cls, only: Iterable[str] | None = None, exclude: Iterable[str] = ()) -> QueueFilter:
        """From queue names (``"*"`` in ``only`` means every queue); ValueError naming a
        bad name, or an ``exclude`` given with a list of queues (it would change
        nothing: name the queues wanted, or ``*`` and the ones not wanted)."""
        names = list(only or [])
        every = not names or "*" in names
        chosen = None if every else frozenset(check_name(n) for n in names)
        excluded = frozenset(check_name(n) for n in exclude)
        if excluded and chosen is not None:
            raise ValueError(
                "--exclude-queue can only be used when every queue is served "
                f"(--queue '*' or no --queue), got queues {sorted(chosen)}"
            )
        return cls(chosen, excluded)

    @classmethod
    def parse(cls, spec: str) -> QueueFilter:
        """The filter a ``Node`` row's text says (see the module); an unreadable text
        serves every queue (a newer node's format: better share too much than none)."""
        parts = [p for p in (spec or "").split(",") if p]
        if not parts:
            return NONE
        if parts[0] == "*":
            return cls(None, frozenset(p[1:] for p in parts[1:] if p.startswith("-")))
        return cls(frozenset(p for p in parts if not p.startswith("-")))

    def __str__(self) -> str:
        if self.only is None:
            return ",".join(["*", *(f"-{q}" for q in sorted(self.exclude))])
        return ",".join(sorted(self.only))

    def serves(self, queue: str) -> bool:
        if queue in self.exclude:
            return False
        return self.only is None or queue in self.only

    @property
    def serves_all(self) -> bool:
        return self.only is None and not self.exclude

    def without(self, names: frozenset[str]) -> QueueFilter:
        """The queues served but ``names`` (itself when ``names`` is empty)."""
        if not names:
            return self
        if self.only is None:
            return QueueFilter(None, self.exclude | names)
        return QueueFilter(self.only - names, self.exclude)


@dataclass(frozen=True, slots=True)
class QueueStates:
    """The queues an operator paused, and those with a limit (``limits``: ``(name, at
    most this many of its tasks running at once on all the nodes)``, by name); a queue
    in neither runs as usual. What a node holds of the ``Queue`` rows."""

    paused: frozenset[str] = frozenset()
    limits: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, rows: Iterable[tuple[str, bool, int | None]]) -> QueueStates:
        """From ``(name, paused, max_running)`` rows."""
        rows = list(rows)
        return cls(
            frozenset(name for name, paused, _limit in rows if paused),
            tuple(sorted((name, limit) for name, _paused, limit in rows if limit is not None)),
        )

    def __bool__(self) -> bool:
        return bool(self.paused or self.limits)

    def __str__(self) -> str:
        """``paused a, b; limited c 5`` (``none paused or limited``)."""
        parts = []
        if self.paused:
            parts.append(f"paused {', '.join(sorted(self.paused))}")
        if self.limits:
            parts.append("limited " + ", ".join(f"{name} {n}" for name, n in self.limits))
        return "; ".join(parts) or "none paused or limited"


ALL = QueueFilter()
NONE = QueueFilter(frozenset())
NO_STATES = QueueStates()
