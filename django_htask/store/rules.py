"""The state changes every store makes the same way, and their texts: one home for
each, called by the in-memory store and the database stores alike (they differ in how
they store a row, never in what they write to it).

Each helper is a function over plain values (a row, or an object with the row's
attributes: a :class:`~django_htask.models.Task` or the in-memory store's
``TaskRecord``) that returns the fields to write, as ``{field: value}``: the database
store passes them to ``QuerySet.update()``, the in-memory store sets them on its
record. Time is a parameter; nothing here reads a clock or a table.

- :func:`reaped_task`: a running task whose node stopped answering (its lease expired,
  or its node is not live): its attempt failed, with :func:`lost_task_error`; retried
  after the lost-run delay, or failed for good.
- :func:`lost_run_error`: a schedule run still running on a node that is not live
  fails, with :data:`RUN_LOST` unless its node noted an error already.
- :func:`abandoned_task`, :func:`abandoned_run`: what a node leaves at a shutdown that
  outlived ``SHUTDOWN_TIMEOUT`` (:meth:`~django_htask.store.base.Store.abandon`).
- :func:`crashed_run`: the failed run row of a started attempt that ended so.
- :func:`broken_reason`: the reason kept on a broken schedule.
- :func:`claimed_task`: a task a claim starts: running on its node, one attempt more,
  under the claim's lease.
- :func:`ended_task`: a task whose attempt ended (a :class:`RunOutcome`): finished, or
  pending again for a retry; no node holds it.
- :func:`writes_run`: which ends write a run row (a task's success writes none: its
  row holds it), and :func:`runs_written`, those of a batch of outcomes.
- :func:`snoozed_task`: a task whose attempt ended snoozed (``raise Snooze``): pending
  again later, its attempt not counted, one snooze more.
- :func:`status_not_older`: the schedules whose last status a run may write (none a
  later run wrote).
- :func:`superseded_task`: a task about to be put back to pending whose key a pending
  task holds is cancelled instead (:mod:`django_htask.keys`).
- Tasks composed (:mod:`~django_htask.store.follow` applies them): what the end of a
  task means for one that runs after it (:func:`edge_met`), a dependent cancelled with
  :func:`after_ended_reason` (:func:`cancelled_task`), released
  (:func:`released_task`) with the results it receives (:func:`bound_payload`), a
  batch moved by the ends of its members (:func:`batch_moved`) and its callbacks'
  payloads (:func:`callback_payload`).

The counters of what a reaper did come from the ``rows_reaped`` signal and from
:func:`reaped_runs` (the runs these texts mark), never from a log record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from string import Formatter
from typing import Any, NamedTuple, Protocol

from django.db.models import Q

from django_htask.engine.codec import decode_call, decode_result, encode_call
from django_htask.engine.errors import PayloadError
from django_htask.enums import RunStatus, TaskStatus
from django_htask.graph import BatchState
from django_htask.retry import RetryPolicy

from .values import Abandoned, RetryColumns, RunOutcome

__all__ = [
    "ABORTED",
    "BROKEN_MAX",
    "LOST_TASK",
    "LOST_TASK_PREFIX",
    "NEVER_HANDED_OUT_SQL",
    "RUN_LOST",
    "TIMED_OUT_PREFIX",
    "UNLOCKED",
    "BatchFacts",
    "BatchMove",
    "Binding",
    "abandoned_run",
    "abandoned_task",
    "after_ended_reason",
    "batch_moved",
    "bound_payload",
    "broken_reason",
    "callback_payload",
    "cancelled_task",
    "claimed_task",
    "closed_task",
    "crashed_run",
    "edge_met",
    "ended_task",
    "lost_run_error",
    "lost_task_error",
    "reaped_runs",
    "reaped_task",
    "released_task",
    "runs_written",
    "snoozed_task",
    "status_not_older",
    "superseded_task",
    "timed_out",
    "unstarted_task",
    "writes_run",
]

#: The error of a schedule run whose node died while it ran.
RUN_LOST = "the node running it stopped answering (killed, crashed or out of memory)"
#: The error of a task's attempt whose node died while it ran (``str.format`` fields:
#: ``holder``, ``attempt``, ``max_attempts``).
LOST_TASK = (
    "the node running it ({holder}) stopped answering during attempt {attempt} of "
    "{max_attempts}: killed, crashed or out of memory"
)
#: The start of :data:`LOST_TASK`, which no other error has.
LOST_TASK_PREFIX = LOST_TASK.partition("{")[0]
#: The error of a run stopped because its abort was asked for (never retried).
ABORTED = "Aborted: an abort was asked for (cancel(token, abort=True) or the admin)"
#: The start of the error of a run stopped by its timeout (:func:`timed_out`).
TIMED_OUT_PREFIX = "TimedOut: "


def timed_out(timeout: float) -> str:
    """The error of a run stopped by its timeout."""
    return f"{TIMED_OUT_PREFIX}the run took longer than its timeout of {timeout:g}s"


#: The longest reason kept on a broken schedule (the rest is cut).
BROKEN_MAX = 2000
#: A task no node holds.
UNLOCKED: dict[str, Any] = {"locked_by": None, "lease_expires_at": None}
#: A task never handed to a node (no node ran it, nor held it and died): the only ones
#: a node claims for its buffer. One that waited in a dead node's buffer is charged its
#: attempt if it dies with a node again: a task that kills its node as it starts cannot
#: be handed back uncharged for ever.
NEVER_HANDED_OUT_SQL = "node IS NULL"


class TaskFacts(Protocol):
    """What the rules read of a task's row."""

    @property
    def function(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def run_at(self) -> datetime: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def abort_requested_at(self) -> datetime | None: ...


def lost_task_error(holder: str | None, attempt: int, max_attempts: int) -> str:
    """The error of attempt ``attempt`` of a task whose node ``holder`` died."""
    return LOST_TASK.format(holder=holder or "?", attempt=attempt, max_attempts=max_attempts)


def lost_run_error(error: str) -> str:
    """The error a schedule run gets when its node dies: the one its node noted (a
    shutdown that outlived its timeout), else :data:`RUN_LOST`."""
    return error or RUN_LOST


def crashed_run(
    task: TaskFacts, task_id: int, node_id: str, now: datetime, error: str
) -> RunOutcome:
    """The failed run of ``task``'s attempt, which ended at ``now`` with ``error``
    (its node died, or left it at a shutdown)."""
    return RunOutcome(
        RunStatus.FAILED,
        task.function,
        task.function,
        node_id,
        task.attempts,
        task.run_at,
        task.started_at,
        now,
        error=error,
        task_id=task_id,
    )


def reaped_task(
    task: TaskFacts, holder: str | None, retry: RetryColumns, policy: RetryPolicy, now: datetime
) -> dict[str, Any]:
    """The fields of a running ``task`` whose node ``holder`` stopped answering: no
    node holds it, its attempt failed with :func:`lost_task_error`; pending again after
    the lost-run delay (``retry`` over ``policy``) if it has attempts left and no abort
    was asked, else failed. (Pending: the store puts it back, unless a newer task holds
    its key, see :mod:`django_htask.keys`.)"""
    error = lost_task_error(holder, task.attempts, task.max_attempts)
    changes: dict[str, Any] = {**UNLOCKED, "last_error": error, "traceback": ""}
    if task.attempts < task.max_attempts and task.abort_requested_at is None:
        delay = timedelta(seconds=retry.lost_delay(policy, task.attempts))
        changes.update(status=TaskStatus.PENDING, run_at=now + delay)
    else:
        changes.update(status=TaskStatus.FAILED, finished_at=now)
    return changes


def claimed_task(
    attempts: Any, node_id: str, now: Any, lease_until: Any, *, buffered: bool = False
) -> dict[str, Any]:
    """The fields of a task (``attempts`` made) a claim of node ``node_id`` starts at
    ``now``: running, one attempt more, held by the node until ``lease_until``, run
    by it (``node``, kept once it ended: a success writes no run row that says so).
    ``attempts`` is a value, or an expression of the column that adds as one (the ORM
    store passes ``F("attempts")``); ``now`` and ``lease_until`` as the store writes a
    timestamp. ``buffered``: claimed for the node's buffer, with no start time until a
    worker begins it."""
    return {
        "status": TaskStatus.RUNNING,
        "attempts": attempts + 1,
        "started_at": None if buffered else now,
        "locked_by": node_id,
        "node": node_id,
        "lease_expires_at": lease_until,
    }


def ended_task(outcome: RunOutcome) -> dict[str, Any]:
    """The fields of a running task whose attempt ended as ``outcome``: no node holds
    it, its error, traceback and result are ``outcome``'s; pending again at
    ``outcome.retry_at`` for a retry (the store puts it back, unless a newer task holds
    its key, see :mod:`django_htask.keys`), else finished with ``outcome.status`` at
    ``outcome.finished_at``."""
    changes: dict[str, Any] = {
        **UNLOCKED,
        "last_error": outcome.error,
        "traceback": outcome.traceback,
        "result": outcome.result,
    }
    if outcome.retry_at is not None:
        changes.update(status=TaskStatus.PENDING, run_at=outcome.retry_at, finished_at=None)
    else:
        changes.update(status=outcome.status, finished_at=outcome.finished_at)
    return changes


def writes_run(outcome: RunOutcome, every_attempt: bool) -> bool:
    """Whether the end ``outcome`` writes a run row: a schedule's run always (its row
    was written when it started); a task's attempt unless it succeeded, or with
    ``every_attempt`` (the ``RECORD_EVERY_ATTEMPT`` setting). A success is on the
    task's row already (its node, start, end, result): a row of its own would add
    nothing, and it is most of the rows a busy node writes. A failed attempt, retried
    or final (a timeout, an abort), a snooze and a lost attempt keep a row each, with
    their error and traceback."""
    return every_attempt or outcome.task_id is None or outcome.status != RunStatus.SUCCEEDED


def runs_written(outcomes: list[RunOutcome], every_attempt: bool) -> list[RunOutcome]:
    """The outcomes of ``outcomes`` that write a run row (:func:`writes_run`)."""
    if every_attempt:
        return outcomes
    return [o for o in outcomes if writes_run(o, every_attempt)]


def snoozed_task(run_at: Any, attempts: Any, snoozes: Any) -> dict[str, Any]:
    """The fields of a running task (``attempts`` made, ``snoozes`` snoozed) whose
    attempt ended snoozed (``raise Snooze``): no node holds it, pending again at
    ``run_at`` (the store puts it back, unless a newer task holds its key, see
    :mod:`django_htask.keys`), its attempt not counted, one snooze more. Its last error,
    traceback and result stay as they were: a snooze is no attempt's end.
    ``attempts`` and ``snoozes`` are values, or expressions of the columns that add
    and subtract as numbers (as :func:`claimed_task`'s)."""
    return {
        **UNLOCKED,
        "status": TaskStatus.PENDING,
        "run_at": run_at,
        "finished_at": None,
        "attempts": attempts - 1,
        "snoozes": snoozes + 1,
    }


def unstarted_task(attempts: int) -> dict[str, Any]:
    """The fields of a running task (``attempts`` made) its node held but never began
    (a shutdown's, or a dead node's buffer): pending again as it was, the attempt not
    counted, no node holding it."""
    return {**UNLOCKED, "status": TaskStatus.PENDING, "attempts": attempts - 1}


def abandoned_task(
    abandoned: Abandoned, attempts: int, now: datetime, dead_at: datetime
) -> dict[str, Any]:
    """The fields of a running task (``attempts`` made) its node left at a shutdown
    (``abandoned``): never called, pending again as it was (the attempt not counted);
    started, its attempt ended with ``abandoned.error``, retried at
    ``abandoned.retry_at`` (not before the node is dead, ``dead_at``) or failed."""
    if not abandoned.started:
        return unstarted_task(attempts)
    ended = {**UNLOCKED, "last_error": abandoned.error, "traceback": ""}
    if abandoned.retry_at is not None:
        return {**ended, "status": TaskStatus.PENDING, "run_at": max(abandoned.retry_at, dead_at)}
    return {**ended, "status": TaskStatus.FAILED, "finished_at": now}


def abandoned_run(abandoned: Abandoned, now: datetime) -> dict[str, Any]:
    """The fields of a schedule run still running its node left at a shutdown: never
    called, failed at once with ``abandoned.error``; started, the error noted, and
    failed by the reaper once the node is dead (:func:`lost_run_error` keeps it)."""
    if abandoned.started:
        return {"error": abandoned.error}
    return {"status": RunStatus.FAILED, "finished_at": now, "error": abandoned.error}


def broken_reason(reason: str) -> str:
    """The reason kept on a broken schedule: at most :data:`BROKEN_MAX` characters."""
    return reason[:BROKEN_MAX]


def superseded_task(now: datetime, error: Any) -> dict[str, Any]:
    """The fields of a task about to be put back to pending (a retry, a reaped or
    abandoned attempt, *send again*) whose key a pending task holds: cancelled at
    ``now``, superseded by that task, no node holding it; ``error`` its last error, the
    :func:`~django_htask.keys.superseded_reason` of the holder's token (the database
    stores pass it as an SQL expression that reads the token)."""
    return cancelled_task(now, error)


def cancelled_task(now: datetime, reason: Any) -> dict[str, Any]:
    """The fields of a task cancelled at ``now`` with ``reason`` as its last error, no
    node holding it."""
    return closed_task(TaskStatus.CANCELLED, now, reason)


def closed_task(status: str, now: datetime, reason: Any) -> dict[str, Any]:
    """The fields of a task that ends in ``status`` at ``now`` without running (again),
    ``reason`` its last error, no node holding it."""
    return {**UNLOCKED, "status": status, "finished_at": now, "traceback": "", "last_error": reason}


# -- tasks composed ----------------------------------------------------------------------
#: Why a task waiting for another was cancelled (``str.format`` fields: ``token``, the
#: one it waited for, and ``how`` it ended).
AFTER_ENDED = "cancelled: it was to run after task {token}, which {how}"
#: Why a batch's callback was not called (fields: ``role``, ``why``).
CALLBACK_NOT_CALLED = "cancelled: the batch's {role} callback is not called: {why}"
#: The most of a failed task's error the reason of a task cancelled after it repeats.
_ERROR_SHOWN = 500
#: The statuses a batch counts its members' ends by.
_COUNTED = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)


