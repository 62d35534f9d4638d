"""A django.tasks backend (Django >= 6.0): Django's ``@task`` functions run on
``runscheduler`` like our own.

::

    TASKS = {"default": {"BACKEND": "django_htask.backends.HtaskBackend"}}

    from django.tasks import task

    @task(priority=10)
    def send_mail(to: str) -> None: ...

    result = send_mail.using(run_after=timezone.now() + timedelta(minutes=5)).enqueue("a@b.c")
    send_mail.get_result(result.id).status   # READY, RUNNING, SUCCESSFUL or FAILED

An enqueued call is stored as a one-off :class:`~django_htask.models.Task` of the
registered runner :func:`run_django_task`, whose payload names the Django task by its
module path. A worker finds the function among the Django tasks defined in its
process, or imports the task's module when that module belongs to an installed app's
package (or to ``HTASK["DJANGO_TASK_MODULES"]``) and checks that the name there is
that Django task: a stored path alone never makes a node import any other code.
``django_htask``'s app imports this module at start in every process whose ``TASKS``
uses the backend, so the runner is registered in ``runscheduler`` too.

The result's id is the task's unguessable token. Statuses map ``pending`` (and
``waiting``) → READY,
``running`` → RUNNING, ``succeeded`` → SUCCESSFUL, ``failed`` and ``cancelled`` →
FAILED. The signals ``task_enqueued`` (when the transaction commits),
``task_started`` and ``task_finished`` (on the worker) are sent.

This module imports ``django.tasks``: import it on Django >= 6.0 only (Django 5.2
has no ``TASKS`` setting and never loads it).
"""

from __future__ import annotations

import builtins
import importlib
import logging
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task as DjangoTask
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils.json import normalize_json

from django_htask.engine import errors as engine_errors
from django_htask.engine import registry

from . import clock, exceptions, notices
from .conf import get_settings, is_dotted_name
from .db import after_commit, scheduler_alias
from .due import due_time
from .exceptions import RunInterrupted, Snooze, TaskCancelled, UnknownDjangoTask
from .functions import task as htask_task
from .models import MAX_ATTEMPTS_MAX, Run, RunStatus, Task, TaskStatus, new_token
from .retention import gone_reason

__all__ = [
    "RUNNER",
    "HtaskBackend",
    "RunInterrupted",
    "TaskCancelled",
    "UnknownDjangoTask",
    "run_django_task",
]

logger = logging.getLogger(__name__)

#: The registered name of the runner every Django task's call goes through.
RUNNER = "django_htask.backends:run_django_task"

#: Django tasks defined in this process, by module path (filled by ``validate_task``
#: and by ``_task_function`` when it imports a task's module).
_known: dict[str, Callable[..., Any]] = {}

_STATUS = {
    TaskStatus.PENDING: TaskResultStatus.READY,
    TaskStatus.WAITING: TaskResultStatus.READY,
    TaskStatus.RUNNING: TaskResultStatus.RUNNING,
    TaskStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    TaskStatus.FAILED: TaskResultStatus.FAILED,
    TaskStatus.CANCELLED: TaskResultStatus.FAILED,
}


def _path(exc_type: type[BaseException]) -> str:
    return f"{exc_type.__module__}.{exc_type.__qualname__}"


@htask_task(name=RUNNER)
def run_django_task(
    module_path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    result_id: str,
    backend: str = "default",
    priority: int = 0,
    queue_name: str = "default",
    takes_context: bool = False,
    deferred: bool = False,
) -> None:
    """Run the Django task ``module_path`` (called by a node's worker).

    ``priority``, ``queue_name``, ``takes_context`` and ``deferred`` describe the
    enqueued task; the result read back from the database carries them.

    Sends ``task_started`` and ``task_finished``; an exception (any
    ``BaseException``: ``SystemExit`` and ``KeyboardInterrupt`` too) is re-raised after
    ``task_finished`` so the run is recorded as failed. A :class:`Snooze` is re-raised
    as it is, without ``task_finished``: the task is not finished, it runs again later
    (docs/retries.md, "Snooze")."""
    htask_backend = task_backends[backend]
    if not isinstance(htask_backend, HtaskBackend):
        raise InvalidTask(f"TASKS[{backend!r}] is not an HtaskBackend")
    result = htask_backend.get_result(result_id)
    now = clock.now()
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    object.__setattr__(result, "last_attempted_at", now)
    if result.started_at is None:
        object.__setattr__(result, "started_at", now)
    sender = type(htask_backend)
    task_started.send(sender=sender, task_result=result)
    try:
        if result.task.takes_context:
            value = result.task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = result.task.call(*args, **kwargs)
        value = _json_value(module_path, value)
    except Snooze:
        raise  # not finished: it runs again later, READY meanwhile (no task_finished)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt fail the task too
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", clock.now())
        result.errors.append(
            TaskError(
                exception_class_path=_path(type(exc)),
                traceback="".join(traceback.format_exception(exc)),
            )
        )
        task_finished.send(sender=sender, task_result=result)
        raise
    # Kept on the row for get_result() in any process; the node marks the task
    # succeeded once this function returns.
    Task.objects.filter(token=result_id).update(return_value=value)
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", clock.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=sender, task_result=result)


