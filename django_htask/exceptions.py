"""Every error django-htask raises, in one place, all under :class:`HtaskError`.

Each also subclasses the builtin that fits, so ``except LookupError`` or
``except ValueError`` catches what it should. The engine's errors are defined in
:mod:`django_htask.engine.errors` (the engine imports nothing from Django) and are
re-exported here.

==========================  =====================  ======================================
error                       also a                 raised when
==========================  =====================  ======================================
``InvalidSchedule``         ``ValueError``         schedule text or a value cannot be read
``FunctionNotRegistered``   ``LookupError``        a stored name names no registered
                                                   function
``PayloadError``            ``ValueError``         a payload cannot be encoded or decoded
``ArgumentError``           ``TypeError``          arguments do not fit the signature
``SchedulerClosed``         ``RuntimeError``       a closed engine scheduler is given work
``SchedulerFull``           ``RuntimeError``       an engine scheduler is at its capacity
``TokenCancelled``          ``RuntimeError``       a cancel token was cancelled
``JobSkipped``              ``RuntimeError``       a job wrapper skips a run
``StartAborted``            ``RuntimeError``       a stop was asked for while a node waited
                                                   for its database at start
``NotMigrated``             ``RuntimeError``       the database lacks django_htask's
                                                   migrations
``NodeFenced``              ``RuntimeError``       the node was declared dead by the others
``StoreUnavailable``        ``RuntimeError``       a store's database cannot be reached, or
                                                   a statement failed for a reason a retry
                                                   could fix (its cause: the driver's error)
``DuplicateKey``            ``ValueError``         ``schedule(key=..., on_conflict="raise")``
                                                   finds a pending task with that key
``UnknownDjangoTask``       ``LookupError``        a stored call names a Django task this
                                                   process does not define
``TaskNotFound``            ``LookupError``        ``get_result(token)``: no task has the
                                                   token (never queued, or deleted past
                                                   its retention)
``TaskCancelled``           ``RuntimeError``       a django.tasks result of a cancelled task
``RunInterrupted``          ``RuntimeError``       a django.tasks attempt the node ended
``ForcedStop``              ``BaseException``      raised in a task's thread to force it
                            (no ``HtaskError``)    to stop (timeout, abort): see
                                                   docs/timeouts.md
``TooManySnoozes``          ``RuntimeError``       the error of a run that snoozed past
                                                   ``MAX_SNOOZES`` (or ``max_snoozes``)
``Snooze``                  ``Exception``          raised *by* a task to run again later,
                            (no ``HtaskError``)    its attempt not counted: not an error
                                                   (docs/retries.md, "Snooze")
==========================  =====================  ======================================
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django_htask.due import seconds_of
from django_htask.engine import errors as engine_errors
from django_htask.engine.errors import *  # noqa: F403 - re-exported: every error in one place
from django_htask.engine.errors import HtaskError
from django_htask.engine.wrappers import JobSkipped

__all__ = [  # noqa: PLE0604
    *engine_errors.__all__,
    "BatchFinished",
    "BatchNotFound",
    "DependencyCycle",
    "DuplicateKey",
    "JobSkipped",
    "NodeFenced",
    "NotMigrated",
    "ResultTimeout",
    "RunInterrupted",
    "Snooze",
    "StartAborted",
    "StoreUnavailable",
    "TaskCancelled",
    "TaskNotFound",
    "TooManySnoozes",
    "UnknownDjangoTask",
]


class StartAborted(HtaskError, RuntimeError):
    """A stop was requested while the node was still waiting for the database at start."""


class NotMigrated(HtaskError, RuntimeError):
    """The database lacks django_htask's tables, or some of its migrations: a node
    cannot run there until ``manage.py migrate`` has run (not an outage to wait out)."""


class NodeFenced(HtaskError, RuntimeError):
    """The node's registration was ended by the others (declared dead): the database
    refuses its writes, and it must start nothing more.

    ``stopped_at`` is when it was declared dead (None if its row is gone)."""

    def __init__(self, node_id: str, stopped_at: datetime | None) -> None:
        self.node_id = node_id
        self.stopped_at = stopped_at
        when = "its row is gone" if stopped_at is None else f"at {stopped_at.isoformat()}"
        super().__init__(
            f"node {node_id} was declared dead by the other nodes ({when}): "
            "its work has been handed to them"
        )


class StoreUnavailable(HtaskError, RuntimeError):
    """A store could not do what it was asked: its database cannot be reached, or a
    statement failed for a reason a retry could fix (a lock, a serialization failure, a
    connection dropped). The node backs off and tries again.

    The database stores raise it from the driver's or Django's ``DatabaseError``
    (``__cause__``), with that error's message; :attr:`reason` names both, as the
    node's log lines show them (``OperationalError: database is locked``)."""

    @property
    def reason(self) -> str:
        """What failed: the cause's class and message (this error's own, without one)."""
        cause = self.__cause__ if self.__cause__ is not None else self
        return f"{type(cause).__name__}: {cause}"

    @property
    def deadlock(self) -> bool:
        """Whether the database rolled the transaction back as a deadlock's victim (or
        a serialization failure): nothing of it was written, and tried again at once it
        most likely passes. PostgreSQL's SQLSTATE 40P01 and 40001; MySQL's and MariaDB's
        error 1213 (Django's error keeps the driver's arguments)."""
        error: BaseException | None = self.__cause__
        while error is not None:
            if getattr(error, "sqlstate", None) in _ROLLED_BACK_SQLSTATES:
                return True
            if error.args and error.args[0] == _MYSQL_DEADLOCK:
                return True
            error = error.__cause__
        return False


