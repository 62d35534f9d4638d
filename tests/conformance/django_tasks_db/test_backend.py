# Ported from django-tasks-db 0.13.0, tests/tests.py, class DatabaseBackendTestCase.
# Copyright (c) Jake Howard and contributors; BSD-3-Clause.
# ruff: noqa: PT009, PT027, SIM117
"""django-tasks-db's tests of its backend (``DatabaseBackendTestCase``) against
HtaskBackend. The wiring is in :mod:`.wiring`; each change, each test not ported and
each deliberate difference is listed in docs/django-tasks.md ("django-tasks-db's
tests"). Each test names the one it ports (``@source``)."""

# django-tasks-db's formatting is kept, so that a diff with its file shows the wiring.
# fmt: off
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest

pytest.importorskip(
    "django.tasks",
    reason="django.tasks needs Django >= 6.0; `make compat` runs these on Django 6.0/6.1",
)

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections, transaction
from django.db.utils import IntegrityError
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.test import override_settings

from django_htask.backends import HtaskBackend, UnknownDjangoTask
from django_htask.checks import check_use_tz
from django_htask.models import Task as HtaskTask
from tests.conformance.django_tasks.wiring import HtaskTestCase

from . import tasks as test_tasks
from .wiring import DBTaskResult, create_row, run_worker, source, store_task_path

HTASK_BACKEND = "django_htask.backends.HtaskBackend"
LOGGER = "django.tasks"


