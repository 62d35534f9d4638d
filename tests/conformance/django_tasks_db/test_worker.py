# Ported from django-tasks-db 0.13.0, tests/tests.py, class DatabaseBackendWorkerTestCase.
# Copyright (c) Jake Howard and contributors; BSD-3-Clause.
# ruff: noqa: PT009, PT027, SIM117
"""django-tasks-db's tests of its worker run in the test process
(``DatabaseBackendWorkerTestCase``: ``call_command("db_worker", batch=True)``) against
``call_command("runscheduler", batch=True)``. The wiring is in :mod:`.wiring`; each
change, each test not ported and each deliberate difference is listed in
docs/django-tasks.md ("django-tasks-db's tests"). Each test names the one it ports
(``@source``)."""

# django-tasks-db's formatting is kept, so that a diff with its file shows the wiring.
# fmt: off
from collections import Counter
from contextlib import redirect_stderr
from datetime import timedelta
from io import StringIO
from typing import cast
from unittest import mock, skipIf

import pytest

pytest.importorskip(
    "django.tasks",
    reason="django.tasks needs Django >= 6.0; `make compat` runs these on Django 6.0/6.1",
)

from django.core.management import CommandError, execute_from_command_line
from django.db import connection, connections, transaction
from django.tasks import TaskResultStatus
from django.tasks.base import Task
from django.test import override_settings
from django.utils import timezone
from django.utils.crypto import get_random_string

from django_htask.node import NodeStats
from tests.conformance.django_tasks.wiring import HtaskTestCase

from . import tasks as test_tasks
from .wiring import DBTaskResult, reset_loggers, run_worker, source, store_task_path

HTASK_BACKEND = "django_htask.backends.HtaskBackend"
DUMMY_BACKEND = "django.tasks.backends.dummy.DummyBackend"
COMMAND = "django_htask.management.commands.runscheduler"


def stopped_node() -> mock.MagicMock:
    """A stand-in for runscheduler's Node that has run and stopped: a validation that
    let a bad value through makes the test fail, not run a node for ever."""
    node = mock.MagicMock(
        node_id="stand-in", stop_requested=True, fenced=None, unfinished=0, done="", exit_status=0,
        max_tasks=None, batch=False,
    )
    node.start.return_value = NodeStats(0, 0, None)
    node.store.describe.return_value = "no database"
    node.serving.backend = None
    node.serving.queues.serves_all = True
    node.settings.shutdown_timeout = 0.0
    return node


