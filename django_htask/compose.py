"""Tasks composed: graphs of tasks that wait for each other (:class:`Graph`, and the
:func:`chain` and :func:`group` built on it, of :func:`call` s), and batches called
back once their members end (:func:`batch`, :func:`get_batch`, :func:`current_batch`).
docs/howto-chains.md shows them at work::

    from django_htask import call, chain, group

    chain(call(resize, 7), call(upload).receiving("path"), call(notify)).schedule()
    chain(group(call(render, 1), call(render, 2)), call(total).receiving("parts")).schedule()


    from django_htask import batch, schedule

    with batch(on_success=send_report, on_failure=alert, name="report 7") as b:
        for page in pages:
            schedule(render, page)      # joins b
    b.id                                # get_batch(b.id): its progress

A callback is a registered function called with the batch's :class:`BatchState` as
its first argument (then the arguments given with it: ``on_success=(send_report,
("ops@example.com",), {})``), queued as an ordinary task with its ``@task`` options:
``on_failure`` at the first member that fails for good (a retry that later succeeds
does not count), ``on_success`` once every member succeeded, ``on_finish`` once every
member ended (succeeded, failed for good or cancelled); each exactly once, in the
transaction that records the end that decides it, whichever node writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import transaction

from . import clock
from .api import (
    BATCH_SIZE,
    SCHEDULE_OPTIONS,
    ManyCall,
    _Call,
    _checked_call,
    _Composition,
    _Options,
    _store,
    _store_parts,
    _token_of,
    schedule,
    schedule_many,
)
from .current import current_task_id
from .db import scheduler_alias
from .exceptions import BatchNotFound, DependencyCycle
from .functions import function_name
from .graph import (
    AfterFailure,
    AfterRef,
    BatchState,
    _building,
    batch_id_of,
    building,
    find_cycle,
    parse_after,
)
from .keys import check_lock
from .models import Batch as BatchRow
from .models import Task
from .queues import DEFAULT_QUEUE
from .store.composed import NewEdge, settle_batch

__all__ = [
    "Batch",
    "BatchState",
    "Call",
    "Chain",
    "Graph",
    "Group",
    "Step",
    "batch",
    "call",
    "chain",
    "current_batch",
    "get_batch",
    "group",
]

#: A callback as :func:`batch` takes it: a registered function (or its name), or
#: ``(fn, args, kwargs)``: called with the batch's state, then ``args`` and ``kwargs``.
Callback = (
    Callable[..., Any] | str | tuple[Callable[..., Any] | str, Sequence[Any], Mapping[str, Any]]
)

#: A batch's state as a callback's checked call holds it until the batch calls it.
_STATE = BatchState(0, "", 0, 0, 0, 0)


class Batch:
    """A batch of tasks, as :func:`batch` makes it and :func:`current_batch` finds it:
    its ``id`` (what :func:`get_batch` takes) and ``name``. Tasks join it by
    :meth:`schedule` and :meth:`schedule_many`, or by ``schedule()`` calls inside the
    ``with batch(...)`` block that makes it."""

    def __init__(self, batch_id: int, name: str = "") -> None:
        self.id = batch_id
        self.name = name

    def __repr__(self) -> str:
        return f"<Batch {self.id}{f' {self.name!r}' if self.name else ''}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Batch) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def schedule(self, fn_or_name: Callable[..., Any] | str, /, *args: Any, **options: Any) -> Task:
        """:func:`~django_htask.schedule` a task that joins this batch (from a member
        while it runs: a sibling, which the batch waits for too);
        :class:`~django_htask.exceptions.BatchFinished` if its members had all ended."""
        token = _building.set(self.id)
        try:
            return schedule(fn_or_name, *args, **options)
        finally:
            _building.reset(token)

    def schedule_many(self, calls: Iterable[ManyCall], **options: Any) -> list[Task]:
        """:func:`~django_htask.schedule_many` tasks that join this batch."""
        return schedule_many(calls, batch=self.id, **options)

    def state(self) -> BatchState:
        """Where it is now (:func:`get_batch`)."""
        return get_batch(self.id)


@contextmanager
def batch(
    *,
    on_success: Callback | None = None,
    on_failure: Callback | None = None,
    on_finish: Callback | None = None,
    name: str = "",
    queue_name: str = DEFAULT_QUEUE,
) -> Iterator[Batch]:
    """Make a batch: the ``schedule()`` and ``schedule_many()`` calls of the block join
    it, in one transaction with it (on the scheduler's database: nothing of it is
    stored if the block raises, and no member starts before the block ends); each
    callback is called once (see the module), on a node serving ``queue_name``.
    Callbacks are checked here (a registered function that takes the batch's state
    first): a bad one raises before anything is stored. A batch whose block added no
    member calls ``on_success`` and ``on_finish`` at once."""
    roles = {"on_success": on_success, "on_failure": on_failure, "on_finish": on_finish}
    calls = {role: _checked_callback(role, spec) for role, spec in roles.items() if spec}
    using = scheduler_alias()
    with transaction.atomic(using=using):
        callbacks = _Composition(wait_for_batch=True)
        options = _Options.of(None, None, None, queue_name, None, None)
        tasks = _store(list(calls.values()), options, BATCH_SIZE, composition=callbacks)
        ids = {f"{role}_id": task.pk for role, task in zip(calls, tasks, strict=True)}
        row = BatchRow.objects.using(using).create(name=name, **ids)
        handle = Batch(row.pk, name)
        token = _building.set(row.pk)
        try:
            yield handle
        finally:
            _building.reset(token)
        settle_batch(using, row.pk, clock.now())  # a batch of no members is complete


def _checked_callback(role: str, spec: Callback) -> _Call:
    """A callback's call, checked (its error names its role), the batch's state left
    for the batch to put in."""
    fn, args, kwargs = (spec, (), {}) if not isinstance(spec, tuple) else (*spec, {})[:3]
    try:
        name = function_name(fn)
        payload, per = _checked_call(name, (_STATE.as_map(), *args), dict(kwargs))
    except (TypeError, ValueError, LookupError) as exc:
        raise type(exc)(f"{role}: {exc}") from exc
    return name, payload, None, per


def get_batch(batch_id: int) -> BatchState:
    """Where the batch ``batch_id`` is: its counts of members by how they ended, and
    when it finished. :class:`~django_htask.exceptions.BatchNotFound` (a
    ``LookupError``) when no batch has the id."""
    row = BatchRow.objects.using(scheduler_alias()).filter(id=batch_id).first()
    if row is None:
        raise BatchNotFound(batch_id)
    return BatchState(
        row.pk,
        row.name,
        row.total,
        row.succeeded,
        row.failed,
        row.cancelled,
        row.finished_at,
        row.failed_at,
    )


def current_batch() -> Batch | None:
    """The batch of the task whose function is running in this thread (to add
    siblings: ``current_batch().schedule(...)``); None outside a task, or for a task of
    no batch."""
    task_id = current_task_id()
    if task_id is None:
        return None
    row = (
        Task.objects.using(scheduler_alias())
        .filter(id=task_id, batch__isnull=False)
        .values_list("batch_id", "batch__name")
        .first()
    )
    return None if row is None else Batch(row[0], row[1] or "")


# -- graphs ---------------------------------------------------------------------------
#: The options a step takes, as :func:`~django_htask.schedule` does (a graph's own
#: edges and its callers' keys stand for the others).
_STEP_OPTIONS = frozenset(SCHEDULE_OPTIONS) - {"key", "on_conflict", "after", "after_failure"}


class Step:
    """A task of a :class:`Graph`, not queued yet (:meth:`Graph.add`); once the graph
    is scheduled, :attr:`task` is its stored task."""

    def __init__(
        self,
        graph: Graph,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: dict[str, Any],
        after_failure: str,
    ) -> None:
        self.graph = graph
        self.name = function_name(fn)
        self.args, self.kwargs, self.options = args, kwargs, options
        self.after_failure = AfterFailure.of(after_failure)
        #: What it runs after: steps of its graph, tasks queued before (or tokens).
        self.refs: list[AfterRef] = []
        #: Its task, once the graph is scheduled.
        self.task: Task | None = None

    def __repr__(self) -> str:
        return f"<Step {self.place} {self.name}>"

    @property
    def place(self) -> int:
        """Its place in its graph (from 0, in the order added)."""
        return self.graph.steps.index(self)

    def after(self, *tasks: Any, **results: Any) -> Step:
        """Run after ``tasks`` too (steps of this graph, tasks queued before, their
        tokens), and after each task of ``results``, whose result it receives under
        that name (a list of tasks: their results as a list); return this step."""
        self.refs += parse_after([*tasks, results] if results else list(tasks))
        return self


class Graph:
    """Tasks that wait for each other, queued in one transaction by :meth:`schedule`::

        g = Graph()
        fetched = g.add(fetch, 42)
        report = g.add(render, after={"data": fetched})
        g.add(send, after=[report])
        g.schedule()

    A cycle, or a token no task has, is refused at :meth:`schedule`, and nothing is
    stored."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def add(
        self,
        fn_or_name: Callable[..., Any] | str,
        /,
        *args: Any,
        after: Any = None,
        after_failure: str = AfterFailure.CANCEL,
        **kwargs: Any,
    ) -> Step:
        """A step calling ``fn(*args, **kwargs)``, after the tasks ``after`` names (as
        :func:`~django_htask.schedule` takes it, steps of this graph included); the
        options of :func:`~django_htask.schedule` (``at``, ``delay``, ``queue_name``,
        ``max_attempts``, ``timeout``, ``retry``, ``lock``, ``max_running``,
        ``rate_limit``, ``priority``) are taken from ``kwargs``, the rest are the
        function's."""
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in _STEP_OPTIONS}
        step = self._add(fn_or_name, args, kwargs, options, after_failure)
        if after is not None:
            step.refs += parse_after(after)
        return step

    def _add(
        self,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: dict[str, Any],
        after_failure: str,
    ) -> Step:
        step = Step(self, fn, args, kwargs, options, after_failure)
        self.steps.append(step)
        return step

    def schedule(self, *, batch: Any = None) -> list[Task]:
        """Queue every step, all or none, in one transaction (joining ``batch``, or the
        one a ``with batch(...)`` block is making): a step waits (``waiting``) until
        those it runs after succeeded. Return the tasks, in the order of the steps.
        :class:`~django_htask.exceptions.DependencyCycle` if steps wait for each other
        in a cycle; ``TaskNotFound`` for a token no task has; a step's bad call raises
        its error naming the step."""
        places = {id(step): i for i, step in enumerate(self.steps)}
        edges = [self._edges(i, step, places) for i, step in enumerate(self.steps)]
        cycle = find_cycle(
            {i: [e.after for e in es if isinstance(e.after, int)] for i, es in enumerate(edges)}
        )
        if cycle is not None:
            raise DependencyCycle([repr(self.steps[i]) for i in cycle])
        parts: list[tuple[list[_Call], _Options]] = []
        for step, options in zip(self.steps, map(_step_options, self.steps), strict=True):
            payload, per = _step_payload(step)
            call = (step.name, payload, step.options.get("lock"), per)
            if parts and parts[-1][1] == options:
                parts[-1][0].append(call)
            else:
                parts.append(([call], options))
        joined = building() if batch is None else batch_id_of(batch)
        composition = _Composition(tuple(e for es in edges for e in es), joined)
        tasks = _store_parts(parts, BATCH_SIZE, composition=composition)
        for step, task in zip(self.steps, tasks, strict=True):
            step.task = task
        return tasks

    def _edges(self, i: int, step: Step, places: dict[int, int]) -> list[NewEdge]:
        """The edges of step ``i``: to a step of this graph by its place, to a task
        queued before by its token."""
        run = step.after_failure is AfterFailure.RUN
        found = []
        for ref in step.refs:
            target: int | str
            if isinstance(ref.ref, Step):
                if id(ref.ref) not in places:
                    raise ValueError(f"{step!r} runs after {ref.ref!r}, a step of another graph")
                target = places[id(ref.ref)]
            else:
                target = _token_of(ref.ref)
            found.append(NewEdge(i, target, ref.param, ref.position, run))
        return found


