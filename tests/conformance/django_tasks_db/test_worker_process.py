# Ported from django-tasks-db 0.13.0, tests/tests.py, class DatabaseWorkerProcessTestCase.
# Copyright (c) Jake Howard and contributors; BSD-3-Clause.
# ruff: noqa: PT009
"""django-tasks-db's tests of its worker as a process (``DatabaseWorkerProcessTestCase``:
``python -m manage db_worker``) against a ``manage.py runscheduler`` subprocess on the
test database; the test process enqueues and reads the results. The wiring is in
:mod:`.wiring`; each change and each deliberate difference is listed in
docs/django-tasks.md ("django-tasks-db's tests"). Each test names the one it ports
(``@source``)."""

# django-tasks-db's formatting is kept, so that a diff with its file shows the wiring.
# fmt: off
import signal
import subprocess
import sys
import time
from unittest import skipIf

import pytest

pytest.importorskip(
    "django.tasks",
    reason="django.tasks needs Django >= 6.0; `make compat` runs these on Django 6.0/6.1",
)

from django.db import connection
from django.tasks import TaskResultStatus, default_task_backend
from django.test import override_settings
from django.utils.crypto import get_random_string

from tests.conformance.django_tasks.wiring import HtaskTestCase

from . import tasks as test_tasks
from .wiring import WorkerProcess, source

pytestmark = pytest.mark.slow