class DatabaseBackendTestCase(HtaskTestCase):
    @contextlib.contextmanager
    def _capture_task_enqueued_signal(
        self,
    ) -> Iterator[list[tuple[type[HtaskBackend], Any]]]:
        received: list[tuple[type[HtaskBackend], Any]] = []

        def capture_signal(
            sender: type[HtaskBackend], task_result: Any, **kwargs: Any
        ) -> None:
            received.append((sender, task_result))

        task_enqueued.connect(
            capture_signal, dispatch_uid="db_enqueue_signal", weak=False
        )
        try:
            yield received
        finally:
            task_enqueued.disconnect(capture_signal, dispatch_uid="db_enqueue_signal")

    def get_task_count_in_new_connection(self) -> int:
        """
        See what other connections see
        """
        new_connection = connections.create_connection("default")
        try:
            with new_connection.cursor() as c:
                c.execute(*HtaskTask.objects.values("id").query.sql_with_params())
                return len(c.fetchall())
        finally:
            new_connection.close()

    @source("DatabaseBackendTestCase::test_using_correct_backend")
    def test_using_correct_backend(self) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], HtaskBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    @source("DatabaseBackendTestCase::test_enqueue_task")
    def test_enqueue_task(self) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                with self._capture_task_enqueued_signal() as received:
                    result = cast(Task, task).enqueue(1, two=3)

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa:B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 0)

                self.assertEqual(received, [(HtaskBackend, result)])

    @source("DatabaseBackendTestCase::test_enqueue_task_async")
    async def test_enqueue_task_async(self) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                with self._capture_task_enqueued_signal() as received:
                    result = await cast(Task, task).aenqueue()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa:B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 0)

                self.assertEqual(received, [(HtaskBackend, result)])

    @source("DatabaseBackendTestCase::test_get_result")
    def test_get_result(self) -> None:
        result = default_task_backend.enqueue(test_tasks.noop_task, [], {})

        new_result = default_task_backend.get_result(result.id)

        self.assertEqual(result, new_result)

    @source("DatabaseBackendTestCase::test_get_result_async")
    async def test_get_result_async(self) -> None:
        result = await default_task_backend.aenqueue(test_tasks.noop_task, [], {})

        new_result = await default_task_backend.aget_result(result.id)

        self.assertEqual(result, new_result)

    @source("DatabaseBackendTestCase::test_refresh_result")
    def test_refresh_result(self) -> None:
        result = default_task_backend.enqueue(
            test_tasks.calculate_meaning_of_life, [], {}
        )

        # Wiring: a node runs the task, where django-tasks-db writes the finished
        # state into its table.
        run_worker()

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 0)

        result.refresh()

        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)

    @source("DatabaseBackendTestCase::test_refresh_result_async")
    async def test_refresh_result_async(self) -> None:
        result = await default_task_backend.aenqueue(
            test_tasks.calculate_meaning_of_life, [], {}
        )

        # Wiring: a node runs the task (as in test_refresh_result).
        await sync_to_async(run_worker)()

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 0)

        await result.arefresh()

        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)

    @source("DatabaseBackendTestCase::test_get_missing_result")
    def test_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(str(uuid.uuid4()))

    @source("DatabaseBackendTestCase::test_async_get_missing_result")
    async def test_async_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result(str(uuid.uuid4()))

    @source("DatabaseBackendTestCase::test_invalid_uuid")
    def test_invalid_uuid(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result("123")

    @source("DatabaseBackendTestCase::test_async_invalid_uuid")
    async def test_async_invalid_uuid(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("123")

    @source("DatabaseBackendTestCase::test_invalid_task_path")
    def test_invalid_task_path(self) -> None:
        db_task_result = store_task_path(
            args_kwargs={"args": [["exit", "1"]], "kwargs": {}},
            task_path="subprocess.check_output",
            backend_name="default",
        )

        # Difference: UnknownDjangoTask, saying what to change, for SuspiciousOperation.
        with self.assertRaisesMessage(
            UnknownDjangoTask,
            f"the Django task {db_task_result.task_path!r} is not defined in this "
            "process, and its module 'subprocess' is in no installed app",
        ):
            _ = db_task_result.task

    @source("DatabaseBackendTestCase::test_missing_task_path")
    def test_missing_task_path(self) -> None:
        db_task_result = store_task_path(
            args_kwargs={"args": [], "kwargs": {}},
            task_path="missing.func",
            backend_name="default",
        )

        # Difference: UnknownDjangoTask (a LookupError) for ImportError: a module in no
        # installed app is not imported at all.
        with self.assertRaises(UnknownDjangoTask):
            _ = db_task_result.task

    @source("DatabaseBackendTestCase::test_check")
    def test_check(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 0, errors)

    @source("DatabaseBackendTestCase::test_database_backend_app_missing")
    @override_settings(INSTALLED_APPS=[])
    def test_database_backend_app_missing(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 1)
        self.assertIn("django_htask", errors[0].hint)

    @source("DatabaseBackendTestCase::test_priority_range_check")
    def test_priority_range_check(self) -> None:
        with self.assertRaises(IntegrityError):
            create_row(priority=-101)

        with self.assertRaises(IntegrityError):
            create_row(priority=101)

        # Django accepts the float, but only stores an int
        result = create_row(priority=3.1)
        result.refresh_from_db()
        self.assertEqual(result.priority, 3)

        create_row(priority=100)
        create_row(priority=-100)
        create_row(priority=0)

    @source("DatabaseBackendTestCase::test_doesnt_wait_until_transaction_commit")
    @override_settings(
        TASKS={
            "default": {
                "BACKEND": HTASK_BACKEND,
            }
        }
    )
    def test_doesnt_wait_until_transaction_commit(self) -> None:
        with transaction.atomic():
            result = test_tasks.noop_task.enqueue()

            self.assertIsNotNone(result.enqueued_at)

            self.assertEqual(DBTaskResult.objects.count(), 1)

            # SQLite locks the table during this transaction
            if connection.vendor != "sqlite":
                self.assertEqual(self.get_task_count_in_new_connection(), 0)

        if connection.vendor != "sqlite":
            self.assertEqual(self.get_task_count_in_new_connection(), 1)

    @source("DatabaseBackendTestCase::test_enqueue_logs")
    def test_enqueue_logs(self) -> None:
        with self.assertLogs(LOGGER, level="DEBUG") as captured_logs:
            result = test_tasks.noop_task.enqueue()

        self.assertEqual(len(captured_logs.output), 1)
        self.assertIn("enqueued", captured_logs.output[0])
        self.assertIn(result.id, captured_logs.output[0])

    @source("DatabaseBackendTestCase::test_run_after_tz")
    def test_run_after_tz(self) -> None:
        for use_tz in [True, False]:
            with self.subTest(use_tz=use_tz):
                with override_settings(USE_TZ=use_tz):
                    if not use_tz:
                        # Difference: USE_TZ = False is the system check error
                        # django_htask.E001, and enqueue refuses it, naming the setting.
                        ids = [e.id for e in check_use_tz()]
                        self.assertEqual(ids, ["django_htask.E001"])
                        with self.assertRaisesMessage(
                            ImproperlyConfigured, "USE_TZ is False"
                        ):
                            test_tasks.noop_task.enqueue()
                        self.assertEqual(HtaskTask.objects.count(), 1)
                        continue
                    result = test_tasks.noop_task.enqueue()
                    self.assertIsNone(
                        default_task_backend.get_result(result.id).task.run_after
                    )

    @source("DatabaseBackendTestCase::test_validate_on_enqueue")
    def test_validate_on_enqueue(self) -> None:
        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": HTASK_BACKEND,
                    "QUEUES": ["unknown_queue"],
                }
            }
        ):
            task_with_custom_queue_name = test_tasks.noop_task.using(
                queue_name="unknown_queue"
            )

        with self.assertRaisesMessage(
            InvalidTask, "Queue 'unknown_queue' is not valid for backend"
        ):
            task_with_custom_queue_name.enqueue()

    @source("DatabaseBackendTestCase::test_validate_on_aenqueue")
    async def test_validate_on_aenqueue(self) -> None:
        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": HTASK_BACKEND,
                    "QUEUES": ["unknown_queue"],
                }
            }
        ):
            task_with_custom_queue_name = test_tasks.noop_task.using(
                queue_name="unknown_queue"
            )

        with self.assertRaisesMessage(
            InvalidTask, "Queue 'unknown_queue' is not valid for backend"
        ):
            await task_with_custom_queue_name.aenqueue()
