"""For tests: tasks run in the test's process, assertions on what was scheduled, and a
node with no database.

**Eager mode.** With ``HTASK["EAGER"] = True`` (or the pytest fixture
``htask_eager``), a task due now runs in the process that scheduled it as soon as the
transaction that wrote it commits (in a Django ``TestCase``, whose own transaction
never commits: at once, unless the test's code opened a transaction of its own). It
runs through the same code as on a node: its arguments stored and read back, its
result recorded, its retries written as pending tasks due later. :func:`drain` runs
what is due now, for example after moving a ``FakeClock`` on::

    from django_htask.testing import assert_scheduled, drain

    def test_the_reminder_fires(htask_clock):
        reminder = make_reminder(due_in=timedelta(hours=1))
        assert_scheduled(fire_reminder, reminder.pk)
        htask_clock.advance(3600)
        assert drain().succeeded == 1

**Assertions.** :func:`scheduled` lists the tasks waiting to run (pending or waiting
for other tasks), their arguments read back as a node would bind them;
:func:`assert_scheduled` and :func:`refute_scheduled` check for one.

**Without a database.** :class:`InMemoryStore` implements the whole store interface in
memory, so a :class:`~django_htask.node.Node` runs on it as on a database — firing
schedules, claiming tasks, retrying, reaping — driven by the engine's
:class:`~django_htask.engine.FakeClock`, with no database and no sleep::

    from django_htask.engine import FakeClock
    from django_htask.node import Node
    from django_htask.testing import InMemoryStore

    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    store = InMemoryStore(clock)
    report = store.add_schedule("report", "myapp.tasks:report", "@every 1h")
    node = Node(store=store, clock=clock, node_id="test")
    node.start()
    clock.advance(3600)                   # the report ran once
    assert store.runs_of(schedule_id=report)[0].status == "succeeded"
    node.stop()

The functions must be registered (``@task``); Django's settings must be configured
(the node reads ``HTASK``), not a database.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .db import scheduler_alias
from .eager import Drained, DrainLimitReached, drain
from .engine import CALL_ERRORS, registry
from .functions import function_name
from .models import Task, TaskStatus
from .node.execution import call_of
from .store.memory import InMemoryStore, NodeRecord, ScheduleRecord, TaskRecord

__all__ = [
    "DrainLimitReached",
    "Drained",
    "InMemoryStore",
    "NodeRecord",
    "ScheduleRecord",
    "ScheduledCall",
    "TaskRecord",
    "assert_scheduled",
    "drain",
    "refute_scheduled",
    "scheduled",
]

#: The statuses of a task that has not run yet: due later, or waiting for other tasks.
NOT_RUN = (TaskStatus.PENDING, TaskStatus.WAITING)


@dataclass(frozen=True)
class ScheduledCall:
    """A task waiting to run, its arguments read back from the stored payload."""

    task: Task
    #: The positional and keyword arguments, as the function receives them (converted
    #: to its annotations); as stored when they no longer fit the function.
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: Every parameter's value, defaults included (None when the arguments no longer
    #: fit the function: its run would fail).
    arguments: Mapping[str, Any] | None

    @property
    def function(self) -> str:
        return self.task.function

    @property
    def token(self) -> str:
        return self.task.token

    @property
    def run_at(self) -> datetime:
        return self.task.run_at

    def __str__(self) -> str:
        arguments = _listed_arguments(self.args, self.kwargs)
        return f"{self.function}({arguments}) at {self.run_at:%Y-%m-%d %H:%M:%S}"


def scheduled(
    fn: Callable[..., Any] | str | None = None,
    *,
    queue_name: str | None = None,
    using: str | None = None,
) -> list[ScheduledCall]:
    """The tasks that have not run yet (pending, or waiting for other tasks), of
    ``fn`` (a registered function or its name; default: every function) and of
    ``queue_name``, oldest first."""
    rows = Task.objects.using(using or scheduler_alias()).filter(status__in=NOT_RUN)
    if fn is not None:
        rows = rows.filter(function=function_name(fn))
    if queue_name is not None:
        rows = rows.filter(queue_name=queue_name)
    return [_read(task) for task in rows.order_by("run_at", "id")]


def _read(task: Task) -> ScheduledCall:
    args, kwargs = call_of(bytes(task.payload))
    try:
        fn, bound_args, bound_kwargs = registry.bind(task.function, args, kwargs)
        arguments = inspect.signature(fn).bind(*bound_args, **bound_kwargs)
    except CALL_ERRORS:
        return ScheduledCall(task, tuple(args), kwargs, None)
    arguments.apply_defaults()
    return ScheduledCall(task, bound_args, bound_kwargs, dict(arguments.arguments))


def _matching(
    fn: Callable[..., Any] | str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[ScheduledCall], list[ScheduledCall]]:
    """The calls of ``fn`` not run yet whose arguments include those given, and all of
    ``fn``'s (for the message)."""
    name = function_name(fn)
    try:
        expected = inspect.signature(registry.get(name)).bind_partial(*args, **kwargs).arguments
    except TypeError as exc:
        raise TypeError(f"{name} cannot take these arguments: {exc}") from None
    calls = scheduled(name)
    found = [
        call
        for call in calls
        if call.arguments is not None
        and all(p in call.arguments and call.arguments[p] == v for p, v in expected.items())
    ]
    return found, calls


def assert_scheduled(fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> ScheduledCall:
    """Assert that a call of ``fn`` waits to run with (at least) these arguments, given
    as to ``fn`` itself: positional or by name, the others not compared. Return the
    first such call (its ``task`` has the rest: ``run_at``, ``priority``, ``key``…).
    The AssertionError lists the calls of ``fn`` that wait."""
    found, calls = _matching(fn, args, kwargs)
    if not found:
        raise AssertionError(
            f"no call of {function_name(fn)} with {_shown(args, kwargs)} waits to run; "
            + _listed(calls)
        )
    return found[0]


def refute_scheduled(fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> None:
    """Assert that no call of ``fn`` with (at least) these arguments waits to run (no
    arguments: no call of ``fn`` at all)."""
    found, _calls = _matching(fn, args, kwargs)
    if found:
        raise AssertionError(
            f"{len(found)} call(s) of {function_name(fn)} with {_shown(args, kwargs)} "
            f"wait to run: " + "; ".join(str(call) for call in found)
        )


def _shown(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return f"({_listed_arguments(args, kwargs)})" if args or kwargs else "any arguments"


def _listed_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``1, 'x', b=2``: the arguments as a call writes them."""
    return ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])


def _listed(calls: list[ScheduledCall]) -> str:
    if not calls:
        return "none of its calls does"
    return f"{len(calls)} of its calls do: " + "; ".join(str(call) for call in calls[:10])
