# Ported from django-tasks-db 0.13.0, tests/tests.py, class
# DatabaseBackendPruneTaskResultsTestCase.
# Copyright (c) Jake Howard and contributors; BSD-3-Clause.
# ruff: noqa: PT009, PT027, SIM117
"""django-tasks-db's tests of its ``prune_db_task_results`` command against ``htask
prune`` (finished tasks deleted past their retention, docs/operating.md). Its
``--min-age-days N`` is our ``--days N``; its ``--failed-min-age-days`` is the
``TASK_RETENTION_DAYS`` setting's ``failed`` key (ours has no option per status); its
``0`` (delete every finished task) is a tiny number of days here, since 0 means "for
ever" in ours (as in the settings). Query counts are not ported (ours deletes in
batches with the tasks' runs); each difference is listed in docs/django-tasks.md."""

# django-tasks-db's formatting is kept, so that a diff with its file shows the wiring.
# fmt: off
from datetime import timedelta
from functools import partial
from io import StringIO

import pytest

pytest.importorskip(
    "django.tasks",
    reason="django.tasks needs Django >= 6.0; `make compat` runs these on Django 6.0/6.1",
)

from contextlib import redirect_stderr

from django.core.management import call_command, execute_from_command_line
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import override_settings
from django.utils import timezone

from django_htask.models import TaskStatus
from tests.conformance.django_tasks.wiring import HtaskTestCase

from . import tasks as test_tasks
from .wiring import DBTaskResult, source

#: Their ``min_age_days=0`` (every finished task): a minute, the rows finished before.
NOW_DAYS = 1 / 1440


@override_settings(
    TASKS={
        "default": {
            "BACKEND": "django_htask.backends.HtaskBackend",
        },
    }
)
class DatabaseBackendPruneTaskResultsTestCase(HtaskTestCase):
    prune_task_results = staticmethod(partial(call_command, "htask", "prune"))

    def finished(self, status: str, days: float = 0.0) -> None:
        """Their ``update(status=..., finished_at=now - days)``: a minute more, so that
        "finished now" is past ``NOW_DAYS``."""
        DBTaskResult.objects.filter(finished_at__isnull=True).exclude(
            status=TaskStatus.RUNNING
        ).update(
            status=status,
            finished_at=timezone.now() - timedelta(days=days, minutes=2),
        )

    @source("DatabaseBackendPruneTaskResultsTestCase::test_prunes_tasks")
    def test_prunes_tasks(self) -> None:
        result = test_tasks.noop_task.enqueue()

        self.finished(TaskStatus.SUCCEEDED)

        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

        stdout = StringIO()

        self.prune_task_results("--days", str(NOW_DAYS), stdout=stdout)

        self.assertEqual(DBTaskResult.objects.successful().count(), 0)

        with self.assertRaises(TaskResultDoesNotExist):
            result.refresh()

        self.assertTrue(stdout.getvalue().startswith("deleted 1 finished tasks"))

    @source("DatabaseBackendPruneTaskResultsTestCase::test_doesnt_prune_new_tasks")
    def test_doesnt_prune_new_tasks(self) -> None:
        result = test_tasks.noop_task.enqueue()

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        stdout = StringIO()
        self.prune_task_results("--days", str(NOW_DAYS), stdout=stdout)

        self.assertEqual(DBTaskResult.objects.ready().count(), 1)

        result.refresh()

        self.assertTrue(stdout.getvalue().startswith("deleted 0 finished tasks"))

    @source("DatabaseBackendPruneTaskResultsTestCase::test_doesnt_prune_running_tasks")
    def test_doesnt_prune_running_tasks(self) -> None:
        result = test_tasks.noop_task.enqueue()

        DBTaskResult.objects.all().update(status=TaskStatus.RUNNING)

        self.assertEqual(DBTaskResult.objects.running().count(), 1)

        self.prune_task_results("--days", str(NOW_DAYS), stdout=StringIO())

        self.assertEqual(DBTaskResult.objects.running().count(), 1)

        result.refresh()

    @source("DatabaseBackendPruneTaskResultsTestCase::test_min_age")
    def test_min_age(self) -> None:
        one_day_result = test_tasks.noop_task.enqueue()

        self.finished(TaskStatus.SUCCEEDED, days=1)

        three_day_result = test_tasks.noop_task.enqueue()
        self.finished(TaskStatus.SUCCEEDED, days=3)

        self.assertEqual(DBTaskResult.objects.successful().count(), 2)

        self.prune_task_results(stdout=StringIO())

        self.assertEqual(DBTaskResult.objects.successful().count(), 2)

        self.prune_task_results("--days", "3", stdout=StringIO())

        self.assertEqual(DBTaskResult.objects.successful().count(), 1)

        one_day_result.refresh()

        with self.assertRaises(TaskResultDoesNotExist):
            three_day_result.refresh()

        self.prune_task_results("--days", "1", stdout=StringIO())

        self.assertEqual(DBTaskResult.objects.successful().count(), 0)

    @source("DatabaseBackendPruneTaskResultsTestCase::test_failed_min_age")
    def test_failed_min_age(self) -> None:
        successful_result = test_tasks.noop_task.enqueue()

        self.finished(TaskStatus.SUCCEEDED, days=3)

        failed_result = test_tasks.noop_task.enqueue()
        self.finished(TaskStatus.FAILED, days=3)

        self.assertEqual(
            DBTaskResult.objects.filter(finished_at__isnull=False).count(), 2
        )

        self.prune_task_results(stdout=StringIO())

        self.assertEqual(
            DBTaskResult.objects.filter(finished_at__isnull=False).count(), 2
        )

        with override_settings(HTASK={"TASK_RETENTION_DAYS": {"default": 3, "failed": 5}}):
            self.prune_task_results(stdout=StringIO())

        self.assertEqual(
            DBTaskResult.objects.filter(finished_at__isnull=False).count(), 1
        )

        failed_result.refresh()

        with self.assertRaises(TaskResultDoesNotExist):
            successful_result.refresh()

        with override_settings(HTASK={"TASK_RETENTION_DAYS": {"default": 3, "failed": 1}}):
            self.prune_task_results(stdout=StringIO())

        with self.assertRaises(TaskResultDoesNotExist):
            failed_result.refresh()

    @source("DatabaseBackendPruneTaskResultsTestCase::test_dry_run")
    def test_dry_run(self) -> None:
        test_tasks.noop_task.enqueue()

        self.finished(TaskStatus.SUCCEEDED)

        self.assertEqual(DBTaskResult.objects.count(), 1)

        stdout = StringIO()
        self.prune_task_results("--days", str(NOW_DAYS), "--dry-run", stdout=stdout)

        self.assertEqual(DBTaskResult.objects.count(), 1)

        self.assertTrue(stdout.getvalue().startswith("would delete 1 finished tasks"))

    @source("DatabaseBackendPruneTaskResultsTestCase::test_negative_age")
    def test_negative_age(self) -> None:
        output = StringIO()
        with redirect_stderr(output):
            with self.assertRaises(SystemExit):
                execute_from_command_line(
                    ["django-admin", "htask", "prune", "--days", "-1"]
                )
        self.assertIn("days must be a number > 0", output.getvalue())
