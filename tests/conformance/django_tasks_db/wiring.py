"""The wiring of django-tasks-db's ``tests/tests.py`` (0.13.0) onto HtaskBackend and
``runscheduler`` (not a test module).

django-tasks-db's tests read its model, ``DBTaskResult``, and run its command,
``db_worker``. The ports put ours in their place:

- :class:`DBTaskResult`: ``DBTaskResult.objects`` is a queryset of our
  :class:`~django_htask.models.Task` rows that hold Django tasks, with the verbs its
  tests call (``ready()``, ``successful()``, ``failed()``, ``running()``);
- :func:`store_task_path`: a row naming any path as its Django task, as their
  ``DBTaskResult.objects.create(task_path=...)`` does, read through
  :class:`StoredTaskPath`;
- :func:`run_worker`: ``call_command("runscheduler", batch=True, ...)`` for their
  ``call_command("db_worker", batch=True, ...)``, serving the queue ``default`` as
  ``db_worker`` does unless told otherwise (``runscheduler`` serves every queue);
- :class:`WorkerProcess`: a ``manage.py runscheduler`` subprocess on the test database
  (:mod:`.worker_settings`), for their ``python -m manage db_worker``.
"""

from __future__ import annotations

import logging
import os
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.db import connection
from django.db.models import QuerySet
from django.tasks import TaskResultStatus, task_backends
from django.utils.functional import classproperty

from django_htask import clock
from django_htask.backends import RUNNER
from django_htask.engine import registry
from django_htask.models import Run, Task, TaskStatus, new_token
from tests.acceptance.conftest import Scheduler

__all__ = [
    "DBTaskResult",
    "StoredTaskPath",
    "WorkerProcess",
    "create_row",
    "reset_loggers",
    "run_worker",
    "source",
    "store_task_path",
]

#: Our statuses as django.tasks reads them (as HtaskBackend.get_result maps them).
STATUS = {
    TaskStatus.PENDING: TaskResultStatus.READY,
    TaskStatus.RUNNING: TaskResultStatus.RUNNING,
    TaskStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    TaskStatus.FAILED: TaskResultStatus.FAILED,
    TaskStatus.CANCELLED: TaskResultStatus.FAILED,
}


class DBTaskResultQuerySet(QuerySet[Task]):
    """The verbs of django-tasks-db's ``DBTaskResultQuerySet`` its tests call."""

    def ready(self) -> DBTaskResultQuerySet:
        """Pending and due (``db_worker`` runs these)."""
        return self.filter(status=TaskStatus.PENDING, run_at__lte=clock.now())

    def successful(self) -> DBTaskResultQuerySet:
        return self.filter(status=TaskStatus.SUCCEEDED)

    def failed(self) -> DBTaskResultQuerySet:
        return self.filter(status=TaskStatus.FAILED)

    def running(self) -> DBTaskResultQuerySet:
        return self.filter(status=TaskStatus.RUNNING)


class DBTaskResult:
    """django-tasks-db's model as its tests query it: our Task rows of Django tasks."""

    @classproperty
    def objects(cls) -> DBTaskResultQuerySet:
        return DBTaskResultQuerySet(model=Task).filter(function=RUNNER)


class StoredTaskPath:
    """A row :func:`store_task_path` wrote, with what django-tasks-db's tests read of
    theirs: ``id``, ``task_path``, ``status`` (django.tasks's), ``traceback`` and
    ``task`` (the Django task the backend finds for it, or the error it raises)."""

    def __init__(self, row: Task, task_path: str) -> None:
        self.row = row
        self.id = row.token
        self.task_path = task_path

    def refresh_from_db(self) -> None:
        self.row.refresh_from_db()

    @property
    def status(self) -> TaskResultStatus:
        return STATUS[TaskStatus(self.row.status)]

    @property
    def traceback(self) -> str:
        """The traceback of its last failed run (kept on the task too)."""
        run = Run.objects.filter(task=self.row).exclude(traceback="").order_by("-id").first()
        return run.traceback if run is not None else self.row.traceback

    @property
    def task(self) -> Any:
        return task_backends[self.row.backend or "default"].get_result(self.id).task


def store_task_path(
    *, args_kwargs: dict[str, Any], task_path: str, backend_name: str
) -> StoredTaskPath:
    """Store a Django task's call naming ``task_path``, as ``HtaskBackend.enqueue``
    stores one, whatever the path names (their ``DBTaskResult.objects.create``)."""
    token = new_token()
    payload = registry.check_call(
        RUNNER,
        [task_path, args_kwargs.get("args", []), args_kwargs.get("kwargs", {})],
        {"result_id": token, "backend": backend_name},
    )
    row = Task.objects.create(
        token=token,
        function=RUNNER,
        payload=payload,
        run_at=clock.now(),
        backend=backend_name,
    )
    return StoredTaskPath(row, task_path)


def create_row(**fields: Any) -> Task:
    """A Task row of a Django task with ``fields`` (their ``DBTaskResult.objects.create``
    where only the row matters: a priority)."""
    return Task.objects.create(function=RUNNER, run_at=clock.now(), **fields)


#: ``db_worker``'s options in django-tasks-db's ``run_worker`` mapped to ours:
#: ``batch`` → ``batch``; ``worker_id`` → ``node_id``; ``interval=0`` → the shortest
#: poll we take (it must be > 0); its default queue, ``default`` → ``queue``; ``no_sync``:
#: no code-defined schedules (db_worker has none); ``verbosity=0`` and
#: ``startup_delay=False`` have no counterpart (we print a banner, and start at once).
run_worker = partial(
    call_command,
    "runscheduler",
    batch=True,
    poll_interval=0.05,
    no_sync=True,
    queue=["default"],
)


def reset_loggers() -> None:
    """Undo what ``runscheduler`` did to the ``django_htask`` logger (its level)."""
    logging.getLogger("django_htask").setLevel(logging.NOTSET)


class WorkerProcess:
    """A ``manage.py runscheduler`` subprocess on the test database, with stderr in its
    output as their ``subprocess.Popen(..., stderr=subprocess.STDOUT)``.

    ``process`` is the ``Popen``; ``output`` all it printed. ``start`` returns once the
    banner is printed (the node has loaded what is due), unless ``batch``: a batch
    run may be over before a test could look."""

    SETTINGS = "tests.conformance.django_tasks_db.worker_settings"

    def __init__(self, args: list[str]) -> None:
        env = {
            "DJANGO_SETTINGS_MODULE": self.SETTINGS,
            "HTASK_DTDB_DATABASE": str(connection.settings_dict["NAME"]),
        }
        self.scheduler = Scheduler(Path(os.devnull), args, env)
        self.process: subprocess.Popen[str] = self.scheduler.process

    @classmethod
    def start(cls, args: list[str], *, wait_ready: bool) -> WorkerProcess:
        worker = cls(args)
        if wait_ready:
            worker.scheduler.wait_ready()
        return worker

    @property
    def output(self) -> str:
        """What it printed so far, stdout then stderr (our log lines go to stderr)."""
        return self.scheduler.stdout + self.scheduler.stderr

    def finish(self) -> None:
        """Read what is left of its output once it has exited."""
        self.scheduler.wait_exit(timeout=10)

    def kill(self) -> None:
        self.scheduler.kill()


def source(name: str) -> Any:
    """Mark a ported test with the django-tasks-db 0.13.0 test it ports
    (``Class::method`` of ``tests/tests.py``); ``test_coverage`` reads the marks."""

    def mark(test: Any) -> Any:
        test.ported_from = name
        return test

    return mark