def edge_met(after_status: str, run_anyway: bool) -> bool:
    """Whether the end of a task in ``after_status`` (succeeded, failed or cancelled)
    lets one that runs after it go on (else that one is cancelled): it succeeded, or
    the edge says to run anyway (``after_failure="run"``)."""
    return after_status == TaskStatus.SUCCEEDED or run_anyway


def after_ended_reason(token: str, status: str, error: str) -> str:
    """Why a task that was to run after task ``token`` is cancelled: that one ended in
    ``status`` (failed, with ``error``, or cancelled)."""
    if status == TaskStatus.CANCELLED:  # its own reason may be such a text: not nested
        return AFTER_ENDED.format(token=token, how="was cancelled")
    how = f"failed: {error[:_ERROR_SHOWN]}" if error else "failed"
    return AFTER_ENDED.format(token=token, how=how)


def released_task(payload: bytes | None = None) -> dict[str, Any]:
    """The fields of a waiting task whose wait is over: pending (due at its ``run_at``),
    with ``payload`` if its arguments changed (results passed to it)."""
    changes: dict[str, Any] = {"status": TaskStatus.PENDING}
    if payload is not None:
        changes["payload"] = payload
    return changes


class Binding(NamedTuple):
    """A result a task receives: under ``param`` (at ``position`` in a list, or alone
    when None), from a task that ended in ``status`` with ``result`` (its encoded
    return value; None: it returned None, did not succeed, or is gone)."""

    param: str
    position: int | None
    status: str
    result: bytes | None