def _json_value(module_path: str, value: Any) -> Any:
    """``value`` as Django's ``normalize_json`` keeps it (the JSON that
    ``return_value`` stores); a TypeError that says it is not JSON serializable (as
    ``json.dumps`` says) and why."""
    try:
        return normalize_json(value)
    except TypeError as exc:
        raise TypeError(
            f"the return value of {module_path!r} ({type(value).__name__}) is not JSON "
            f"serializable: {exc}"
        ) from exc


class HtaskBackend(BaseTaskBackend):
    """Django's tasks, stored and run by django-htask (see the module's docstring).

    ``OPTIONS``: ``MAX_ATTEMPTS`` (int >= 1, default 1): attempts of a call that raises.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.max_attempts = self.options.get("MAX_ATTEMPTS", 1)

    def validate_task(self, task: DjangoTask[Any, Any]) -> None:
        """Check ``task`` (Django's rules) and remember its function by module path."""
        super().validate_task(task)
        _known[task.module_path] = task.func

    def enqueue(
        self, task: DjangoTask[Any, Any], args: Iterable[Any], kwargs: dict[str, Any]
    ) -> TaskResult[Any, Any]:
        self.validate_task(task)
        if not settings.USE_TZ:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}] cannot enqueue {task.module_path!r}: USE_TZ is False, "
                "and django-htask stores and compares aware UTC datetimes (system check "
                "django_htask.E001); set USE_TZ = True"
            )
        call_args: list[Any] = normalize_json(list(args))  # type: ignore[assignment]
        call_kwargs: dict[str, Any] = normalize_json(dict(kwargs))  # type: ignore[assignment]
        row = self._row(task, call_args, call_kwargs)
        token = row.token
        using = scheduler_alias()
        row.save(using=using)
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=token,
            status=TaskResultStatus.READY,
            enqueued_at=row.created_at,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=call_args,
            kwargs=call_kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

        def committed() -> None:
            from .signals import task_scheduled  # noqa: PLC0415

            task_scheduled.send_robust(sender=Task, task=row)
            notices.notify_local_change()
            task_enqueued.send(type(self), task_result=result)

        after_commit(committed, using)
        return result

    def _row(self, task: DjangoTask[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> Task:
        """The task row that runs ``task(*args, **kwargs)`` through the runner (not
        saved). InvalidTask for a ``run_after`` out of range."""
        token = new_token()
        runner_kwargs = {
            "result_id": token,
            "backend": self.alias,
            "priority": task.priority,
            "queue_name": task.queue_name,
            "takes_context": task.takes_context,
            "deferred": task.run_after is not None,
        }
        payload = registry.check_call(RUNNER, [task.module_path, args, kwargs], runner_kwargs)
        now = clock.now()
        try:  # a past run_after runs at once; one more than 100 years ahead is refused
            run_at = now if task.run_after is None else due_time(task.run_after, None)
        except ValueError as exc:
            raise InvalidTask(f"run_after: {exc}") from exc
        return Task(
            token=token,
            function=RUNNER,
            payload=payload,
            run_at=run_at,
            max_attempts=self.max_attempts,
            priority=task.priority,
            queue_name=task.queue_name,
            backend=self.alias,
        )

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        row = Task.objects.filter(token=result_id, function=RUNNER).first()
        if row is None:
            kept = get_settings().task_retention_days
            raise TaskResultDoesNotExist(gone_reason(result_id, kept))
        _name, call_args, call_kwargs = _decode(row)
        module_path, args, kwargs = call_args
        func = _task_function(module_path)
        task: DjangoTask[Any, Any] = DjangoTask(
            priority=call_kwargs.get("priority", 0),
            func=func,
            backend=self.alias,
            queue_name=call_kwargs.get("queue_name", "default"),
            run_after=row.run_at if call_kwargs.get("deferred") else None,
            takes_context=bool(call_kwargs.get("takes_context", False)),
        )
        runs = Run.objects.attempts_of(row)  # its success, if it succeeded, from its row
        attempts = [r for r in runs if r.started_at is not None]
        errors = [_error(r) for r in runs if r.status == RunStatus.FAILED and r.error]
        if row.status == TaskStatus.CANCELLED:
            errors.append(
                TaskError(
                    exception_class_path=_path(TaskCancelled),
                    traceback=f"{_path(TaskCancelled)}: cancelled before it ran\n",
                )
            )
        worker_ids = [r.node for r in attempts]
        counted = sum(r.status != RunStatus.SNOOZED for r in attempts)  # as row.attempts
        if row.status == TaskStatus.RUNNING and row.locked_by and counted < row.attempts:
            worker_ids.append(row.locked_by)  # the attempt in progress: its run is not written yet
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=row.token,
            status=_STATUS[TaskStatus(row.status)],
            enqueued_at=row.created_at,
            started_at=attempts[0].started_at if attempts else None,
            last_attempted_at=attempts[-1].started_at if attempts else None,
            finished_at=row.finished_at,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=worker_ids,
        )
        if row.status == TaskStatus.SUCCEEDED:
            object.__setattr__(result, "_return_value", row.return_value)
        return result

    def check(self, **kwargs: Any) -> list[Any]:
        found: list[Any] = []
        if not apps.is_installed("django_htask"):
            found.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] uses django_htask.backends.HtaskBackend but "
                    "'django_htask' is not in INSTALLED_APPS",
                    hint="add 'django_htask' to INSTALLED_APPS and run migrate",
                    id="django_htask.E005",
                )
            )
        attempts = self.max_attempts
        if (
            isinstance(attempts, bool)
            or not isinstance(attempts, int)
            or not 1 <= attempts <= MAX_ATTEMPTS_MAX
        ):
            found.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['MAX_ATTEMPTS'] must be an int from 1 "
                    f"to {MAX_ATTEMPTS_MAX}, got {attempts!r}",
                    id="django_htask.E006",
                )
            )
        return found


