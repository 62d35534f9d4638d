"""Keys of one-off tasks: at most one pending task per key (``schedule(key=...)``).

The rules, which every store follows (the database ones through a partial unique
index, the in-memory one under its lock):

- A key names one logical job, whatever queue it is on: at most one task with a given
  key is pending at a time, across all queues.
- Scheduling with a key another pending task holds does what ``on_conflict`` says
  (:class:`OnConflict`).
- A task put back to pending (a retry, a snooze, a lease reaped from a dead node, a
  handback at shutdown, the admin's *send again*) while a newer pending task holds its
  key is not put back: the newer one stands, and the old one is finished as
  ``cancelled`` with the reason :func:`superseded_reason`. Cancelled, not failed: it
  did not fail, a later request for the same job replaced it (and a failed one would
  invite a *send again*).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from .exceptions import DuplicateKey

__all__ = [
    "KEY_MAX_LENGTH",
    "LOCK_MAX_LENGTH",
    "OnConflict",
    "check_key",
    "check_lock",
    "resolve_keys",
    "superseded_reason",
]

#: The longest key of a one-off task.
KEY_MAX_LENGTH = 200
#: The longest lock name of a one-off task (``schedule(lock=...)``, docs/howto-exactly-one.md).
LOCK_MAX_LENGTH = 200


class OnConflict(enum.StrEnum):
    """What scheduling with a key does when a pending task already holds it."""

    #: Store nothing; return the pending task, unchanged (the default).
    IGNORE = "ignore"
    #: Move the pending task (same token) to the new call: its time, function,
    #: arguments, ``max_attempts``, ``timeout``, queue and priority, attempts from 0.
    REPLACE = "replace"
    #: Raise :class:`~django_htask.exceptions.DuplicateKey`; store nothing.
    RAISE = "raise"

    @classmethod
    def of(cls, value: object) -> OnConflict:
        """``value`` as an OnConflict; ValueError naming it and the allowed ones."""
        for member in cls:
            if isinstance(value, str) and value == member.value:
                return member
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"on_conflict must be one of {allowed}, got {value!r}")


def check_key(key: object) -> str:
    """``key`` if it is a non-empty string of at most :data:`KEY_MAX_LENGTH`
    characters; TypeError or ValueError naming it otherwise."""
    return _check_name("key", key, KEY_MAX_LENGTH)


def check_lock(lock: object) -> str:
    """``lock`` if it is a non-empty string of at most :data:`LOCK_MAX_LENGTH`
    characters; TypeError or ValueError naming it otherwise."""
    return _check_name("lock", lock, LOCK_MAX_LENGTH)


def _check_name(what: str, value: object, longest: int) -> str:
    """``value`` if it is a non-empty string of at most ``longest`` characters;
    TypeError or ValueError saying ``what`` it is and naming it otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {value!r}")
    if not value:
        raise ValueError(f"{what} must be a non-empty string, got ''")
    if len(value) > longest:
        raise ValueError(
            f"{what} must be at most {longest} characters, got {len(value)}: {value[:40]!r}…"
        )
    return value


def superseded_reason(token: str) -> str:
    """The ``last_error`` of a task not put back to pending because the pending task
    ``token`` holds its key."""
    return f"superseded by pending task {token} with the same key"


def resolve_keys(keys: Sequence[str | None], on_conflict: OnConflict) -> list[int]:
    """For each of a batch's calls (given by their keys), the place of the call whose
    row it shares: the first call with its key, or itself (no key, or the first).
    Calls with the same key are resolved as if made one after another: the first
    stands (``ignore``; with ``replace`` its row takes the last one's values), or
    :class:`DuplicateKey` naming both (``raise``)."""
    first: dict[str, int] = {}
    stands_for = []
    for i, key in enumerate(keys):
        j = i if key is None else first.setdefault(key, i)
        if j != i and on_conflict is OnConflict.RAISE:
            raise DuplicateKey(key or "", None, f"calls[{j}] and calls[{i}] both have it")
        stands_for.append(j)
    return stands_for
