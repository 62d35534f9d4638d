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
module path. A worker finds the function among the Django tasks defined in this
process (decorating a function with ``@task`` registers it here), never by importing
a stored string: define them in an installed app's ``tasks`` module, which
``runscheduler`` imports at start.

The result's id is the task's unguessable token. Statuses map ``pending`` → READY,
``running`` → RUNNING, ``succeeded`` → SUCCESSFUL, ``failed`` and ``cancelled`` →
FAILED. The signals ``task_enqueued`` (when the transaction commits),
``task_started`` and ``task_finished`` (on the worker) are sent.

This module imports ``django.tasks``: import it on Django >= 6.0 only (Django 5.2
has no ``TASKS`` setting and never loads it).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from django.apps import apps
from django.core import checks
from django.db import router, transaction
from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task as DjangoTask
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils.json import normalize_json

from django_htask.engine import HtaskError, registry

from . import clock
from .decorators import task as htask_task
from .models import Run, RunStatus, Task, TaskStatus, new_token

__all__ = ["RUNNER", "HtaskBackend", "TaskCancelled", "UnknownDjangoTask", "run_django_task"]

logger = logging.getLogger("django_htask.backends")

#: The registered name of the runner every Django task's call goes through.
RUNNER = "django_htask.backends:run_django_task"

#: Django tasks defined in this process, by module path (filled by ``validate_task``).
_known: dict[str, Callable[..., Any]] = {}

_STATUS = {
    TaskStatus.PENDING: TaskResultStatus.READY,
    TaskStatus.RUNNING: TaskResultStatus.RUNNING,
    TaskStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    TaskStatus.FAILED: TaskResultStatus.FAILED,
    TaskStatus.CANCELLED: TaskResultStatus.FAILED,
}


class UnknownDjangoTask(HtaskError, LookupError):
    """A stored call names a Django task this process does not define."""


class TaskCancelled(HtaskError, RuntimeError):
    """The task was cancelled before it ran (the error of a cancelled task's result)."""


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

    Sends ``task_started`` and ``task_finished``; an exception is re-raised after
    ``task_finished`` so the run is recorded as failed."""
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
        value = normalize_json(value)
    except Exception as exc:
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
        call_args: list[Any] = normalize_json(list(args))  # type: ignore[assignment]
        call_kwargs: dict[str, Any] = normalize_json(dict(kwargs))  # type: ignore[assignment]
        token = new_token()
        runner_kwargs = {
            "result_id": token,
            "backend": self.alias,
            "priority": task.priority,
            "queue_name": task.queue_name,
            "takes_context": task.takes_context,
            "deferred": task.run_after is not None,
        }
        payload = registry.check_call(
            RUNNER, [task.module_path, call_args, call_kwargs], runner_kwargs
        )
        now = clock.now()
        row = Task(
            token=token,
            function=RUNNER,
            payload=payload,
            run_at=task.run_after or now,
            max_attempts=self.max_attempts,
            priority=task.priority,
        )
        using = router.db_for_write(Task)
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
            from . import node  # noqa: PLC0415
            from .signals import task_scheduled  # noqa: PLC0415

            task_scheduled.send_robust(sender=Task, task=row)
            node.notify_local_change()
            task_enqueued.send(type(self), task_result=result)

        transaction.on_commit(committed, using=using, robust=True)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        row = Task.objects.filter(token=result_id, function=RUNNER).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        _name, call_args, call_kwargs = _decode(row)
        module_path, args, kwargs = call_args
        func = _known.get(module_path)
        if func is None:
            raise UnknownDjangoTask(
                f"the Django task {module_path!r} is not defined in this process: define it "
                "with @task in an installed app's tasks module"
            )
        task: DjangoTask[Any, Any] = DjangoTask(
            priority=call_kwargs.get("priority", 0),
            func=func,
            backend=self.alias,
            queue_name=call_kwargs.get("queue_name", "default"),
            run_after=row.run_at if call_kwargs.get("deferred") else None,
            takes_context=bool(call_kwargs.get("takes_context", False)),
        )
        runs = list(Run.objects.filter(task=row).order_by("started_at", "id"))
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
        if row.status == TaskStatus.RUNNING and row.locked_by and len(worker_ids) < row.attempts:
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
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            found.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['MAX_ATTEMPTS'] must be an int >= 1, "
                    f"got {attempts!r}",
                    id="django_htask.E006",
                )
            )
        return found


def _decode(row: Task) -> tuple[str, list[Any], dict[str, Any]]:
    from django_htask.engine import decode_call  # noqa: PLC0415

    name, args, kwargs = decode_call(bytes(row.payload))
    return name, list(args), dict(kwargs)


def _error(run: Run) -> TaskError:
    """The run's error as Django's TaskError (the class path from the traceback)."""
    text = run.traceback or f"{run.error}\n"
    last = text.rstrip().splitlines()[-1] if text.strip() else run.error
    name = last.split(":", 1)[0].strip()
    if "." not in name:
        engine_errors = "django_htask.engine.errors"
        import django_htask.engine.errors as errors_module  # noqa: PLC0415

        module = engine_errors if hasattr(errors_module, name) else "builtins"
        name = f"{module}.{name}"
    return TaskError(exception_class_path=name, traceback=text)