@override_settings(
    TASKS={
        "default": {
            "BACKEND": HTASK_BACKEND,
            "QUEUES": ["default", "queue-1"],
        },
        "dummy": {"BACKEND": DUMMY_BACKEND},
        # Wiring: a second alias of our backend (test_doesnt_process_different_backend).
        "other": {"BACKEND": HTASK_BACKEND},
    }
)
class DatabaseBackendWorkerTestCase(HtaskTestCase):
    worker_id = get_random_string(32)

    run_worker = staticmethod(run_worker)

    def tearDown(self) -> None:
        # Reset the logger after every run (runscheduler sets its level)
        reset_loggers()

    @source("DatabaseBackendWorkerTestCase::test_run_enqueued_task")
    def test_run_enqueued_task(self) -> None:
        for task in [
            test_tasks.noop_task,
            # test_tasks.noop_task_async,
        ]:
            with self.subTest(task):
                result = cast(Task, task).enqueue()
                self.assertEqual(DBTaskResult.objects.ready().count(), 1)

                self.assertEqual(result.status, TaskResultStatus.READY)

                self.run_worker()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertEqual(result.attempts, 0)
                result.refresh()
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type:ignore[arg-type,misc]
                self.assertGreaterEqual(result.finished_at, result.started_at)  # type:ignore[arg-type,misc]
                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertEqual(result.attempts, 1)

                self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    @source("DatabaseBackendWorkerTestCase::test_batch_processes_all_tasks")
    def test_batch_processes_all_tasks(self) -> None:
        for _ in range(3):
            test_tasks.noop_task.enqueue()
        test_tasks.failing_task_value_error.enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 4)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.successful().count(), 3)
        self.assertEqual(DBTaskResult.objects.failed().count(), 1)

    @source("DatabaseBackendWorkerTestCase::test_no_tasks")
    def test_no_tasks(self) -> None:
        self.run_worker()

    @source("DatabaseBackendWorkerTestCase::test_doesnt_process_different_queue")
    def test_doesnt_process_different_queue(self) -> None:
        result = test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker(queue=[result.task.queue_name])

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    @source("DatabaseBackendWorkerTestCase::test_process_all_queues")
    def test_process_all_queues(self) -> None:
        test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker(queue=["*"])

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    @source("DatabaseBackendWorkerTestCase::test_process_all_queues_excluding_one_queue")
    def test_process_all_queues_excluding_one_queue(self) -> None:
        test_tasks.noop_task.enqueue()
        excluded_result = test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 2)

        self.run_worker(queue=["*"], exclude_queue=["queue-1"])

        excluded_result.refresh()
        self.assertEqual(excluded_result.status, TaskResultStatus.READY)
        self.assertEqual(DBTaskResult.objects.ready().count(), 1)
        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

    @source("DatabaseBackendWorkerTestCase::test_exclude_queues_requires_processing_all_queues")
    def test_exclude_queues_requires_processing_all_queues(self) -> None:
        test_tasks.noop_task.enqueue()
        test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 2)

        # Difference: our message.
        with self.assertRaisesMessage(
            CommandError, "--exclude-queue can only be used when every queue is served"
        ):
            self.run_worker(queue=["default", "queue-1"], exclude_queue=["queue-1"])

        self.assertEqual(DBTaskResult.objects.ready().count(), 2)
        self.assertEqual(DBTaskResult.objects.successful().count(), 0)

    @source("DatabaseBackendWorkerTestCase::test_excluding_unknown_queue_processes_selected_queues")
    def test_excluding_unknown_queue_processes_selected_queues(self) -> None:
        test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker(queue=["*"], exclude_queue=["missing"])

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

    @source("DatabaseBackendWorkerTestCase::test_failing_task")
    def test_failing_task(self) -> None:
        result = test_tasks.failing_task_value_error.enqueue()
        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)

        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type: ignore
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type: ignore
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value  # noqa: B018

        self.assertEqual(result.errors[0].exception_class, ValueError)
        traceback = result.errors[0].traceback
        self.assertTrue(
            traceback
            and traceback.endswith("ValueError: This task failed due to ValueError\n"),
            traceback,
        )

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    @source("DatabaseBackendWorkerTestCase::test_complex_exception")
    def test_complex_exception(self) -> None:
        result = test_tasks.complex_exception.enqueue()
        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)

        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type: ignore
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type: ignore
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value  # noqa: B018

        self.assertEqual(result.errors[0].exception_class, ValueError)
        self.assertIn(
            'ValueError(ValueError("This task failed"))', result.errors[0].traceback
        )

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    @source("DatabaseBackendWorkerTestCase::test_complex_return_value")
    def test_complex_return_value(self) -> None:
        result = test_tasks.complex_return_value.enqueue()

        self.run_worker()

        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type:ignore[arg-type,misc]
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type:ignore[arg-type,misc]

        self.assertIsNone(result._return_value)  # type: ignore[attr-defined]
        self.assertEqual(result.errors[0].exception_class, TypeError)
        self.assertIn("is not JSON serializable", result.errors[0].traceback)

    @source("DatabaseBackendWorkerTestCase::test_doesnt_process_different_backend")
    def test_doesnt_process_different_backend(self) -> None:
        result = test_tasks.failing_task_value_error.enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        # Difference: --backend must name an alias of our backend ("other", not "dummy").
        self.run_worker(backend="other")

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker(backend=result.backend)

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

    @source("DatabaseBackendWorkerTestCase::test_unknown_backend")
    def test_unknown_backend(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(
                    ["django-admin", "runscheduler", "--backend", "unknown"]
                )
        # Difference: our message.
        self.assertIn("--backend 'unknown': no such alias in TASKS", output.getvalue())

    @source("DatabaseBackendWorkerTestCase::test_incorrect_backend")
    def test_incorrect_backend(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(
                    ["django-admin", "runscheduler", "--backend", "dummy"]
                )
        # Difference: our message.
        self.assertIn(
            "--backend 'dummy': TASKS['dummy'] is not django-htask's backend",
            output.getvalue(),
        )

    @source("DatabaseBackendWorkerTestCase::test_negative_interval")
    def test_negative_interval(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(
                    ["django-admin", "runscheduler", "--poll-interval", "-1"]
                )
        # Difference: our message.
        self.assertIn("--poll-interval must be a finite number > 0, got -1", output.getvalue())

    @source("DatabaseBackendWorkerTestCase::test_infinite_interval")
    def test_infinite_interval(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                # Wiring: a Node stand-in, so that the bug fails the test, not hangs it.
                with mock.patch(f"{COMMAND}.Node", return_value=stopped_node()):
                    execute_from_command_line(
                        ["django-admin", "runscheduler", "--poll-interval", "inf"]
                    )
        # Difference: our message.
        self.assertIn("--poll-interval must be a finite number > 0, got inf", output.getvalue())

    @source("DatabaseBackendWorkerTestCase::test_fractional_interval")
    def test_fractional_interval(self) -> None:
        with mock.patch(f"{COMMAND}.Node", return_value=stopped_node()) as worker_class:
            execute_from_command_line(
                ["django-admin", "runscheduler", "--poll-interval", "0.1"]
            )

        self.assertEqual(worker_class.mock_calls[0].kwargs["poll_interval"], 0.1)

    @source("DatabaseBackendWorkerTestCase::test_negative_max_tasks")
    def test_negative_max_tasks(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(
                    ["django-admin", "runscheduler", "--max-tasks", "-1"]
                )
        # Difference: our message.
        self.assertIn("--max-tasks must be greater than zero", output.getvalue())

    @source("DatabaseBackendWorkerTestCase::test_zero_max_tasks")
    def test_zero_max_tasks(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(
                    ["django-admin", "runscheduler", "--max-tasks", "0"]
                )
        # Difference: our message.
        self.assertIn("--max-tasks must be greater than zero", output.getvalue())

    @source("DatabaseBackendWorkerTestCase::test_too_long_worker_id")
    def test_too_long_worker_id(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                # Difference: a node id has up to 100 characters (db_worker: 64).
                execute_from_command_line(
                    ["django-admin", "runscheduler", "--node-id", "A" * 101]
                )
        self.assertIn(
            "--node-id must be 1 to 100 characters, got 101", output.getvalue()
        )

    @source("DatabaseBackendWorkerTestCase::test_empty_worker_id")
    def test_empty_worker_id(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(
                    ["django-admin", "runscheduler", "--node-id", ""]
                )
        # Difference: our message.
        self.assertIn("--node-id must be 1 to 100 characters, got 0", output.getvalue())

    @source("DatabaseBackendWorkerTestCase::test_run_after")
    def test_run_after(self) -> None:
        result = test_tasks.noop_task.using(
            run_after=timezone.now() + timedelta(hours=10)
        ).enqueue()

        self.assertEqual(DBTaskResult.objects.count(), 1)
        self.assertEqual(DBTaskResult.objects.ready().count(), 0)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.count(), 1)
        self.assertEqual(DBTaskResult.objects.ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.successful().count(), 0)

        DBTaskResult.objects.filter(token=result.id).update(run_at=timezone.now())

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

    @source("DatabaseBackendWorkerTestCase::test_invalid_task_path")
    def test_invalid_task_path(self) -> None:
        db_task_result = store_task_path(
            args_kwargs={"args": [["exit", "1"]], "kwargs": {}},
            task_path="subprocess.check_output",
            backend_name="default",
        )

        self.run_worker()

        db_task_result.refresh_from_db()

        self.assertEqual(db_task_result.status, TaskResultStatus.FAILED)

    @source("DatabaseBackendWorkerTestCase::test_missing_task_path")
    def test_missing_task_path(self) -> None:
        db_task_result = store_task_path(
            args_kwargs={"args": [], "kwargs": {}},
            task_path="missing.func",
            backend_name="default",
        )

        self.run_worker()

        db_task_result.refresh_from_db()

        self.assertEqual(db_task_result.status, TaskResultStatus.FAILED)

    @source("DatabaseBackendWorkerTestCase::test_worker_doesnt_exit_on_failure")
    def test_worker_doesnt_exit_on_failure(self) -> None:
        result = test_tasks.exit_task.enqueue()

        self.run_worker()

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)

    @source("DatabaseBackendWorkerTestCase::test_worker_with_locked_rows")
    @skipIf(connection.vendor == "sqlite", "SQLite locks the entire database")
    def test_worker_with_locked_rows(self) -> None:
        result_1 = test_tasks.noop_task.enqueue()
        new_connection = connections.create_connection("default")

        with transaction.atomic():
            locked_tasks_query = DBTaskResult.objects.select_for_update().query.sql_with_params()

        try:
            # Start a transaction in the other connection
            with new_connection.cursor() as c:
                c.execute("BEGIN")

            # Lock the current rows in the table
            with new_connection.cursor() as c:
                c.execute(*locked_tasks_query)
                results = list(c.fetchall())
            self.assertEqual(len(results), 1)

            # Add another task which isn't locked
            result_2 = test_tasks.noop_task.enqueue()

            self.run_worker()
        finally:
            new_connection.close()

        result_1.refresh()
        result_2.refresh()

        self.assertEqual(result_1.status, TaskResultStatus.READY)
        self.assertEqual(result_2.status, TaskResultStatus.SUCCESSFUL)

    @source("DatabaseBackendWorkerTestCase::test_max_tasks")
    def test_max_tasks(self) -> None:
        results = [test_tasks.noop_task.enqueue() for _ in range(5)]

        stdout = StringIO()
        self.run_worker(max_tasks=2, stdout=stdout)

        # Difference: our message.
        self.assertIn("ran the maximum of 2 tasks (--max-tasks)", stdout.getvalue())

        for result in results:
            result.refresh()

        statuses = Counter(result.status for result in results)

        self.assertEqual(statuses[TaskResultStatus.SUCCESSFUL], 2)
        self.assertEqual(statuses[TaskResultStatus.READY], 3)

    @source("DatabaseBackendWorkerTestCase::test_takes_context")
    def test_takes_context(self) -> None:
        result = test_tasks.get_task_id.enqueue()

        self.run_worker()

        result.refresh()

        self.assertEqual(result.return_value, result.id)

    @source("DatabaseBackendWorkerTestCase::test_context")
    def test_context(self) -> None:
        result = test_tasks.test_context.enqueue(1)

        self.run_worker()
        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    @source("DatabaseBackendWorkerTestCase::test_task_import_string")
    def test_task_import_string(self) -> None:
        db_task_result = store_task_path(
            args_kwargs={"args": [], "kwargs": {}},
            task_path=f"{test_tasks.__name__}.some_test",
            backend_name="default",
        )
        self.run_worker()
        db_task_result.refresh_from_db()

        self.assertEqual(db_task_result.status, TaskResultStatus.FAILED)
        self.assertIn("ImportError", db_task_result.traceback)