def bound_payload(payload: bytes, bindings: Sequence[Binding]) -> tuple[bytes | None, str]:
    """``payload`` (an encoded call) with the results of ``bindings`` added to its
    keyword arguments (a result that did not succeed, or none, as None; the results at
    positions as a list in their order); or None and why it cannot be (the payload or a
    result cannot be read, or the call grows past the payload limit)."""
    try:
        name, args, kwargs = decode_call(payload)
        lists: dict[str, list[tuple[int, Any]]] = {}
        for b in bindings:
            ok = b.status == TaskStatus.SUCCEEDED and b.result is not None
            value = decode_result(b.result) if ok and b.result is not None else None
            if b.position is None:
                kwargs[b.param] = value
            else:
                lists.setdefault(b.param, []).append((b.position, value))
        for param, values in lists.items():
            kwargs[param] = [value for _position, value in sorted(values, key=lambda v: v[0])]
        return encode_call(name, args, kwargs), ""
    except PayloadError as exc:
        return None, f"the results it was to receive cannot be passed to it: {exc}"


def callback_payload(payload: bytes, state: BatchState) -> tuple[bytes | None, str]:
    """A batch's callback's ``payload`` (its call, the batch's place a first argument
    left empty) with ``state`` in that place; or None and why it cannot be."""
    try:
        name, args, kwargs = decode_call(payload)
        return encode_call(name, [state.as_map(), *args[1:]], kwargs), ""
    except PayloadError as exc:
        return None, f"the batch's state cannot be passed to it: {exc}"