def _task_function(module_path: str) -> Callable[..., Any]:
    """The function of the Django task ``module_path`` (``module.name``).

    A task defined in this process is found at once. Otherwise its module is imported
    only if it belongs to an installed app's package or to ``HTASK["DJANGO_TASK_MODULES"]``,
    and the name there must be that Django task. Raises :class:`UnknownDjangoTask`
    saying what to change."""
    func = _known.get(module_path)
    if func is not None:
        return func
    module_name, _, name = module_path.rpartition(".")
    if not _importable(module_name):
        refused = ImportError(
            f"a node does not import {module_name!r}: it is in no installed app and not in "
            "HTASK['DJANGO_TASK_MODULES']",
            name=module_name,
        )
        raise UnknownDjangoTask(
            f"the Django task {module_path!r} is not defined in this process, and its "
            f"module {module_name!r} is in no installed app: move the task into an "
            f"installed app, or add {module_name!r} to HTASK['DJANGO_TASK_MODULES']"
        ) from refused
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownDjangoTask(
            f"cannot import {module_name!r} for the Django task {module_path!r}: {exc}"
        ) from exc
    found = getattr(module, name, None)
    if not isinstance(found, DjangoTask) or found.module_path != module_path:
        missing = (
            ImportError(f"cannot import name {name!r} from {module_name!r}", name=module_name)
            if found is None
            else None
        )
        raise UnknownDjangoTask(
            f"{module_path!r} is not a Django task: {module_name}.{name} is {found!r}; "
            "decorate the function with django.tasks.task"
        ) from missing
    _known[module_path] = found.func
    return found.func


def _importable(module_name: str) -> bool:
    """Whether a node may import ``module_name`` to find a Django task: a module of an
    installed app's package, or one listed (or inside a package listed) in
    ``HTASK["DJANGO_TASK_MODULES"]``."""
    if not is_dotted_name(module_name):
        return False
    if apps.get_containing_app_config(module_name) is not None:
        return True
    return any(
        module_name == allowed or module_name.startswith(f"{allowed}.")
        for allowed in get_settings().django_task_modules
    )


def _decode(row: Task) -> tuple[str, list[Any], dict[str, Any]]:
    from django_htask.engine import decode_call  # noqa: PLC0415

    name, args, kwargs = decode_call(bytes(row.payload))
    return name, list(args), dict(kwargs)


def _error(run: Run) -> TaskError:
    """The run's error as Django's TaskError: the exception's class path read from the
    traceback the node stored (its last exception), or :class:`RunInterrupted` when
    the run ended without the task raising (the node stopped or died)."""
    text = run.traceback or f"{run.error}\n"
    name = _exception_line(text).split(":", 1)[0].strip()
    return TaskError(exception_class_path=_class_path(name, bool(run.traceback)), traceback=text)


#: The lines that start a top-level traceback in ``traceback.format_exc()``'s text.
_TRACEBACK_STARTS = (
    "Traceback (most recent call last):",
    "  + Exception Group Traceback (most recent call last):",
)


def _exception_line(text: str) -> str:
    """The line naming the exception in a traceback's text: the first line under the
    frames of the last top-level traceback (a message's further lines and the
    exception's notes come after it). A text without a traceback is its first line."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line in _TRACEBACK_STARTS]
    if not starts:
        return lines[0] if lines else ""
    group = lines[starts[-1]] == _TRACEBACK_STARTS[1]
    for raw in lines[starts[-1] + 1 :]:
        line = raw
        if group:  # an exception group's own lines are prefixed with "  | "
            if not raw.startswith("  | "):
                break
            line = raw[4:]
        if line and not line.startswith(" "):
            return line
    return ""


def _class_path(name: str, raised: bool) -> str:
    """The class path of the exception named ``name`` in a traceback (which omits the
    module of builtins and of ``__main__``) or in a node's error text (``raised``
    False: the node's own errors name their class by its name)."""
    if "." in name and is_dotted_name(name):
        return name
    for module in (builtins, engine_errors, exceptions):
        found = getattr(module, name, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return _path(found)
    if raised and name.isidentifier():
        return f"__main__.{name}"
    return _path(RunInterrupted)
