# Ported from django-tasks-db 0.13.0, tests/tests.py, class DatabaseTaskResultTestCase.
# Copyright (c) Jake Howard and contributors; BSD-3-Clause.
# ruff: noqa: PT009
"""django-tasks-db's tests of its results across connections
(``DatabaseTaskResultTestCase``) against HtaskBackend. Its other tests there are of its
queryset's row locks (``get_locked``), not ported: see docs/django-tasks.md
("django-tasks-db's tests")."""

# django-tasks-db's formatting is kept, so that a diff with its file shows the wiring.
# fmt: off
from collections.abc import Sequence
from typing import cast

import pytest

pytest.importorskip(
    "django.tasks",
    reason="django.tasks needs Django >= 6.0; `make compat` runs these on Django 6.0/6.1",
)

from django.db import connections
from django.db.models import QuerySet
from django.test import override_settings

from tests.conformance.django_tasks.wiring import HtaskTestCase

from . import tasks as test_tasks
from .wiring import DBTaskResult, source


@override_settings(
    TASKS={
        "default": {
            "BACKEND": "django_htask.backends.HtaskBackend",
        },
    }
)
class DatabaseTaskResultTestCase(HtaskTestCase):
    def execute_in_new_connection(self, sql: str | QuerySet) -> Sequence:
        params: tuple = ()
        if isinstance(sql, QuerySet):
            sql, params = sql.query.sql_with_params()
        new_connection = connections.create_connection("default")
        try:
            with new_connection.cursor() as c:
                c.execute(sql, params)
                return cast(list, c.fetchall())
        finally:
            new_connection.close()

    @source("DatabaseTaskResultTestCase::test_cross_connection")
    def test_cross_connection(self) -> None:
        test_tasks.noop_task.enqueue()
        test_tasks.noop_task.enqueue()

        self.assertEqual(DBTaskResult.objects.count(), 2)

        self.assertEqual(DBTaskResult.objects.using("default").count(), 2)

        self.assertEqual(
            len(self.execute_in_new_connection(DBTaskResult.objects.all())),
            2,
        )