#: PostgreSQL's deadlock_detected and serialization_failure.
_ROLLED_BACK_SQLSTATES = frozenset({"40P01", "40001"})
#: MySQL's and MariaDB's ER_LOCK_DEADLOCK.
_MYSQL_DEADLOCK = 1213


class DuplicateKey(HtaskError, ValueError):
    """``schedule(..., key=k, on_conflict="raise")`` (or ``schedule_many``) found a
    pending task with the key ``k``, or was given ``k`` twice in one batch; nothing was
    stored.

    ``key`` is the key; ``token`` the token of the pending task that holds it (None
    when the clash is between two calls of one batch, which ``detail`` names)."""

    def __init__(self, key: str, token: str | None, detail: str = "") -> None:
        self.key = key
        self.token = token
        held = f"pending task {token} has it" if token is not None else detail
        super().__init__(f"key {key!r} is taken: {held} (on_conflict='raise'; nothing stored)")


class UnknownDjangoTask(HtaskError, LookupError):
    """A stored call names a Django task this process does not define and may not import.

    Its cause (``__cause__``, printed in the run's traceback) is the ``ImportError``
    that says why: the import failed, the name is not in the module, or the module is
    one a node may not import."""


class TaskNotFound(HtaskError, LookupError):
    """No task has the token :attr:`token`: it was never queued in this database, or
    it ended and was deleted once its retention passed (the message says how long
    finished tasks are kept). Raised by ``get_result``."""

    def __init__(self, token: str, message: str) -> None:
        self.token = token
        super().__init__(message)


class ResultTimeout(HtaskError, TimeoutError):
    """``wait_result`` waited ``timeout`` seconds and the task with the token
    :attr:`token` had not ended: it was :attr:`status` (``pending``, ``waiting`` or
    ``running``) at the last look. The task is left as it is."""

    def __init__(self, token: str, status: str, timeout: float) -> None:
        self.token = token
        self.status = status
        self.timeout = timeout
        super().__init__(
            f"task {token} has not ended within {timeout:g}s: it is {status} "
            "(wait_result leaves it as it is; cancel(token) stops it)"
        )


class DependencyCycle(HtaskError, ValueError):
    """A graph of tasks where a task would wait, through others, for itself: nothing
    was stored. :attr:`cycle` names the tasks along it, the first one repeated last."""

    def __init__(self, cycle: list[str]) -> None:
        self.cycle = cycle
        super().__init__(f"the tasks wait for each other in a cycle: {' waits for '.join(cycle)}")


class BatchFinished(HtaskError, ValueError):
    """A task was added to a batch whose members had all ended (its ``on_finish`` was
    called): nothing was stored."""

    def __init__(self, batch_id: int) -> None:
        self.batch_id = batch_id
        super().__init__(f"batch {batch_id} has finished: it takes no more tasks")


class BatchNotFound(HtaskError, LookupError):
    """No batch has the id :attr:`batch_id`: it was never made in this database, or it
    finished and was deleted with the last of its members (their retention passed)."""

    def __init__(self, batch_id: int) -> None:
        self.batch_id = batch_id
        super().__init__(
            f"no batch has the id {batch_id}: it was never made here, or it finished and "
            "was deleted with the last of its members, once their retention passed"
        )


class TaskCancelled(HtaskError, RuntimeError):
    """The task was cancelled before it ran (the error of a cancelled task's result)."""


class RunInterrupted(HtaskError, RuntimeError):
    """An attempt ended without the task raising: the node running it stopped or died
    (the error of that attempt in a result; its traceback is the node's reason)."""


class Snooze(Exception):
    """Raised by a task's function, at any depth of its calls, to run again
    ``seconds`` later (a number or a :class:`~datetime.timedelta`) without its attempt
    counting as a failure: a one-off task is pending again then, its attempt not
    counted, its ``snoozes`` one more; a schedule's run runs again then. At most
    ``MAX_SNOOZES`` times (``@task(max_snoozes=...)``); see docs/retries.md, "Snooze".

    Not an error (no :class:`HtaskError`): an ``except Exception`` around the call that
    raises it catches it too, so let it through. A bad ``seconds`` (not a number,
    negative, NaN, infinite, more than 100 years) raises TypeError or ValueError naming
    it, here, where the task raises: its attempt fails with that error.

    ``seconds`` is kept as a float."""

    def __init__(self, seconds: float | timedelta) -> None:
        self.seconds = seconds_of(seconds, "Snooze seconds")
        super().__init__(self.seconds)  # its args: pickled and copied as it was made

    def __str__(self) -> str:
        return snoozed_for(self.seconds)


class TooManySnoozes(HtaskError, RuntimeError):
    """A task, or a schedule's occurrence, asked to snooze once more than its bound
    allows (``MAX_SNOOZES``, a task's ``max_snoozes``): the error its run fails with,
    not retried (its text begins with this class's name; nothing raises it)."""


def snoozed_for(seconds: float) -> str:
    """The text of a snooze of ``seconds``: what a snoozed run's row says."""
    return f"snoozed: runs again in {seconds:g}s"