def _step_options(step: Step) -> _Options:
    options = step.options
    return _Options.of(
        options.get("at"),
        options.get("delay"),
        options.get("max_attempts"),
        options.get("queue_name", DEFAULT_QUEUE),
        options.get("timeout"),
        options.get("retry"),
        options.get("max_running"),
        options.get("rate_limit"),
        options.get("priority"),
    )


def _step_payload(step: Step) -> tuple[bytes, str | None]:
    """The step's call, checked (its error names the step), the results it receives
    given later; and its per key (``@task(per=...)``)."""
    later = sorted({ref.param for ref in step.refs if ref.param is not None})
    try:
        lock = step.options.get("lock")
        if lock is not None:
            check_lock(lock)
        return _checked_call(step.name, step.args, step.kwargs, later)
    except (TypeError, ValueError, LookupError) as exc:
        raise type(exc)(f"{step!r}: {exc}") from exc


# -- chains and groups, of calls ----------------------------------------------------------
class Call:
    """A call of a registered function to place in a :func:`chain` or a :func:`group`
    (:func:`call`): ``.using(...)`` gives it options, ``.receiving(name)`` passes it
    the result of what comes before it in its chain under that name (a group's
    results as a list, in the group's order)."""

    def __init__(
        self,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: dict[str, Any] | None = None,
        receives: str | None = None,
    ) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.options = dict(options or {})
        self.receives = receives

    def using(self, **options: Any) -> Call:
        """This call with the options of :func:`~django_htask.schedule` (``at``,
        ``delay``, ``queue_name``, ``max_attempts``, ``timeout``, ``retry``, ``lock``,
        ``max_running``, ``rate_limit``, ``after_failure``)."""
        unknown = sorted(set(options) - _STEP_OPTIONS - {"after_failure"})
        if unknown:
            raise TypeError(f"using() takes the options of schedule(), got {unknown}")
        return Call(self.fn, self.args, self.kwargs, {**self.options, **options}, self.receives)

    def receiving(self, param: str) -> Call:
        """This call, receiving the result of what comes before it as ``param``."""
        parse_after({param: None})  # the name checked
        return Call(self.fn, self.args, self.kwargs, self.options, param)

    def schedule(self, *, batch: Any = None) -> list[Task]:
        """Queue this call alone (as a chain of one)."""
        return chain(self).schedule(batch=batch)

    def _place(self, graph: Graph, before: list[Step], group_before: bool) -> list[Step]:
        options = dict(self.options)
        after_failure = options.pop("after_failure", AfterFailure.CANCEL)
        after: Any = before
        if self.receives is not None:
            if not before:
                raise ValueError(
                    f"{self.fn!r} receives {self.receives!r} but nothing comes before it"
                )
            after = {self.receives: list(before) if group_before else before[0]}
        step = graph._add(self.fn, self.args, self.kwargs, options, after_failure)
        if before:
            step.refs += parse_after(after)
        return [step]


