"""Tasks composed, as plain values: what a dependency's failure does to the tasks that
run after it (:class:`AfterFailure`), the cycle of a graph of tasks if it has one
(:func:`find_cycle`), and a batch's state as its callbacks and ``get_batch()`` give it
(:class:`BatchState`). Nothing here reads a table or a clock."""

from __future__ import annotations

import contextvars
import dataclasses
import enum
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "PARAM_MAX_LENGTH",
    "AfterFailure",
    "AfterRef",
    "BatchState",
    "batch_id_of",
    "building",
    "find_cycle",
    "parse_after",
]

#: The longest parameter name a result is passed under (``after={"report": ...}``).
PARAM_MAX_LENGTH = 100

N = TypeVar("N", bound=Hashable)


class AfterFailure(enum.StrEnum):
    """What happens to a task when one it runs after fails for good or is cancelled
    (``schedule(after=..., after_failure=...)``)."""

    #: It is cancelled, its last error naming the task it waited for and why.
    CANCEL = "cancel"
    #: It runs anyway, once the others ended; a result it was to receive from that
    #: task is None.
    RUN = "run"

    @classmethod
    def of(cls, value: object) -> AfterFailure:
        """``value`` checked: ValueError naming it and the choices otherwise."""
        for member in cls:
            if value == member.value:
                return member
        choices = ", ".join(repr(str(m)) for m in cls)
        raise ValueError(f"after_failure must be one of {choices}, got {value!r}")


class AfterRef(NamedTuple):
    """One task another runs after (``schedule(after=...)``): ``ref`` as the caller
    named it (a task, its token, a step of a graph), and the parameter its result is
    passed under (``param``; ``position``: its place in a list passed under it), if
    any."""

    ref: Any
    param: str | None = None
    position: int | None = None


def parse_after(after: object) -> list[AfterRef]:
    """``after`` as ``schedule()`` takes it, as a list: a sequence of tasks (each a
    task, its token, or a mapping as below), or a mapping of parameter names to a task
    (its result passed under that name) or to a list of tasks (their results, as a
    list in that order). ValueError or TypeError naming what does not fit."""
    if isinstance(after, Mapping):
        return _bound(after, set())
    if isinstance(after, str | bytes) or not isinstance(after, Iterable):
        raise TypeError(
            "after must be a list of tasks (or their tokens) or a mapping of parameter "
            f"names to tasks, got {after!r}"
        )
    refs: list[AfterRef] = []
    names: set[str] = set()
    for item in after:
        refs += _bound(item, names) if isinstance(item, Mapping) else [AfterRef(item)]
    return refs


def _bound(mapping: Mapping[Any, Any], names: set[str]) -> list[AfterRef]:
    """The tasks of one mapping of ``after``: parameter name -> task(s); ``names``:
    the names seen so far (each is given once)."""
    refs: list[AfterRef] = []
    for name, value in mapping.items():
        if not isinstance(name, str) or not name.isidentifier() or len(name) > PARAM_MAX_LENGTH:
            raise ValueError(
                f"after's keys must be parameter names (identifiers of at most "
                f"{PARAM_MAX_LENGTH} characters), got {name!r}"
            )
        if name in names:
            raise ValueError(f"after names the parameter {name!r} twice")
        names.add(name)
        if isinstance(value, list | tuple):
            refs += [AfterRef(ref, name, i) for i, ref in enumerate(value)]
        else:
            refs.append(AfterRef(value, name))
    return refs


#: The batch that ``schedule()`` calls join by default: the one a ``with batch()``
#: block of this thread (or task) is making.
_building: contextvars.ContextVar[int | None] = contextvars.ContextVar("htask_batch", default=None)


def building() -> int | None:
    """The id of the batch a ``with batch()`` block around this call is making."""
    return _building.get()


def batch_id_of(batch: object) -> int:
    """The id of ``batch``: a batch's id, or a batch (its ``id``); TypeError naming it
    otherwise."""
    pk = getattr(batch, "id", batch)
    if isinstance(pk, bool) or not isinstance(pk, int):
        raise TypeError(f"batch must be a batch or its id, got {batch!r}")
    return pk


def find_cycle(after: Mapping[N, Iterable[N]]) -> list[N] | None:
    """A cycle of the graph whose node ``n`` runs after each of ``after[n]`` (nodes
    outside the mapping have no edges), as the nodes along it, the first one repeated
    last (``[a, b, a]``: a after b after a); None when there is none."""
    state: dict[N, int] = {}  # 1: on the path being walked, 2: done
    for start in after:
        if state.get(start):
            continue
        path: list[N] = [start]
        todo: list[Any] = [iter(after.get(start, ()))]
        state[start] = 1
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                todo.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                todo.append(iter(after.get(nxt, ())))
    return None


@dataclass(frozen=True, slots=True)
class BatchState:
    """Where a batch is (``get_batch(id)``), and what its callbacks are called with:
    its id and name, how many members it has, and how many of them succeeded, failed
    for good and were cancelled so far; when it finished (every member ended: its
    ``on_finish`` was called) and when its first member failed (its ``on_failure``
    was called), None before."""

    id: int
    name: str
    total: int
    succeeded: int
    failed: int
    cancelled: int
    finished_at: datetime | None = None
    failed_at: datetime | None = None

    @property
    def ended(self) -> int:
        """Members that ended: succeeded, failed for good or cancelled."""
        return self.succeeded + self.failed + self.cancelled

    @property
    def remaining(self) -> int:
        """Members not ended yet (waiting, pending or running)."""
        return self.total - self.ended

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def as_map(self) -> dict[str, Any]:
        """Its fields as a map (what a callback's payload holds: the binding makes a
        ``BatchState`` of it again for a parameter so annotated)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