@override_settings(
    TASKS={
        "default": {
            "BACKEND": "django_htask.backends.HtaskBackend",
        },
    }
)
class DatabaseWorkerProcessTestCase(HtaskTestCase):
    WORKER_STARTUP_TIME = 1

    def setUp(self) -> None:
        # Wiring: their class decorator @skipIfInMemoryDB(), checked here, once the test
        # database is set up (pytest evaluates a class's skip when it collects it).
        if connection.vendor == "sqlite" and connection.is_in_memory_db():
            self.skipTest("Tests cannot run on in-memory DB")
        self.workers: list[WorkerProcess] = []
        self.processes: list[subprocess.Popen] = []

    def tearDown(self) -> None:
        # Kill any remaining child processes (and close their pipes)
        for worker in self.workers:
            worker.kill()

    def start_worker(
        self,
        args: list[str] | None = None,
        *,
        worker_id: str | None = None,
    ) -> WorkerProcess:
        if args is None:
            args = []

        if worker_id is None:
            worker_id = get_random_string(32)

        # Wiring: db_worker's --verbosity 3 → --log-level DEBUG, --worker-id →
        # --node-id; --no-sync: no code-defined schedules (db_worker has none); no
        # --no-startup-delay (we have none). It returns once the node is up (the
        # banner), but for a --batch run, which may be over by then.
        worker = WorkerProcess.start(
            ["--log-level", "DEBUG", "--no-sync", "--node-id", worker_id, *args],
            wait_ready="--batch" not in args,
        )
        self.workers.append(worker)
        self.processes.append(worker.process)
        return worker

    @source("DatabaseWorkerProcessTestCase::test_run_subprocess")
    def test_run_subprocess(self) -> None:
        result = test_tasks.noop_task.enqueue()
        process = self.start_worker(["--batch"]).process
        process.wait()
        self.assertEqual(process.returncode, 0)

        self.assertEqual(result.status, TaskResultStatus.READY)

        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    @source("DatabaseWorkerProcessTestCase::test_interrupt_no_tasks")
    @skipIf(sys.platform == "win32", "Terminate is always forceful on Windows")
    def test_interrupt_no_tasks(self) -> None:
        process = self.start_worker().process

        time.sleep(self.WORKER_STARTUP_TIME)

        process.terminate()

        process.wait(timeout=0.5)
        self.assertEqual(process.returncode, 0)

    @source("DatabaseWorkerProcessTestCase::test_interrupt_signals")
    @skipIf(sys.platform == "win32", "Cannot emulate CTRL-C on Windows")
    def test_interrupt_signals(self) -> None:
        for sig in [
            signal.SIGINT,  # ctrl-c
            signal.SIGTERM,
        ]:
            with self.subTest(sig):
                result = test_tasks.sleep_for.enqueue(2)
                self.assertEqual(default_task_backend.get_result(result.id).worker_ids, [])

                self.assertGreater(result.args[0], self.WORKER_STARTUP_TIME)

                process = self.start_worker().process

                # Make sure the task is running by now
                time.sleep(self.WORKER_STARTUP_TIME)

                result.refresh()
                self.assertEqual(result.status, TaskResultStatus.RUNNING)
                self.assertNotEqual(
                    default_task_backend.get_result(result.id).worker_ids, []
                )

                process.send_signal(sig)

                process.wait(timeout=2)

                self.assertEqual(process.returncode, 0)

                result.refresh()

                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    @source("DatabaseWorkerProcessTestCase::test_repeat_ctrl_c")
    @skipIf(sys.platform == "win32", "Cannot emulate CTRL-C on Windows")
    def test_repeat_ctrl_c(self) -> None:
        result = test_tasks.hang.enqueue()
        self.assertEqual(default_task_backend.get_result(result.id).worker_ids, [])

        worker_id = get_random_string(32)

        process = self.start_worker(worker_id=worker_id).process

        # Make sure the task is running by now
        time.sleep(self.WORKER_STARTUP_TIME)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.RUNNING)
        self.assertEqual(default_task_backend.get_result(result.id).worker_ids, [worker_id])

        process.send_signal(signal.SIGINT)

        time.sleep(0.5)

        self.assertIsNone(process.poll())
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.RUNNING)
        self.assertEqual(default_task_backend.get_result(result.id).worker_ids, [worker_id])

        process.send_signal(signal.SIGINT)

        process.wait(timeout=2)

        # Difference: the second signal ends the process at once (os._exit(1)), writing
        # nothing: the task is still RUNNING, as after a kill (test_kill), until the
        # other nodes declare this one dead and fail its run with RunInterrupted.
        # db_worker raises SystemExit in the task, fails it with it, and exits with 0.
        self.assertEqual(process.returncode, 1)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.RUNNING)

    @source("DatabaseWorkerProcessTestCase::test_kill")
    @skipIf(sys.platform == "win32", "Windows doesn't support SIGKILL")
    def test_kill(self) -> None:
        # Required to keep mypy happy
        assert hasattr(signal, "SIGKILL")

        result = test_tasks.hang.enqueue()

        process = self.start_worker().process

        # Make sure the task is running by now
        time.sleep(self.WORKER_STARTUP_TIME)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.RUNNING)

        process.kill()

        process.wait(timeout=2)

        self.assertEqual(process.returncode, -signal.SIGKILL)

        result.refresh()

        # TODO: https://github.com/RealOrangeOne/django-tasks-db/issues/46
        self.assertEqual(result.status, TaskResultStatus.RUNNING)

    @source("DatabaseWorkerProcessTestCase::test_system_exit_task")
    def test_system_exit_task(self) -> None:
        result = test_tasks.failing_task_system_exit.enqueue()

        process = self.start_worker(["--batch"]).process
        process.wait(timeout=2)

        self.assertEqual(process.returncode, 0)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, SystemExit)

    @source("DatabaseWorkerProcessTestCase::test_keyboard_interrupt_task")
    def test_keyboard_interrupt_task(self) -> None:
        result = test_tasks.failing_task_keyboard_interrupt.enqueue()

        process = self.start_worker(["--batch"]).process
        process.wait(timeout=2)

        self.assertEqual(process.returncode, 0)

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, KeyboardInterrupt)

    @source("DatabaseWorkerProcessTestCase::test_multiple_workers")
    def test_multiple_workers(self) -> None:
        results = [test_tasks.sleep_for.enqueue(0.1) for _ in range(10)]

        for _ in range(3):
            self.start_worker(["--batch"])

        time.sleep(self.WORKER_STARTUP_TIME)

        for process in self.processes:
            process.wait(timeout=5)
            self.assertIsNotNone(process.returncode)

        for result in results:
            result.refresh()
            self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

        all_output = ""

        for worker in self.workers:
            worker.finish()
            stdout_text = worker.output
            all_output += stdout_text
            # Difference: our message.
            self.assertIn("nothing is due any more (--batch)", stdout_text)

        for result in results:
            # Running and successful
            self.assertEqual(all_output.count(result.id), 2)