def call(fn: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Call:
    """``fn(*args, **kwargs)``, to place in a :func:`chain` or a :func:`group`."""
    return Call(fn, args, kwargs)


class _Canvas:
    """What :func:`chain` and :func:`group` make: calls in an order, or side by side."""

    def __init__(self, items: tuple[Any, ...]) -> None:
        for item in items:
            if not isinstance(item, Call | _Canvas):
                raise TypeError(
                    f"chain() and group() take call(), chain() and group(), got {item!r}"
                )
        self.items = items

    def graph(self) -> Graph:
        """The graph it makes (to schedule with others, or to look at)."""
        graph = Graph()
        self._place(graph, [], False)
        return graph

    def schedule(self, *, batch: Any = None) -> list[Task]:
        """Queue every call, in one transaction (:meth:`Graph.schedule`); return their
        tasks, in the order of the calls."""
        return self.graph().schedule(batch=batch)

    def _place(self, graph: Graph, before: list[Step], group_before: bool) -> list[Step]:
        raise NotImplementedError


class Chain(_Canvas):
    """Calls that run one after the other (:func:`chain`)."""

    def _place(self, graph: Graph, before: list[Step], group_before: bool) -> list[Step]:
        for item in self.items:
            before = item._place(graph, before, group_before)
            group_before = isinstance(item, Group)
        return before


class Group(_Canvas):
    """Calls that run side by side (:func:`group`): what comes after a group runs after
    all of them, and receives their results as a list."""

    def _place(self, graph: Graph, before: list[Step], group_before: bool) -> list[Step]:
        tails: list[Step] = []
        for item in self.items:
            tails += item._place(graph, before, group_before)
        return tails


def chain(*items: Call | Chain | Group) -> Chain:
    """Each item (a :func:`call`, a :func:`group`, a chain) runs once the one before it
    succeeded; when one fails for good, those after it are cancelled (docs/howto-chains.md)."""
    return Chain(items)


def group(*items: Call | Chain | Group) -> Group:
    """The items run side by side; a call after the group in a chain runs once all of
    them succeeded (Celery's chord)."""
    return Group(items)