class BatchFacts(Protocol):
    """What :func:`batch_moved` reads of a batch's row."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def total(self) -> int: ...
    @property
    def succeeded(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def cancelled(self) -> int: ...
    @property
    def finished_at(self) -> datetime | None: ...
    @property
    def failed_at(self) -> datetime | None: ...
    @property
    def on_success_id(self) -> int | None: ...
    @property
    def on_failure_id(self) -> int | None: ...
    @property
    def on_finish_id(self) -> int | None: ...


@dataclass
class BatchMove:
    """What :func:`batch_moved` decided: the batch's fields to write, its state after,
    the callbacks released (their task ids) and those cancelled (id -> reason)."""

    changes: dict[str, Any]
    state: BatchState
    release: list[int] = field(default_factory=list)
    cancel: dict[int, str] = field(default_factory=dict)


def batch_moved(batch: BatchFacts, ended: Mapping[str, int], now: datetime) -> BatchMove:
    """A batch whose members just ended (``ended``: how many in each final status; none
    when it is only looked at, as at its creation): its counters moved; ``on_failure``
    released at its first member failed for good; once every member ended,
    ``on_finish`` released, ``on_success`` released if every one succeeded (else
    cancelled), and an ``on_failure`` never released cancelled. Each at most once:
    the caller holds the batch's row (its ``failed_at`` and ``finished_at`` say what
    was released already)."""
    counts = {s: getattr(batch, str(s)) + ended.get(s, 0) for s in _COUNTED}
    changes: dict[str, Any] = {str(s): n for s, n in counts.items() if ended.get(s)}
    succeeded, failed, cancelled = (counts[s] for s in _COUNTED)
    release: list[int] = []
    cancel: dict[int, str] = {}
    failed_at = batch.failed_at
    if failed and failed_at is None:
        failed_at = changes["failed_at"] = now
        release += [i for i in (batch.on_failure_id,) if i is not None]
    finished_at = batch.finished_at
    if finished_at is None and succeeded + failed + cancelled >= batch.total:
        finished_at = changes["finished_at"] = now
        release += [i for i in (batch.on_finish_id,) if i is not None]
        if batch.on_success_id is not None:
            if failed or cancelled:
                why = f"{failed} of its {batch.total} members failed, {cancelled} cancelled"
                cancel[batch.on_success_id] = CALLBACK_NOT_CALLED.format(role="on_success", why=why)
            else:
                release.append(batch.on_success_id)
        if batch.on_failure_id is not None and failed_at is None:
            why = "no member failed"
            cancel[batch.on_failure_id] = CALLBACK_NOT_CALLED.format(role="on_failure", why=why)
    state = BatchState(
        batch.id, batch.name, batch.total, succeeded, failed, cancelled, finished_at, failed_at
    )
    return BatchMove(changes, state, release, cancel)


def _ends(template: str) -> tuple[str, str]:
    """The fixed text before the first field and after the last of ``template``."""
    parts = list(Formatter().parse(template))
    last_text, last_field = parts[-1][0], parts[-1][1]
    return parts[0][0], last_text if last_field is None else ""


def status_not_older(when: datetime) -> Q:
    """The schedules whose last status a run of ``when`` may write: a last status only
    moves forward, so a run ending after a later run of its schedule (a retry, a slow
    run overlapping the next) leaves the later one's. The PostgreSQL, MySQL and
    in-memory stores write the same condition in their own SQL or Python; the contract
    tests hold them to it."""
    return Q(last_run_at__isnull=True) | Q(last_run_at__lte=when)


def reaped_runs() -> Q:
    """The runs a reaper failed, as a filter: their error is :data:`RUN_LOST`, or
    :data:`LOST_TASK` filled in. Built from the texts above when called, so that
    rewording them rewords the filter too (``django_htask_recent_reaped_runs``)."""
    prefix, suffix = _ends(LOST_TASK)
    return Q(error=RUN_LOST) | Q(error__startswith=prefix, error__endswith=suffix)
